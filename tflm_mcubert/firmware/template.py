"""The text of the files `export` writes lives in firmware/templates/ as files, with `${name}`
placeholders (string.Template; `$$` is a dollar sign); the render functions compute the values.
A template names every value it needs: a missing one is an error, not a blank."""

from __future__ import annotations

import string
from pathlib import Path

TEMPLATES = Path(__file__).with_name("templates")


def fill(template: str, **values: object) -> str:
    """The text of templates/`template` with its placeholders replaced by `values`."""
    return string.Template((TEMPLATES / template).read_text(encoding="utf-8")).substitute(values)

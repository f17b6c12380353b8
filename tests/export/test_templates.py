"""The text templates of export (tflm_mcubert/firmware/templates/): used, shipped, strict."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

from tflm_mcubert.firmware import template

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "tflm_mcubert"
TEMPLATES = sorted(template.TEMPLATES.glob("*.tmpl"))


def test_every_template_is_rendered_by_the_package():
    sources = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    unused = [t.name for t in TEMPLATES if f'"{t.name}"' not in sources]
    assert TEMPLATES and not unused


def test_every_template_ships_in_the_wheel():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = patterns["tflm_mcubert"]
    for path in TEMPLATES:
        relative = path.relative_to(PACKAGE).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in shipped), relative


def test_a_missing_value_is_an_error_not_a_blank():
    with pytest.raises(KeyError, match="seq_len"):
        template.fill("layer_data.h.tmpl", source="x", hidden=1, hidden_bytes=1, scratch_bytes=1, soak_runs=0)

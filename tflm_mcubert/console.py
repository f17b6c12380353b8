"""What the long-running commands tell the user while they work: one line on stderr, shown at once
(stdout carries the results that scripts read)."""

from __future__ import annotations

import sys


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

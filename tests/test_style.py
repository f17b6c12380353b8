"""The code stays formatted and lint-free: ruff (Python) and clang-format (C, C++), as CI runs them.

Run the fixers with `pre-commit run --all-files` (.pre-commit-config.yaml) or directly:
`ruff format . && ruff check --fix .` and `clang-format -i FILE` (C++ front ends with
`--style=file:custom_ops/tflm/.clang-format`, as style_of() says).
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOOGLE_STYLE = REPO / "custom_ops" / "tflm" / ".clang-format"
C_SUFFIXES = {".c", ".h", ".cc", ".cpp"}
# Copies generated from custom_ops/ (kept in sync by tests/firmware) and third-party layouts.
NOT_FORMATTED = ("arduino_lib/src/",)


def tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [REPO / name for name in out.stdout.split("\0") if name]


def style_of(path: Path) -> str:
    """C follows the root .clang-format; C++ (the TFLM binding and front ends) TFLM's Google style."""
    return f"file:{GOOGLE_STYLE}" if path.suffix in (".cc", ".cpp") else "file"


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=REPO, capture_output=True, text=True)


def test_python_is_lint_free_and_formatted():
    pytest.importorskip("ruff", reason="ruff is in the test extra (pip install -e '.[test]')")
    lint = ruff("check", ".")
    assert lint.returncode == 0, lint.stdout[-3000:]
    form = ruff("format", "--check", ".")
    assert form.returncode == 0, f"run `ruff format .`:\n{form.stdout[-3000:]}"


def test_c_and_cpp_are_formatted():
    if shutil.which("clang-format") is None:
        pytest.skip("clang-format is not installed (Debian: clang-format); .ci/run installs it")
    files = [
        p
        for p in tracked()
        if p.suffix in C_SUFFIXES
        and not str(p.relative_to(REPO)).startswith(NOT_FORMATTED)
        and "GENERATED FILE" not in p.read_text()[:200]  # written by a script, which a test keeps in sync
    ]
    assert len(files) > 30
    unformatted = []
    for path in files:
        done = subprocess.run(
            ["clang-format", "--dry-run", "-Werror", f"--style={style_of(path)}", str(path)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            unformatted.append(str(path.relative_to(REPO)))
    assert not unformatted, f"run clang-format -i on: {unformatted}"

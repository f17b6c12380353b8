"""The user documentation: README.md (short) and docs/ (the MkDocs site, built in strict mode).

The site builds without a warning (a broken relative link, a page missing from mkdocs.yml's nav), the
README stays a front page, and no page carries project bookkeeping: issue numbers, "met / not met" target
lists, "Left:" / "Not yet run" notes, or a `runs/` folder outside a command the reader is told to run."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 200


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code: what the reader reads as sentences."""
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def without_code_blocks(text: str) -> str:
    return re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.S | re.M)


BOOKKEEPING = {
    "an issue reference": (re.compile(r"\bissues? #?\d+|\(#\d+\)", re.I), lambda text: text),
    "a #number": (re.compile(r"(?<![\w&])#\d+\b"), prose),
    "target bookkeeping (met / not met)": (re.compile(r"\b(?:not )?met\b", re.I), lambda text: text),
    "a lab note": (re.compile(r"^\s*(?:\*\*)?(?:Left|Not yet run|Not run)\b", re.M), lambda text: text),
    "a runs/ folder outside a command": (re.compile(r"(?<![\w.-])runs/"), without_code_blocks),
}


def bookkeeping(text: str) -> list[str]:
    found = []
    for what, (pattern, view) in BOOKKEEPING.items():
        found += [f"{what}: {m.group(0)!r}" for m in pattern.finditer(view(text))]
    return found


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_carries_project_bookkeeping(page):
    found = bookkeeping(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: " + "; ".join(found)


def test_the_bookkeeping_check_finds_what_it_is_for():
    assert bookkeeping("fixed in issue 25.") and bookkeeping("see (#25)") and bookkeeping("the target: not met")
    assert bookkeeping("Left: a search") and bookkeeping("written to runs/lm/x.json")
    assert not bookkeeping("```sh\npython bench/x.py --out runs/x\n```\nThe `ASR #4` shift; metadata.")


def test_the_readme_points_into_the_docs_and_keeps_the_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines() if line.startswith("python3.11 -m venv") and "pytest" in line)
    assert command in ci.splitlines(), "the README's test command is not .ci/run's, verbatim"
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_every_page_is_in_the_nav():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in config, f"{page.relative_to(DOCS)} is not in mkdocs.yml's nav"


def test_the_site_builds_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "WARNING" not in output, output[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()

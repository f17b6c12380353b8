"""The package's layering: data flows up the pipeline, and no package imports one above it.

Every import counts, including those inside functions, so a function-level import cannot hide a
cycle. The command modules (`cli/`, one module per sub-command, and `__main__`) are the top layer:
commands wire packages together and may use any of them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tflm_mcubert"

# Lowest first. A module may import its own package and any package of a lower layer.
LAYERS = [
    {"__init__", "errors", "files", "kernel_sources"},
    {"boards", "ops", "data", "model", "tokenizer"},
    {"quantize", "train", "measure"},
    {"compress", "schedule"},
    {"tflite"},
    {"runtime"},
    {"export"},
    {"cli", "__main__"},
]
RANK = {name: rank for rank, layer in enumerate(LAYERS) for name in layer}
TOP = len(LAYERS) - 1


def unit_of(path: Path) -> tuple[str, int]:
    """(package or top-level module, its layer) of a source file."""
    parts = path.relative_to(PACKAGE).parts
    unit = parts[0] if len(parts) > 1 else path.stem
    rank = RANK.get(unit, TOP)
    return unit, rank


def imported_units(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "tflm_mcubert" and len(parts) > 1:
                yield node.lineno, parts[1]


def sources():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_has_a_layer():
    parts = {path.relative_to(PACKAGE).parts for path in sources()}
    units = {p[0] if len(p) > 1 else p[0].removesuffix(".py") for p in parts}
    assert units <= RANK.keys(), f"add these to LAYERS: {sorted(units - RANK.keys())}"


def test_no_module_imports_a_package_above_its_own():
    upward = []
    for path in sources():
        unit, rank = unit_of(path)
        for line, target in imported_units(path):
            if target != unit and RANK.get(target, TOP) > rank:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({unit}) imports {target}")
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_the_rule_catches_an_upward_import(tmp_path, monkeypatch):
    """The check itself: an `ops` module importing `export` is reported."""
    fake = tmp_path / "tflm_mcubert"
    (fake / "ops").mkdir(parents=True)
    (fake / "ops" / "bad.py").write_text("def f():\n    from tflm_mcubert.export import pipeline\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="ops/bad.py:2 \\(ops\\) imports export"):
        test_no_module_imports_a_package_above_its_own()


@pytest.mark.parametrize("package", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
def test_each_package_imports_on_its_own(package):
    modules = sorted(
        f"tflm_mcubert.{package}.{p.stem}" for p in (PACKAGE / package).glob("*.py") if p.stem != "__init__"
    )
    code = "import " + ", ".join([f"tflm_mcubert.{package}"] + modules)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=PACKAGE.parent
    )
    assert result.returncode == 0, result.stderr[-2000:]

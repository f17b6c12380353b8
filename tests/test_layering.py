"""The package's layering: data flows up the pipeline, and no package imports one above it.

Every import counts, including those inside functions, so a function-level import cannot hide a
cycle. The command modules (`cli/`, one module per sub-command, and `__main__`) are the top layer:
commands wire packages together and may use any of them.

Neither packages nor modules form an import cycle, and a function-level import of a tflm_mcubert module
is there only to defer a heavy third-party import (HEAVY) that the importing module does not already
load, or is allowed in DEFERRED_IMPORTS with its reason; light imports go at the top.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tflm_mcubert"

# Lowest first. A module may import its own package and any package of a lower layer.
LAYERS = [
    {"__init__", "console", "errors", "files"},
    {"boards", "ops", "data", "model"},
    {"kernel_sources"},  # the C sources with the contract header generated from ops/
    {"quantize", "train", "measure", "tokenizer"},
    {"compress", "schedule"},
    {"tflite"},
    {"runtime"},
    {"firmware"},
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


# --- cycles ----------------------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path):
    """(line, imported tflm_mcubert module or other top-level package, at module level?) of every import in
    `path`; `from package import module` names the module."""
    tree = ast.parse(path.read_text(), str(path))
    known = {module_name(p) for p in sources()}
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]

    def visit(node, top: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield child.lineno, resolve(alias.name), top
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from its package
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1] + [base]).strip(".")
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    yield child.lineno, full if full in known else resolve(base), top
            else:
                inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                yield from visit(child, top and not inner)

    def resolve(name: str) -> str:
        if not name.startswith("tflm_mcubert"):
            return name.split(".")[0]
        while name not in known and "." in name:
            name = name.rpartition(".")[0]
        return name

    yield from visit(tree, True)


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph `edges` (node -> successors) as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for succ in sorted(edges.get(node, ())):
            if state.get(succ) == "open":
                return stack[stack.index(succ) :] + [succ]
            if succ not in state and (cycle := visit(succ)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph(unit) -> dict[str, set[str]]:
    """unit(module) -> the units it imports, over every import of every module (function-level too)."""
    edges: dict[str, set[str]] = {}
    for path in sources():
        source = unit(module_name(path))
        for _, target, _ in imports_of(path):
            if target.startswith("tflm_mcubert.") and unit(target) != source:
                edges.setdefault(source, set()).add(unit(target))
    return edges


def package_of(module: str) -> str:
    return module.split(".")[1] if "." in module else module


def test_no_package_import_cycle():
    """Packages (and top-level modules) form no cycle, counting every import of every module."""
    cycle = find_cycle(import_graph(package_of))
    assert cycle is None, "package import cycle: " + " -> ".join(cycle)


def test_no_module_import_cycle():
    """Nor do modules: e.g. schedule/kernel_cost.py and flash_traffic.py, model/clustered_embedding.py and
    stored_tables.py once imported each other, held open by a function-level import."""
    cycle = find_cycle(import_graph(lambda module: module))
    assert cycle is None, "module import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "first, second",
    [
        ("tflm_mcubert.schedule.kernel_cost", "tflm_mcubert.schedule.flash_traffic"),
        ("tflm_mcubert.model.clustered_embedding", "tflm_mcubert.model.stored_tables"),
    ],
)
def test_the_known_cycles_stay_gone(first, second):
    """The two file-level cycles a function-level import used to hold open: neither module imports the
    other in a function, and they do not import each other both ways."""
    imports = {}
    for path in sources():
        if module_name(path) in (first, second):
            imports[module_name(path)] = list(imports_of(path))
    inner = [
        f"{m}:{line}"
        for m, found in imports.items()
        for line, target, top in found
        if not top and target in (first, second)
    ]
    assert not inner, f"function-level imports between {first} and {second}: {inner}"
    both = {target for _, target, _ in imports[first]} >= {second} and {t for _, t, _ in imports[second]} >= {first}
    assert not both, f"{first} and {second} import each other"


def test_the_cycle_checks_catch_a_cycle(tmp_path, monkeypatch):
    """The checks themselves: a function-level import closing a loop between two packages is reported."""
    fake = tmp_path / "tflm_mcubert"
    for package, body in (
        ("ops", "from tflm_mcubert.model import bert\n"),
        ("model", "def f():\n    from tflm_mcubert.ops import spec\n"),
    ):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text("")
    (fake / "ops" / "spec.py").write_text("from tflm_mcubert.model import bert\n")
    (fake / "model" / "bert.py").write_text("def f():\n    from tflm_mcubert.ops import spec\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="package import cycle: model -> ops -> model"):
        test_no_package_import_cycle()
    with pytest.raises(AssertionError, match="module import cycle: .*model.bert -> .*ops.spec -> .*model.bert"):
        test_no_module_import_cycle()


# --- function-level imports ------------------------------------------------------------------------------

# Third-party packages worth deferring: seconds to import, or optional (torch, unicorn: the test extra).
HEAVY = {"tensorflow", "keras", "torch", "transformers", "datasets", "matplotlib", "unicorn"}

# (module, imported tflm_mcubert module) -> why it is imported inside a function although it loads nothing
# heavier than the importing module already does.
DEFERRED_IMPORTS: dict[tuple[str, str], str] = {}


@cache
def heavy_imports(module: str) -> frozenset[str]:
    """The HEAVY packages importing `module` loads (its module-level imports, transitively, and its
    packages' __init__)."""
    paths = {module_name(p): p for p in sources()}
    found, seen, todo = set(), set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in paths]
        for _, target, top in imports_of(paths[name]) if name in paths else ():
            if top and target in HEAVY:
                found.add(target)
            elif top and target.startswith("tflm_mcubert"):
                todo.append(target)
    return frozenset(found)


def test_function_level_imports_defer_something_heavy():
    """A tflm_mcubert module imported inside a function must load a HEAVY package its importer does not
    (or be in DEFERRED_IMPORTS): an import that only dodges a cycle, or loads nothing heavy, goes at the top."""
    heavy_imports.cache_clear()
    light = []
    for path in sources():
        module = module_name(path)
        for line, target, top in imports_of(path):
            if top or not target.startswith("tflm_mcubert") or (module, target) in DEFERRED_IMPORTS:
                continue
            if not heavy_imports(target) - heavy_imports(module):
                light.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} in a function")
    assert not light, "light function-level imports (move them to the top):\n" + "\n".join(light)


def test_the_function_level_check_catches_a_light_import(tmp_path, monkeypatch):
    fake = tmp_path / "tflm_mcubert"
    (fake / "ops").mkdir(parents=True)
    (fake / "ops" / "__init__.py").write_text("")
    (fake / "ops" / "light.py").write_text("import numpy\n")
    (fake / "ops" / "heavy.py").write_text("import tensorflow\n")
    (fake / "ops" / "user.py").write_text(
        "def f():\n    from tflm_mcubert.ops import heavy\n\n\ndef g():\n    from tflm_mcubert.ops import light\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="ops/user.py:6 imports tflm_mcubert.ops.light") as caught:
        test_function_level_imports_defer_something_heavy()
    assert "heavy" not in str(caught.value)

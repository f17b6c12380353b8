"""Sizes a reader can hold in mind, in the package and the benchmarks: modules up to 600 lines, functions up to
80 unless they say why.

A longer function states its reason in a `# Long:` comment among its first lines.
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tflm_mcubert"
MODULE_LINES, FUNCTION_LINES = 600, 80


def sources():
    return sorted(PACKAGE.rglob("*.py")) + sorted((REPO / "bench").glob("*.py"))


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(REPO)): n for p in sources() if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, long


def long_functions_without_a_reason(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            head = lines[node.lineno - 1 : node.body[0].end_lineno + 2]
            if length > FUNCTION_LINES and not any(line.strip().startswith("# Long:") for line in head):
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_long_functions_say_why():
    found = [entry for path in sources() for entry in long_functions_without_a_reason(path)]
    assert not found, found


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x = {i}" for i in range(FUNCTION_LINES + 1))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n")
    (tmp_path / "n.py").write_text(f"def g():\n    # Long: a test of the rule.\n{body}\n")
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        assert long_functions_without_a_reason(tmp_path / "m.py") == ["m.py:1 f (82 lines)"]
        assert long_functions_without_a_reason(tmp_path / "n.py") == []
    finally:
        REPO = saved

"""Every command and option that a message tells users to run exists in the CLI.

The sources' string literals (f-strings included) are scanned for `python -m tflm_mcubert <command>`
and for `--option`; each must be a sub-command / an option of some sub-command, or belong to another
tool named in EXTERNAL_OPTIONS.
"""

import argparse
import ast
import re
from pathlib import Path

import pytest

from tflm_mcubert.cli import build_parser

PACKAGE = Path(__file__).resolve().parents[2] / "tflm_mcubert"
# Options of other tools that the package runs or tells users to run.
EXTERNAL_OPTIONS = {
    "--no-deps": "pip",
    "--disable-pip-version-check": "pip",
    "--build": "cmake",
    "--target": "cmake",
    "--no-show-raw-insn": "objdump",
    "--no-undefined": "ld",
    "--fit": "bench/kernel_cost.py",
}
COMMAND = re.compile(r"python -m tflm_mcubert ([a-z][a-z-]*)")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def sub_commands():
    parser, _ = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def string_literals():
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", node.value


def test_commands_named_in_messages_exist():
    commands = sub_commands()
    unknown = [
        f"{where}: {name}"
        for where, text in string_literals()
        for name in COMMAND.findall(text)
        if name not in commands
    ]
    assert not unknown, f"no such command: {unknown}"


def test_options_named_in_messages_exist():
    from tflm_mcubert.firmware import layer_check  # the one module with a command line of its own

    parsers = [*sub_commands().values(), layer_check.build_parser()]
    options = {o for p in parsers for a in p._actions for o in a.option_strings}
    unknown = [
        f"{where}: {name}"
        for where, text in string_literals()
        for name in OPTION.findall(text)
        if name not in options and name not in EXTERNAL_OPTIONS
    ]
    assert not unknown, f"no command has these options: {unknown}"


@pytest.mark.parametrize(
    "text, found",
    [
        ("run `python -m tflm_mcubert compress` first", ["compress"]),
        ("python -m tflm_mcubert.firmware.layer_check DIR", []),
    ],
)
def test_the_scan_finds_command_hints(text, found):
    assert COMMAND.findall(text) == found

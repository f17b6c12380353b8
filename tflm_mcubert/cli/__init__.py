"""Command line: `python -m tflm_mcubert <command> ...`. Bad input ends in one clear line, never a traceback.

Each command is a module of this package with `add_parser(subparsers)` and `run(args)`; this file only
dispatches, so the pipeline reads from the command list below. The command modules are the only top
layer: they wire the packages together, and no other package imports them. Building the parser imports
every command module, so a command imports the TensorFlow-backed modules it needs inside its functions:
--help and every argument error answer without TensorFlow, torch or transformers (tests/cli/test_cli_speed.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

from tflm_mcubert.errors import UserError

# Keep TensorFlow's start-up chatter out of the user's terminal unless they asked for it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The numpy reference runs many small matrix products: OpenBLAS threads spinning against TensorFlow's
# (and on a 2-core machine against each other) make them ~10x slower than one thread.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

MAX_SEED = 2**32 - 1  # numpy's and TensorFlow's seeds are unsigned 32-bit


def seed_argument(text: str) -> int:
    """argparse type of every --seed: an integer from 0 to MAX_SEED."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value} is outside 0..{MAX_SEED}")
    return value


# In pipeline order.
COMMAND_MODULES = (
    "tflm_mcubert.cli.train",
    "tflm_mcubert.cli.train_lm",
    "tflm_mcubert.cli.search",
    "tflm_mcubert.cli.plan",
    "tflm_mcubert.cli.export",
    "tflm_mcubert.cli.boards",
    "tflm_mcubert.cli.tokenize",
    "tflm_mcubert.cli.classify",
    "tflm_mcubert.cli.evaluate",
    "tflm_mcubert.cli.tflm_check",
)
# Commands that need no TensorFlow: `main` imports neither it nor the other commands for them, so they
# answer in about a second (TensorFlow alone takes ~7 s and ~600 MB to import).
LIGHT_COMMANDS = {
    "tokenize": "tflm_mcubert.cli.tokenize",
    "classify": "tflm_mcubert.cli.classify",
    # the standard boards' figures come from the package's Flash probes (export/flash_probes.py); a
    # configuration without one (`--shapes --labels 5`) is measured, importing TensorFlow then
    "boards": "tflm_mcubert.cli.boards",
}


def import_tensorflow_quietly() -> None:
    """Import TensorFlow and initialise its devices with C-level stderr muted.

    TF's native start-up lines (oneDNN notices, "no CUDA drivers", cuInit errors) are written through
    absl before any log-level setting applies; on a CPU machine they are pure noise around our messages.
    Python exceptions are unaffected. TFLM_MCUBERT_VERBOSE=1 shows them.
    """
    if os.environ.get("TFLM_MCUBERT_VERBOSE"):
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow as tf

            tf.config.list_physical_devices()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same one-line style and exit code as ours
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(UserError.exit_code)


def build_parser(modules: tuple[str, ...] = COMMAND_MODULES) -> tuple[argparse.ArgumentParser, dict]:
    parser = Parser(
        prog="python -m tflm_mcubert", description="BERT on microcontrollers with TensorFlow Lite Micro (MCUBERT)."
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    runners = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name in module.add_parser(subparsers):
            runners[name] = module.run
    return parser, runners


def run_inside(argv: list, module: str) -> int:
    """`python -m tflm_mcubert *argv` of the command in `module`, in this process: its errors raised (not
    printed) as the caller's, its printed figures sent to stderr, since stdout is the caller's own figures."""
    parser, runners = build_parser((module,))
    args = parser.parse_args([str(a) for a in argv])
    with contextlib.redirect_stdout(sys.stderr):
        return runners[args.command](args)


# A local file's columns: a command that runs another on the same data passes them on (search's evaluate).
COLUMN_FLAGS = ("text_column", "text_pair_column", "label_column")


def given_flags(args, names: tuple[str, ...]) -> list:
    """The options `names` of `args` that are set, as the command line spells them, for another command."""
    given = []
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            given += [f"--{name.replace('_', '-')}", value]
    return given


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    light = LIGHT_COMMANDS.get(argv[0]) if argv else None
    try:
        parser, runners = build_parser(COMMAND_MODULES if light is None else (light,))
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, or a usage error already printed by Parser.error
            return int(exc.code or 0)
        if light is None:
            import_tensorflow_quietly()  # only once the arguments parse: --help and usage errors answer at once
        return runners[args.command](args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # the machine, not the input: a full disk, a vanished file, a broken pipe
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

#!/usr/bin/env python3
"""Copy what the Mbed application compiles but does not own: the MCUBERT kernels and an export.

    python mbed_app/sync_sources.py --export out/fw     kernels -> mbed_app/mcubert/, out/fw -> mbed_app/model/
    python mbed_app/sync_sources.py                     kernels only (after editing custom_ops/)
    python mbed_app/sync_sources.py --check [--export out/fw]
                                                        exit 1, listing every stale, missing or extra copy

Mbed CLI 1 compiles every source under the application directory and puts every directory on the
include path, so the copies need no build configuration:

    custom_ops/include/mcubert/*.h           ->  mbed_app/mcubert/include/mcubert/
    custom_ops/src/*.c, *.h, *.S             ->  mbed_app/mcubert/src/
    custom_ops/tflm/*.cc, *.h (TFLM binding) ->  mbed_app/mcubert/tflm/
    EXPORT/model_data.cc/.h, model_settings.h,
    EXPORT/model_test_input.cc/.h            ->  mbed_app/model/

custom_ops/ stays the one source of truth: mbed_app/mcubert/ and mbed_app/model/ are git-ignored
byte-for-byte copies (edit the originals and sync again). Symbolic links would avoid the copy but
Mbed's source scan and Windows checkouts do not follow them reliably.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import shutil
import sys
from pathlib import Path

APP = Path(__file__).resolve().parent
REPO = APP.parent
sys.path.insert(0, str(REPO))  # run from a checkout: the package beside this folder
from tflm_mcubert.kernel_sources import write_contract_header  # noqa: E402

# (source directory under the repository, file suffixes, destination under mbed_app/)
KERNEL_SOURCES = (
    ("custom_ops/include/mcubert", (".h",), "mcubert/include/mcubert"),
    ("custom_ops/src", (".c", ".h", ".S"), "mcubert/src"),
    ("custom_ops/tflm", (".cc", ".h"), "mcubert/tflm"),
)
# What the firmware compiles from an export (`python -m tflm_mcubert export --out EXPORT`). The
# .tflite, report.json and the JSON test vector stay behind: they are for host tools.
EXPORT_FILES = ("model_data.cc", "model_data.h", "model_settings.h", "model_test_input.cc", "model_test_input.h")
# The on-device tokenizer's vocabulary, when the export wrote it (its report.json lists it): main.cpp then reads text.
OPTIONAL_EXPORT_FILES = ("model_vocab.cc", "model_vocab.h")
MODEL_DIR = "model"


def exported(export: Path, name: str) -> bool:
    """Whether the export wrote `name`: its report.json lists it (no report: the file is there)."""
    try:
        return name in json.loads((export / "report.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return (export / name).is_file()


class SyncError(Exception):
    pass


def planned_copies(repo: Path, app: Path, export: Path | None) -> dict[Path, dict[str, Path]]:
    """Destination directory -> {file name: source file}. Each destination holds exactly these files."""
    plan: dict[Path, dict[str, Path]] = {}
    write_contract_header(repo / "custom_ops" / "include" / "mcubert")  # generated, never committed
    for source_dir, suffixes, destination in KERNEL_SOURCES:
        source = repo / source_dir
        if not source.is_dir():
            raise SyncError(f"{source}: missing (is {repo} a tflm-mcubert checkout?)")
        plan[app / destination] = {p.name: p for p in sorted(source.iterdir()) if p.is_file() and p.suffix in suffixes}
    if export is not None:
        missing = [name for name in EXPORT_FILES if not (export / name).is_file()]
        if missing:
            raise SyncError(
                f"{export}: lacks {', '.join(missing)}; export the model there first "
                f"(python -m tflm_mcubert export --out {export})"
            )
        plan[app / MODEL_DIR] = {
            **{name: export / name for name in EXPORT_FILES},
            **{name: export / name for name in OPTIONAL_EXPORT_FILES if exported(export, name)},
        }
    return plan


def differences(plan: dict[Path, dict[str, Path]], app: Path) -> list[str]:
    found = []
    for destination, files in plan.items():
        where = destination.relative_to(app)
        present = {p.name for p in destination.iterdir() if p.is_file()} if destination.is_dir() else set()
        for name, source in files.items():
            if name not in present:
                found.append(f"missing:   {where / name}")
            elif not filecmp.cmp(source, destination / name, shallow=False):
                found.append(f"different: {where / name}  (from {source})")
        found += [f"extra:     {where / name}" for name in sorted(present - files.keys())]
    return found


def write(plan: dict[Path, dict[str, Path]]) -> int:
    copied = 0
    for destination, files in plan.items():
        destination.mkdir(parents=True, exist_ok=True)
        for stale in destination.iterdir():  # a file removed from the source must not linger in the build
            if stale.is_file() and stale.name not in files:
                stale.unlink()
        for name, source in files.items():
            target = destination / name
            if not target.is_file() or not filecmp.cmp(source, target, shallow=False):
                shutil.copyfile(source, target)
                copied += 1
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="an export directory (python -m tflm_mcubert export --out DIR)")
    parser.add_argument("--check", action="store_true", help="only report stale copies (exit 1 if any)")
    parser.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)  # tests sync a copy
    parser.add_argument("--app", type=Path, default=APP, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        plan = planned_copies(args.repo, args.app, args.export)
    except SyncError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        stale = differences(plan, args.app)
        if stale:
            print(
                f"{len(stale)} file(s) out of sync; run python mbed_app/sync_sources.py"
                + (f" --export {args.export}" if args.export else "")
                + ":"
            )
            print("\n".join(f"  {line}" for line in stale))
            return 1
        print("in sync")
        return 0
    copied = write(plan)
    print(
        f"{copied} file(s) copied into {', '.join(str(d.relative_to(args.app)) + '/' for d in plan)}"
        f" ({sum(len(f) for f in plan.values())} in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Copy an export's firmware files into an Arduino sketch folder (e.g. examples/mcubert_bert_tiny).

    python arduino_lib/extras/copy_export_to_sketch.py EXPORT_DIR SKETCH_DIR

EXPORT_DIR is the --out of `python -m tflm_mcubert export` (mcubert schedule); SKETCH_DIR is a sketch
folder (it holds <folder name>.ino). The sources are renamed .cc -> .cpp: the Arduino sketch
specification compiles .cpp, and .cc support differs between IDE versions.

    model_data.cc        ->  model_data.cpp
    model_test_input.cc  ->  model_test_input.cpp
    model_data.h, model_settings.h, model_test_input.h   copied as they are
    model_vocab.cc -> model_vocab.cpp, model_vocab.h      when the export's report.json lists them (the on-device
                                                          tokenizer's vocabulary: the sketch reads text)

Refuses, changing nothing, when a file is missing from EXPORT_DIR, when the export is a stock-schedule
one (TFLM builtins: no MCUBERT ops for the sketch to register), or when SKETCH_DIR already holds a .cc
copy of a source (both would be compiled where .cc is supported: duplicate symbols).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

# Export file -> name in the sketch folder.
SKETCH_FILES = {
    "model_data.cc": "model_data.cpp",
    "model_data.h": "model_data.h",
    "model_settings.h": "model_settings.h",
    "model_test_input.cc": "model_test_input.cpp",
    "model_test_input.h": "model_test_input.h",
}
# Copied when the export wrote the on-device tokenizer's vocabulary (its report.json lists it: the sketch
# then reads text), and removed from the sketch when it did not, so that no other model's vocabulary is
# left behind.
OPTIONAL_FILES = {"model_vocab.cc": "model_vocab.cpp", "model_vocab.h": "model_vocab.h"}
_SCHEDULE = re.compile(r'^#define MCUBERT_MODEL_SCHEDULE "([^"]*)"', re.MULTILINE)


class CopyError(Exception):
    """Why the export cannot go into the sketch (nothing was copied)."""


def exported(export_dir: Path, name: str) -> bool:
    """Whether the export wrote `name`: its report.json lists it (no report: the file is there)."""
    try:
        return name in json.loads((export_dir / "report.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return (export_dir / name).is_file()


def check(export_dir: Path, sketch_dir: Path) -> None:
    if not export_dir.is_dir():
        raise CopyError(
            f"{export_dir}: no such directory (run `python -m tflm_mcubert export --out {export_dir}` first)"
        )
    missing = [name for name in SKETCH_FILES if not (export_dir / name).is_file()]
    if missing:
        raise CopyError(
            f"{export_dir} lacks {', '.join(missing)}: not a complete export (an export made "
            f"before firmware files existed has no model_settings.h); export again into it"
        )
    settings = (export_dir / "model_settings.h").read_text()
    schedule = _SCHEDULE.search(settings)
    if schedule is None:
        raise CopyError(f"{export_dir / 'model_settings.h'} names no MCUBERT_MODEL_SCHEDULE; export again")
    if schedule.group(1) != "mcubert":
        raise CopyError(
            f"{export_dir} is a {schedule.group(1)}-schedule export (TFLM builtin ops); the sketch "
            f"runs the mcubert schedule: export without --schedule {schedule.group(1)}"
        )
    if not (sketch_dir / f"{sketch_dir.name}.ino").is_file():
        raise CopyError(f"{sketch_dir}: not a sketch folder (no {sketch_dir.name}.ino in it)")
    stale = [name for name in [*SKETCH_FILES, *OPTIONAL_FILES] if name.endswith(".cc") and (sketch_dir / name).exists()]
    if stale:
        raise CopyError(
            f"{sketch_dir} holds {', '.join(stale)}: remove it, the .cpp copy replaces it (with both, "
            f"IDEs that compile .cc files define the model twice)"
        )


def copy_export(export_dir: Path, sketch_dir: Path) -> list[Path]:
    """Copy the files after checking all of them; returns the written paths."""
    export_dir, sketch_dir = export_dir.resolve(), sketch_dir.resolve()  # "." has no name to check
    check(export_dir, sketch_dir)
    written = []
    for source, target in SKETCH_FILES.items():
        written.append(Path(shutil.copyfile(export_dir / source, sketch_dir / target)))
    for source, target in OPTIONAL_FILES.items():
        if exported(export_dir, source):
            written.append(Path(shutil.copyfile(export_dir / source, sketch_dir / target)))
        elif (sketch_dir / target).exists():
            (sketch_dir / target).unlink()
            print(f"removed {sketch_dir / target}: this export has no vocabulary")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export_dir", type=Path, help="the export's --out directory")
    parser.add_argument("sketch_dir", type=Path, help="the sketch folder (holding <folder name>.ino)")
    args = parser.parse_args(argv)
    try:
        written = copy_export(args.export_dir, args.sketch_dir)
    except CopyError as error:
        print(f"copy_export_to_sketch: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

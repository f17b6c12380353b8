#!/usr/bin/env python3
"""Generate the Arduino library's sources (arduino_lib/src/) from custom_ops/, the one source of truth.

    python arduino_lib/extras/sync_from_custom_ops.py          write arduino_lib/src/ (and the examples' generated
                                                              files)
    python arduino_lib/extras/sync_from_custom_ops.py --check  exit 1, listing every file that is missing, extra or
                                                              different, if the library is out of date
    ... --lib DIR                                             generate into a copy of arduino_lib/ elsewhere

arduino_lib/src/ is not in git (.gitignore): run this script before using or vendoring the library, as
mbed_app/ has its copies made by its own script. The code is tflm_mcubert/firmware/arduino_library.py's,
the same that writes `export --bundle arduino`'s per-model library; CI generates the library into a
temporary folder and compile-checks it (tests/firmware/test_arduino_lib.py). The examples' two generated
files (the test vector and the BERT sketch) stay committed so that the example folders are sketches.

Layout (Arduino library specification 1.5, recursive `src/`: the Arduino build compiles every
.c/.cpp/.S under src/ and puts src/ on the include path):

    custom_ops/include/mcubert/mcubert_ops.h  ->  arduino_lib/src/mcubert/mcubert_ops.h
    custom_ops/src/*.c, *.h, *.S              ->  arduino_lib/src/            (flat, as in custom_ops)
    custom_ops/tflm/*.h                       ->  arduino_lib/src/            (the TFLM binding's headers)
    custom_ops/tflm/*.cc                      ->  arduino_lib/src/*.cpp       (the binding, guarded; see below)
    (generated)                               ->  arduino_lib/src/mcubert.h   (the kernels' header)
    (generated)                               ->  arduino_lib/src/mcubert_tflm_arduino.h  (the binding's)
    (generated from the numpy reference)      ->  arduino_lib/examples/mcubert_classify/mcubert_test_vector.h

custom_ops/tflm/python/ (the binding's registerer for the Python interpreter) is not copied. The
binding's sources become .cpp: the Arduino builder does not compile .cc files in a library.

The kernels and the binding include "mcubert/mcubert_ops.h", their private headers and
"mcubert_tflm.h" by quoted name, which resolves relative to the including file, so this layout needs
no include-path flags. TFLM's own headers ("tensorflow/lite/...") come from Arduino_TensorFlowLite's
src/, which the Arduino builder puts on the include path only for sketches that include
<TensorFlowLite.h> (it finds a library by the headers in its src/ root, never by a nested path such
as tensorflow/lite/c/common.h). Because the builder compiles every source of a library a sketch
uses, each binding .cpp is wrapped in `#if __has_include(<a TFLM header>)`: without TFLM it compiles
to nothing and kernel-only sketches (examples/mcubert_classify) build without Arduino_TensorFlowLite;
a sketch that calls the binding includes <mcubert_tflm_arduino.h>, which includes <TensorFlowLite.h>
first so the builder finds TFLM. The Thumb-2 micro-kernel keeps its capital `.S` extension: Arduino
runs `.S` files through the C preprocessor (lower-case `.s` would not be), and the file assembles to
nothing on cores without the DSP extension.

Every generated file starts with a banner naming its source; edit custom_ops/ and re-run this script.
The script lives in arduino_lib/extras/, the folder the Arduino library specification reserves for
files the IDE ignores, so the library still ships as one folder.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tflm_mcubert.firmware import arduino_library as library  # noqa: E402  (the layout lives in the package)

SCRIPT = "arduino_lib/extras/sync_from_custom_ops.py"
EXAMPLE_VECTOR = Path("examples/mcubert_classify/mcubert_test_vector.h")
EXAMPLE_SKETCH = Path("examples/mcubert_bert_tiny/mcubert_bert_tiny.ino")
# The committed BERT sketch's comment block (the body is the package's sketch template, which
# `export --bundle arduino` fills for each model).
SKETCH_HEADER = """\
// mcubert_bert_tiny: an exported BERT (mcubert schedule) through tflite::MicroInterpreter.
//
// The model and its facts are not in this folder in git: export a model
// (`python -m tflm_mcubert export --out OUT`) and copy its files here with
//   python arduino_lib/extras/copy_export_to_sketch.py OUT <this sketch folder>
// (README.md in this folder). Needs the Arduino_TensorFlowLite library with a TFLM that has
// TFLMRegistration (this library's README.md says which).
//
// Runs the export's test sequence once and prints the logits (int8 and dequantized), the latency of
// Invoke() (micros()), the arena TFLM used, and whether the output equals the one the host
// reference computed for the same sequence. Open the serial monitor at 115200 baud."""


def banner(source: str) -> str:
    return library.banner(source, SCRIPT)


def _c_array(ctype: str, name: str, values, per_line: int = 12) -> str:
    values = [int(v) for v in values]
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(str(v) for v in values[i : i + per_line]) + ",")
    return f"static const {ctype} {name}[{len(values)}] = {{\n" + "\n".join(lines) + "\n};\n"


def example_vector() -> str:
    """One MCUBERT_CLASSIFIER_HEAD call (d = 32, 3 labels) and the numpy reference's logits.

    Integer draws from a seeded generator plus a tanh table, so the file is the same on every machine.
    """
    import numpy as np

    sys.path.insert(0, str(REPO))
    from tflm_mcubert.ops import classifier_head
    from tflm_mcubert.ops.classifier_head import ClassifierHeadParams
    from tflm_mcubert.ops.linear import Linear, pack_weights

    d, labels, seq_len = 32, 3, 1
    rng = np.random.default_rng(20261122)

    def linear(n: int, k: int, shift: int) -> Linear:
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        channels = np.stack(
            [rng.integers(-4096, 4097, n), rng.integers(1 << 30, (1 << 31) - 1, n, endpoint=True), np.full(n, shift)],
            axis=1,
        ).astype(np.int32)
        return Linear(k, n, pack_weights(w), channels)

    q = np.arange(-128, 128)
    tanh_lut = np.clip(np.round(127.0 * np.tanh(q / 32.0)), -127, 127).astype(np.int8)
    params = ClassifierHeadParams(
        seq_len=seq_len,
        hidden=d,
        labels=labels,
        pooler_zero_point=0,
        logits_zero_point=0,
        pooler=linear(d, d, -10),
        tanh_lut=tanh_lut,
        classifier=linear(labels, d, -9),
    ).validate()
    hidden = rng.integers(-128, 128, (seq_len, d)).astype(np.int8)
    expected = classifier_head.run(params, hidden, np.zeros(labels, np.int8))

    out = [
        "/* A tiny MCUBERT_CLASSIFIER_HEAD test vector: the [CLS] row of a 32-wide hidden state, the\n"
        " * pooler (32 -> 32, tanh table) and classifier (32 -> 3) constants, and the logits the numpy\n"
        " * reference (tflm_mcubert/ops/classifier_head.py) computes from them. */\n",
        "#ifndef MCUBERT_TEST_VECTOR_H\n#define MCUBERT_TEST_VECTOR_H\n\n#include <stdint.h>\n\n",
        f"#define TV_SEQ_LEN {seq_len}\n#define TV_HIDDEN {d}\n#define TV_LABELS {labels}\n",
        f"#define TV_POOLER_ZERO_POINT {params.pooler_zero_point}\n"
        f"#define TV_LOGITS_ZERO_POINT {params.logits_zero_point}\n\n",
        _c_array("int8_t", "tv_hidden", hidden.reshape(-1)),
        _c_array("int8_t", "tv_pooler_weights", params.pooler.packed_weights),
        _c_array("int32_t", "tv_pooler_channels", params.pooler.channels.reshape(-1), per_line=3),
        _c_array("int8_t", "tv_tanh_lut", params.tanh_lut, per_line=16),
        _c_array("int8_t", "tv_classifier_weights", params.classifier.packed_weights),
        _c_array("int32_t", "tv_classifier_channels", params.classifier.channels.reshape(-1), per_line=3),
        _c_array("int8_t", "tv_expected_logits", expected),
        "\n#endif /* MCUBERT_TEST_VECTOR_H */\n",
    ]
    source = "tflm_mcubert/ops/classifier_head.py (numpy reference)"
    return banner(source) + "\n".join(part.rstrip("\n") + "\n" for part in out).replace("\n\n\n", "\n\n")


def expected_files(source: Path) -> dict[str, bytes]:
    """Library-relative path -> the bytes the library must hold."""
    files = library.library_sources(source, SCRIPT)
    files[EXAMPLE_VECTOR.as_posix()] = example_vector().encode()
    files[EXAMPLE_SKETCH.as_posix()] = library.sketch(EXAMPLE_SKETCH.stem, SKETCH_HEADER.rstrip("\n")).encode()
    return files


def existing_files(lib: Path) -> dict[str, bytes]:
    """The files the script owns that exist now: everything under src/, plus the example vector."""
    found = {}
    if (lib / "src").is_dir():
        for path in sorted((lib / "src").rglob("*")):
            if path.is_file():
                found[path.relative_to(lib).as_posix()] = path.read_bytes()
    for owned in (EXAMPLE_VECTOR, EXAMPLE_SKETCH):
        if (lib / owned).is_file():
            found[owned.as_posix()] = (lib / owned).read_bytes()
    return found


def differences(source: Path, lib: Path) -> list[str]:
    want, have = expected_files(source), existing_files(lib)
    problems = [f"missing:   {p}" for p in sorted(want.keys() - have.keys())]
    problems += [f"extra:     {p}" for p in sorted(have.keys() - want.keys())]
    problems += [f"different: {p}" for p in sorted(want.keys() & have.keys()) if want[p] != have[p]]
    return problems


def write(source: Path, lib: Path) -> list[str]:
    want = expected_files(source)
    changed = []
    for rel in sorted(existing_files(lib).keys() - want.keys()):  # stale copies of removed sources
        (lib / rel).unlink()
        changed.append(f"removed:   {rel}")
    for rel, data in want.items():
        path = lib / rel
        if not path.is_file() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            changed.append(f"wrote:     {rel}")
    for directory in sorted((lib / "src").rglob("*"), reverse=True):  # empty folders left behind
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 listing missing, extra and different files"
    )
    parser.add_argument("--source", type=Path, default=REPO / "custom_ops", help="default: custom_ops/")
    parser.add_argument("--lib", type=Path, default=REPO / "arduino_lib", help="default: arduino_lib/")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences(args.source, args.lib)
        if problems:
            print(f"{args.lib} is out of sync with {args.source} (run {SCRIPT}):")
            print("\n".join("  " + p for p in problems))
            return 1
        print(f"{args.lib} is in sync with {args.source}")
        return 0
    for line in write(args.source, args.lib):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

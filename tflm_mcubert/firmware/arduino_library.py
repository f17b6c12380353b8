"""The MCUBERT Arduino library (Arduino library specification 1.5), generated from custom_ops/: the
generic library's src/ in arduino_lib/ (arduino_lib/extras/sync_from_custom_ops.py; git-ignored) and the
per-model zip of `export --bundle arduino` are both made here, so they cannot drift apart.

    custom_ops/include/mcubert/*.h            ->  src/mcubert/*.h
    custom_ops/src/*.c, *.h, *.S              ->  src/            (flat, as in custom_ops)
    custom_ops/tflm/*.h                       ->  src/            (the TFLM binding's headers)
    custom_ops/tflm/*.cc                      ->  src/*.cpp       (the binding, guarded; see below)
    (generated)                               ->  src/mcubert.h, src/mcubert_tflm_arduino.h

The Arduino builder compiles every .c/.cpp/.S under a library's src/ (never .cc) and puts src/ on the
include path. Each binding .cpp is wrapped in `#if __has_include(<a TFLM header>)`: without TFLM it
compiles to nothing, so kernel-only sketches build without Arduino_TensorFlowLite; a sketch that
calls the binding includes <mcubert_tflm_arduino.h>, which includes <TensorFlowLite.h> first so the
builder finds TFLM (it resolves a library by a header in its src/ root, never by a nested path).
"""

from __future__ import annotations

import dataclasses
import io
import re
import zipfile
from pathlib import Path

from tflm_mcubert.firmware.template import fill
from tflm_mcubert.ops import c_contract

COPIED_SUFFIXES = (".c", ".h", ".S")
# A header every TFLM revision the binding could build against has; its presence means the sketch
# included <TensorFlowLite.h> and TFLM's src/ is on the include path.
TFLM_PROBE_HEADER = "tensorflow/lite/micro/micro_interpreter.h"
MODULE = "tflm_mcubert/firmware/arduino_library.py"
SKETCH_TEMPLATE = "arduino_sketch.ino.tmpl"


def banner(source: str, generator: str) -> str:
    # A C comment: valid at the top of .c, .h and .S (the .S file goes through the C preprocessor).
    return (
        f"/* GENERATED FILE - do not edit. Generated from {source} by {generator};\n"
        f" * edit the source, not this copy, and re-run the script. */\n"
    )


MAIN_HEADER = """\
/* The MCUBERT kernels' Arduino header: the portable C99 kernel API (mcubert/mcubert_ops.h) and the
 * on-device tokenizer (mcubert/mcubert_tokenizer.h). Usable from C and C++ sketches; the declarations
 * are extern "C". */
#ifndef MCUBERT_H
#define MCUBERT_H

#include "mcubert/mcubert_ops.h"
#include "mcubert/mcubert_tokenizer.h"

#endif /* MCUBERT_H */
"""

TFLM_HEADER = """\
// The MCUBERT TFLM binding's Arduino header: TFLM first, then mcubert::AddMcubertOps() and the ops'
// registrations (mcubert_tflm.h). Needs the Arduino_TensorFlowLite library with a TFLM that has
// TFLMRegistration (see this library's README.md).
#ifndef MCUBERT_TFLM_ARDUINO_H
#define MCUBERT_TFLM_ARDUINO_H

// Included first so that the Arduino builder finds Arduino_TensorFlowLite: it resolves a library by
// a header in that library's src/ root, never by a path like "tensorflow/lite/c/common.h".
#include <TensorFlowLite.h>

#include "mcubert_tflm.h"

#endif  // MCUBERT_TFLM_ARDUINO_H
"""


def guarded_binding_source(text: str) -> str:
    """A binding .cc as the library's .cpp: compiled only when TFLM's headers are on the include path."""
    return (
        "// Compiled only when the sketch uses Arduino_TensorFlowLite (TFLM's headers on the include\n"
        "// path): the Arduino builder compiles every source of a library, and kernel-only sketches\n"
        "// must build without TFLM.\n"
        "#if defined(__has_include)\n"
        f'#if __has_include("{TFLM_PROBE_HEADER}")\n\n'
        + text
        + "\n#endif  // TFLM on the include path\n#endif  // defined(__has_include)\n"
    )


def library_sources(custom_ops: Path, generator: str) -> dict[str, bytes]:
    """Library-relative path (src/...) -> bytes of every source the library holds."""
    files: dict[str, bytes] = {}
    for header in sorted((custom_ops / "include" / "mcubert").glob("*.h")):
        if header.name == c_contract.HEADER_NAME:
            continue  # generated: written below from this package's contract, whatever the folder holds
        origin = f"custom_ops/include/mcubert/{header.name}"
        files[f"src/mcubert/{header.name}"] = (banner(origin, generator) + header.read_text()).encode()
    origin = "tflm_mcubert/ops/c_contract.py (the op contract)"
    files[f"src/mcubert/{c_contract.HEADER_NAME}"] = (banner(origin, generator) + c_contract.header_text()).encode()
    for path in sorted((custom_ops / "src").iterdir()):
        if path.is_file() and path.suffix in COPIED_SUFFIXES:
            files[f"src/{path.name}"] = (banner(f"custom_ops/src/{path.name}", generator) + path.read_text()).encode()
    for path in sorted((custom_ops / "tflm").iterdir()):  # files only: tflm/python/ stays out
        if not path.is_file() or path.suffix not in (".h", ".cc"):
            continue
        origin = f"custom_ops/tflm/{path.name}"
        if path.suffix == ".h":
            rel, text = f"src/{path.name}", path.read_text()
        else:
            rel, text = f"src/{path.stem}.cpp", guarded_binding_source(path.read_text())
        if rel in files:
            raise ValueError(f"{origin} would collide with {rel} copied from custom_ops/src")
        files[rel] = (banner(origin, generator) + text).encode()
    for rel, template, name in (
        ("src/mcubert.h", MAIN_HEADER, "MAIN_HEADER"),
        ("src/mcubert_tflm_arduino.h", TFLM_HEADER, "TFLM_HEADER"),
    ):
        if rel in files:
            raise ValueError(f"a custom_ops file would collide with the generated library header {rel}")
        files[rel] = (banner(f"the {name} template in {MODULE}", generator) + template).encode()
    return files


def sketch(name: str, header: str) -> str:
    """The BERT sketch (one test sequence through tflite::MicroInterpreter, checked against the
    reference), named `name`, under the comment block `header`."""
    return fill(SKETCH_TEMPLATE, header=header, sketch=name)


# ---------------------------------------------------------------------------------------------
# export --bundle arduino
# ---------------------------------------------------------------------------------------------

BUNDLE_GENERATOR = "tflm-mcubert export --bundle arduino"
_ZIP_TIME = (2024, 1, 1, 0, 0, 0)  # fixed: the same export gives the same zip


@dataclasses.dataclass(frozen=True)
class LibraryContents:
    """What a model kind puts in its Arduino library: export files copied into src/ (export name -> src name:
    the Arduino builder compiles .cpp, not .cc), `optional` ones only when the export wrote them, `needs_tflm`
    ones wrapped as the binding is (they include TFLM's headers), and the example sketch, written from
    `sketch_template` under a header whose lines after the first are `about`."""

    model_files: dict[str, str]
    sketch_template: str
    about: tuple[str, ...]
    example: str  # what the example sketch does, for library.properties
    optional: dict[str, str] = dataclasses.field(default_factory=dict)
    needs_tflm: dict[str, str] = dataclasses.field(default_factory=dict)


# Written when the export has the on-device tokenizer's vocabulary: the sketch then reads text.
_VOCAB_FILES = {"model_vocab.cc": "model_vocab.cpp", "model_vocab.h": "model_vocab.h"}
_BUNDLE_ABOUT = ("//", "// Generated by `tflm-mcubert export --bundle arduino`: the model and its facts are in this")

ENCODER_LIBRARY = LibraryContents(
    model_files={
        "model_data.cc": "model_data.cpp",
        "model_data.h": "model_data.h",
        "model_settings.h": "model_settings.h",
        "model_test_input.cc": "model_test_input.cpp",
        "model_test_input.h": "model_test_input.h",
    },
    sketch_template=SKETCH_TEMPLATE,
    about=(
        *_BUNDLE_ABOUT,
        "// library's src/ (model_data.cpp, model_settings.h, model_test_input.cpp). Needs the",
        "// Arduino_TensorFlowLite library with a TFLM that has TFLMRegistration.",
        "//",
        "// Runs the export's test sequence once and prints the logits (int8 and dequantized), the latency of",
        "// Invoke() (micros()), the arena TFLM used, and whether the output equals the one the host",
        "// reference computed for the same sequence. Open the serial monitor at 115200 baud. With the",
        "// export's vocabulary (model_vocab.cpp, when the checkpoint has a tokenizer) it then classifies",
        "// every line typed into the monitor, tokenized on the board.",
    ),
    example="The example sketch runs the test sequence and checks the output against the host reference.",
    optional=_VOCAB_FILES,
)
DECODER_LIBRARY = LibraryContents(
    model_files={
        "model_data.cc": "model_data.cpp",
        "model_data.h": "model_data.h",
        "model_settings.h": "model_settings.h",
    },
    sketch_template="arduino_decoder_sketch.ino.tmpl",
    about=(
        *_BUNDLE_ABOUT,
        "// library's src/ (model_data.cpp, model_settings.h; mcubert_generate.cpp, the greedy generation loop).",
        "// Needs the Arduino_TensorFlowLite library with a TFLM that has TFLMRegistration.",
        "//",
        "// Continues the export's check prompt and prints the ids, the time per token (micros()) and whether",
        "// they equal the continuation the host reference computed. Open the serial monitor at 115200 baud.",
        "// Then it continues every line typed into the monitor: text, tokenized and detokenized on the board",
        "// with the export's byte-level BPE (model_vocab.cpp), or token ids when the export has no tokenizer.",
    ),
    example="The example sketch continues the export's check prompt and compares the ids with the host reference.",
    optional=_VOCAB_FILES,
    needs_tflm={"mcubert_generate.cc": "mcubert_generate.cpp"},
)


def library_name(model: str) -> str:
    """The library's name for a checkpoint path or preset: `<last path part>_mcubert`, a C identifier."""
    return (re.sub(r"[^A-Za-z0-9_]", "_", Path(str(model)).name.strip("/")) or "model") + "_mcubert"


def bundle_properties(library: str, summary: str, contents: LibraryContents = ENCODER_LIBRARY) -> str:
    return "\n".join(
        [
            f"name={library}",
            "version=0.1.0",
            "author=tflm-mcubert export",
            "maintainer=tflm-mcubert export",
            f"sentence=One MCUBERT model ({summary}) with the MCUBERT int8 kernels and their TFLM op binding.",
            "paragraph=Generated by tflm-mcubert export --bundle arduino: the model as a C array, its settings "
            "and a test sequence, the portable C99 kernels (DSP path on Cortex-M4/M7/M33) and the TFLM binding "
            f"(mcubert::AddMcubertOps). {contents.example}",
            "category=Data Processing",
            "url=https://github.com/tflm-mcubert/tflm-mcubert",
            "architectures=mbed,mbed_nano,mbed_portenta,stm32,rp2040",
            "depends=Arduino_TensorFlowLite",
            "includes=mcubert.h,mcubert_tflm_arduino.h,model_settings.h",
            "",
        ]
    )


def bundle_sketch_header(sketch_name: str, summary: str, contents: LibraryContents = ENCODER_LIBRARY) -> str:
    return "\n".join([f"// {sketch_name}: {summary} through tflite::MicroInterpreter.", *contents.about])


def write_arduino_bundle(
    export_dir: Path, custom_ops: Path, library: str, summary: str, contents: LibraryContents = ENCODER_LIBRARY
) -> Path:
    """OUT/<library>.zip: the library folder <library>/ as "Add .ZIP Library" takes it."""
    export_dir = Path(export_dir)
    files = library_sources(custom_ops, BUNDLE_GENERATOR)
    copied = {**contents.model_files, **{s: t for s, t in contents.optional.items() if (export_dir / s).is_file()}}
    for source, target in copied.items():
        files[f"src/{target}"] = (export_dir / source).read_bytes()
    for source, target in contents.needs_tflm.items():
        files[f"src/{target}"] = guarded_binding_source((export_dir / source).read_text()).encode()
    files["library.properties"] = bundle_properties(library, summary, contents).encode()
    header = bundle_sketch_header(library, summary, contents)
    files[f"examples/{library}/{library}.ino"] = fill(contents.sketch_template, header=header, sketch=library).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in sorted(files):
            info = zipfile.ZipInfo(f"{library}/{rel}", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[rel])
    out = export_dir / f"{library}.zip"
    out.write_bytes(buffer.getvalue())
    return out

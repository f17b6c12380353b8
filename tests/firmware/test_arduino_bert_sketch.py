"""examples/mcubert_bert_tiny (an exported BERT-tiny through tflite::MicroInterpreter) and
arduino_lib/extras/copy_export_to_sketch.py, against a real export (BERT-tiny preset, seq 128).

* The copy script puts the export's sources into a copy of the sketch folder as .cpp and its headers as
  they are, byte for byte; it refuses, copying nothing, an export missing a file, a stock-schedule export,
  a folder that is not a sketch, and a sketch folder holding a .cc copy.
* Every MCUBERT_MODEL_* / MCUBERT_TEST_* macro and g_model_* symbol the sketch names is one the export
  writes (read from the export's headers), and the sketch uses the ones that make it run the export
  (arena size and alignment, resolver size, op registration, the test input and expected output).
* With TFLM_DIR (a tflite-micro checkout; FLATBUFFERS_INCLUDE, GEMMLOWP_DIR for its third-party
  headers): the .ino, made a .cpp as the Arduino builder does (Arduino.h first), the copied export
  files and the library's src/ (binding and kernels) compile to Cortex-M7 objects against a stub
  Arduino.h and TensorFlowLite.h; every symbol of ours the sketch needs is defined by those objects,
  leaving TFLM's and the Arduino core's. Not linked: that needs TFLM built, which stays out of this
  repository.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tflm_mcubert.boards import get_board
from tflm_mcubert.export.pipeline import ExportRequest, run_export

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "arduino_lib"
EXAMPLE = LIB / "examples" / "mcubert_bert_tiny"
SKETCH = EXAMPLE / "mcubert_bert_tiny.ino"
COPY_SCRIPT = LIB / "extras" / "copy_export_to_sketch.py"
COPIED = {
    "model_data.cc": "model_data.cpp",
    "model_data.h": "model_data.h",
    "model_settings.h": "model_settings.h",
    "model_test_input.cc": "model_test_input.cpp",
    "model_test_input.h": "model_test_input.h",
}

ARCH = ["-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"]
# Roughly an Arduino mbed/STM32 core's C++ flags, TFLM's static-memory build, and warnings as errors
# for our code (TFLM's headers have unused parameters).
CXX_FLAGS = [
    "-std=c++17",
    "-Os",
    "-DTF_LITE_STATIC_MEMORY",
    "-fno-exceptions",
    "-fno-rtti",
    "-ffunction-sections",
    "-fdata-sections",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror",
]
C_FLAGS = ["-std=gnu11", "-Os", "-Wall", "-Wextra", "-Werror", "-ffunction-sections", "-fdata-sections"]

# What the sketch needs from the Arduino core (declarations only: the objects are not linked).
STUB_ARDUINO_H = """\
#pragma once
#include <stddef.h>
#include <stdint.h>
unsigned long micros(void);
unsigned long millis(void);
void delay(unsigned long ms);
class StubSerial {
 public:
  void begin(unsigned long baud);
  explicit operator bool() const;
  size_t print(const char *text);
  size_t print(char c);
  size_t print(int value);
  size_t print(unsigned int value);
  size_t print(long value);
  size_t print(unsigned long value);
  size_t print(double value, int digits = 2);
  size_t println(const char *text);
  size_t println(int value);
  size_t println(unsigned long value);
  size_t println(double value, int digits = 2);
  size_t println(void);
  int available(void);
  int read(void);
};
extern StubSerial Serial;
void setup(void);
void loop(void);
"""
# Arduino_TensorFlowLite's umbrella header; TFLM's own headers come from TFLM_DIR.
STUB_TENSORFLOWLITE_H = "#pragma once\n"


def copy_export(export_dir: Path, sketch_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(COPY_SCRIPT), str(export_dir), str(sketch_dir)], capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("bert-tiny-128")
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f746zg"), seq_len=128))
    return out


@pytest.fixture
def sketch_copy(tmp_path):
    """The example folder as a user's sketchbook copy (git holds only the .ino and README.md)."""
    sketch = tmp_path / "mcubert_bert_tiny"
    shutil.copytree(EXAMPLE, sketch)
    assert not any((sketch / name).exists() for name in COPIED.values())
    return sketch


# ---- the copy script ---------------------------------------------------------------------------


def test_copy_puts_the_export_into_the_sketch(export_dir, sketch_copy):
    result = copy_export(export_dir, sketch_copy)
    assert result.returncode == 0, result.stderr
    for source, target in COPIED.items():
        assert (sketch_copy / target).read_bytes() == (export_dir / source).read_bytes(), target
    assert not list(sketch_copy.glob("*.cc"))
    assert len(result.stdout.splitlines()) == len(COPIED)


def refused(export_dir: Path, sketch_dir: Path) -> str:
    before = sorted(p.name for p in sketch_dir.iterdir())
    result = copy_export(export_dir, sketch_dir)
    assert result.returncode == 1, result.stdout
    assert sorted(p.name for p in sketch_dir.iterdir()) == before  # nothing copied
    return " ".join(result.stderr.split())


def test_copy_brings_the_vocabulary_and_removes_a_stale_one(text_export_dir, export_dir, sketch_copy):
    assert copy_export(text_export_dir, sketch_copy).returncode == 0
    for source, target in (("model_vocab.cc", "model_vocab.cpp"), ("model_vocab.h", "model_vocab.h")):
        assert (sketch_copy / target).read_bytes() == (text_export_dir / source).read_bytes()
    result = copy_export(export_dir, sketch_copy)  # no vocabulary: another model's must not stay
    assert result.returncode == 0 and "removed" in result.stdout
    assert not (sketch_copy / "model_vocab.cpp").exists() and not (sketch_copy / "model_vocab.h").exists()


def test_copy_takes_the_vocabulary_only_when_the_report_lists_it(export_dir, sketch_copy, tmp_path):
    stray = tmp_path / "export-with-a-stray-vocabulary"
    shutil.copytree(export_dir, stray)
    (stray / "model_vocab.cc").write_text("// another export's\n")
    (stray / "model_vocab.h").write_text("// another export's\n")
    assert copy_export(stray, sketch_copy).returncode == 0
    assert not (sketch_copy / "model_vocab.cpp").exists() and not (sketch_copy / "model_vocab.h").exists()


def test_copy_refuses_an_incomplete_export(export_dir, sketch_copy, tmp_path):
    partial = tmp_path / "partial-export"
    shutil.copytree(export_dir, partial)
    (partial / "model_test_input.cc").unlink()
    (partial / "model_settings.h").unlink()
    message = refused(partial, sketch_copy)
    assert "lacks model_settings.h, model_test_input.cc" in message
    assert "no such directory" in refused(tmp_path / "never-exported", sketch_copy)


def test_copy_refuses_a_stock_schedule_export(export_dir, sketch_copy, tmp_path):
    # The schedule line as the exporter writes it, changed to stock (a real stock BERT-tiny export
    # writes a 17 MB model_data.cc and costs more than this test is worth).
    stock = tmp_path / "stock-export"
    shutil.copytree(export_dir, stock)
    settings = (stock / "model_settings.h").read_text()
    assert '#define MCUBERT_MODEL_SCHEDULE "mcubert"' in settings
    (stock / "model_settings.h").write_text(settings.replace('SCHEDULE "mcubert"', 'SCHEDULE "stock"'))
    message = refused(stock, sketch_copy)
    assert "is a stock-schedule export" in message and "without --schedule stock" in message


def test_copy_refuses_a_folder_that_is_not_the_sketch_or_holds_cc_copies(export_dir, sketch_copy, tmp_path):
    elsewhere = tmp_path / "not_a_sketch"
    elsewhere.mkdir()
    assert "not a sketch folder (no not_a_sketch.ino in it)" in refused(export_dir, elsewhere)
    shutil.copyfile(export_dir / "model_data.cc", sketch_copy / "model_data.cc")
    assert "holds model_data.cc: remove it" in refused(export_dir, sketch_copy)


# ---- the sketch against what the export writes -------------------------------------------------

EXPORT_NAME = re.compile(r"\b(MCUBERT_MODEL_\w+|MCUBERT_TEST_\w+|g_model_\w+)\b")


def names_the_export_defines(export_dir: Path) -> set[str]:
    """Macros #defined and symbols declared extern in the export's headers."""
    names = set()
    for header in ("model_settings.h", "model_test_input.h", "model_data.h", "model_vocab.h"):
        if not (export_dir / header).is_file():
            continue  # model_vocab.h: only exports of a checkpoint with a tokenizer
        text = (export_dir / header).read_text()
        names |= set(re.findall(r"^#define (\w+)", text, re.MULTILINE))
        names |= set(re.findall(r"^extern [^;(\n]*?\b(\w+)(?:\[[^\]]*\])?;", text, re.MULTILINE))
    return names


def test_sketch_uses_only_what_the_export_writes(export_dir, text_export_dir):
    defined = names_the_export_defines(export_dir) | names_the_export_defines(text_export_dir)
    assert {"g_model_vocab", "g_model_vocab_len"} <= defined
    assert {"MCUBERT_MODEL_REGISTER_OPS", "g_model_data", "g_model_test_inputs"} <= defined  # the parser works
    sketch_code = re.sub(r"//[^\n]*", "", SKETCH.read_text())
    used = set(EXPORT_NAME.findall(sketch_code)) - {"MCUBERT_SKETCH_ARENA_EXTRA_BYTES"}
    assert used - defined == set(), f"the sketch names what the export does not write: {sorted(used - defined)}"
    assert {
        "MCUBERT_MODEL_ARENA_BYTES",
        "MCUBERT_MODEL_ARENA_ALIGNMENT",
        "MCUBERT_MODEL_OP_RESOLVER_SIZE",
        "MCUBERT_MODEL_REGISTER_OPS",
        "MCUBERT_MODEL_OUTPUT_INDEX",
        "MCUBERT_TEST_OUTPUT_TOLERANCE",
        "g_model_data",
        "g_model_test_inputs",
        "g_model_test_expected_output",
    } <= used


def test_sketch_includes_the_binding_through_tensorflowlite():
    text = SKETCH.read_text()
    includes = re.findall(r"^#include\s+[<\"]([^>\"]+)", text, re.MULTILINE)
    assert includes[0] == "mcubert_tflm_arduino.h"  # TensorFlowLite.h first, so the builder finds TFLM
    assert {"model_data.h", "model_settings.h", "model_test_input.h"} <= set(includes)
    assert "micros()" in text and "arena_used_bytes()" in text


# ---- compiled against a TFLM checkout ----------------------------------------------------------


def tflm_include_dirs() -> list[Path]:
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip(
            "set TFLM_DIR (a tflite-micro checkout; FLATBUFFERS_INCLUDE and GEMMLOWP_DIR, default: its "
            "Makefile's downloads/) to compile the sketch, the export and the binding against TFLM"
        )
    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("arm-none-eabi-g++ not found (Debian: apt-get install gcc-arm-none-eabi)")
    downloads = Path(tflm) / "tensorflow" / "lite" / "micro" / "tools" / "make" / "downloads"
    dirs = [
        Path(tflm),
        Path(os.environ.get("FLATBUFFERS_INCLUDE", downloads / "flatbuffers" / "include")),
        Path(os.environ.get("GEMMLOWP_DIR", downloads / "gemmlowp")),
    ]
    for path, header in zip(
        dirs, ("tensorflow/lite/micro/micro_interpreter.h", "flatbuffers/flatbuffers.h", "fixedpoint/fixedpoint.h")
    ):
        if not (path / header).is_file():
            pytest.fail(f"{path / header} not found: check TFLM_DIR / FLATBUFFERS_INCLUDE / GEMMLOWP_DIR")
    return dirs


def compile_object(source: Path, obj: Path, include_dirs: list[Path]) -> str:
    """'' on success, else the command and the compiler's messages."""
    if source.suffix == ".c":
        command = ["arm-none-eabi-gcc", *ARCH, *C_FLAGS]
    elif source.suffix == ".S":
        command = ["arm-none-eabi-gcc", *ARCH, "-x", "assembler-with-cpp"]
    else:
        command = ["arm-none-eabi-g++", *ARCH, *CXX_FLAGS]
    command += [f"-I{path}" for path in include_dirs] + ["-c", str(source), "-o", str(obj)]
    result = subprocess.run(command, capture_output=True, text=True, errors="replace")
    return "" if result.returncode == 0 else f"{' '.join(command)}\n{result.stderr}"


# One symbol line of `nm -C` (BSD format): the value (absent for an undefined symbol), the type letter,
# the name. A demangled name holds spaces ("mcubert::TextInput::TextInput(unsigned char const*, unsigned
# long)"): everything after the type is the name, not one more field.
NM_LINE = re.compile(r"^[0-9a-fA-F]*\s+(\S) (.+)$")


def parse_nm(out: str) -> tuple[set[str], set[str]]:
    """(defined, undefined) names in `nm -C` output; defined: global text, data, read-only, bss, weak."""
    defined, undefined = set(), set()
    for line in out.splitlines():
        match = NM_LINE.match(line)  # file headers ("x.o:") and blank lines do not match
        if match is None:
            continue
        kind, name = match.groups()
        if kind == "U":
            undefined.add(name)
        elif kind in ("T", "D", "R", "B", "W"):
            defined.add(name)
    return defined, undefined


def symbols(objects: list[Path]) -> tuple[set[str], set[str]]:
    """(defined, undefined) C++-demangled symbol names of the objects."""
    out = subprocess.run(
        ["arm-none-eabi-nm", "-C", *map(str, objects)], capture_output=True, text=True, check=True
    ).stdout
    return parse_nm(out)


def test_parse_nm_keeps_demangled_names_with_spaces():
    # Lines as arm-none-eabi-nm -C writes them for the text-in build (two objects, each under its name).
    fill = (
        "mcubert::TextInput::Fill(tflite::MicroInterpreter&, mcubert::TextInputIndices const&, "
        "unsigned char const*, unsigned long, unsigned long*)"
    )
    constructor = "mcubert::TextInput::TextInput(unsigned char const*, unsigned long)"
    add_ops = "TfLiteStatus mcubert::AddMcubertOps<4u>(tflite::MicroMutableOpResolver<4u>&)"
    out = f"""
sketch.o:
00000000 T setup()
00000000 W {add_ops}
00000000 r mcubert::kEmbeddingOpName
         U mcubert::Register_MCUBERT_EMBEDDING()
         U {fill}
         U {constructor}
         U g_model_vocab

vocab.o:
00000000 R g_model_vocab
00000008 b tensor_arena
"""
    defined, undefined = parse_nm(out)
    assert defined == {"setup()", add_ops, "g_model_vocab"}
    assert undefined == {"mcubert::Register_MCUBERT_EMBEDDING()", fill, constructor, "g_model_vocab"}


@pytest.mark.parametrize("with_text", [False, True], ids=["test-sequence", "text-in"])
def test_sketch_compiles_with_the_export_and_the_library_against_tflm(
    request, export_dir, sketch_copy, tmp_path, with_text, arduino_lib_dir
):
    """Both builds: the test sequence only, and with the export's vocabulary the serial text loop
    (mcubert::TextInput from the binding)."""
    tflm_dirs = tflm_include_dirs()
    if with_text:
        export_dir = request.getfixturevalue("text_export_dir")
    assert copy_export(export_dir, sketch_copy).returncode == 0
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "Arduino.h").write_text(STUB_ARDUINO_H)
    (stubs / "TensorFlowLite.h").write_text(STUB_TENSORFLOWLITE_H)
    # The .ino as the Arduino builder makes it a .cpp: Arduino.h first, then the sketch.
    sketch_cpp = tmp_path / "mcubert_bert_tiny.ino.cpp"
    sketch_cpp.write_text(f'#include <Arduino.h>\n#line 1 "{SKETCH}"\n' + SKETCH.read_text())
    # Include paths as the builder sets them: the core (stubs), each library's src/, the sketch folder.
    include_dirs = [stubs, arduino_lib_dir / "src", *tflm_dirs, sketch_copy]
    library_sources = sorted(p for p in (arduino_lib_dir / "src").rglob("*") if p.suffix in (".c", ".cpp", ".S"))
    sketch_sources = [sketch_cpp, sketch_copy / "model_data.cpp", sketch_copy / "model_test_input.cpp"]
    if with_text:
        sketch_sources.append(sketch_copy / "model_vocab.cpp")
    jobs = [
        (source, tmp_path / f"{kind}-{source.name}.o")
        for kind, sources in (("lib", library_sources), ("sketch", sketch_sources))
        for source in sources
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores, shared
        errors = [e for e in pool.map(lambda job: compile_object(*job, include_dirs), jobs) if e]
    assert not errors, "\n\n".join(errors)

    objects = [obj for _, obj in jobs]
    sketch_object = objects[len(library_sources)]
    sketch_defined, sketch_needs = symbols([sketch_object])
    assert {"setup()", "loop()"} <= sketch_defined
    ours_defined, _ = symbols([obj for obj in objects if obj != sketch_object])
    ours = {name for name in sketch_needs if name.startswith(("mcubert", "g_model_"))}
    assert {"mcubert::Register_MCUBERT_EMBEDDING()", "g_model_data", "g_model_test_inputs"} <= ours
    uses_text = "g_model_vocab" in ours and any(name.startswith("mcubert::TextInput::") for name in ours)
    assert uses_text == with_text
    assert ours - ours_defined == set(), f"undefined in the library and export objects: {sorted(ours - ours_defined)}"
    binding_defined, _ = symbols([obj for source, obj in jobs if source.name.endswith("_tflm.cpp")])
    assert {
        f"mcubert::Register_MCUBERT_{op}()" for op in ("EMBEDDING", "ATTENTION", "MLP", "CLASSIFIER_HEAD")
    } <= binding_defined  # compiled for real, not to the empty no-TFLM object

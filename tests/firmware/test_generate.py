"""`mcubert_generate` (examples/baremetal): a decoder exported from a GPT-2 checkpoint generates under QEMU's
Cortex-M7 and Cortex-M55 (MVE path), prompt in, ids out, each prompt's greedy continuation equal to the
reference's (the .tflite read back) token for token, every KV cache reset between prompts, with int8 and with int4
weights, and drawing each next id with MCUBERT_SAMPLE (--sample; the generator restarted for each prompt, as
TFLM's Reset() restarts it); bad prompt lines are named and skipped."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tests import qemu
from tests.export.test_arduino_bundle import CPUS, compile_library
from tests.export.test_cmake_bundle import TOOLCHAIN, build
from tests.firmware.baremetal_helpers import firmware_sizes, need
from tests.gpt2_helpers import random_gpt2
from tflm_mcubert.firmware.app_data import app_data_from_export, write_app_data
from tflm_mcubert.tflite.mcubert_reader import read_decoder

VOCAB = 211
LANGS = ("C", "CXX", "ASM")
NEW_TOKENS = 12


# export options: int8 and int4 weights greedy, int8 drawing its next ids on the device, and int4 weights with the
# tied word table at int4 (looked up and scored by the LM head at int4 storage)
VARIANTS = {
    "int8": ("--weight-bits", "8"),
    "int4": ("--weight-bits", "4"),
    "int8-sample": ("--weight-bits", "8", "--sample", "temperature=1.5,top_k=6,seed=3"),
    "int4-tables": ("--weight-bits", "4", "--embedding-bits", "4"),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def export_dir(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("generate")
    random_gpt2(root / "gpt2", vocab_size=VOCAB, n_positions=40, n_embd=32, n_layer=2, n_head=4)
    code = _cli(
        "export", "--checkpoint", root / "gpt2", "--top-k", "2", *VARIANTS[request.param], "--out", root / "export"
    )
    assert code == 0
    return root / "export"


def _cli(*argv) -> int:
    from tflm_mcubert.cli import main

    return main([str(a) for a in argv])


@pytest.mark.parametrize(
    "board, machine", [("qemu-mps2-an500", "mps2-an500"), ("qemu-mps3-an547", "mps3-an547")], ids=["m7", "m55"]
)
def test_generation_under_qemu_equals_the_reference_token_for_token(export_dir, tmp_path, board, machine):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    write_app_data(app_data_from_export(export_dir), tmp_path / "data")
    elf = firmware_sizes.build(
        board,
        tmp_path / "build",
        target="mcubert_generate",
        cmake_args=(f"-DMCUBERT_GENERATE_DATA_DIR={tmp_path / 'data'}",),
    )
    prompts = [[5], [17, 3, 99, 210], list(range(30, 60)), [7, 7, 7]]  # the third runs into the 40-token context
    lines = [" ".join(map(str, p)) for p in prompts]
    lines.insert(2, "12 banana 4")
    lines.insert(3, f"1 2 {VOCAB}")
    (tmp_path / "prompts.txt").write_text("\n".join(lines) + "\n")
    status, console = qemu.run_qemu(
        elf, machine=machine, command_line=f"prompts={tmp_path / 'prompts.txt'} tokens={NEW_TOKENS}", timeout=300
    )
    assert status == 3, console  # the two bad lines
    assert ("MVE path" in console) == (machine == "mps3-an547"), console
    decoder = read_decoder((export_dir / "model.tflite").read_bytes()).quantized
    numbers = [1, 2, 5, 6]
    for number, prompt in zip(numbers, prompts):
        new = min(NEW_TOKENS, decoder.context - len(prompt) + 1)
        expected = _greedy_to_the_context(decoder, prompt, new)
        want = f"prompt {number}: {len(prompt)} ids in, ids out: {' '.join(map(str, expected))}"
        assert want in console, (want, console)
    if decoder.sample is not None:  # the drawn ids are not the best ones
        greedy = decoder.sampling(None)
        assert any(_greedy_to_the_context(decoder, p, 8) != _greedy_to_the_context(greedy, p, 8) for p in prompts)
    assert "prompt 3: the line is not token ids" in console
    assert f"prompt 4: the line has an id outside the vocabulary (ids 0..{VOCAB - 1}, at most 40 tokens)" in console
    assert "(the context is full)" in console
    assert "done: 6 prompts" in console


def _greedy_to_the_context(decoder, prompt, new_tokens) -> list[int]:
    """QuantizedDecoder.greedy, also where the last id comes from the step at the last position."""
    caches, out = decoder.new_caches(), []
    for position, token in enumerate(prompt):
        top = decoder.step(token, position, caches)
    position = len(prompt)
    while len(out) < new_tokens:
        out.append(int(top[0, 0]))
        if len(out) == new_tokens or position == decoder.context:
            break
        top = decoder.step(out[-1], position, caches)
        position += 1
    return out


def test_decoder_data_refuses_an_export_without_a_model(tmp_path, capsys):
    from tflm_mcubert.firmware.app_data import main

    assert main([str(tmp_path), str(tmp_path / "out")]) == 2
    assert "model.tflite: missing" in capsys.readouterr().err


def test_the_tied_table_is_written_once_in_the_c_data(export_dir):
    from tflm_mcubert.firmware.app_data import render_source

    source = render_source(app_data_from_export(export_dir))
    rows = "generate_decoder_embedding_word_rows"
    assert f"{rows}[" in source and "generate_lm_head_word_rows[" not in source
    # the tensor views of the embedding and of the head both point at the one array
    assert source.count(f"{rows},") == 2


@pytest.fixture(scope="module")
def text_export(tmp_path_factory):
    """A GPT-2-style LM with its own byte-level BPE (train-lm on the built-in sentences), exported."""
    from tflm_mcubert.data.calibration import builtin_sentences, evaluation_sentences

    root = tmp_path_factory.mktemp("generate-text")
    (root / "text.txt").write_text("\n".join(builtin_sentences() + evaluation_sentences()) * 2 + "\n")
    train = ["train-lm", "--task", root / "text.txt", "--vocab-size", "400", "--context", "48", "--hidden", "32"]
    assert (
        _cli(*train, "--layers", "2", "--heads", "4", "--epochs", "2", "--batch-size", "8", "--out", root / "lm") == 0
    )
    assert _cli("export", "--checkpoint", root / "lm", "--out", root / "export") == 0
    return root / "lm", root / "export"


def test_text_in_text_out_under_qemu_equals_the_reference(text_export, tmp_path):
    """Prompts tokenized by the C byte-level BPE, the decoder run over its caches, the continuation
    detokenized one id at a time: ids and text equal Hugging Face's tokenizer and the reference decoder."""
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    transformers = pytest.importorskip("transformers")
    checkpoint, export_dir = text_export
    calls = app_data_from_export(export_dir)
    assert calls.vocab, "the export wrote no tokenizer blob"
    write_app_data(calls, tmp_path / "data")
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "build",
        target="mcubert_generate",
        cmake_args=(f"-DMCUBERT_GENERATE_DATA_DIR={tmp_path / 'data'}",),
    )
    prompts = ["The film", "Crème brûlée, 東京 and 😀 in a quiet", "", "word " * 60]
    (tmp_path / "prompts.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    status, console = qemu.run_qemu(elf, command_line=f"prompts={tmp_path / 'prompts.txt'} tokens=10", timeout=300)
    assert status == 3, console  # the empty line and the one longer than the context
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
    decoder = read_decoder((export_dir / "model.tflite").read_bytes()).quantized
    to_model = np.load(export_dir / "model_ids.npy") if (export_dir / "model_ids.npy").is_file() else None
    for number, text in enumerate(prompts[:2], 1):
        ids = tokenizer.encode(text)
        model_ids = [int(to_model[i]) if to_model is not None else i for i in ids]
        expected = _greedy_to_the_context(decoder, model_ids, 10)
        assert f"prompt {number}: {len(ids)} ids in, ids out: {' '.join(map(str, expected))};" in console, console
        back = [int(np.argsort(to_model)[i]) if to_model is not None else i for i in expected]
        text_out = tokenizer.decode(back, skip_special_tokens=True).replace("\n", "\\n").replace("\r", "\\r")
        assert f"text {number}: {text_out}\n" in console, (text_out, console)
    assert "prompt 3: the line is empty" in console
    assert "prompt 4: the text makes more tokens than the context holds" in console


def test_no_vocab_leaves_the_tokenizer_off_the_device_and_its_bytes_out_of_the_flash(text_export, tmp_path):
    """--no-vocab for a decoder: the device reads and writes ids (its tokenizer runs elsewhere), so no blob is
    written or counted; calibration still reads the text through the checkpoint's tokenizer."""
    checkpoint, with_vocab = text_export
    assert _cli("export", "--checkpoint", checkpoint, "--no-vocab", "--out", tmp_path / "ids") == 0
    report = json.loads((tmp_path / "ids" / "report.json").read_text())
    full = json.loads((with_vocab / "report.json").read_text())
    assert report["tokenizer"] is None and not (tmp_path / "ids" / "model_vocab.bin").exists()
    assert report["flash_bytes"] == report["model_bytes"] == full["model_bytes"]
    assert full["flash_bytes"] == full["model_bytes"] + full["tokenizer"]["bytes"]
    assert report["calibration"] == full["calibration"] and report["calibration"]["source"] != "random ids"
    assert app_data_from_export(tmp_path / "ids").vocab == b""  # the bare-metal app takes id prompts


def test_a_decoder_cmake_bundle_builds_on_the_host_and_for_cortex_m7(text_export, tmp_path):
    """`--bundle cmake` for a decoder: its model data, settings, BPE blob and generation loop in a CMake project
    that builds with nothing else of this repository (int4 weights: their kernels are in the library too)."""
    need("cmake", "arm-none-eabi-gcc")
    checkpoint, _ = text_export
    out = tmp_path / "export"
    assert _cli("export", "--checkpoint", checkpoint, "--weight-bits", "4", "--bundle", "cmake", "--out", out) == 0
    project = out / "cmake"
    for name in ("model_data.cc", "model_data.h", "model_settings.h", "model_vocab.cc", "model_vocab.h"):
        assert (project / "model" / name).read_bytes() == (out / name).read_bytes(), name
    assert (project / "mcubert_generate.cc").read_bytes() == (out / "mcubert_generate.cc").read_bytes()
    cmake_lists = (project / "CMakeLists.txt").read_text()
    assert "add_library(mcubert_model STATIC model/model_data.cc model/model_vocab.cc)" in cmake_lists
    assert "add_library(mcubert_model_example OBJECT mcubert_generate.cc)" in cmake_lists
    assert "cmake/" in json.loads((out / "report.json").read_text())["files"]
    build(project, tmp_path / "host")
    m7 = "-mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16"
    build(project, tmp_path / "m7", f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", *(f"-DCMAKE_{x}_FLAGS={m7}" for x in LANGS))
    symbols = subprocess.run(
        ["arm-none-eabi-nm", str(tmp_path / "m7" / "libmcubert_model.a")], capture_output=True, text=True, check=True
    ).stdout
    assert "g_model_data" in symbols and "g_model_vocab" in symbols


# The Arduino core and Arduino_TensorFlowLite as far as the decoder sketch reaches them: it calls TFLM only
# through mcubert_generate(), so TFLM's headers can be the binding's stand-ins (tests/tflm/host_stub).
STUB_ARDUINO_H = """\
#pragma once
#include <stddef.h>
#include <stdint.h>
unsigned long micros(void);
unsigned long millis(void);
void delay(unsigned long ms);
struct StubSerial {
  void begin(unsigned long baud);
  explicit operator bool() const;
  size_t print(const char *text);
  size_t print(long value);
  size_t print(unsigned long value);
  size_t print(int value);
  size_t println(const char *text);
  size_t println(unsigned long value);
  size_t println(void);
  size_t write(const uint8_t *bytes, size_t count);
  int available(void);
  int read(void);
};
extern StubSerial Serial;
"""
HOST_STUB = Path(__file__).resolve().parents[1] / "tflm" / "host_stub"


def test_a_decoder_arduino_bundle_holds_the_model_and_its_generation_loop_and_compiles(text_export, tmp_path):
    """`--bundle arduino` for a decoder with int4 weights: the library holds the model, its settings, the BPE blob
    and mcubert_generate (compiled only with TFLM), every macro the sketch names is one model_settings.h defines,
    the library compiles for the Nano 33 BLE's Cortex-M4 and the sketch for Cortex-M7."""
    checkpoint, _ = text_export
    out = tmp_path / "export"
    assert _cli("export", "--checkpoint", checkpoint, "--weight-bits", "4", "--bundle", "arduino", "--out", out) == 0
    assert "lm_mcubert.zip" in json.loads((out / "report.json").read_text())["files"]
    with zipfile.ZipFile(out / "lm_mcubert.zip") as archive:
        assert {name.split("/")[0] for name in archive.namelist()} == {"lm_mcubert"}
        archive.extractall(tmp_path / "library")
    library = tmp_path / "library" / "lm_mcubert"
    src = library / "src"
    for export_name in ("model_data.cc", "model_data.h", "model_settings.h", "model_vocab.cc", "model_vocab.h"):
        assert (src / export_name.replace(".cc", ".cpp")).read_bytes() == (out / export_name).read_bytes()
    generate = (src / "mcubert_generate.cpp").read_text()
    assert (out / "mcubert_generate.cc").read_text() in generate
    assert '#if __has_include("tensorflow/lite/micro/micro_interpreter.h")' in generate
    assert not list(library.rglob("*.cc"))
    sketch = (library / "examples" / "lm_mcubert" / "lm_mcubert.ino").read_text()
    settings = (src / "model_settings.h").read_text()
    named = set(re.findall(r"\bMCUBERT_MODEL_\w+", sketch))
    assert named and named <= set(re.findall(r"#define (MCUBERT_MODEL_\w+)", settings)), named
    assert "name=lm_mcubert" in (library / "library.properties").read_text()
    compile_library(src, "cortex-m4", tmp_path)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "Arduino.h").write_text(STUB_ARDUINO_H)
    (stubs / "TensorFlowLite.h").write_text("#pragma once\n")
    sketch_cpp = tmp_path / "lm_mcubert.ino.cpp"  # as the Arduino builder makes it: Arduino.h first
    sketch_cpp.write_text('#include <Arduino.h>\n#line 1 "lm_mcubert.ino"\n' + sketch)
    includes = [flag for path in (stubs, src, HOST_STUB) for flag in ("-I", str(path))]
    flags = [*CPUS["cortex-m7"], "-std=gnu++17", "-fno-exceptions", "-fno-rtti", "-O2", "-Wall", "-Wextra", "-Werror"]
    result = subprocess.run(
        ["arm-none-eabi-g++", *flags, *includes, "-c", str(sketch_cpp), "-o", str(tmp_path / "sketch.o")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]

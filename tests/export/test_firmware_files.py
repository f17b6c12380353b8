"""Firmware files of an export (firmware/firmware_files.py): model_settings.h, model_test_input.*, FIRMWARE.md.

* A real `export` (mcubert schedule, BERT-tiny preset): the files are listed in report.json, the settings
  carry the report's numbers, the expected output is the numpy reference's for the stored sequence.
* Stock and hidden-state graphs: the resolver registers exactly the graph's builtins, the expected output
  is the tflite-micro interpreter's, the output quantization is described as it is.
* The model's size and CRC-32, which the device checks the model against (mcubert_verify_model_expected).
* Deterministic output; headers and the test-input source compile with arm-none-eabi-gcc/g++, and the
  REGISTER_OPS macro compiles against a resolver with TFLM's Add methods.
* Errors: an op without an Add method, a sample without one of the model's inputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from tflm_mcubert.ops.registry import OPS

from mcubert_models import small_export
from tflm_mcubert.tflite.graph import parse
from tflm_mcubert.boards import get_board
from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.firmware import firmware_files
from tflm_mcubert.firmware.firmware_files import FILES, FirmwareFilesError, describe_model, write_firmware_files
from tflm_mcubert.tflite.integrity import expected_crc32
from tflm_mcubert.tflite.mcubert_reader import read_model
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.firmware.tflm_op_resolver import BUILTIN_ADD_METHODS, UnsupportedOpError, registration
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.runtime.tflm_runner import run_tflm

BOARD = get_board("nucleo-f767zi")


def define(header: str, name: str) -> str:
    match = re.search(rf"^#define {name} (.+?)(?:\s+//.*)?$", header, re.MULTILINE)
    assert match, f"{name} not defined"
    return match.group(1).strip()


def c_array(source: str, name: str) -> np.ndarray:
    match = re.search(rf"{name}\[[A-Z_]+\] = \{{(.*?)\}};", source, re.DOTALL)
    assert match, f"{name} not in the source"
    return np.array([int(v) for v in match.group(1).replace("\n", " ").split(",") if v.strip()])


@pytest.fixture(scope="module")
def mcubert_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("export-mcubert")
    report = run_export(ExportRequest(out_dir=out, board=BOARD, seq_len=32))
    return out, report


def test_export_lists_and_writes_the_firmware_files(mcubert_export):
    out, report = mcubert_export
    assert set(FILES) <= set(report["files"])
    assert json.loads((out / "report.json").read_text())["files"] == report["files"]
    for name in report["files"]:
        assert (out / name.rstrip("/")).exists(), name


def test_settings_carry_the_report_numbers(mcubert_export):
    out, report = mcubert_export
    header = (out / "model_settings.h").read_text()
    assert int(define(header, "MCUBERT_MODEL_ARENA_BYTES")) == report["arena_bytes"]
    assert define(header, "MCUBERT_MODEL_ARENA_ALIGNMENT") == "16"
    assert int(define(header, "MCUBERT_MODEL_SEQ_LEN")) == report["seq_len"] == 32
    assert int(define(header, "MCUBERT_MODEL_NUM_LABELS")) == report["model"]["config"]["num_labels"] == 2
    assert define(header, "MCUBERT_MODEL_SCHEDULE") == '"mcubert"'
    assert define(header, "MCUBERT_MODEL_BOARD") == f'"{report["board"]["name"]}"'
    assert define(header, "MCUBERT_MODEL_OP_RESOLVER_SIZE") == str(len(OPS))  # AddMcubertOps: every op
    assert define(header, "MCUBERT_MODEL_USES_CUSTOM_OPS") == "1"
    assert "mcubert::AddMcubertOps(resolver)" in header
    graph = parse((out / "model.tflite").read_bytes())
    assert define(header, "MCUBERT_MODEL_INPUT_NAMES") == "{" + ", ".join(f'"{i.name}"' for i in graph.inputs) + "}"
    logits = graph.output_named("logits").tensor
    assert float(define(header, "MCUBERT_MODEL_OUTPUT_SCALE").rstrip("f")) == pytest.approx(logits.scales[0], rel=1e-7)
    assert int(define(header, "MCUBERT_MODEL_OUTPUT_ZERO_POINT")) == logits.zero_points[0]
    assert define(header, "MCUBERT_MODEL_ATTENTION_MASK_TYPE") == "int8_t"
    guide = (out / "FIRMWARE.md").read_text()
    assert f"{report['arena_bytes']:,} B" in guide and f"{report['flash_bytes']:,} B" in guide


def test_expected_output_is_the_reference_on_the_stored_sequence(mcubert_export):
    out, _ = mcubert_export
    inputs, expected = firmware_files.read_test_input(out)
    run = run_reference(read_model((out / "model.tflite").read_bytes()), inputs)
    assert np.array_equal(run.outputs["logits"].reshape(-1), expected)
    source = (out / "model_test_input.cc").read_text()
    assert np.array_equal(c_array(source, "g_model_test_expected_output"), expected)
    for name, values in inputs.items():
        assert np.array_equal(c_array(source, f"g_model_test_{name}"), values), name
    valid = int(define((out / "model_test_input.h").read_text(), "MCUBERT_TEST_VALID_TOKENS"))
    assert valid == int(inputs["attention_mask"].sum()) and 0 < valid <= 32


def test_files_are_deterministic(tmp_path):
    result = small_export(16)
    sample = {
        "input_ids": np.arange(16, dtype=np.int32),
        "attention_mask": np.ones(16, np.int8),
        "token_type_ids": np.zeros(16, np.int32),
    }
    for name in ("a", "b"):
        write_firmware_files(
            tmp_path / name,
            tflite=result.tflite,
            schedule="mcubert",
            board=BOARD,
            arena_bytes=1234,
            sample=sample,
            sample_source="a test",
        )
    for name in FILES:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_hidden_state_model_has_no_labels_and_per_channel_output(tmp_path):
    result = small_export(16, labels=None)
    sample = {
        "input_ids": np.arange(16, dtype=np.int32),
        "attention_mask": np.ones(16, np.int8),
        "token_type_ids": np.zeros(16, np.int32),
    }
    write_firmware_files(
        tmp_path,
        tflite=result.tflite,
        schedule="mcubert",
        board=BOARD,
        arena_bytes=1,
        sample=sample,
        sample_source="a test",
    )
    header = (tmp_path / "model_settings.h").read_text()
    assert define(header, "MCUBERT_MODEL_NUM_LABELS") == "0"
    assert define(header, "MCUBERT_MODEL_OUTPUT_NAME") == '"last_hidden_state"'
    assert define(header, "MCUBERT_MODEL_OUTPUT_PER_TENSOR_QUANTIZED") == "0"
    assert "MCUBERT_MODEL_OUTPUT_SCALE" not in header
    _, expected = firmware_files.read_test_input(tmp_path)
    assert expected.size == 16 * 48


@pytest.fixture(scope="module")
def stock_files(micro_int8, tmp_path_factory):
    out = tmp_path_factory.mktemp("stock-files")
    sample = random_samples(200, 8, 1, seed=3)[0]
    write_firmware_files(
        out,
        tflite=micro_int8,
        schedule="stock",
        board=BOARD,
        arena_bytes=54321,
        sample=sample,
        sample_source="random ids",
    )
    return out, sample


def test_stock_settings_register_exactly_the_graph_builtins(micro_int8, stock_files):
    out, _ = stock_files
    header = (out / "model_settings.h").read_text()
    used = sorted({op.name for op in parse(micro_int8).ops})
    registered = sorted(re.findall(r"\(resolver\)\.(Add\w+)\(\)", header))
    assert registered == sorted(BUILTIN_ADD_METHODS[name] for name in used)
    assert int(define(header, "MCUBERT_MODEL_OP_RESOLVER_SIZE")) == len(used)
    assert "mcubert::" not in header
    assert define(header, "MCUBERT_MODEL_USES_CUSTOM_OPS") == "0"
    assert define(header, "MCUBERT_MODEL_ARENA_BYTES") == "54321"
    assert define(header, "MCUBERT_MODEL_SCHEDULE") == '"stock"'
    assert define(header, "MCUBERT_MODEL_ATTENTION_MASK_TYPE") == "int32_t"
    graph = parse(micro_int8)
    for position, io in enumerate(graph.inputs):
        assert int(define(header, f"MCUBERT_MODEL_{io.name.upper()}_INDEX")) == position


def test_stock_expected_output_is_the_tflm_interpreters(micro_int8, stock_files):
    out, sample = stock_files
    _, expected = firmware_files.read_test_input(out)
    want = run_tflm(micro_int8, sample, dequantize_outputs=False)["logits"].reshape(-1)
    assert expected.dtype == np.int8 and np.array_equal(expected, want)


def test_settings_carry_the_size_and_crc_the_device_checks(mcubert_export, micro_int8, stock_files):
    """MCUBERT_MODEL_TFLITE_BYTES / _CRC32: the file's size, and its CRC-32 with the integrity record's
    data read as zeros (the record's word 3) for an MCUBERT export, of the whole file for a stock one."""
    out, _ = mcubert_export
    header = (out / "model_settings.h").read_text()
    model = (out / "model.tflite").read_bytes()
    assert int(define(header, "MCUBERT_MODEL_TFLITE_BYTES").rstrip("u")) == len(model)
    crc = int(define(header, "MCUBERT_MODEL_TFLITE_CRC32").rstrip("u"), 16)
    assert crc == expected_crc32(model) != zlib.crc32(model)
    stock = (stock_files[0] / "model_settings.h").read_text()
    assert int(define(stock, "MCUBERT_MODEL_TFLITE_BYTES").rstrip("u")) == len(micro_int8)
    assert int(define(stock, "MCUBERT_MODEL_TFLITE_CRC32").rstrip("u"), 16) == zlib.crc32(micro_int8)


def test_unknown_op_and_incomplete_sample_are_named():
    with pytest.raises(UnsupportedOpError, match="MY_CUSTOM_OP"):
        registration(["FULLY_CONNECTED", "MY_CUSTOM_OP"])
    result = small_export(16)
    model = describe_model(parse(result.tflite), "mcubert")
    with pytest.raises(FirmwareFilesError, match="token_type_ids"):
        firmware_files.reference_sample(
            result.tflite, model, {"input_ids": np.zeros(16, np.int32), "attention_mask": np.ones(16, np.int8)}, "x"
        )
    with pytest.raises(FirmwareFilesError, match="12 tokens, the model takes 16"):
        firmware_files.reference_sample(
            result.tflite,
            model,
            {
                "input_ids": np.zeros(12, np.int32),
                "attention_mask": np.ones(12, np.int8),
                "token_type_ids": np.zeros(12, np.int32),
            },
            "x",
        )


# ---- C syntax --------------------------------------------------------------------------------

# The parts of TFLM the macro touches: TfLiteStatus and a resolver with every Add method of the table.
FAKE_TFLM = """\
typedef enum { kTfLiteOk = 0, kTfLiteError = 1 } TfLiteStatus;
struct FakeResolver {
%s
};
namespace mcubert {
template <typename Resolver> TfLiteStatus AddMcubertOps(Resolver&) { return kTfLiteOk; }
}
#include "model_settings.h"
#include "model_test_input.h"
static_assert(MCUBERT_MODEL_OP_RESOLVER_SIZE > 0, "resolver size");
int main() {
  FakeResolver resolver;
  const char* names[] = MCUBERT_MODEL_INPUT_NAMES;
  TfLiteStatus status = MCUBERT_MODEL_REGISTER_OPS(resolver);
  return (int)status + (int)sizeof(names) + (int)g_model_test_inputs[0].bytes;
}
"""


def _syntax(compiler: str, language: str, source: Path, include: Path) -> None:
    if shutil.which(compiler) is None:
        pytest.skip(f"{compiler} not found (Debian: apt-get install gcc-arm-none-eabi)")
    std = ["-std=c99"] if language == "c" else ["-std=gnu++17"]
    result = subprocess.run(
        [
            compiler,
            "-mcpu=cortex-m7",
            "-mthumb",
            "-fsyntax-only",
            "-Wall",
            "-Wextra",
            "-Werror",
            *std,
            "-x",
            language,
            "-I",
            str(include),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("schedule", ["mcubert", "stock"])
def test_generated_files_compile(schedule, mcubert_export, stock_files, tmp_path):
    out = mcubert_export[0] if schedule == "mcubert" else stock_files[0]
    for header in ("model_settings.h", "model_test_input.h"):
        _syntax("arm-none-eabi-gcc", "c", out / header, out)  # plain C users
    _syntax("arm-none-eabi-g++", "c++", out / "model_test_input.cc", out)
    methods = "\n".join(
        f"  TfLiteStatus {m}() {{ return kTfLiteOk; }}" for m in sorted(set(BUILTIN_ADD_METHODS.values()))
    )
    (tmp_path / "use.cc").write_text(FAKE_TFLM % methods)
    _syntax("arm-none-eabi-g++", "c++", tmp_path / "use.cc", out)


def test_resolver_table_matches_tflm_checkout():
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip("set TFLM_DIR to a tflite-micro checkout to check the Add-method table against it")
    text = (Path(tflm) / "tensorflow/lite/micro/micro_mutable_op_resolver.h").read_text()
    pairs = re.findall(r"TfLiteStatus (Add\w+)\([^{]*\{\s*[^}]*?AddBuiltin\(\s*BuiltinOperator_(\w+)", text)
    table = {}
    for method, op in pairs:
        table.setdefault(op, method)
    assert table == BUILTIN_ADD_METHODS


def test_layer_check_needs_an_mcubert_export(micro_int8, stock_files, tmp_path):
    from tflm_mcubert.firmware.layer_check import LayerCheckError, layer_check_from_export

    with pytest.raises(LayerCheckError, match="model.tflite: missing"):
        layer_check_from_export(tmp_path)
    out, _ = stock_files
    (out / "model.tflite").write_bytes(micro_int8)
    with pytest.raises(LayerCheckError, match="needs an MCUBERT-schedule export"):
        layer_check_from_export(out)

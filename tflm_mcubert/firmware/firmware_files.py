"""The firmware side of an export: what a TFLM application needs next to model_data.cc.

    model_settings.h        arena size and alignment, sequence length, labels, schedule, board, the op
                            resolver's size and a macro registering exactly the model's ops, the
                            input/output tensor facts (interpreter order, C types, output quantization),
                            and the model's size and CRC-32, which the device checks it against
    model_test_input.h/.cc  one input sequence and the output the host reference computes for it, so a
                            firmware can check itself ("matches the reference: yes/no")
    model_test_input.json   the same sequence and output for host-side tools (layer_check.py)
    FIRMWARE.md             what to copy where, with this export's numbers

The expected output comes from the numpy reference of the MCUBERT ops (runtime/reference.py) for the
mcubert schedule, and from the tflite-micro interpreter (TFLM's reference kernels) for stock. Output
depends only on the arguments, so exports are reproducible byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Mapping

import numpy as np

from tflm_mcubert.boards import Board, human_bytes
from tflm_mcubert.errors import UserError
from tflm_mcubert.firmware.c_string import c_string_literal
from tflm_mcubert.model.labels import check_label_names, default_label_names
from tflm_mcubert.firmware.template import fill
from tflm_mcubert.firmware.tflm_op_resolver import MCUBERT_REGISTRATION, register_expression, registration
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.runtime.tflm_runner import TflmRunner
from tflm_mcubert.tflite.graph import TensorInfo, TfliteGraph, parse
from tflm_mcubert.tflite.integrity import expected_crc32
from tflm_mcubert.tflite.mcubert_reader import read_model

SETTINGS_FILE = "model_settings.h"
TEST_INPUT_HEADER = "model_test_input.h"
TEST_INPUT_SOURCE = "model_test_input.cc"
TEST_INPUT_JSON = "model_test_input.json"
GUIDE_FILE = "FIRMWARE.md"
FILES = (SETTINGS_FILE, TEST_INPUT_HEADER, TEST_INPUT_SOURCE, TEST_INPUT_JSON, GUIDE_FILE)

ARENA_ALIGNMENT = 16  # TFLM's own requirement (MicroInterpreter aligns the arena it is given)
OUTPUT_NAMES = ("logits", "last_hidden_state")  # the output a firmware reports, in order of preference
_C_TYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.float32): "float",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Relative tolerance of a float32 output (TFLM on the MCU and on the host may round differently);
# integer outputs must match exactly.
FLOAT_RELATIVE_TOLERANCE = 1e-4
MACRO_LINE_BREAK = " \\\n    "  # continues a macro body on the next line


class FirmwareFilesError(UserError):
    """The model or the sample cannot be described to a firmware."""


@dataclasses.dataclass(frozen=True)
class FirmwareModel:
    """What a firmware must know about one .tflite."""

    schedule: str
    seq_len: int
    inputs: tuple[TensorInfo, ...]  # interpreter order
    input_names: tuple[str, ...]
    output: TensorInfo
    output_name: str
    output_index: int
    resolver_calls: tuple[str, ...]
    resolver_slots: int

    @property
    def num_labels(self) -> int:
        return int(self.output.shape[-1]) if self.output_name == "logits" else 0


@dataclasses.dataclass(frozen=True)
class ReferenceSample:
    inputs: dict[str, np.ndarray]  # input name -> 1-D array in the model's dtype
    expected: np.ndarray  # the output, flattened, in the model's dtype
    source: str  # where the sequence came from (one line)

    @property
    def valid_tokens(self) -> int:
        return (
            int(np.count_nonzero(self.inputs["attention_mask"]))
            if "attention_mask" in self.inputs
            else int(self.inputs["input_ids"].size)
        )


def describe_model(graph: TfliteGraph, schedule: str) -> FirmwareModel:
    """Inputs, the reported output and the op registration of a parsed .tflite (either schedule)."""
    names = [io.name for io in graph.inputs]
    for name in names:
        if not _IDENTIFIER.fullmatch(name):
            raise FirmwareFilesError(f"model input {name!r} is not a C identifier; cannot name it in {SETTINGS_FILE}")
    if "input_ids" not in names:
        raise FirmwareFilesError(f"the model has no input_ids input (inputs: {', '.join(names)})")
    shape = graph.inputs[names.index("input_ids")].tensor.shape
    outputs = {io.name: io for io in graph.outputs}
    chosen = next((outputs[n] for n in OUTPUT_NAMES if n in outputs), None)
    if chosen is None:
        raise FirmwareFilesError(
            f"the model has neither a logits nor a last_hidden_state output (outputs: {', '.join(outputs)})"
        )
    for tensor in [io.tensor for io in graph.inputs] + [chosen.tensor]:
        if tensor.dtype not in _C_TYPES:
            raise FirmwareFilesError(
                f"tensor {tensor.name!r} is {tensor.type_name}; firmware files support int8, int16, int32 and float32"
            )
    calls, slots = registration(op.name for op in graph.ops)
    return FirmwareModel(
        schedule=schedule,
        seq_len=int(shape[-1]),
        inputs=tuple(io.tensor for io in graph.inputs),
        input_names=tuple(names),
        output=chosen.tensor,
        output_name=chosen.name,
        output_index=chosen.position,
        resolver_calls=tuple(calls),
        resolver_slots=slots,
    )


def reference_sample(
    tflite: bytes,
    model: FirmwareModel,
    sample: Mapping[str, np.ndarray],
    source: str,
    expected: np.ndarray | None = None,
) -> ReferenceSample:
    """`sample` (input name -> [1, s] or [s] integers, in the model's vocabulary) and the reference output
    (`expected` when the caller already ran the reference on this sample)."""
    missing = set(model.input_names) - set(sample)
    if missing:
        raise FirmwareFilesError(f"the test sample lacks the model input(s) {', '.join(sorted(missing))}")
    inputs = {}
    for name, tensor in zip(model.input_names, model.inputs):
        values = np.asarray(sample[name]).reshape(-1)
        if values.size != model.seq_len:
            raise FirmwareFilesError(f"test sample {name}: {values.size} tokens, the model takes {model.seq_len}")
        info = np.iinfo(tensor.dtype)
        if values.min() < info.min or values.max() > info.max:
            raise FirmwareFilesError(f"test sample {name}: values outside {tensor.dtype.name}")
        inputs[name] = values.astype(tensor.dtype)
    if expected is None:
        expected = _reference_output(tflite, model, inputs)
    return ReferenceSample(inputs, expected.reshape(-1).astype(model.output.dtype), source)


def _reference_output(tflite: bytes, model: FirmwareModel, inputs: dict[str, np.ndarray]) -> np.ndarray:
    if model.schedule == "mcubert":
        return run_reference(read_model(tflite), inputs).outputs[model.output_name]
    batch = {name: values[np.newaxis] for name, values in inputs.items()}
    return TflmRunner(tflite).run(batch, dequantize_outputs=False)[model.output_name]


def write_firmware_files(
    out_dir: str | Path,
    *,
    tflite: bytes,
    schedule: str,
    board: Board,
    arena_bytes: int,
    sample: Mapping[str, np.ndarray],
    sample_source: str,
    sample_output: np.ndarray | None = None,
    graph: TfliteGraph | None = None,
    label_names: list[str] | None = None,
) -> list[str]:
    """Write FILES into `out_dir` (next to model_data.cc/.h; created if needed); returns their names.
    `sample_output`: the reference's output for `sample`, and `graph`: the parsed `tflite`, when the
    export has them already; `label_names`: the classes by id (default: HF's "LABEL_0", ...)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = describe_model(graph or parse(bytes(tflite)), schedule)
    labels = firmware_labels(model, label_names)
    reference = reference_sample(tflite, model, sample, sample_source, sample_output)
    (out_dir / SETTINGS_FILE).write_text(render_settings(model, board, arena_bytes, tflite, labels))
    (out_dir / TEST_INPUT_HEADER).write_text(render_sample_header(model, reference))
    (out_dir / TEST_INPUT_SOURCE).write_text(render_sample_source(model, reference))
    (out_dir / TEST_INPUT_JSON).write_text(render_sample_json(model, reference))
    (out_dir / GUIDE_FILE).write_text(render_guide(model, reference, board, arena_bytes, len(tflite), labels))
    return list(FILES)


def firmware_labels(model: FirmwareModel, label_names: list[str] | None) -> list[str]:
    """The label names a firmware prints, one per logit (none for a hidden-state output)."""
    if not model.num_labels:
        return []
    if label_names is None:
        return default_label_names(model.num_labels)
    if len(label_names) != model.num_labels:
        raise FirmwareFilesError(f"{len(label_names)} label names for a model of {model.num_labels} logits")
    try:
        check_label_names(list(label_names), "label names")
    except UserError as exc:
        raise FirmwareFilesError(str(exc)) from None
    return list(label_names)


def read_test_input(export_dir: str | Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(inputs by name, expected output) from an export's model_test_input.json."""
    path = Path(export_dir) / TEST_INPUT_JSON
    if not path.is_file():
        raise FirmwareFilesError(f"{path}: missing (run `python -m tflm_mcubert export` into {Path(export_dir)} first)")
    data = json.loads(path.read_text())
    inputs = {name: np.asarray(values, data["input_dtypes"][name]) for name, values in data["inputs"].items()}
    return inputs, np.asarray(data["expected_output"], data["output_dtype"])


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _banner(what: str) -> str:
    return (
        f"// {what}\n// Generated by `tflm-mcubert export` next to model_data.cc; do not edit, export again instead.\n"
    )


def _macro(name: str) -> str:
    return f"MCUBERT_MODEL_{name.upper()}"


def _float_literal(value: float) -> str:
    text = repr(float(np.float32(value)))
    return (text if ("e" in text or "." in text) else text + ".0") + "f"


def _c_string(text: str) -> str:
    return c_string_literal(text)


def render_settings(
    model: FirmwareModel, board: Board, arena_bytes: int, tflite: bytes, labels: list[str] | None = None
) -> str:
    """model_settings.h; `tflite`: the model's bytes, for the size and CRC-32 the device checks; `labels`:
    the names of the logits (firmware_labels)."""
    out = model.output
    per_tensor = len(out.scales) == 1
    input_macros = []
    for position, (name, tensor) in enumerate(zip(model.input_names, model.inputs)):
        input_macros.append(f"#define {_macro(name)}_INDEX {position}")
        input_macros.append(f"#define {_macro(name)}_TYPE {_C_TYPES[tensor.dtype]}")
    output_quantization = ""
    if per_tensor:
        output_quantization = (
            f"#define MCUBERT_MODEL_OUTPUT_SCALE {_float_literal(out.scales[0])}\n"
            f"#define MCUBERT_MODEL_OUTPUT_ZERO_POINT {int(out.zero_points[0]) if out.zero_points else 0}\n"
        )
    return fill(
        "model_settings.h.tmpl",
        banner=_banner(f"Facts a TFLM firmware needs about this model ({model.schedule} schedule, {board.name})."),
        schedule=_c_string(model.schedule),
        uses_custom_ops=int(MCUBERT_REGISTRATION in model.resolver_calls),
        board=_c_string(board.name),
        clock_hz=board.clock_hz,
        seq_len=model.seq_len,
        num_labels=model.num_labels,
        label_names=_label_macro(labels if labels is not None else firmware_labels(model, None)),
        tflite_bytes=len(tflite),
        tflite_crc32=f"0x{expected_crc32(bytes(tflite)):08X}",
        arena_bytes=arena_bytes,
        arena_alignment=ARENA_ALIGNMENT,
        binding_note=" (needs custom_ops/tflm/mcubert_tflm.h)." if model.schedule == "mcubert" else ".",
        resolver_slots=model.resolver_slots,
        register_ops=register_expression(list(model.resolver_calls), line_break=MACRO_LINE_BREAK),
        input_count=len(model.inputs),
        input_names=", ".join(_c_string(n) for n in model.input_names),
        input_macros="\n".join(input_macros),
        output_index=model.output_index,
        output_name=_c_string(model.output_name),
        output_type=_C_TYPES[out.dtype],
        output_elements=int(np.prod(out.shape)),
        per_tensor=int(per_tensor),
        output_quantization=output_quantization,
    )


def _label_macro(labels: list[str]) -> str:
    if not labels:
        return "// No labels: the output is the hidden state."
    return (
        "// The label names by id (the checkpoint's id2label), as UTF-8:\n"
        "// static const char* const kLabels[MCUBERT_MODEL_LABEL_COUNT] = MCUBERT_MODEL_LABELS;\n"
        f"#define MCUBERT_MODEL_LABEL_COUNT {len(labels)}\n"
        f"#define MCUBERT_MODEL_LABELS {{{', '.join(c_string_literal(n) for n in labels)}}}"
    )


def _tolerance(model: FirmwareModel, reference: ReferenceSample) -> str:
    if model.output.dtype.kind == "f":
        scale = max(1.0, float(np.max(np.abs(reference.expected)))) if reference.expected.size else 1.0
        return _float_literal(FLOAT_RELATIVE_TOLERANCE * scale)
    return "0"


def render_sample_header(model: FirmwareModel, reference: ReferenceSample) -> str:
    declarations = [
        f"extern const {_C_TYPES[tensor.dtype]} g_model_test_{name}[MCUBERT_MODEL_SEQ_LEN];"
        for name, tensor in zip(model.input_names, model.inputs)
    ]
    return fill(
        "model_test_input.h.tmpl",
        banner=_banner("One test sequence and the output the host reference computes for it."),
        settings_file=SETTINGS_FILE,
        source=reference.source,
        valid_tokens=reference.valid_tokens,
        tolerance=_tolerance(model, reference),
        input_declarations="\n".join(declarations),
    )


def _values(array: np.ndarray) -> str:
    if array.dtype.kind == "f":
        items = [_float_literal(v) for v in array.tolist()]
    else:
        items = [str(v) for v in array.tolist()]
    rows = [", ".join(items[i : i + 16]) for i in range(0, len(items), 16)]
    return "    " + ",\n    ".join(rows)


def render_sample_source(model: FirmwareModel, reference: ReferenceSample) -> str:
    lines = [
        _banner("One test sequence and the output the host reference computes for it."),
        f'#include "{TEST_INPUT_HEADER}"',
        "",
    ]
    for name, tensor in zip(model.input_names, model.inputs):
        lines += [
            f"const {_C_TYPES[tensor.dtype]} g_model_test_{name}[MCUBERT_MODEL_SEQ_LEN] = {{",
            _values(reference.inputs[name]),
            "};",
            "",
        ]
    lines.append("const mcubert_test_tensor g_model_test_inputs[MCUBERT_MODEL_INPUT_COUNT] = {")
    for name in model.input_names:
        lines.append(f"    {{{_c_string(name)}, g_model_test_{name}, sizeof(g_model_test_{name})}},")
    lines += [
        "};",
        "",
        "const MCUBERT_MODEL_OUTPUT_TYPE g_model_test_expected_output[MCUBERT_MODEL_OUTPUT_ELEMENTS] = {",
        _values(reference.expected),
        "};",
        "",
    ]
    return "\n".join(lines)


def render_sample_json(model: FirmwareModel, reference: ReferenceSample) -> str:
    data = {
        "source": reference.source,
        "valid_tokens": reference.valid_tokens,
        "input_dtypes": {name: reference.inputs[name].dtype.name for name in model.input_names},
        "inputs": {name: reference.inputs[name].tolist() for name in model.input_names},
        "output_name": model.output_name,
        "output_dtype": model.output.dtype.name,
        "expected_output": reference.expected.tolist(),
    }
    return json.dumps(data) + "\n"


# TFLM's Makefile target for each core (its cortex_m_generic target's TARGET_ARCH values).
_TFLM_ARCH = {
    "cortex-m0plus": "cortex-m0plus",
    "cortex-m4": "cortex-m4+fp",
    "cortex-m7": "cortex-m7+fp",
    "cortex-m33": "cortex-m33",
    "cortex-m55": "cortex-m55",
}


def tflm_build(board: Board) -> str:
    """The TFLM Makefile arguments for the board's core, in Markdown (a line break where the guide wraps)."""
    make = f"`TARGET=cortex_m_generic TARGET_ARCH={_TFLM_ARCH.get(board.core, board.core)}`"
    if board.core == "cortex-m7":
        return make + ", plus `FPU=fpv5-sp-d16` for the F746's\nsingle-precision FPU"
    if board.core == "cortex-m55":
        return make + " and\n`OPTIMIZED_KERNEL_DIR=cmsis_nn` for TFLM's own ops on Helium"
    return make


def render_guide(
    model: FirmwareModel,
    reference: ReferenceSample,
    board: Board,
    arena_bytes: int,
    flash_bytes: int,
    labels: list[str] | None = None,
) -> str:
    output = (
        f"{model.num_labels} int8 logits"
        if model.num_labels and model.output.dtype == np.int8
        else f"{model.output_name} ({int(np.prod(model.output.shape))} {model.output.dtype.name} values)"
    )
    custom = model.schedule == "mcubert"
    ops = (
        "the MCUBERT custom ops (`mcubert::AddMcubertOps`, custom_ops/tflm/)"
        if custom
        else ", ".join(c.removeprefix("Add") for c in model.resolver_calls) + " (TFLM builtins)"
    )
    arena_note = (
        "The arena figure is modelled for a 32-bit MCU (plan plus TFLM's own allocations)."
        if custom
        else "The arena figure was measured on the 64-bit host (TFLM's reference kernels); an optimized kernel "
        "library (CMSIS-NN) may request a little more scratch: raise the arena if AllocateTensors() fails, and "
        "expect its int8 outputs to differ from the reference kernels' by a few LSB at most."
    )
    inputs = ", ".join(
        f"{i}: `{n}` ({_C_TYPES[t.dtype]})" for i, (n, t) in enumerate(zip(model.input_names, model.inputs))
    )
    region = board.largest_contiguous_sram
    return fill(
        "FIRMWARE.md.tmpl",
        schedule=model.schedule,
        board=board.name,
        mcu=board.mcu,
        core=board.core,
        clock_mhz=board.clock_hz // 1_000_000,
        seq_len=model.seq_len,
        output=output,
        arena_bytes=f"{arena_bytes:,}",
        arena_human=human_bytes(arena_bytes),
        arena_alignment=ARENA_ALIGNMENT,
        region=region.name,
        region_human=human_bytes(region.size),
        flash_bytes=f"{flash_bytes:,}",
        flash_human=human_bytes(flash_bytes),
        resolver_slots=model.resolver_slots,
        ops=ops,
        valid_tokens=reference.valid_tokens,
        sample_source=reference.source,
        board_arg=board.name if board.name != "custom" else "<your board's linker script>",
        tflm_build=tflm_build(board),
        sources_to_add="`custom_ops/tflm/*.cc`, `custom_ops/src/*.c`, `custom_ops/src/*.S`"
        if custom
        else "nothing else",
        include_dirs_to_add=" and `custom_ops/include`, `custom_ops/tflm`" if custom else "",
        binding_include="\n" + '#include "mcubert_tflm.h"' if custom else "",
        inputs=inputs,
        arena_note=arena_note,
        arduino_section=_arduino_section(custom),
        labels=_labels_section(labels if labels is not None else firmware_labels(model, None)),
    )


def _labels_section(labels: list[str]) -> str:
    if not labels:
        return "The output is the hidden state: the model has no labels."
    cells = [json.dumps(name, ensure_ascii=False).replace("|", "\\|") for name in labels]
    rows = "\n".join(f"| {i} | {cell} |" for i, cell in enumerate(cells))
    return (
        "The firmware prints the largest logit's label as `label <name> (<id>)`; `MCUBERT_MODEL_LABELS` in\n"
        "`model_settings.h` holds the names (the checkpoint's `id2label`):\n\n| id | label |\n|---|---|\n" + rows
    )


def _arduino_section(custom: bool) -> str:
    if not custom:
        return (
            "Copy `model_data.cc` (as `model_data.cpp`: Arduino sketches do not reliably compile `.cc`),\n"
            "`model_settings.h` and `model_test_input.cc/.h` (likewise renamed) into the sketch folder and use\n"
            "the code above with a TFLM Arduino library."
        )
    return (
        "The MCUBERT Arduino library holds the kernels and the TFLM binding (`<mcubert_tflm_arduino.h>`).\n"
        "Copy this export into your copy of `arduino_lib/examples/mcubert_bert_tiny` with\n"
        "`python arduino_lib/extras/copy_export_to_sketch.py <this directory> <sketch folder>`; see\n"
        "arduino_lib/README.md for the Arduino_TensorFlowLite revision it needs."
    )

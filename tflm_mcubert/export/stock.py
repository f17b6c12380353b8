"""The stock export: BERT as today's TFLM users deploy it, and the baseline every later figure is compared with.

`tf.lite.TFLiteConverter` with full-integer post-training quantization from a representative data set,
into a graph of builtin operators that stock TFLite Micro runs, shaped for the smallest arena:

* inputs `input_ids`, `attention_mask`, `token_type_ids`: int32 [1, seq_len]. The mask is what makes
  padding harmless, and token types carry sentence pairs. Neither costs arena: both are dead long before
  the peak (the feed-forward block), and their tables have 2 rows.
* outputs `logits` for a classifier, else `last_hidden_state` and `pooler_output` (or those asked for).
  Quantized models keep them quantized (int8, or int16 for int16x8) rather than ending in a DEQUANTIZE
  (float outputs would cost arena: 64 KB for bert-tiny's hidden states at seq 128). Read the output
  tensor's scale and zero point to get real values (`runtime.tflm_runner.dequantize` does).
* GELU is tanh-GELU as x*sigmoid(...) (LOGISTIC; TFLM has no GELU kernel), embeddings and the mask bias
  are GATHERs, LayerNorm is decomposed, the attention scale is folded into the query weights, and both
  attention products are BATCH_MATMUL(adj_y=True), which TFLM runs without a persistent transposed copy.

int16x8 needs one rewrite the converter cannot be asked for: it makes embedding tables int16, which
TFLM's GATHER cannot run, so they become int8 tables followed by a QUANTIZE to int16 (`tflite_edit`).

`check_stock_graph` verifies those properties on the converted bytes; `export_stock` calls it.
"""

from __future__ import annotations

import warnings
from typing import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from tflm_mcubert.errors import UserError
from tflm_mcubert.tflite.edit import int8_gather_tables
from tflm_mcubert.model.bert import INPUT_NAMES, BertModel
from tflm_mcubert.tflite.graph import parse

PRECISIONS = ("float32", "int8", "int16x8")

# Additive bias of masked keys in the exported graph. In int8 it shares one scale with the attention
# scores (the mask ADD's output), so HF's -10000 spends the whole int8 range on the mask: on MiniLM-L6
# (bench/stock_fidelity.py) the int8 embedding cosine falls from 0.76 to 0.28. Anything from -100 to -10
# scores the same in int8 (0.755-0.763) and costs nothing in float (cosine >= 0.9999998 vs -1e9). -30
# keeps a margin: a masked key leaks a visible int8 probability (> 1/512) only if its score beats the
# row's best unmasked one by more than 23.
EXPORT_MASK_VALUE = -30.0

_OUTPUT_TYPES = {"int8": tf.int8, "int16x8": tf.int16}
_OPS_SETS = {
    "int8": tf.lite.OpsSet.TFLITE_BUILTINS_INT8,
    "int16x8": tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
}
# Operators TFLM lacks, or that the graph must not need: a Keras GELU, a Keras Embedding's bound check,
# resource variables left unfrozen.
_FORBIDDEN_OPS = {"GELU", "SELECT", "SELECT_V2", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"}


class ExportError(Exception):
    """The converter produced a graph that breaks the stock-graph rules (a bug here, not a user error)."""


def export_stock(
    model: BertModel,
    *,
    seq_len: int,
    precision: str,
    calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    outputs: Sequence[str] | None = None,
    mask_value: float = EXPORT_MASK_VALUE,
) -> bytes:
    """The model as a .tflite for stock TFLM.

    `calibration`: the representative data set for int8/int16x8, dicts of int32 [1, seq_len] arrays keyed
    by input name (`input_ids` required; a missing mask means no padding, missing token types are 0).
    `outputs`: the model outputs to keep (default: `logits` for a classifier, else `last_hidden_state`
    and `pooler_output`); fewer outputs, fewer ops and bytes.
    """
    if precision not in PRECISIONS:
        raise UserError(f"precision {precision!r} is not supported (choose from: {', '.join(PRECISIONS)})")
    config = model.config
    if not 1 <= seq_len <= config.max_position_embeddings:
        raise UserError(f"seq_len must be within 1..{config.max_position_embeddings}, got {seq_len}")
    output_names = _output_names(model, outputs)
    samples = _calibration_samples(calibration, seq_len) if precision != "float32" else None

    twin = model.with_options(gelu_mode="sigmoid", mask_value=mask_value)
    module = _frozen_serving_module(twin, seq_len, output_names)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([module.serve.get_concrete_function()], module)
    if samples is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: iter(samples)
        converter.target_spec.supported_ops = [_OPS_SETS[precision]]
        converter.inference_output_type = _OUTPUT_TYPES[precision]
    with warnings.catch_warnings():
        # Noise from the converter's own machinery: its calibrator uses the deprecated tf.lite.Interpreter,
        # and it expects float inputs to carry statistics (ours are int32 ids).
        warnings.filterwarnings("ignore", message=r"(?s).*tf\.lite\.Interpreter is deprecated")
        warnings.filterwarnings("ignore", message="Statistics for quantized inputs were expected")
        model_bytes = converter.convert()
    if precision == "int16x8":
        model_bytes = int8_gather_tables(model_bytes)

    problems = check_stock_graph(model_bytes, precision)
    if problems:
        raise ExportError("the converted graph is not a clean stock TFLM graph:\n  " + "\n  ".join(problems))
    return model_bytes


def check_stock_graph(model_bytes: bytes, precision: str) -> list[str]:
    """What keeps `model_bytes` from being the stock graph described above; empty when nothing does."""
    graph = parse(model_bytes)
    problems = []
    for op in graph.ops:
        where = f"op {op.index} {op.name}"
        if op.is_custom:
            problems.append(f"{where}: a custom op, which stock TFLM does not have")
        if op.name in _FORBIDDEN_OPS:
            problems.append(f"{where}: must not appear in a stock graph")
        touches_float = any(graph.tensors[i].type_name == "FLOAT32" for i in (*op.inputs, *op.outputs) if i >= 0)
        if precision != "float32" and touches_float:
            problems.append(f"{where}: computes in float in a {precision} graph")
        if op.name == "BATCH_MATMUL" and (op.options.get("adj_x") or not op.options.get("adj_y")):
            problems.append(
                f"{where}: adj_x={op.options.get('adj_x')} adj_y={op.options.get('adj_y')}; TFLM "
                f"keeps a persistent transposed copy of an operand unless adj_x=False, adj_y=True"
            )
    return problems


def default_output_names(model: BertModel) -> tuple[str, ...]:
    return ("logits",) if model.config.num_labels else ("last_hidden_state", "pooler_output")


def _output_names(model: BertModel, outputs: Sequence[str] | None) -> tuple[str, ...]:
    if outputs is None:
        return default_output_names(model)
    available = ("last_hidden_state", "pooler_output") + (("logits",) if model.config.num_labels else ())
    unknown = [name for name in outputs if name not in available]
    if unknown or not outputs:
        raise UserError(f"outputs must be some of {', '.join(available)}; got {list(outputs)}")
    return tuple(dict.fromkeys(outputs))


def _calibration_samples(
    calibration: Iterable[Mapping[str, np.ndarray]] | None, seq_len: int
) -> list[dict[str, np.ndarray]]:
    """Complete, checked samples: the representative data set must yield a dict per sample, keyed by the
    signature's input names (a list in some order is silently mis-assigned, or rejected)."""
    if calibration is None:
        raise UserError("int8 and int16x8 export need calibration samples (a representative data set)")
    samples = []
    for n, sample in enumerate(calibration):
        unknown = set(sample) - set(INPUT_NAMES)
        if unknown or "input_ids" not in sample:
            raise UserError(
                f"calibration sample {n}: keys must be input_ids and optionally attention_mask, "
                f"token_type_ids; got {sorted(sample)}"
            )
        ids = _int32_input(sample["input_ids"], seq_len, n, "input_ids")
        samples.append(
            {
                "input_ids": ids,
                "attention_mask": _int32_input(
                    sample.get("attention_mask", np.ones_like(ids)), seq_len, n, "attention_mask"
                ),
                "token_type_ids": _int32_input(
                    sample.get("token_type_ids", np.zeros_like(ids)), seq_len, n, "token_type_ids"
                ),
            }
        )
    if not samples:
        raise UserError("calibration holds no samples")
    return samples


def _int32_input(value, seq_len: int, n: int, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.shape != (1, seq_len) or array.dtype.kind not in "iu":
        raise UserError(
            f"calibration sample {n}: {name} must be integers of shape (1, {seq_len}), got {array.dtype} {array.shape}"
        )
    return array.astype(np.int32)


def _frozen_serving_module(model: BertModel, seq_len: int, output_names: tuple[str, ...]) -> tf.Module:
    """A variable-free tf.Module whose `serve` signature takes the named inputs and returns the named outputs.

    Frozen by hand: given the live Keras 3 model, the converter keeps its weights as resource variables
    (VAR_HANDLE / READ_VARIABLE: TFLM cannot run them, calibration fails on them), and its own frozen-graph
    path drops the signature that a dict-yielding representative data set needs.
    """
    specs = [tf.TensorSpec([1, seq_len], tf.int32, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=specs)
    def live(input_ids, attention_mask, token_type_ids):
        out = model(
            {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}, training=False
        )
        return {name: out[name] for name in output_names}

    live_function = live.get_concrete_function()
    frozen = convert_variables_to_constants_v2(live_function)

    @tf.function(input_signature=specs)
    def serve(input_ids, attention_mask, token_type_ids):
        flat = tf.nest.flatten(frozen(input_ids, attention_mask, token_type_ids))
        return tf.nest.pack_sequence_as(live_function.structured_outputs, flat)

    module = tf.Module()
    module.serve = serve
    return module

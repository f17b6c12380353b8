"""The stock export: graph shape, fidelity in the real TFLM interpreter, and the arena it needs.

Tolerances were measured on bert-tiny (random weights, perturbed biases/LayerNorm), seq 32, 16 held-out
padded samples, and are set a few times looser than measured:
  float .tflite vs the Keras twin it was converted from (sigmoid GELU, export mask bias): max |diff|
    2.9e-6 on hidden states, 1.1e-6 on logits; float32 rounding only.
  float .tflite vs the exact model (erf GELU, -1e9 mask bias): 5.1e-4 / 1.8e-4; that is the tanh-vs-erf
    GELU gap (the two Keras models differ by the same amounts).
  int8: hidden-state cosine per sample >= 0.9990; logits centred over the batch, cosine 0.993.
  int16x8: hidden-state cosine per sample >= 0.99996; centred logits 0.99994.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.export.conftest import SEQ_LEN, with_perturbed_vectors
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.stock import EXPORT_MASK_VALUE, check_stock_graph, export_stock
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import preset
from tflm_mcubert.tflite.graph import parse
from tflm_mcubert.runtime.tflm_runner import TflmError, TflmRunner, min_arena_bytes

FLOAT_VS_TWIN_ATOL = 2e-5
FLOAT_VS_EXACT_ATOL = 2e-3
HIDDEN_COSINE_FLOOR = {"int8": 0.997, "int16x8": 0.9998}
CENTRED_LOGITS_COSINE_FLOOR = {"int8": 0.97, "int16x8": 0.9995}
STOCK_ARENA_CEILING = 260_000  # bert-tiny, seq 128, int8; measured 250,728


def tflm_outputs(model_bytes, samples) -> dict[str, np.ndarray]:
    runner = TflmRunner(model_bytes)
    runs = [runner.run(sample) for sample in samples]
    return {name: np.concatenate([run[name] for run in runs]) for name in runs[0]}


def keras_outputs(model, samples) -> dict[str, np.ndarray]:
    runs = [{name: value.numpy() for name, value in model(sample).items()} for sample in samples]
    return {name: np.concatenate([run[name] for run in runs]) for name in ("last_hidden_state", "logits")}


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def centred_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the sample-to-sample variation: a head's bias alone makes raw logits look alike."""
    a, b = (a - a.mean(axis=0)).ravel(), (b - b.mean(axis=0)).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def exact_reference(tiny_classifier, eval_samples):
    return keras_outputs(tiny_classifier, eval_samples)


def test_float_export_matches_its_keras_twin_and_the_exact_model(
    tiny_classifier, tiny_export, eval_samples, exact_reference
):
    got = tflm_outputs(tiny_export("float32"), eval_samples)
    twin = keras_outputs(tiny_classifier.with_options(gelu_mode="sigmoid", mask_value=EXPORT_MASK_VALUE), eval_samples)
    for name in ("last_hidden_state", "logits"):
        np.testing.assert_allclose(got[name], twin[name], atol=FLOAT_VS_TWIN_ATOL, rtol=0)
        np.testing.assert_allclose(got[name], exact_reference[name], atol=FLOAT_VS_EXACT_ATOL, rtol=0)


@pytest.mark.parametrize("precision", ["int8", "int16x8"])
def test_quantized_export_runs_in_tflm_close_to_float(precision, tiny_export, eval_samples, exact_reference):
    model_bytes = tiny_export(precision)
    graph = parse(model_bytes)
    activation_type = {"int8": "INT8", "int16x8": "INT16"}[precision]
    assert {io.tensor.type_name for io in graph.outputs} == {activation_type}  # outputs stay quantized

    got = tflm_outputs(model_bytes, eval_samples)
    hidden = row_cosines(got["last_hidden_state"], exact_reference["last_hidden_state"])
    logits = centred_cosine(got["logits"], exact_reference["logits"])
    print(f"{precision}: hidden-state cosine min {hidden.min():.5f}, centred logits cosine {logits:.5f}")
    assert hidden.min() >= HIDDEN_COSINE_FLOOR[precision]
    assert logits >= CENTRED_LOGITS_COSINE_FLOOR[precision]


@pytest.mark.parametrize("precision", ["float32", "int8", "int16x8"])
def test_graph_is_clean_stock_tflm(precision, tiny_classifier, tiny_export):
    model_bytes = tiny_export(precision)
    assert check_stock_graph(model_bytes, precision) == []
    graph = parse(model_bytes)
    names = [op.name for op in graph.ops]
    assert not {"GELU", "SELECT", "SELECT_V2", "DEQUANTIZE", "CAST"} & set(names)
    assert names.count("LOGISTIC") == 2  # one GELU per layer, as x * sigmoid(...)
    matmuls = [op.options for op in graph.ops if op.name == "BATCH_MATMUL"]
    assert matmuls == [{"adj_x": False, "adj_y": True}] * 4  # scores and context, 2 layers
    # The attention scale is folded into the query weights: no op works on a scores-shaped tensor except
    # the matmul making it, the mask ADD, the SOFTMAX and the matmul reading it.
    scores_shape = (1, tiny_classifier.config.num_attention_heads, SEQ_LEN, SEQ_LEN)
    touching_scores = [
        op.name
        for op in graph.ops
        if any(graph.tensors[i].shape == scores_shape for i in (*op.inputs, *op.outputs) if i >= 0)
    ]
    assert touching_scores == ["BATCH_MATMUL", "ADD", "SOFTMAX", "BATCH_MATMUL"] * 2
    if precision != "float32":
        # No float anywhere, inputs included: the mask is a GATHER of a 2-entry table, not a CAST. The
        # activations are all of the precision's type but the int32 ids (int16x8 biases are int64).
        assert "FLOAT32" not in {t.type_name for t in graph.tensors}
        activation_type = {"int8": "INT8", "int16x8": "INT16"}[precision]
        input_tensors = {io.tensor.index for io in graph.inputs}
        assert {t.type_name for t in graph.tensors if not t.constant_bytes and t.index not in input_tensors} <= {
            activation_type,
            "INT8",
        }  # int8: the tables' GATHER outputs before requantizing to int16


def test_int16x8_embedding_tables_are_int8_then_requantized(tiny_export):
    graph = parse(tiny_export("int16x8"))
    gathers = [op for op in graph.ops if op.name == "GATHER"]
    assert len(gathers) == 3  # words, token types, mask bias
    for gather in gathers:
        assert graph.tensors[gather.inputs[0]].type_name == "INT8"
        consumers = [op for op in graph.ops if gather.outputs[0] in op.inputs]
        assert [op.name for op in consumers] == ["QUANTIZE"]
        assert graph.tensors[consumers[0].outputs[0]].type_name == "INT16"
    # So the int16x8 model is about the int8 one's size, not twice it (the word table dominates).
    assert len(tiny_export("int16x8")) < 1.1 * len(tiny_export("int8"))


def test_masked_positions_do_not_change_unmasked_outputs(tiny_export, eval_samples):
    """Changing the ids under the mask must leave the logits alone, in int8 too."""
    sample = next(s for s in eval_samples if s["attention_mask"].sum() < SEQ_LEN)
    other = dict(sample, input_ids=np.where(sample["attention_mask"] == 1, sample["input_ids"], 7777))
    runner = TflmRunner(tiny_export("int8"))
    np.testing.assert_array_equal(
        runner.run(sample, dequantize_outputs=False)["logits"], runner.run(other, dequantize_outputs=False)["logits"]
    )


def test_bert_tiny_seq128_int8_arena_is_exact_and_below_ceiling(tiny_classifier):
    from tflm_mcubert.data.calibration import random_samples

    model_bytes = export_stock(
        tiny_classifier, seq_len=128, precision="int8", calibration=random_samples(30522, 128, 8, seed=0)
    )
    arena = min_arena_bytes(model_bytes)
    print(f"bert-tiny seq 128 int8: arena {arena:,} B, flash {len(model_bytes):,} B")
    assert arena <= STOCK_ARENA_CEILING
    inputs = random_samples(30522, 128, 1, seed=3)[0]
    assert np.all(np.isfinite(TflmRunner(model_bytes, arena).run(inputs)["logits"]))
    with pytest.raises(TflmError):
        TflmRunner(model_bytes, arena - 1).run(inputs)


def test_export_refuses_bad_requests(micro_model):
    from tflm_mcubert.data.calibration import random_samples

    good = random_samples(200, 8, 2, seed=0)
    with pytest.raises(UserError, match="precision"):
        export_stock(micro_model, seq_len=8, precision="int4", calibration=good)
    with pytest.raises(UserError, match="seq_len"):
        export_stock(micro_model, seq_len=17, precision="float32")
    with pytest.raises(UserError, match="calibration"):
        export_stock(micro_model, seq_len=8, precision="int8")
    with pytest.raises(UserError, match="input_ids"):
        export_stock(micro_model, seq_len=8, precision="int8", calibration=[{"ids": good[0]["input_ids"]}])
    with pytest.raises(UserError, match=r"shape \(1, 8\)"):
        export_stock(micro_model, seq_len=8, precision="int8", calibration=[{"input_ids": good[0]["input_ids"][:, :4]}])
    with pytest.raises(UserError, match="outputs"):
        export_stock(micro_model, seq_len=8, precision="float32", outputs=("pooled",))


def test_bare_encoder_exports_hidden_states_and_pooler_by_default():
    model = with_perturbed_vectors(build_model(preset("bert-tiny"), seed=0))
    graph = parse(export_stock(model, seq_len=8, precision="float32"))
    assert [io.name for io in graph.inputs] == ["attention_mask", "input_ids", "token_type_ids"]
    assert sorted(io.name for io in graph.outputs) == ["last_hidden_state", "pooler_output"]
    shapes = {io.name: io.tensor.shape for io in graph.outputs}
    assert shapes == {"last_hidden_state": (1, 8, 128), "pooler_output": (1, 128)}

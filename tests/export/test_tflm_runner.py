"""The TFLM runner: named I/O, quantization helpers, exact minimum arena, op accounting, clean failures."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.tflite.graph import parse
from tflm_mcubert.runtime.tflm_runner import (
    TflmError,
    TflmRunner,
    dequantize,
    min_arena_bytes,
    quantize,
    run_tflm,
)


def micro_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "input_ids": rng.integers(1, 200, (1, 8)).astype(np.int32),
        "attention_mask": np.array([[1, 1, 1, 1, 1, 1, 0, 0]], np.int32),
        "token_type_ids": np.zeros((1, 8), np.int32),
    }


def test_runs_by_input_name_and_dequantizes_outputs(micro_int8):
    logits = run_tflm(micro_int8, micro_inputs())["logits"]
    assert logits.shape == (1, 3) and logits.dtype == np.float32
    raw = run_tflm(micro_int8, micro_inputs(), dequantize_outputs=False)["logits"]
    assert raw.dtype == np.int8
    np.testing.assert_array_equal(dequantize(raw, parse(micro_int8).output_named("logits").tensor), logits)


def test_rejects_wrong_inputs(micro_int8):
    runner = TflmRunner(micro_int8)
    with pytest.raises(ValueError, match="exactly"):
        runner.run({"input_ids": micro_inputs()["input_ids"]})
    with pytest.raises(ValueError, match="shape"):
        runner.run({**micro_inputs(), "input_ids": np.zeros((1, 9), np.int32)})
    with pytest.raises(ValueError, match="cannot feed"):
        runner.run({**micro_inputs(), "input_ids": np.zeros((1, 8), np.float32)})


def test_quantize_round_trip_and_saturation(micro_int8):
    tensor = parse(micro_int8).output_named("logits").tensor
    scale, zero_point = tensor.scales[0], tensor.zero_points[0]
    values = (np.arange(-128, 128) - zero_point) * scale
    np.testing.assert_array_equal(quantize(values, tensor), np.arange(-128, 128).astype(np.int8))
    np.testing.assert_allclose(dequantize(quantize(values, tensor), tensor), values, rtol=1e-6, atol=1e-7)
    assert quantize([1e9], tensor)[0] == 127 and quantize([-1e9], tensor)[0] == -128


def test_min_arena_is_exact(micro_int8):
    arena = min_arena_bytes(micro_int8)
    TflmRunner(micro_int8, arena).run(micro_inputs())
    with pytest.raises(TflmError):
        TflmRunner(micro_int8, arena - 1).run(micro_inputs())


@pytest.mark.parametrize("arena", [0, 64, 20_000])
def test_an_arena_far_too_small_is_an_error_not_a_crash(micro_int8, arena):
    # At such sizes some TFLM kernels dereference a failed allocation; the probe child takes the hit.
    with pytest.raises(TflmError, match="arena"):
        TflmRunner(micro_int8, arena)


def test_op_rows_account_for_every_constant_byte(micro_int8):
    graph = parse(micro_int8)
    rows = graph.op_rows()
    assert [row["name"] for row in rows] == [op.name for op in graph.ops]
    assert [row["index"] for row in rows] == list(range(len(rows)))
    assert sum(row["bytes"] for row in rows) == graph.constant_bytes() < len(micro_int8)
    # The word embeddings are the int8 table of one GATHER (vocab x hidden); each fully connected op
    # carries its int8 weights and int32 biases: q, k, v, attention output, pooler (32x32), FFN 64x32 and
    # 32x64, classifier 3x32.
    assert max(row["bytes"] for row in rows if row["name"] == "GATHER") == 200 * 32
    fc_bytes = sorted(row["bytes"] for row in rows if row["name"] == "FULLY_CONNECTED")
    assert fc_bytes == sorted([32 * 32 + 4 * 32] * 5 + [64 * 32 + 4 * 64, 32 * 64 + 4 * 32, 3 * 32 + 4 * 3])


def test_what_is_not_a_model_is_refused_plainly():
    with pytest.raises(ValueError, match="not a TFLite model"):
        TflmRunner(b"garbage, not a flatbuffer")

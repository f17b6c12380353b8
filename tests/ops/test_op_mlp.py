"""MCUBERT_MLP reference: float agreement, tiling invariance, saturation, the spec oracle."""

import dataclasses

import numpy as np
import pytest

import spec_oracle as oracle
from tflm_mcubert.ops import mlp, testing
from tflm_mcubert.ops.mlp import MLPParams
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError


def quantized_layer(s, d, ffn, t, activation="gelu", seed=0):
    rng = np.random.default_rng(seed)
    fm = testing.float_mlp(rng, d, ffn, activation)
    x = rng.normal(size=(s, d))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    quant = fm.calibrate(inq.dequantize(xq), inq)
    return MLPParams.quantize(fm, quant, seq_len=s, tile=t), fm, quant, xq


@pytest.mark.parametrize("activation", ["gelu", "gelu_new", "relu"])
@pytest.mark.parametrize("s,d,ffn,t", [(128, 128, 512, 16), (77, 64, 256, 5)])
def test_matches_float_mlp_within_a_few_lsb(s, d, ffn, t, activation):
    params, fm, quant, xq = quantized_layer(s, d, ffn, t, activation)
    got = mlp.run(params, xq.copy())
    want = fm.forward(quant.input.dequantize(xq)) / quant.output.scale + quant.output.zero_point
    err = np.abs(got - np.clip(want, -128, 127))
    assert err.max() <= 2.5 and err.mean() <= 0.4, (err.max(), err.mean())


@pytest.mark.parametrize("s", [1, 77, 300])
def test_output_bytes_do_not_depend_on_the_tile(s):
    params, _, _, xq = quantized_layer(s, 32, 128, 1, seed=s)
    outs = [mlp.run(dataclasses.replace(params, tile=t), xq.copy()) for t in sorted({1, min(7, s), s})]
    for out in outs[1:]:
        assert np.array_equal(out, outs[0])


@pytest.mark.parametrize("s,d,ffn,t", [(1, 8, 16, 1), (9, 8, 32, 4), (10, 12, 20, 3)])
def test_extreme_parameters_match_the_spec_oracle(s, d, ffn, t):
    rng = np.random.default_rng(200 + s)
    for trial in range(3):
        params = testing.extreme_mlp(rng, s, d, ffn, t)
        x = rng.integers(-128, 128, (s, d)).astype(np.int8)
        x[0] = (127, -128, 0)[trial]
        assert mlp.run(params, x.copy()).tolist() == oracle.mlp(params, x.tolist())


def test_quantized_layer_matches_the_spec_oracle():
    params, _, _, xq = quantized_layer(13, 16, 64, 4, seed=9)
    assert mlp.run(params, xq.copy()).tolist() == oracle.mlp(params, xq.tolist())


def test_saturated_inputs_stay_finite_and_exact():
    params, _, _, _ = quantized_layer(8, 32, 128, 4)
    for value in (127, -128):
        x = np.full((8, 32), value, np.int8)
        assert mlp.run(params, x.copy()).tolist() == oracle.mlp(params, x.tolist())


def test_writes_only_its_scratch():
    s, d, f, t = 10, 16, 64, 4
    params, _, _, xq = quantized_layer(s, d, f, t)
    need = mlp.scratch_bytes(s, d, f, t)
    buf = np.full(need + 32, 0x77, np.uint8)
    want = mlp.run(params, xq.copy())
    assert np.array_equal(mlp.run(params, xq.copy(), buf), want)
    assert np.all(buf[need:] == 0x77)


def test_validation_names_op_and_field():
    params = quantized_layer(8, 16, 64, 4)[0]
    with pytest.raises(OpSpecError, match="MCUBERT_MLP: fc1_output_zero_point: 200"):
        dataclasses.replace(params, fc1_output_zero_point=200).validate()
    with pytest.raises(OpSpecError, match="MCUBERT_MLP: activation_lut: expected shape"):
        dataclasses.replace(params, activation_lut=np.zeros(255, np.int8)).validate()
    with pytest.raises(OpSpecError, match="MCUBERT_MLP: fc2: expected a 16 x 64 layer"):
        dataclasses.replace(params, fc2=params.fc1).validate()
    bad = params.residual.copy()
    bad[3, 1] = 8
    with pytest.raises(OpSpecError, match=r"MCUBERT_MLP: residual: channel 3: shift 8 is outside \[0, 7\]"):
        dataclasses.replace(params, residual=bad).validate()
    bad = params.residual.copy()
    bad[0, 0] = -129
    with pytest.raises(OpSpecError, match=r"MCUBERT_MLP: residual: channel 0: zero point -129 is outside"):
        dataclasses.replace(params, residual=bad).validate()
    with pytest.raises(OpSpecError, match="MCUBERT_MLP: residual: expected shape"):
        dataclasses.replace(params, residual=params.residual[:-1]).validate()

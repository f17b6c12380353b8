"""MCUBERT_SAMPLE (SPEC 4.9): the C kernel against ops/sample.py, byte for byte, over thousands of generator
states: host (plain and DSP builds, ASan/UBSan) and unicorn Cortex-M7, M4, M7 plain; its errors named."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.ops import contract, kernel_abi, sample
from tflm_mcubert.ops.sample import SampleParams
from tflm_mcubert.ops.validation import OpSpecError

OP = contract.SAMPLE
STATES = np.random.default_rng(5).integers(-(1 << 31), 1 << 31, 400).astype(np.int32)


def _candidates(k: int, seed: int, spread: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = np.sort(rng.integers(-spread, spread, k))[::-1]
    return np.array([rng.permutation(1000)[:k], scores], np.int32)


CASES = {  # (params, candidates)
    "t1-all": (SampleParams.of(16, 1e-3, 1.0, seed=7), _candidates(16, 0)),
    "top-k-top-p": (SampleParams.of(40, 2e-3, 0.7, keep=25, top_p=0.9, seed=123), _candidates(40, 1)),
    "hot": (SampleParams.of(8, 1e-2, 5.0, seed=1 << 31), _candidates(8, 2, spread=1 << 30)),
    "cold": (SampleParams.of(256, 1e-3, 0.05, seed=99), _candidates(256, 3)),
    "ties": (SampleParams.of(5, 1e-3, 1.0, top_p=0.5), np.array([[4, 3, 2, 1, 0], [7, 7, 7, 7, 7]], np.int32)),
    "one": (SampleParams.of(1, 1e-3, 1.0), np.array([[9], [-5]], np.int32)),
}


def _expected(params, top, state):
    top, state = top.copy(), np.array([state], np.int32)
    return sample.run(params, top, state).reshape(-1), state


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_on_host(runner, name):
    params, top = CASES[name]
    for state in STATES:
        result = runner.run(kernel_abi.op_call(params, top=top, rng_state=np.array([state], np.int32)))
        assert result.ok, result.message
        assert np.array_equal(result.output, _expected(params, top, state)[0]), (name, int(state))


def test_the_state_advances_so_that_a_chain_of_calls_matches(runner):
    """Feed each call the state the reference left: a wrong advance would change the draws."""
    params, top = CASES["top-k-top-p"]
    state = np.zeros(1, np.int32)
    for _ in range(200):
        expected, next_state = _expected(params, top, state[0])
        result = runner.run(kernel_abi.op_call(params, top=top, rng_state=state))
        assert np.array_equal(result.output, expected)
        state = next_state


def test_bad_options_and_tables_are_named(runner):
    params, top = CASES["t1-all"]
    call = kernel_abi.op_call(params, top=top, rng_state=np.zeros(1, np.int32))
    result = runner.run(call, params=kernel_abi.make_params(OP, {**params.options(), "keep": 17}))
    assert (result.status, result.message) == (kernel_abi.ERROR_OPTION, f"{OP}: keep: 17 exceeds top_k 16")
    with pytest.raises(OpSpecError, match="keep: 17 exceeds top_k 16"):
        SampleParams(**{**params.options(), "keep": 17}, exp_lut=params.exp_lut).validate()
    bad = np.array(params.exp_lut)
    bad[3] = -1
    lut_call = kernel_abi.op_call(
        SampleParams(**params.options(), exp_lut=params.exp_lut), top=top, rng_state=np.zeros(1, np.int32)
    )
    lut_call.tensors["exp_lut"] = bad
    result = runner.run(lut_call)
    assert result.status == kernel_abi.ERROR_TENSOR and "exp_lut" in result.message
    assert runner.buffer_size(OP, (16,)) == sample.scratch_bytes(16)
    assert runner.buffer_size(OP, (0,)) == -1 and runner.buffer_size(OP, (257,)) == -1


def test_bit_exact_on_the_core(emulator):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    for name in ("top-k-top-p", "cold"):
        params, top = CASES[name]
        for state in STATES[:40]:
            call = kernel_abi.op_call(params, top=top, rng_state=np.array([state], np.int32))
            run = run_kernel(emulator, call)
            assert run.status == kernel_abi.OK, run.message
            assert np.array_equal(run.output, _expected(params, top, state)[0]), (name, int(state))

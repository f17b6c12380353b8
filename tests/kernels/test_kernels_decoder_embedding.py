"""MCUBERT_DECODER_EMBEDDING (SPEC 4.8): the C kernel against ops/decoder_embedding.py, byte for byte, for ids in
every cluster and every position: host (plain and DSP builds, ASan/UBSan) and unicorn Cortex-M7, M4, M7 plain."""

from __future__ import annotations

import numpy as np
import pytest

from tflm_mcubert.ops import contract, decoder_embedding, kernel_abi, testing

OP = contract.DECODER_EMBEDDING
CASES = {
    "d32": testing.quantized_decoder_embedding(d=32, context=16),
    "odd": testing.quantized_decoder_embedding(d=6, context=5, seed=2, sizes=(3, 4, 9), ranks=(None, 5, 1)),
    "dense": testing.quantized_decoder_embedding(d=16, context=4, seed=3, sizes=(30,), ranks=(None,)),
}


def _expected(params, token, p):
    out = np.zeros(params.hidden, np.int8)
    return decoder_embedding.run(params, np.array([token], np.int32), np.array([p], np.int32), out)


def _probes(params):
    ends = params.clusters[:, 0]
    tokens = sorted({0, *(int(e) - 1 for e in ends), *(int(e) for e in ends[:-1]), int(ends[-1]) // 2})
    return [(t, p) for t in tokens for p in (0, params.context - 1)]


@pytest.mark.parametrize("name", list(CASES))
def test_bit_exact_on_host(runner, name):
    params = CASES[name][0]
    for token, p in _probes(params):
        result = runner.run(kernel_abi.decoder_embedding_call(params, token, p))
        assert result.ok, result.message
        assert np.array_equal(result.output, _expected(params, token, p)), (name, token, p)


def test_out_of_range_inputs_are_input_errors(runner):
    params = CASES["odd"][0]
    for token, p, field, value, limit in (
        (16, 0, "input_id", 16, 16),
        (-1, 0, "input_id", -1, 16),
        (0, 5, "position", 5, 5),
    ):
        result = runner.run(kernel_abi.decoder_embedding_call(params, token, p))
        assert result.status == kernel_abi.ERROR_INPUT
        assert result.message == f"{OP}: {field}: {value} is outside [0, {limit})"
    assert runner.buffer_size(OP, (5, 6)) == decoder_embedding.scratch_bytes(6)
    assert runner.buffer_size(OP, (0, 6)) == -1


def test_bit_exact_on_the_core(emulator):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    params = CASES["d32"][0]
    for token, p in _probes(params):
        run = run_kernel(emulator, kernel_abi.decoder_embedding_call(params, token, p), misalign={"word_rows": 1})
        assert run.status == kernel_abi.OK, run.message
        assert np.array_equal(run.output, _expected(params, token, p)), (token, p)

"""MCUBERT_DECODER_EMBEDDING (SPEC 4.8): the C kernel against ops/decoder_embedding.py, byte for byte, for ids in
every cluster and every position, int8 and int4 tables: host (plain and DSP builds, ASan/UBSan) and unicorn
Cortex-M7, M4, M7 plain."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tflm_mcubert.ops import contract, decoder_embedding, kernel_abi, testing
from tflm_mcubert.ops.validation import OpSpecError

OP = contract.DECODER_EMBEDDING
CASES = {
    "d32": testing.quantized_decoder_embedding(d=32, context=16),
    "odd": testing.quantized_decoder_embedding(d=6, context=5, seed=2, sizes=(3, 4, 9), ranks=(None, 5, 1)),
    "dense": testing.quantized_decoder_embedding(d=16, context=4, seed=3, sizes=(30,), ranks=(None,)),
    "d32-int4": testing.quantized_decoder_embedding(d=32, context=16, word_bits=4),
    "odd-int4": testing.quantized_decoder_embedding(
        d=7, context=5, seed=2, sizes=(3, 4, 9), ranks=(None, 5, 1), word_bits=4
    ),
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


@pytest.mark.parametrize("name", ["d32", "d32-int4"])
def test_bit_exact_on_the_core(emulator, name):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    params = CASES[name][0]
    for token, p in _probes(params):
        run = run_kernel(emulator, kernel_abi.decoder_embedding_call(params, token, p), misalign={"word_rows": 1})
        assert run.status == kernel_abi.OK, run.message
        assert np.array_equal(run.output, _expected(params, token, p)), (name, token, p)


def test_int4_padding_nibbles_are_checked(runner):
    params = CASES["odd-int4"][0]
    rows = params.word_rows.copy()
    rows[2 + 3] |= np.int8(0x10)  # cluster 0, row 0: its last byte holds value 6 and the padding nibble
    call = kernel_abi.decoder_embedding_call(params, 0, 0)
    result = runner.run(dataclasses.replace(call, tensors={**call.tensors, "word_rows": rows}))
    problem = "cluster 0 row 0: the padding nibble of an odd-length int4 row (rank 7) must be 0, got 1"
    assert result.status == kernel_abi.ERROR_TENSOR and result.message == f"{OP}: word_rows: {problem}"
    with pytest.raises(OpSpecError, match=re.escape(problem)):
        dataclasses.replace(params, word_rows=rows).validate()

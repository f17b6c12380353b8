"""MCUBERT_LM_HEAD (SPEC 4.5): the C kernel against ops/lm_head.py, byte for byte.

* host, ASan/UBSan, plain C and DSP (emulated intrinsics): "extreme" tables (every integer anywhere in
  the contract's range, clamps that bite), ties, a head tied to a quantized embedding, every rank % 4
  and odd d, misaligned int8 tensors; the same at int4 storage (version 11: nibbles, row scales);
* validate and run-time errors with the Python reference's wording where both check;
* unicorn Cortex-M7 and M4 (DSP path, as built for each core) and the M7 plain path, bit-exact within
  the stack bound; the instruction count of the clustered head against one dense cluster (the int8
  dense head over the same vocabulary) on the same core.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from kernel_cases import HEADER
from tflm_mcubert.ops import contract, kernel_abi, lm_head, testing
from tflm_mcubert.ops.embedding import EmbeddingParams
from tflm_mcubert.ops.fixed_point import INT32_MAX, MULTIPLIER_MIN
from tflm_mcubert.ops.layernorm import LayerNormParams
from tflm_mcubert.ops.linear import pack_weights
from tflm_mcubert.ops.lm_head import LmHeadParams
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError

OP = contract.LM_HEAD
STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))


@dataclasses.dataclass
class Case:
    name: str
    params: LmHeadParams
    hidden: np.ndarray
    expected: np.ndarray

    @property
    def call(self):
        return kernel_abi.lm_head_call(self.params, self.hidden)


def _finish(name: str, params: LmHeadParams, hidden: np.ndarray) -> Case:
    params = params.validate()
    expected = lm_head.run(params, hidden, np.zeros((2, params.top_k), np.int32))
    return Case(name, params, hidden, expected.reshape(-1).copy())


def _requant(rng, shape, shifts):
    mult = rng.integers(MULTIPLIER_MIN, INT32_MAX, shape, endpoint=True)
    shift = rng.integers(*shifts, shape)
    zero = rng.random(shape) < 0.05
    return np.stack([np.where(zero, 0, mult), np.where(zero, 0, shift)], axis=-1).astype(np.int32)


def extreme_case(
    d: int, sizes: tuple[int, ...], ranks: tuple[int, ...], k: int, seed: int = 0, word_bits: int = 8
) -> Case:
    """Every table value anywhere in range; shifts that make some g and p clamp at +-G and some scores
    saturate int32, and others land in between. int4: any nibble, row scales over the whole uint16 range."""
    rng = np.random.default_rng(seed * 7919 + d * 31 + sum(sizes))
    ends = np.cumsum(sizes)
    if word_bits == 8:
        rows = [rng.integers(-128, 128, n * r) for n, r in zip(sizes, (d,) + ranks)]
    else:
        rows = [testing._int4_rows(rng, n, r, i == 0) for i, (n, r) in enumerate(zip(sizes, (d,) + ranks))]
    projections = [pack_weights(rng.integers(-127, 128, (d, r)).astype(np.int8)) for r in ranks]
    c = len(sizes)
    cluster = np.zeros((c, 4), np.int32)
    cluster[1:, :2] = _requant(rng, (c - 1,), (-20, 0))
    cluster[:, 2:] = _requant(rng, (c,), (-8, 8))
    ln = np.stack([rng.integers(-(1 << 20), 1 << 20, d), rng.integers(-(1 << 22), 1 << 22, d)], axis=1)
    params = LmHeadParams(
        hidden=d,
        vocab_size=int(ends[-1]),
        top_k=k,
        normed_zero_point=int(rng.integers(-128, 128)),
        clusters=np.array([ends, (d,) + ranks], np.int32).T.copy(),
        word_rows=np.concatenate(rows).astype(np.int8),
        word_projections=(np.concatenate(projections) if projections else np.zeros(0, np.int8)),
        channel_requant=_requant(rng, (c, d), (0, 12)),
        cluster_requant=cluster,
        layer_norm=LayerNormParams(ln.astype(np.int32), int(rng.integers(0, 1 << 40))),
        residual=np.stack([rng.integers(-128, 128, d), rng.integers(0, 8, d)], axis=1).astype(np.int32),
        word_bits=word_bits,
    )
    hidden = rng.integers(-128, 128, d).astype(np.int8)
    return _finish(f"extreme-d{d}-c{c}-k{k}-seed{seed}-w{word_bits}", params, hidden)


def final_norm(rng, d: int, normed: TensorQuant) -> dict:
    """LN_f and the residual stream's channels for a tied head (a random stream at s_z = 0.01)."""
    residual = np.stack([rng.integers(-20, 20, d), rng.integers(0, 4, d)], axis=1).astype(np.int32)
    gamma, beta = 1 + 0.1 * rng.normal(size=d), 0.1 * rng.normal(size=d)
    return {"layer_norm": LayerNormParams.from_float(gamma, beta, 1e-5, 0.01, normed), "residual": residual}


def tied_case(d: int, sizes, ranks, k: int, seed: int = 0, word_bits: int = 8) -> tuple[Case, EmbeddingParams]:
    """The head tied to an embedding quantized through the offline path (LmHeadParams.tie)."""
    rng = np.random.default_rng(seed + 100 * d)
    fw = testing.float_embedding(rng, d, 8, cluster_sizes=sizes, ranks=(None,) + ranks)
    embedding = EmbeddingParams.quantize(fw, TensorQuant(0.05, 3), word_bits=word_bits)
    params, _ = LmHeadParams.tie(embedding, TensorQuant(0.04, -7), k, **final_norm(rng, d, TensorQuant(0.04, -7)))
    hidden = rng.integers(-128, 128, d).astype(np.int8)
    return _finish(f"tied-d{d}-k{k}-w{word_bits}", params, hidden), embedding


HOST_CASES = [
    extreme_case(8, (5,), (), 3),
    extreme_case(16, (40, 30, 20), (16, 5), 8, seed=1),
    extreme_case(33, (50, 60, 70), (1, 2, 3)[:2], 16, seed=2),
    extreme_case(64, (100, 200, 300, 50), (13, 6, 7), 32, seed=3),
    extreme_case(128, (64, 400), (32,), 256, seed=4),
    extreme_case(7, (3, 4), (7,), 7, seed=5),  # k == vocab
    tied_case(64, (50, 200, 750), (16, 4), 10)[0],
    tied_case(128, (100, 300, 600), (32, 8), 5, seed=1)[0],
    extreme_case(8, (5,), (), 3, word_bits=4),
    extreme_case(33, (50, 60, 70), (1, 2), 16, seed=2, word_bits=4),  # odd d and ranks: padding nibbles
    extreme_case(64, (100, 200, 300, 50), (13, 6, 7), 32, seed=3, word_bits=4),
    extreme_case(128, (64, 400), (32,), 256, seed=4, word_bits=4),
    tied_case(64, (50, 200, 750), (16, 4), 10, word_bits=4)[0],
    tied_case(128, (100, 300, 600), (32, 8), 5, seed=1, word_bits=4)[0],
]


def _assert_exact(result, case: Case):
    assert result.ok, result.message
    mismatches = np.flatnonzero(result.output != case.expected)
    assert mismatches.size == 0, f"{case.name}: {mismatches.size} of {case.expected.size} values differ"


@pytest.mark.parametrize("index", range(len(HOST_CASES)), ids=[c.name for c in HOST_CASES])
def test_bit_exact_on_host(runner, index):
    case = HOST_CASES[index]
    _assert_exact(runner.run(case.call), case)
    for fill in (0x00, 0xFF):
        _assert_exact(runner.run(case.call, scratch_fill=fill), case)


def test_the_extreme_cases_reach_the_clamps():
    """g and p clamp at +-G somewhere, and some scores saturate int32: the cases test the bounds."""
    case = HOST_CASES[3]
    scores = lm_head.cluster_scores(case.params, case.hidden)
    assert {INT32_MAX, -INT32_MAX - 1} & set(scores.tolist()) or np.abs(scores).max() > 1 << 24


def test_ties_go_to_the_smaller_id(runner):
    case = extreme_case(16, (10, 10), (4,), 6, seed=9)
    rows = case.params.word_rows.copy()
    rows[: 16 * 10] = np.tile(rows[:16], 10)  # cluster 0: ten identical rows, so ten equal scores
    params = dataclasses.replace(case.params, word_rows=rows)
    tied = _finish("ties", params, case.hidden)
    ids = tied.expected[:6]
    scores = tied.expected[6:]
    assert np.all(np.diff(scores) <= 0)
    equal = scores == scores[0]
    assert np.array_equal(ids[equal], np.sort(ids[equal]))
    _assert_exact(runner.run(tied.call), tied)


def test_misaligned_int8_tensors(runner):
    case = HOST_CASES[2]
    misalign = {"hidden": 1, "word_rows": 3, "word_projections": 2}
    _assert_exact(runner.run(case.call, misalign=misalign), case)


@pytest.mark.parametrize("word_bits", [8, 4])
def test_the_tied_head_ranks_as_the_float_table_does(word_bits):
    """The integer scores of the tied head against float logits of the same int8 or int4 tables."""
    case, embedding = tied_case(64, (50, 200, 750), (16, 4), 10, word_bits=word_bits)
    params = case.params
    real = lm_head._real_scale(embedding.word_requant)
    table = np.concatenate(
        [
            (v.rows if v.projection is None else v.rows.astype(np.int64) @ v.projection.T)
            * (1 if v.row_scale is None else v.row_scale[:, None])
            * real[i]
            for i, v in enumerate(params.cluster_views)
        ]
    )
    rng = np.random.default_rng(4)
    for _ in range(20):
        hidden = rng.integers(-128, 128, 64).astype(np.int8)
        logits = table @ (hidden.astype(np.float64) - params.normed_zero_point)
        scores = lm_head.cluster_scores(params, hidden)
        assert np.corrcoef(logits, scores)[0, 1] > 0.99999
        assert np.argmax(scores) == np.argmax(logits)


def test_buffer_size_equals_the_reference_scratch(runner):
    for d in (1, 8, 33, 128, 1024):
        assert runner.buffer_size(OP, (d, 1)) == lm_head.scratch_bytes(d)
    for dims in ((0, 1), (1025, 1), (8, 0), (8, contract.MAX_TOP_K + 1)):
        assert runner.buffer_size(OP, dims) == -1


BASE = HOST_CASES[1]


@pytest.mark.parametrize(
    "field,value,problem",
    [
        ("top_k", 0, "0 is outside [1, 256]"),
        ("top_k", 91, "91 exceeds vocab_size 90"),
        ("normed_zero_point", 128, "128 is outside [-128, 127]"),
        ("hidden", 0, "0 is outside [1, 1024]"),
    ],
)
def test_option_errors_name_the_field(runner, field, value, problem):
    params = kernel_abi.make_params(OP, {**BASE.call.options, field: value})
    result = runner.validate(OP, params, None)
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message == f"{OP}: {field}: {problem}"
    with pytest.raises(OpSpecError, match=re.escape(problem)):
        dataclasses.replace(BASE.params, **{field: value}).validate()


def test_tensor_contents_are_checked(runner):
    call = BASE.call
    bad = call.tensors["cluster_requant"].copy().reshape(-1, 4)
    bad[0, :2] = (MULTIPLIER_MIN, 0)
    result = runner.run(dataclasses.replace(call, tensors={**call.tensors, "cluster_requant": bad.reshape(-1)}))
    assert result.status == kernel_abi.ERROR_TENSOR
    assert result.message == f"{OP}: cluster_requant: cluster 0 has no projection: its (Mp, shift) must be (0, 0)"
    with pytest.raises(OpSpecError, match=re.escape("its (Mp, shift) must be (0, 0)")):
        dataclasses.replace(BASE.params, cluster_requant=bad).validate()
    clusters = call.tensors["clusters"].copy().reshape(-1, 2)
    clusters[-1, 0] += 1
    result = runner.run(dataclasses.replace(call, tensors={**call.tensors, "clusters": clusters.reshape(-1)}))
    assert result.status == kernel_abi.ERROR_TENSOR
    assert "cluster ends must increase strictly and the last must equal vocab_size 90" in result.message


def test_scratch_too_small_is_refused(runner):
    need = runner.buffer_size(OP, BASE.call.dims())
    result = runner.run(BASE.call, scratch_size=need - 1)
    assert result.status == kernel_abi.ERROR_ARGUMENT
    assert result.message == f"{OP}: scratch: {need - 1} bytes given, {need} needed"


INT4 = HOST_CASES[-4]  # extreme, d 64, four clusters, int4


def test_int4_heads_write_version_11_and_read_back():
    assert INT4.call.options["word_bits"] == 4 and "word_bits" not in BASE.call.options
    assert kernel_abi.make_params(OP, INT4.call.options).spec_version == contract.SPEC_VERSION_DECODER_INT4
    assert kernel_abi.make_params(OP, BASE.call.options).spec_version == contract.SPEC_VERSION_LM_HEAD
    back = LmHeadParams.from_serialized(INT4.params.options(), INT4.params.tensors())
    assert np.array_equal(lm_head.cluster_scores(back, INT4.hidden), lm_head.cluster_scores(INT4.params, INT4.hidden))


def test_int4_table_errors_match_the_reference(runner):
    """A padding nibble that is not 0, and a cluster-0 score shift past requantize_wide's bound."""
    case = HOST_CASES[-5]  # d 33, odd ranks
    call = case.call
    rows = call.tensors["word_rows"].copy()
    rows[2 + 16] |= np.int8(0x10)  # cluster 0, row 0: byte 16 holds value 32 and the padding nibble
    result = runner.run(dataclasses.replace(call, tensors={**call.tensors, "word_rows": rows}))
    problem = "cluster 0 row 0: the padding nibble of an odd-length int4 row (rank 33) must be 0, got 1"
    assert result.status == kernel_abi.ERROR_TENSOR and result.message == f"{OP}: word_rows: {problem}"
    with pytest.raises(OpSpecError, match=re.escape(problem)):
        dataclasses.replace(case.params, word_rows=rows).validate()
    requant = call.tensors["cluster_requant"].copy().reshape(-1, 4)
    requant[0, 2:] = (MULTIPLIER_MIN, 15)
    result = runner.run(dataclasses.replace(call, tensors={**call.tensors, "cluster_requant": requant.reshape(-1)}))
    problem = "cluster 0's score shift 15 exceeds 14 (int4 rows)"
    assert result.status == kernel_abi.ERROR_TENSOR and result.message == f"{OP}: cluster_requant: {problem}"
    with pytest.raises(OpSpecError, match=re.escape(problem)):
        dataclasses.replace(case.params, cluster_requant=requant).validate()


def test_int4_needs_its_version(runner):
    old = contract.SPEC_VERSION_LM_HEAD
    params = kernel_abi.make_params(
        OP, INT4.call.options, spec_version=old, spec_hash=kernel_abi.OP_SPEC_HASHES[OP][old]
    )
    result = runner.validate(OP, params, None)
    assert result.status == kernel_abi.ERROR_OPTION
    assert result.message == f"{OP}: word_bits: 4 (int4 tables) needs spec_version 11"


# ---- Cortex-M (unicorn) -------------------------------------------------------------------------------


CORE_CASES = [1, 2, 4, 6, 9, 10, 12]


@pytest.mark.parametrize("index", CORE_CASES, ids=[HOST_CASES[i].name for i in CORE_CASES])
def test_bit_exact_on_the_core(emulator, index):
    from tflm_mcubert.measure.arm_emulator import run_kernel

    case = HOST_CASES[index]
    run = run_kernel(emulator, case.call, misalign={"hidden": 1, "word_rows": 2})
    assert run.status == kernel_abi.OK, run.message
    assert np.array_equal(run.output, case.expected), case.name
    assert run.stack_bytes <= STACK_BOUND, f"{case.name}: {run.stack_bytes} bytes of stack"

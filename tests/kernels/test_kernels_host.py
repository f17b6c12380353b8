"""C kernels on the host, bit-exact against the numpy reference, under ASan + UBSan.

Every test runs twice through the `runner` fixture: the plain C path and the DSP path (compiled
on the host with portable emulations of SXTB16/SMLAD, MCUBERT_EMULATE_DSP), so the micro-kernel,
widening and tail logic of the DSP path run under the sanitizers too. Each tensor is its own
exact-size allocation and the scratch is exactly get_buffer_size() bytes of garbage, so an
out-of-bounds access or a read of unwritten scratch shows up.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from kernel_cases import HEADER_SPEC_HASH, Case, attention_case, embedding_case, mlp_case, shift_boundary_cases
from tflm_mcubert.ops import attention, contract, testing
from tflm_mcubert.ops.linear import Linear, pack_weights
from tflm_mcubert.ops import kernel_abi


# Attention and MLP run every geometry with int8 and int4 weights (version 3, SPEC 3.1.1).
WEIGHT_BITS = pytest.mark.parametrize("weight_bits", [8, 4], ids=["w8", "w4"])


def check(runner, case: Case, **run_options):
    result = runner.run(case.call, **run_options)
    assert result.status == kernel_abi.OK, result.message
    mismatches = np.flatnonzero(result.output != case.expected)
    assert mismatches.size == 0, (
        f"{case.name}: {mismatches.size} bytes differ, first at "
        f"{mismatches[0]}: {result.output[mismatches[0]]} != "
        f"{case.expected[mismatches[0]]}"
    )
    return result


# ---- attention ------------------------------------------------------------------------------


@WEIGHT_BITS
@pytest.mark.parametrize("s", [1, 4, 77, 128, 300])
@pytest.mark.parametrize("dh", [16, 32, 64])
def test_attention_extreme_parameters(runner, s, dh, weight_bits):
    """Full-range parameters (saturation everywhere), two heads, a tile that does not divide s."""
    t = min(s, 7)
    check(runner, attention_case(s, 2 * dh, 2, t, seed=dh, weight_bits=weight_bits))


@pytest.mark.parametrize(
    "s,d,h,t,mask",
    [
        (128, 128, 2, 4, "tail"),  # BERT-tiny at the planner's tile
        (77, 64, 4, 5, "random"),
        (300, 32, 2, 16, "tail"),
        (1, 16, 2, 1, "all"),
    ],
)
@WEIGHT_BITS
def test_attention_realistic_layer(runner, s, d, h, t, mask, weight_bits):
    check(runner, attention_case(s, d, h, t, kind="realistic", mask=mask, weight_bits=weight_bits))


@pytest.mark.parametrize(
    "s,d,h,t",
    [
        (9, 6, 2, 4),  # dh = 3: head boundaries inside a channel pair, K tails everywhere
        (11, 20, 4, 3),  # dh = 5: the output projection's two segments straddle a 4-group
        (10, 9, 3, 10),  # odd d
        (5, 4, 4, 2),  # dh = 1
        (6, 64, 64, 5),  # the most heads
        (13, 1, 1, 13),  # d = 1
    ],
)
@WEIGHT_BITS
def test_attention_odd_geometry(runner, s, d, h, t, weight_bits):
    check(runner, attention_case(s, d, h, t, seed=d, weight_bits=weight_bits))


@pytest.mark.parametrize("mask", ["all", "none", "tail", "random"])
def test_attention_key_masks(runner, mask):
    """ "none": every key masked, so the context is exactly zero (SPEC 3.4)."""
    check(runner, attention_case(77, 32, 2, 6, mask=mask))


@pytest.mark.parametrize("length", ["none", "all", "tail", "random"])
@WEIGHT_BITS
def test_attention_valid_length_mode(runner, length, weight_bits):
    check(runner, attention_case(41, 24, 3, 5, mask=length, mask_mode=1, weight_bits=weight_bits))


def test_attention_every_tile_size(runner):
    """Every tile the planner may choose for s = 77 (1..77; most do not divide 77) gives the
    reference's bytes (the reference itself is tile-invariant: tests/ops)."""
    base = attention_case(77, 32, 2, 77, seed=5)
    for t in range(1, 78):
        call = dataclasses.replace(
            base.call, params=kernel_abi.make_params(contract.ATTENTION, {**base.call.options, "tile": t})
        )
        check(runner, dataclasses.replace(base, call=call, name=f"{base.name}-tile{t}"))


def test_attention_saturated_inputs(runner):
    for value in (-128, 127):
        case = attention_case(19, 16, 2, 4, seed=value & 0xFF)
        hidden = np.full(case.call.tensors["hidden"].shape, value, np.int8)
        params = _attention_params(case)
        expected = attention.run(params, hidden.reshape(19, 16).copy(), case.call.tensors["mask"])
        call = kernel_abi.attention_call(params, hidden.reshape(19, 16), case.call.tensors["mask"], HEADER_SPEC_HASH)
        check(runner, Case(f"saturated{value}", call, expected.reshape(-1)))


def test_attention_longest_sequence_reaches_the_accumulator_bound(runner):
    """s = 1024, every score equal, every value -128: sum_k e v = -2^31 exactly (SPEC 3.4)."""
    s, d, h = contract.MAX_SEQ_LEN, 8, 1
    rng = np.random.default_rng(1)
    base = testing.extreme_attention(rng, s, d, h, 64)
    zero = pack_weights(np.zeros((d, d), np.int8))
    plain = np.tile(np.array([[0, 1 << 30, 0]], np.int32), (d, 1))
    most_negative = np.tile(np.array([[-(1 << 30), 1 << 30, 0]], np.int32), (d, 1))
    params = dataclasses.replace(
        base, query=Linear(d, d, zero, plain), key=Linear(d, d, zero, plain), value=Linear(d, d, zero, most_negative)
    ).validate()
    hidden = rng.integers(-128, 128, (s, d)).astype(np.int8)
    mask = np.ones(s, np.int8)
    expected = attention.run(params, hidden.copy(), mask)
    check(
        runner,
        Case(
            "accumulator-bound", kernel_abi.attention_call(params, hidden, mask, HEADER_SPEC_HASH), expected.reshape(-1)
        ),
    )


def _attention_params(case: Case):
    """Rebuild the reference params of a case from its serialized call (round trip)."""
    options = {k: v for k, v in case.call.options.items() if k not in ("spec_version", "spec_hash")}
    tensors = {
        k: v
        for k, v in case.call.tensors.items()
        if k not in kernel_abi.RUNTIME_INPUTS[contract.ATTENTION] and k != "output"
    }
    shaped = dict(tensors)
    d = options["hidden"]
    for name in ("query", "key", "value", "output"):
        shaped[f"{name}_channels"] = tensors[f"{name}_channels"].reshape(d, 3)
    shaped["layer_norm"] = tensors["layer_norm"].reshape(d, 2)
    shaped["residual"] = tensors["residual"].reshape(d, 2)
    return attention.AttentionParams.from_serialized(options, shaped)


@pytest.mark.parametrize("shift", [-3, -2, -1, 0, 1, 2, 3, 8])
@WEIGHT_BITS
def test_requantization_on_both_sides_of_the_fast_form(runner, shift, weight_bits):
    """Every output stage requantizes shift <= -2 as SMMLA + ASR (mcubert_requant_fast) and other
    shifts exactly as the spec writes it (the residual stages: also the scaled fast form for shifts
    >= -1 within the accumulator bound): each stage with every channel on one side."""
    for case in shift_boundary_cases(shift, weight_bits=weight_bits):
        check(runner, case)


# ---- MLP ------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", [1, 4, 77, 128, 300])
@pytest.mark.parametrize("d,f", [(16, 64), (32, 128), (64, 256)])
@WEIGHT_BITS
def test_mlp_extreme_parameters(runner, s, d, f, weight_bits):
    check(runner, mlp_case(s, d, f, min(s, 9), seed=d, weight_bits=weight_bits))


@pytest.mark.parametrize("s,d,f,t", [(128, 128, 512, 28), (77, 64, 256, 5), (300, 32, 128, 64)])
@WEIGHT_BITS
def test_mlp_realistic_layer(runner, s, d, f, t, weight_bits):
    check(runner, mlp_case(s, d, f, t, kind="realistic", weight_bits=weight_bits))


@pytest.mark.parametrize("s,d,f,t", [(7, 7, 13, 3), (5, 5, 3, 5), (6, 1, 1, 4), (9, 3, 4096, 2), (3, 1024, 6, 2)])
@WEIGHT_BITS
def test_mlp_odd_geometry(runner, s, d, f, t, weight_bits):
    """Odd K and N everywhere, the largest ffn (accumulator bound) and the largest hidden."""
    check(runner, mlp_case(s, d, f, t, seed=f, weight_bits=weight_bits))


# A width per layer (SPEC 3.1.2, version 8): every mix of the four projections, and of FC1/FC2.
LAYER_MIXES = [tuple(4 if bit == "1" else 8 for bit in f"{m:04b}") for m in range(1, 15)]


@pytest.mark.parametrize("widths", LAYER_MIXES, ids=lambda w: "w" + "".join(map(str, w)))
def test_attention_a_width_per_projection(runner, widths):
    check(runner, attention_case(77, 64, 4, 5, kind="realistic", mask="tail", weight_bits=widths))
    check(runner, attention_case(11, 20, 4, 3, seed=len(widths), weight_bits=widths))


@pytest.mark.parametrize("widths", [(4, 8), (8, 4)], ids=["w48", "w84"])
def test_mlp_a_width_per_layer(runner, widths):
    check(runner, mlp_case(77, 64, 256, 5, kind="realistic", weight_bits=widths))
    check(runner, mlp_case(7, 7, 13, 3, seed=13, weight_bits=widths))


def test_mlp_every_tile_size(runner):
    base = mlp_case(77, 24, 40, 77, seed=3)
    for t in range(1, 78):
        call = dataclasses.replace(
            base.call, params=kernel_abi.make_params(contract.MLP, {**base.call.options, "tile": t})
        )
        check(runner, dataclasses.replace(base, call=call, name=f"{base.name}-tile{t}"))


# ---- embedding ------------------------------------------------------------------------------


# Every embedding test runs on int8 tables and on int4 ones (word_bits 4, SPEC 4.1.1).
WORD_BITS = pytest.mark.parametrize("bits", [8, 4], ids=["int8", "int4"])


@WORD_BITS
@pytest.mark.parametrize("s", [1, 4, 77, 128, 300])
@pytest.mark.parametrize("d", [16, 32, 64, 17])  # odd d: int4 rows of cluster 0 end in a padding nibble
def test_embedding_extreme_parameters(runner, s, d, bits):
    check(runner, embedding_case(s, d, seed=d, word_bits=bits))


@WORD_BITS
@pytest.mark.parametrize(
    "sizes,ranks",
    [
        ((30,), (None,)),  # one cluster: plain lookup
        ((5, 7, 3, 9, 4, 6, 2, 8), (None, 1, 2, 3, 5, 16, 31, 32)),  # 8 clusters, ranks up to d
    ],
)
def test_embedding_cluster_layouts(runner, sizes, ranks, bits):
    check(runner, embedding_case(50, 32, cluster_sizes=sizes, ranks=ranks, type_vocab=3, word_bits=bits))


@WORD_BITS
@pytest.mark.parametrize("s,d", [(13, 24), (128, 128)])
def test_embedding_realistic(runner, s, d, bits):
    check(
        runner,
        embedding_case(s, d, kind="realistic", cluster_sizes=(40, 60, 100), ranks=(None, 16, 4), word_bits=bits),
    )


@WORD_BITS
def test_embedding_hidden_of_one(runner, bits):
    check(runner, embedding_case(9, 1, cluster_sizes=(3, 4), ranks=(None, 1), word_bits=bits))


# ---- memory behaviour -----------------------------------------------------------------------


@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x5A])
def test_results_do_not_depend_on_scratch_contents(runner, fill):
    for case in (
        attention_case(21, 20, 4, 6),
        mlp_case(21, 20, 44, 6),
        attention_case(21, 20, 4, 6, weight_bits=4),
        mlp_case(21, 20, 44, 6, weight_bits=4),
        attention_case(21, 20, 4, 6, weight_bits=(8, 4, 8, 4)),
        mlp_case(21, 20, 44, 6, weight_bits=(4, 8)),
        embedding_case(21, 20),
        embedding_case(21, 20, word_bits=4),
    ):
        check(runner, case, scratch_fill=fill)


def test_int8_tensors_may_be_misaligned(runner):
    """int8 tensors (weights, hidden, rows) at every address residue: only LDR-sized reads."""
    for offset in (1, 2, 3):
        every = {name: offset for name in kernel_abi.TENSOR_NAMES[contract.ATTENTION]}
        for weight_bits in (8, 4):
            case = attention_case(14, 12, 3, 5, seed=offset, weight_bits=weight_bits)
            misalign = {n: o for n, o in every.items() if case.call.tensors[n].dtype == np.int8}
            check(runner, case, misalign=misalign)
            case = mlp_case(10, 12, 20, 3, seed=offset, weight_bits=weight_bits)
            names = ("hidden", "fc1_weights", "fc2_weights", "activation_lut")
            check(runner, case, misalign={n: offset for n in names})
        for bits in (8, 4):
            case = embedding_case(10, 12, seed=offset, word_bits=bits)
            check(
                runner,
                case,
                misalign={
                    n: offset for n in ("word_rows", "word_projections", "position_table", "token_type_table", "output")
                },
            )


def test_scratch_one_byte_short_is_refused_and_exact_size_suffices(runner):
    case = mlp_case(8, 16, 32, 3)
    need = runner.buffer_size(case.call.op, case.call.dims())
    check(runner, case, scratch_size=need)
    short = runner.run(case.call, scratch_size=need - 1)
    assert short.status == kernel_abi.ERROR_ARGUMENT
    assert short.message == f"MCUBERT_MLP: scratch: {need - 1} bytes given, {need} needed"


def test_the_build_variant_is_the_expected_path(host_runners):
    assert host_runners["plain"].uses_dsp_path() is False
    assert host_runners["dsp"].uses_dsp_path() is True


# ---- random shapes and a whole encoder ------------------------------------------------------


def _random_shapes(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        s = int(rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 150]))
        h = int(rng.choice([1, 2, 3, 4, 6]))
        d = h * int(rng.integers(1, 24))
        t = int(rng.integers(1, s + 1))
        f = int(rng.integers(1, 200))
        yield s, d, h, t, f, int(rng.integers(0, 1 << 16))


@pytest.mark.parametrize("shape", list(_random_shapes(2024, 40)), ids=lambda p: "s{}-d{}-h{}-t{}-f{}".format(*p[:5]))
def test_random_shapes(runner, shape):
    s, d, h, t, f, seed = shape
    mask_mode = seed % 2
    mask = ("all", "none", "tail", "random")[seed % 4]
    weight_bits = (8, 4)[(seed >> 2) % 2]  # about half the shapes with int4 weights
    check(runner, attention_case(s, d, h, t, seed=seed, mask=mask, mask_mode=mask_mode, weight_bits=weight_bits))
    check(runner, mlp_case(s, d, f, t, seed=seed, weight_bits=weight_bits))
    check(runner, embedding_case(s, d, seed=seed, cluster_sizes=(4, 5, 6), ranks=(None, 1, min(d, 7))))
    check(runner, embedding_case(s, d, seed=seed, cluster_sizes=(4, 5, 6), ranks=(None, 1, min(d, 7)), word_bits=4))


def test_whole_encoder_chained_through_the_kernels(runner):
    """Embedding, then two layers of attention + MLP, each kernel consuming the previous one's
    bytes: the final hidden state equals the reference encoder's."""
    rng = np.random.default_rng(11)
    s = 77
    valid = np.arange(s) < 60
    encoder, _, ids, types, _ = testing.quantized_encoder(
        rng, hidden=64, heads=2, ffn=256, layers=2, seq_len=s, tiles={"attention": 5, "mlp": 12}, valid=valid
    )
    mask = valid.astype(np.int8)
    want = encoder.run(ids, types, mask)
    result = runner.run(kernel_abi.embedding_call(encoder.embedding, ids, types, HEADER_SPEC_HASH))
    assert result.ok, result.message
    hidden = result.output.reshape(s, 64)
    for attn, ffn in encoder.layers:
        result = runner.run(kernel_abi.attention_call(attn, hidden, mask, HEADER_SPEC_HASH))
        assert result.ok, result.message
        result = runner.run(kernel_abi.mlp_call(ffn, result.output.reshape(s, 64), HEADER_SPEC_HASH))
        assert result.ok, result.message
        hidden = result.output.reshape(s, 64)
    assert np.array_equal(hidden, want)


# ---- the student shapes a search prices (export/shape_space.py) -----------------------------


def _space_corners():
    """The narrowest and widest hidden widths of the shape space, at each head size and FFN ratio, with
    the tiles the planner picks for them at 128 tokens on the NUCLEO-F746ZG."""
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export import shape_space
    from tflm_mcubert.schedule.memory import Dims
    from tflm_mcubert.schedule.planner import plan_model

    budget = get_board("nucleo-f746zg").arena_budget()
    corners = []
    for d in (min(shape_space.HIDDEN), max(shape_space.HIDDEN)):
        for size, ratio in itertools.product(shape_space.HEAD_SIZES, shape_space.FFN_RATIOS):
            dims = Dims(hidden=d, heads=d // size, ffn=d * ratio, layers=1)
            corners.append((dims, plan_model(dims, 128, budget, output_bytes=2).tiles))
    return corners


SPACE_CORNERS = _space_corners()


@pytest.mark.parametrize("dims,tiles", SPACE_CORNERS, ids=[f"d{d.hidden}h{d.heads}f{d.ffn}" for d, _ in SPACE_CORNERS])
@WEIGHT_BITS
def test_the_shape_space_corners_run_bit_exact(runner, dims, tiles, weight_bits):
    s, d = 128, dims.hidden
    check(
        runner,
        attention_case(s, d, dims.heads, tiles["attention"], kind="realistic", mask="tail", weight_bits=weight_bits),
    )
    check(runner, mlp_case(s, d, dims.ffn, tiles["mlp"], kind="realistic", weight_bits=weight_bits))

"""linear_int4: the w4row packing of int4 weights, its refusals, and the reference matmul."""

import dataclasses

import numpy as np
import pytest

from tflm_mcubert.ops import attention, mlp, testing
from tflm_mcubert.ops.fixed_point import requantize
from tflm_mcubert.ops.fixed_point import round_half_up
from tflm_mcubert.ops.linear import Linear, int4_clip_ratios, int_matmul, linear_from_int4, pack_weights
from tflm_mcubert.ops.linear_int4 import (
    matmul_int4,
    pack_weights_int4,
    packed_size_int4,
    row_bytes_int4,
    unpack_weights_int4,
)
from tflm_mcubert.ops.quantization import TensorQuant
from tflm_mcubert.ops.validation import OpSpecError


def random_int4(rng, n, k):
    return rng.integers(-7, 8, size=(n, k)).astype(np.int8)


def test_layout_by_example():
    w = np.array([[-7, -1, 0, 1, 2, 3, 4, 7, 5], [1, 2, 3, 4, 5, 6, 7, -7, -6]], dtype=np.int8)
    packed = pack_weights_int4(w)
    assert row_bytes_int4(9) == 8 and packed_size_int4(2, 9) == packed.size == 16
    # nibble = value + 8, K value k in nibble k % 2 of byte k // 2; padding nibbles 0
    assert packed[:8].tolist() == [0x71, 0x98, 0xBA, 0xFC, 0x0D, 0, 0, 0]
    assert packed[8:].tolist() == [0xA9, 0xCB, 0xED, 0x1F, 0x02, 0, 0, 0]


@pytest.mark.parametrize("n, k", [(1, 1), (3, 7), (5, 8), (4, 9), (7, 33), (16, 128)])
def test_pack_unpack_round_trip(n, k):
    w = random_int4(np.random.default_rng(n * 100 + k), n, k)
    packed = pack_weights_int4(w)
    assert packed.dtype == np.uint8 and packed.size == n * 4 * -(-k // 8)
    assert np.array_equal(unpack_weights_int4(packed, n, k), w)


def test_flash_is_half_of_pair4_plus_row_padding():
    from tflm_mcubert.ops.linear import packed_size

    for n, k in [(128, 128), (512, 128), (256, 1024)]:
        assert 2 * packed_size_int4(n, k) == packed_size(n, k)
    assert packed_size_int4(3, 9) == 3 * 8  # 9 values: two words per channel


def test_pack_refuses_out_of_range_and_wrong_types():
    with pytest.raises(ValueError, match=r"\[-7, 7\]"):
        pack_weights_int4(np.array([[-8, 0]], dtype=np.int8))
    with pytest.raises(ValueError, match=r"\[-7, 7\]"):
        pack_weights_int4(np.array([[8]], dtype=np.int8))
    with pytest.raises(ValueError, match="int8"):
        pack_weights_int4(np.zeros((2, 2), dtype=np.int16))


def test_unpack_refuses_padding_minus_eight_and_wrong_size():
    packed = pack_weights_int4(np.ones((2, 5), dtype=np.int8))
    bad = packed.copy()
    bad[2] |= 0x10  # channel 0, nibble 5: padding (rows are 4 bytes)
    with pytest.raises(OpSpecError, match="padding nibble 5 of channel 0"):
        unpack_weights_int4(bad, 2, 5)
    bad = packed.copy()
    bad[4 + 1] &= 0x0F  # channel 1, K 3 -> nibble 0, i.e. -8
    with pytest.raises(OpSpecError, match=r"weight \[1, 3\] is -8"):
        unpack_weights_int4(bad, 2, 5)
    with pytest.raises(OpSpecError, match="shape"):
        unpack_weights_int4(packed[:-1], 2, 5)
    with pytest.raises(OpSpecError, match="dtype"):
        unpack_weights_int4(packed.view(np.int8), 2, 5)


def test_matmul_is_the_int8_math_with_unpacked_weights():
    rng = np.random.default_rng(7)
    n, k = 9, 37
    w = random_int4(rng, n, k)
    x = rng.integers(-128, 128, size=(5, k)).astype(np.int8)
    acc = matmul_int4(x, pack_weights_int4(w), n, k)
    assert np.array_equal(acc, x.astype(np.int64) @ w.astype(np.int64).T)
    channels = np.stack([rng.integers(-1000, 1000, n), np.full(n, 1 << 30), np.full(n, -6)], axis=1).astype(np.int32)
    layer = linear_from_int4(pack_weights_int4(w), channels, n, k)
    assert np.array_equal(layer.weight, w)
    assert np.array_equal(layer.requantized(x), requantize(acc + channels[:, 0], channels[:, 1], channels[:, 2]))


def smlad_model(x: np.ndarray, packed: np.ndarray, n: int, k: int) -> np.ndarray:
    """The DSP kernel's arithmetic on the packed words, in numpy (docs/w4-gemm.md): per word, the
    int16 pairs word & 0x000F000F, word & 0x00F000F0, (word >> 8) & 0x000F000F, (word >> 8) & 0x00F000F0
    against the widened activations (16 x0, 16 x4), (x1, x5), (16 x2, 16 x6), (x3, x7); accumulators
    start at -128 * sum x and are shifted right by 4 at the end. The K % 8 tail is scalar."""
    full = k // 8
    words = packed.reshape(n, -1).view("<u4")[:, :full].astype(np.int64)  # [n, words]
    xs = x[:, : 8 * full].astype(np.int64).reshape(len(x), full, 8)  # [rows, words, 8]
    acc = np.zeros((len(x), n), dtype=np.int64) - 128 * xs.sum(axis=(1, 2))[:, None]
    for shift, lanes in ((0, (0, 4)), (8, (2, 6))):
        w = words >> shift
        lo, hi = w & 0x000F000F, w & 0x00F000F0
        for lane, half in enumerate(lanes):
            acc += 16 * xs[:, :, half] @ ((lo >> (16 * lane)) & 0xFFFF).T
            acc += xs[:, :, half + 1] @ ((hi >> (16 * lane)) & 0xFFFF).T
    assert np.all(acc % 16 == 0)
    weight = unpack_weights_int4(packed, n, k).astype(np.int64)
    return (acc >> 4) + x[:, 8 * full :].astype(np.int64) @ weight[:, 8 * full :].T


@pytest.mark.parametrize("n, k", [(3, 8), (5, 17), (4, 64), (2, 3)])
def test_the_layouts_smlad_algebra_gives_the_reference(n, k):
    rng = np.random.default_rng(n + k)
    w = random_int4(rng, n, k)
    w[0, : min(k, 8)] = -7  # the extremes: every lane at its bound
    w[-1, : min(k, 8)] = 7
    x = rng.integers(-128, 128, size=(4, k)).astype(np.int8)
    x[0] = -128
    packed = pack_weights_int4(w)
    assert np.array_equal(smlad_model(x, packed, n, k), int_matmul(x, w.T))


# ---- Linear with weight_bits = 4, and the ops that carry it (version 3) -----------------------


def test_an_int4_layer_is_the_int8_math_on_its_unpacked_weights():
    rng = np.random.default_rng(11)
    for n, k in ((5, 9), (8, 16), (3, 1), (13, 37)):
        w = random_int4(rng, n, k)
        channels = np.stack(
            [rng.integers(-(1 << 20), 1 << 20, n), rng.integers(1 << 30, 1 << 31, n), rng.integers(-20, 0, n)], 1
        ).astype(np.int32)
        int4 = Linear(k, n, pack_weights_int4(w).view(np.int8), channels, 4).validate("op", "layer")
        int8 = Linear(k, n, pack_weights(w), channels).validate("op", "layer")
        assert int4.packed_weights.size == n * row_bytes_int4(k) and np.array_equal(int4.weight, w)
        x = rng.integers(-128, 128, (6, k)).astype(np.int8)
        assert np.array_equal(int4.accumulate(x), int_matmul(x, w.T) + channels[:, 0])
        assert np.array_equal(int4.requantized(x), int8.requantized(x))
        assert np.array_equal(int4.requantized(x, slice(1, 3)), int8.requantized(x, slice(1, 3)))


def test_from_float_at_4_bits_is_per_channel_symmetric_with_mse_clipping():
    rng = np.random.default_rng(5)
    w = rng.normal(size=(6, 20)) * np.array([1, 2, 0.1, 5, 1, 0])[:, None]
    w[0, 3] = 9.0  # an outlier: clipping it buys resolution for the rest of the channel
    b = rng.normal(size=6)
    quant = TensorQuant.observe(rng.normal(size=(4, 20)), symmetric=False)  # per tensor: nothing folds into w
    layer = Linear.from_float(w, b, quant, 0.05, weight_bits=4)
    assert layer.weight_bits == 4 and layer.packed_weights.dtype == np.int8
    assert layer.packed_weights.size == packed_size_int4(6, 20)
    wq = layer.weight
    assert int(wq.min()) >= -7 and np.all(np.abs(wq[:5]).max(axis=1) == 7) and not wq[5].any()
    ratios = int4_clip_ratios(w)
    assert ratios.shape == (6,) and np.all((0.5 <= ratios) & (ratios <= 1)) and ratios[5] == 1
    assert ratios[0] < 1  # the outlier channel is clipped
    plain = np.abs(w).max(axis=1) / 7
    for c in range(5):
        errors = []
        for scale in (plain[c], ratios[c] * plain[c]):
            q = np.clip(round_half_up(w[c] / scale), -7, 7)
            errors.append(((q * scale - w[c]) ** 2).sum())
        assert errors[1] <= errors[0]  # never worse than the plain max / 7
        assert np.array_equal(wq[c], np.clip(round_half_up(w[c] / (ratios[c] * plain[c])), -7, 7))
    assert errors[1] < errors[0] or ratios[4] == 1
    eight = Linear.from_float(w, b, quant, 0.05)
    assert eight.weight_bits == 8 and int(np.abs(eight.weight).max()) == 127
    with pytest.raises(ValueError, match="weight_bits 6"):
        Linear.from_float(w, b, quant, 0.05, weight_bits=6)


def _int4_attention():
    return testing.extreme_attention(np.random.default_rng(3), 9, 12, 3, 4, weight_bits=4)


def _int4_mlp():
    return testing.extreme_mlp(np.random.default_rng(4), 5, 9, 13, 2, weight_bits=4)


def test_int4_ops_serialize_as_version_3_and_compute_the_int8_reference():
    from tflm_mcubert.ops.options import decode_options, encode_options

    rng = np.random.default_rng(0)
    for params, module in ((_int4_attention(), attention), (_int4_mlp(), mlp)):
        code = module.OP
        options = params.options()
        assert options["weight_bits"] == 4
        back = type(params).from_serialized(decode_options(code, encode_options(code, options)), params.tensors())
        as_int8 = dataclasses.replace(
            params,
            weight_bits=8,
            **{
                name: Linear(lin.in_features, lin.out_features, pack_weights(lin.weight), lin.channels)
                for name in ("query", "key", "value", "output", "fc1", "fc2")
                if (lin := getattr(params, name, None)) is not None
            },
        ).validate()
        assert "weight_bits" not in as_int8.options()
        s, d = params.seq_len, params.hidden
        x = rng.integers(-128, 128, (s, d)).astype(np.int8)
        args = (np.ones(s, np.int8),) if module is attention else ()
        want = module.run(as_int8, x.copy(), *args)
        assert np.array_equal(module.run(params, x.copy(), *args), want)
        assert np.array_equal(module.run(back, x.copy(), *args), want)


@pytest.mark.parametrize("make,field", [(_int4_attention, "key"), (_int4_mlp, "fc2")])
def test_corrupt_int4_op_tensors_are_refused_naming_op_and_field(make, field):
    params = make()
    op = type(params).__module__.rsplit(".", 1)[1]
    code = attention.OP if op == "attention" else mlp.OP
    tensors = params.tensors()
    name = f"{field}_weights"
    layer = getattr(params, field)
    n, k = layer.out_features, layer.in_features

    def refused(weights, options=None):
        with pytest.raises(OpSpecError) as caught:
            type(params).from_serialized(options or params.options(), {**tensors, name: weights})
        return str(caught.value)

    good = tensors[name]
    assert refused(good[:-1]).startswith(f"{code}: {field}.weights: expected shape ({good.size},)")
    as_int8 = refused(good, {k_: v for k_, v in params.options().items() if k_ != "weight_bits"})
    first = "query" if code == attention.OP else "fc1"  # int4 bytes read as int8 pair4: the first layer fails
    assert as_int8.startswith(f"{code}: {first}.weights: expected shape (")
    padded = good.view(np.uint8).copy()
    row = row_bytes_int4(k)
    padded[row - 1] |= 0x10  # the last nibble of channel 0's row: padding when K % 8 != 0 ...
    assert k % 8, "the case needs K padding"
    assert refused(padded.view(np.int8)) == (
        f"{code}: {field}.weights: padding nibble {2 * row - 1} of channel 0 is 1 (must be 0)"
    )
    minus8 = good.view(np.uint8).copy()
    minus8[row + 1] &= 0xF0  # channel 1, K value 2: nibble 0 = -8
    assert refused(minus8.view(np.int8)) == (
        f"{code}: {field}.weights: weight [1, 2] is -8: int4 weights are in [-7, 7] (nibble 1..15)"
    )
    mixed = {field: Linear(k, n, pack_weights(layer.weight), layer.channels)}
    with pytest.raises(OpSpecError, match=f"{code}: {field}.weights: stored at 8 bits in an op of weight_bits 4"):
        dataclasses.replace(params, **mixed).validate()
    with pytest.raises(OpSpecError, match=f"{code}: weight_bits: 6 is not a weight width"):
        dataclasses.replace(params, weight_bits=6).validate()


@pytest.mark.parametrize(
    "module,widths", [(attention, (4, 8, 8, 4)), (attention, (8, 4, 4, 8)), (mlp, (4, 8)), (mlp, (8, 4))]
)
def test_a_width_per_layer_is_version_8_and_computes_what_the_layers_give(module, widths):
    """SPEC 3.1.2: a mixed op's output is the int8 reference on its layers' unpacked weights."""
    from tflm_mcubert.ops.options import decode_options, encode_options

    rng = np.random.default_rng(7)
    if module is attention:
        params = testing.extreme_attention(rng, 9, 12, 3, 4, weight_bits=widths)
    else:
        params = testing.extreme_mlp(rng, 5, 9, 13, 2, weight_bits=widths)
    options = params.options()
    layers = module.LAYERS
    mask = sum(1 << i for i, bits in enumerate(widths) if bits == 4)
    assert (options["weight_bits"], options["int4_layers"]) == (8, mask)
    encoded = encode_options(module.OP, options)
    assert decode_options(module.OP, encoded) == options
    back = type(params).from_serialized(decode_options(module.OP, encoded), params.tensors())
    assert back.layer_widths == widths and back.weight_bits == widths
    as_int8 = dataclasses.replace(
        params,
        weight_bits=8,
        **{
            name: Linear(lin.in_features, lin.out_features, pack_weights(lin.weight), lin.channels)
            for name in layers
            if (lin := getattr(params, name))
        },
    ).validate()
    s, d = params.seq_len, params.hidden
    x = rng.integers(-128, 128, (s, d)).astype(np.int8)
    args = (np.ones(s, np.int8),) if module is attention else ()
    want = module.run(as_int8, x.copy(), *args)
    assert np.array_equal(module.run(back, x.copy(), *args), want)
    swapped = tuple(12 - w for w in widths)  # each layer declared at the other width: refused, naming it
    first = layers[0]
    with pytest.raises(OpSpecError, match=f"{module.OP}: {first}.weights: stored at {widths[0]} bits"):
        dataclasses.replace(params, weight_bits=swapped).validate()
    with pytest.raises(OpSpecError, match=f"{module.OP}: weight_bits: 3 widths for the {len(layers)} layers"):
        dataclasses.replace(params, weight_bits=(4, 8, 4)).validate()
    with pytest.raises(OpSpecError, match=f"{module.OP}: weight_bits: {layers[-1]}: 6 is not a weight width"):
        dataclasses.replace(params, weight_bits=(*widths[:-1], 6)).validate()

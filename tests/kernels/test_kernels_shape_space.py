"""Every student shape `distill --preset auto` may choose runs bit-exact: the shape space's hidden widths,
head sizes, FFN ratios and weight widths (export/shape_space.py) through MCUBERT_ATTENTION and MCUBERT_MLP
on the host's plain C and DSP paths (the `runner` fixture), against the numpy reference, with realistic
(calibrated float) weights and with extreme ones. Layers repeat the same ops, so one layer of each covers
the space; Cortex-M cores run random shapes of the fuzz harness (test_kernels_fuzz_inputs_qemu.py)."""

from __future__ import annotations

import itertools

import pytest

from kernel_cases import attention_case, mlp_case
from test_kernels_host import check
from tflm_mcubert.export.shape_space import FFN_RATIOS, HEAD_SIZES, HIDDEN, WEIGHT_BITS

SEQ, TILE = 9, 4
SHAPES = [(d, h, b) for d, h, b in itertools.product(HIDDEN, HEAD_SIZES, WEIGHT_BITS) if d % h == 0]  # as the space


@pytest.mark.parametrize("hidden, head_size, bits", SHAPES, ids=[f"d{d}-dh{h}-w{b}" for d, h, b in SHAPES])
def test_attention_of_every_width_and_head_size(runner, hidden, head_size, bits):
    heads = hidden // head_size
    check(runner, attention_case(SEQ, hidden, heads, TILE, kind="realistic", mask="tail", weight_bits=bits))
    check(runner, attention_case(SEQ, hidden, heads, TILE, seed=hidden, weight_bits=bits))


@pytest.mark.parametrize("hidden, ratio, bits", list(itertools.product(HIDDEN, FFN_RATIOS, WEIGHT_BITS)))
def test_mlp_of_every_width_and_ffn_ratio(runner, hidden, ratio, bits):
    check(runner, mlp_case(SEQ, hidden, ratio * hidden, TILE, kind="realistic", weight_bits=bits))
    check(runner, mlp_case(SEQ, hidden, ratio * hidden, TILE, seed=ratio, weight_bits=bits))

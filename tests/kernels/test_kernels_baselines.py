"""The re-implemented baselines of custom_ops/baselines/ against the numpy reference, on an
emulated Cortex-M7 (they are DSP-path code: the `mcubert_baselines_emu` target builds them with the library into one
image; measure/baseline_abi.py calls them).

* cmsis (untiled graph of 1x2x4 per-token ops) and burrello (per-head, untiled) attention and the
  shared untiled MLP produce the reference's bytes: same numerics, other schedule and loop nest.
* flash rescales its running sums when a row's maximum grows, which rounds differently from the
  reference's single lookup against the final maximum: with one key block (tile >= s) there is
  no rescale and it is bit-exact; with streamed blocks it is compared within a tolerance.
* both linear-layer kernels of the benchmark's comparison (the library's row-block kernel alone,
  and 1x2x4 per token) equal the reference's requantized outputs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from kernel_build import build, need_arm_toolchain
from kernel_cases import Case, attention_case, mlp_case
from tflm_mcubert.ops import contract, testing
from tflm_mcubert.ops.fixed_point import saturate
from tflm_mcubert.ops import kernel_abi

pytest.importorskip("unicorn", reason="the `unicorn` package runs the baselines")

from tflm_mcubert.measure.arm_emulator import ArmEmulator, run_kernel  # noqa: E402
from tflm_mcubert.measure.baseline_abi import row_major_call, run_baseline, run_linear  # noqa: E402

# Flash vs reference on realistic layers: every byte within this many LSBs, and few bytes off.
FLASH_MAX_ABS_DIFF = 1
FLASH_MAX_FRACTION_DIFFERENT = 0.03


@pytest.fixture(scope="module")
def emu(build_dir):
    need_arm_toolchain()
    image = build(build_dir, "cortex-m7", "mcubert_baselines_emu").image("mcubert_baselines_emu")
    return ArmEmulator(image, "cortex-m7")


def with_tile(case: Case, tile: int) -> Case:
    params = kernel_abi.make_params(case.call.op, {**case.call.options, "tile": tile})
    return dataclasses.replace(case, call=dataclasses.replace(case.call, params=params), name=f"{case.name}-tile{tile}")


ATTENTION_CASES = [
    lambda: attention_case(32, 64, 2, 4, kind="realistic", mask="tail"),
    lambda: attention_case(19, 24, 3, 5),  # extreme parameters
    lambda: attention_case(11, 20, 4, 3, mask="random"),  # dh = 5: odd pairs, K tails
    lambda: attention_case(9, 6, 2, 4, mask="none"),  # every key masked
    lambda: attention_case(13, 12, 3, 13, mask_mode=1),  # valid length
    lambda: attention_case(17, 16, 1, 17, mask="all", mask_mode=1),
]


@pytest.mark.parametrize("schedule", ["cmsis", "burrello"])
@pytest.mark.parametrize("index", range(len(ATTENTION_CASES)))
def test_untiled_attention_schedules_are_bit_exact(emu, schedule, index):
    case = ATTENTION_CASES[index]()
    run = run_baseline(emu, schedule, case.call)
    assert run.status == kernel_abi.OK, run.message
    assert np.array_equal(run.output, case.expected), f"{schedule} {case.name}"


@pytest.mark.parametrize("index", range(len(ATTENTION_CASES)))
def test_flash_with_one_key_block_is_bit_exact(emu, index):
    """tile >= s: a single key block, so the running maximum is the final one and nothing is
    rescaled — the schedule then computes exactly the reference's weights."""
    case = ATTENTION_CASES[index]()
    case = with_tile(case, case.call.params.seq_len)
    run = run_baseline(emu, "flash", case.call)
    assert run.status == kernel_abi.OK, run.message
    assert np.array_equal(run.output, case.expected), case.name


@pytest.mark.parametrize(
    "s,d,h,t,mask", [(64, 64, 2, 8, "all"), (77, 64, 4, 16, "tail"), (40, 32, 2, 5, "random"), (128, 128, 2, 32, "all")]
)
def test_flash_with_streamed_key_blocks_is_within_tolerance(emu, s, d, h, t, mask):
    """Realistic layers: the rescaled running sums move a few outputs by a rounding step."""
    case = with_tile(attention_case(s, d, h, 1, kind="realistic", mask=mask, seed=3), t)
    run = run_baseline(emu, "flash", case.call)
    assert run.status == kernel_abi.OK, run.message
    diff = np.abs(run.output.astype(np.int32) - case.expected.astype(np.int32))
    assert diff.max() <= FLASH_MAX_ABS_DIFF, (case.name, int(diff.max()))
    assert np.mean(diff > 0) <= FLASH_MAX_FRACTION_DIFFERENT, (case.name, float(np.mean(diff > 0)))


@pytest.mark.parametrize(
    "make_case",
    [
        lambda: mlp_case(32, 64, 256, 8, kind="realistic"),
        lambda: mlp_case(9, 7, 13, 4),
        lambda: mlp_case(13, 20, 44, 13, seed=2),
    ],
    ids=["realistic", "odd", "extreme"],
)
def test_untiled_mlp_is_bit_exact(emu, make_case):
    case = make_case()
    for schedule in ("cmsis", "flash"):  # every schedule runs the same untiled MLP
        run = run_baseline(emu, schedule, case.call)
        assert run.status == kernel_abi.OK, run.message
        assert np.array_equal(run.output, case.expected), f"{schedule} {case.name}"


@pytest.mark.parametrize("tokens,k,n", [(9, 12, 10), (5, 7, 3), (4, 128, 64), (13, 33, 17)])
def test_both_linear_kernels_match_the_reference(emu, tokens, k, n):
    rng = np.random.default_rng(tokens * k + n)
    linear = testing._linear(rng, n, k)
    x = rng.integers(-128, 128, (tokens, k)).astype(np.int8)
    expected = saturate(linear.requantized(x), -128, 127, np.int8)
    for kind in ("ours", "cmsis"):
        y, _ = run_linear(emu, kind, x, linear)
        assert np.array_equal(y, expected), kind


def test_baselines_refuse_a_short_scratch(emu):
    case = attention_case(9, 8, 2, 3)
    assert case.call.op == contract.ATTENTION
    size = emu.call("mcubert_baseline_cmsis_attention_get_buffer_size", *case.call.dims()).value
    for scratch, status in ((size, kernel_abi.OK), (size - 4, kernel_abi.ERROR_ARGUMENT)):
        run = run_kernel(
            emu,
            row_major_call(case.call),
            validate=False,
            scratch_size=scratch,
            symbol="mcubert_baseline_cmsis_attention_s8",
        )
        assert run.status == status


@pytest.mark.parametrize("kind", ["conv1x1", "fc"])
def test_the_real_cmsis_nn_kernels_compute_the_layer(kind, tmp_path):
    """bench/kernel_cost.py's real CMSIS-NN path (a user's checkout in CMSIS_NN_DIR) runs the layer it
    claims to: outputs within one unit of the reference (CMSIS-NN rounds its requantization twice)."""
    import os
    import sys

    cmsis_nn_dir = os.environ.get("CMSIS_NN_DIR")
    if not cmsis_nn_dir:
        pytest.skip("set CMSIS_NN_DIR to a CMSIS-NN checkout to check the benchmark's real-kernel path")
    pytest.importorskip("unicorn")
    bench = Path(__file__).resolve().parents[2] / "bench"
    sys.path.insert(0, str(bench))
    import kernel_cost_cmsis_nn
    from kernel_cost import linear_layer

    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.ops.fixed_point import saturate

    emu = ArmEmulator(kernel_cost_cmsis_nn.build_image(Path(cmsis_nn_dir), "cortex-m7", tmp_path), "cortex-m7")
    for k, n in ((32, 48), (64, 16)):
        linear, x = linear_layer(k, n, 9)
        y, call = kernel_cost_cmsis_nn.run_linear(emu, kind, x, linear)
        expected = saturate(linear.requantized(x), -128, 127, np.int8)
        assert np.abs(y.astype(int) - expected.astype(int)).max() <= 1
        assert call.instructions > k * n * 9 // 4


def test_the_real_cmsis_nn_s4_kernel_computes_the_layer(tmp_path, monkeypatch):
    """bench/w4_gemm.py's real arm_fully_connected_s4 (TFLM's int4-weight path) on CMSIS-NN's packing of our
    int4 values: within one unit of the once-rounded result (run_fc_s4 checks it), and it fails on a
    wrong packing (the check can fail)."""
    import os
    import sys

    cmsis_nn_dir = os.environ.get("CMSIS_NN_DIR")
    if not cmsis_nn_dir:
        pytest.skip("set CMSIS_NN_DIR to a CMSIS-NN checkout to check the benchmark's real s4 path")
    pytest.importorskip("unicorn")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import kernel_cost_cmsis_nn

    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    if not kernel_cost_cmsis_nn.has_s4(Path(cmsis_nn_dir)):
        pytest.skip(f"{cmsis_nn_dir} has no s4 kernels (TFLM's pin 4ab83cc has them)")
    emu = ArmEmulator(kernel_cost_cmsis_nn.build_image(Path(cmsis_nn_dir), "cortex-m4", tmp_path), "cortex-m4")
    rng = np.random.default_rng(4)
    x = rng.integers(-128, 128, size=(5, 32)).astype(np.int8)
    w = rng.integers(-8, 8, size=(24, 32)).astype(np.int8)
    bias = rng.integers(-3000, 3000, 24).astype(np.int32)
    y, call = kernel_cost_cmsis_nn.run_fc_s4(emu, x, w, bias, 1 << 30, -8)
    assert call.instructions > 5 * 32 * 24 // 4 and len(np.unique(y)) > 10
    swapped = kernel_cost_cmsis_nn.pack_s4  # the nibbles the other way round: CMSIS-NN reads other weights
    monkeypatch.setattr(kernel_cost_cmsis_nn, "pack_s4", lambda v: swapped(v.reshape(-1, 2)[:, ::-1].reshape(v.shape)))
    with pytest.raises(RuntimeError, match="differs from the reference"):
        kernel_cost_cmsis_nn.run_fc_s4(emu, x, w, bias, 1 << 30, -8, count=False)

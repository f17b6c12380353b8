"""The arm-none-eabi builds on emulated Cortex-M7, M4, M33 and M0+ cores (unicorn; the M0+ build runs
on unicorn's Cortex-M0 model, the same ARMv6-M instruction set).

The kernels are called directly (tflm_mcubert/measure/arm_emulator.py): the DSP path as built for
each core (Thumb-2 assembly micro-kernel), and on the M7 also the DSP path with the C version of
the micro-kernel (MCUBERT_DSP_NO_ASM) and the plain C path (MCUBERT_FORCE_PLAIN), bit-exact
against the numpy reference on a representative subset; every call's stack use is checked against
the documented bound, and instruction counts (the benchmark's measure) are exercised.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kernel_cases import HEADER, Case, attention_case, embedding_case, mlp_case, shift_boundary_cases
from tflm_mcubert.ops import attention, embedding, mlp
from tflm_mcubert.ops import kernel_abi

unicorn = pytest.importorskip("unicorn", reason="the `unicorn` package runs the Cortex-M tests")

from tflm_mcubert.measure.arm_emulator import ArmEmulator, ElfImage, run_kernel  # noqa: E402

STACK_BOUND = int(re.search(r"#define MCUBERT_STACK_BOUND_BYTES (\d+)", HEADER.read_text()).group(1))
BUILDS = [
    ("cortex-m7", False, True),
    ("cortex-m4", False, True),
    ("cortex-m33", False, True),  # Raspberry Pi Pico 2 (RP2350): ARMv8-M with the DSP extension
    ("cortex-m0plus", False, True),  # Raspberry Pi Pico (RP2040): no DSP extension, so the plain path
    ("cortex-m7", True, True),
    ("cortex-m7", False, False),
]
BUILD_IDS = ["m7-dsp", "m4-dsp", "m33-dsp", "m0plus-plain", "m7-plain", "m7-dsp-c"]
NO_DSP_CORES = {"cortex-m0plus"}  # ARMv6-M: the build takes the plain path by itself


@pytest.fixture(scope="module", params=BUILDS, ids=BUILD_IDS)
def emulator(request, arm_images):
    cpu, plain, asm = request.param
    return ArmEmulator(arm_images(cpu, plain, asm), cpu)


def _subset() -> list[tuple[Case, dict[str, int]]]:
    return [
        (attention_case(77, 64, 4, 5, kind="realistic", mask="tail"), {"hidden": 1, "query_weights": 3}),
        (attention_case(9, 20, 4, 4), {}),  # dh = 5: split groups, K tails
        (attention_case(13, 12, 3, 13, mask_mode=1), {"key_weights": 2}),
        (attention_case(6, 8, 2, 3, mask="none"), {}),  # every key masked
        (attention_case(4, 64, 2, 3, seed=4), {"hidden": 3}),
        (mlp_case(33, 36, 100, 7, kind="realistic"), {"fc1_weights": 1, "fc2_weights": 2}),
        (mlp_case(9, 7, 13, 4), {"hidden": 2}),
        (embedding_case(13, 24, kind="realistic"), {"word_rows": 1, "word_projections": 3}),
        (embedding_case(11, 20, cluster_sizes=(5, 7, 3, 9), ranks=(None, 1, 3, 20)), {"output": 1}),
        # int4 tables (SPEC 4.1.1): odd d and ranks (padding nibbles), K tails, rank < 4, rows misaligned
        (embedding_case(13, 24, kind="realistic", word_bits=4), {"word_rows": 1, "word_projections": 3}),
        (embedding_case(11, 21, cluster_sizes=(5, 7, 3, 9), ranks=(None, 1, 3, 21), word_bits=4), {"word_rows": 3}),
        # int4 weights (version 3): the W4 gemm in every linear layer, weights misaligned
        (attention_case(77, 64, 4, 5, kind="realistic", mask="tail", weight_bits=4), {"query_weights": 3}),
        (attention_case(9, 20, 4, 4, weight_bits=4), {"output_weights": 1}),  # dh = 5, K % 8 = 4, split rows
        (attention_case(13, 12, 3, 13, mask_mode=1, weight_bits=4), {"key_weights": 2}),
        (mlp_case(33, 36, 100, 7, kind="realistic", weight_bits=4), {"fc1_weights": 1, "fc2_weights": 2}),
        (mlp_case(9, 7, 13, 4, weight_bits=4), {"hidden": 2}),
        # a width per layer (version 8): K and V at different widths share one row block
        (attention_case(77, 64, 4, 5, kind="realistic", mask="tail", weight_bits=(4, 8, 4, 8)), {"key_weights": 1}),
        (attention_case(9, 20, 4, 4, weight_bits=(8, 4, 8, 4)), {"value_weights": 3}),
        (mlp_case(33, 36, 100, 7, kind="realistic", weight_bits=(8, 4)), {"fc2_weights": 1}),
        (mlp_case(9, 7, 13, 4, weight_bits=(4, 8)), {"fc1_weights": 2}),
    ] + [
        (case, {})
        for shift, bits in ((-2, 8), (-1, 8), (1, 8), (3, 8), (-1, 4), (2, 4), (3, 4))
        for case in shift_boundary_cases(shift, weight_bits=bits)
    ]


SUBSET = _subset()


@pytest.mark.parametrize("index", range(len(SUBSET)), ids=[case.name for case, _ in SUBSET])
def test_bit_exact_on_the_core(emulator, index):
    case, misalign = SUBSET[index]
    run = run_kernel(emulator, case.call, misalign=misalign)
    assert run.validate_status == kernel_abi.OK and run.status == kernel_abi.OK, run.message
    mismatches = np.flatnonzero(run.output != case.expected)
    assert mismatches.size == 0, f"{case.name}: {mismatches.size} bytes differ"
    assert run.stack_bytes <= STACK_BOUND, f"{case.name}: {run.stack_bytes} bytes of stack"


@pytest.mark.parametrize("cpu,plain,asm", BUILDS, ids=BUILD_IDS)
def test_each_image_runs_its_path_and_agrees_on_buffer_sizes(arm_images, cpu, plain, asm):
    emu = ArmEmulator(arm_images(cpu, plain, asm), cpu)
    assert emu.call("mcubert_uses_dsp_path").value == (0 if plain or cpu in NO_DSP_CORES else 1)
    for dims in ((128, 128, 512, 28), (77, 256, 1024, 5), (1, 1, 1, 1)):
        assert emu.call("mcubert_mlp_get_buffer_size", *dims).value == mlp.scratch_bytes(*dims)
    for dims in ((128, 128, 2, 4), (77, 64, 4, 5), (512, 256, 4, 8)):
        assert emu.call("mcubert_attention_get_buffer_size", *dims).value == attention.scratch_bytes(*dims)
    assert emu.call("mcubert_embedding_get_buffer_size", 300, 96).value == embedding.scratch_bytes(300, 96)


def test_errors_come_back_with_their_message(emulator):
    case = attention_case(9, 12, 3, 4, mask_mode=1, seed=2)
    call = case.call
    call.tensors["mask"] = np.array([10], np.int32)
    run = run_kernel(emulator, call)
    assert run.status == kernel_abi.ERROR_INPUT
    assert run.message == "MCUBERT_ATTENTION: mask: valid length 10 is outside [0, 9]"


def test_instruction_counts(arm_images):
    """Counts are deterministic, scale with the work, and the DSP path needs fewer than plain C."""
    case = mlp_case(16, 64, 256, 8, kind="realistic")
    small = mlp_case(8, 64, 256, 8, kind="realistic")
    counts = {}
    for plain in (False, True):
        emu = ArmEmulator(arm_images("cortex-m7", plain), "cortex-m7")
        runs = [run_kernel(emu, case.call, count_instructions=True) for _ in range(2)]
        assert runs[0].instructions == runs[1].instructions > 0
        assert np.array_equal(runs[0].output, case.expected)
        half = run_kernel(emu, small.call, count_instructions=True).instructions
        assert 0.4 < half / runs[0].instructions < 0.6
        counts[plain] = runs[0].instructions
    assert counts[False] < 0.75 * counts[True], counts


def test_native_and_python_block_counters_agree(arm_images):
    """The compiled block hook and the Python fallback count the same executions."""
    case = attention_case(21, 16, 2, 5, kind="realistic", mask="tail")
    runs = []
    for native in (True, False):
        emu = ArmEmulator(arm_images("cortex-m7"), "cortex-m7", native_counter=native)
        runs.append(run_kernel(emu, case.call, count_instructions=True))
        assert emu.native_counter == native or not native
        assert np.array_equal(runs[-1].output, case.expected)
    assert runs[0].instructions == runs[1].instructions
    assert runs[0].blocks == runs[1].blocks


def test_micro_kernel_every_reduction_length(emulator):
    """K = 0..19 in both linear layers: every count of 4-groups modulo the assembly loop's unroll
    (its TBB entry points), no group at all, and every K % 4 tail; plus ragged row blocks."""
    for d, f, s, t in (
        (1, 3, 5, 5),
        (2, 4, 6, 3),
        (3, 5, 7, 7),
        (4, 8, 9, 4),
        (5, 12, 8, 8),
        (6, 16, 6, 2),
        (7, 19, 10, 5),
        (8, 17, 5, 5),
        (11, 13, 9, 9),
        (12, 9, 4, 4),
        (13, 10, 5, 3),
        (15, 18, 6, 6),
        (16, 14, 7, 7),
    ):
        case = mlp_case(s, d, f, t, seed=d)
        run = run_kernel(emulator, case.call)
        assert run.status == kernel_abi.OK, run.message
        assert np.array_equal(run.output, case.expected), case.name


def test_elf_reader_finds_the_api(arm_images):
    image = ElfImage.read(arm_images("cortex-m4"))
    for symbol in list(kernel_abi.KERNEL_SYMBOLS.values()) + list(kernel_abi.VALIDATE_SYMBOLS.values()):
        assert symbol in image.symbols
    assert any(address == 0 for address, _, _ in image.segments)  # the vector table

"""The instruction classifier and the per-core cycle estimates on hand-built blocks (no toolchain)."""

import pytest

from tflm_mcubert.measure.instruction_classes import CYCLE_MODELS, Instruction, classify


@pytest.mark.parametrize(
    "mnemonic, operands, expected",
    [
        ("smlad", "r0, r1, r2, r0", ("mac", 0, False)),
        ("muls", "r0, r1, r0", ("mac", 0, False)),
        ("ldrd", "r2, r3, [r0]", ("load_double", 2, False)),
        ("pop", "{r4, r5, r6, pc}", ("load_multiple", 4, True)),
        ("push", "{r4-r7, lr}", ("store_multiple", 5, False)),
        ("ldr.w", "pc, [sp], #4", ("load", 1, True)),
        ("strb", "r1, [r0, #3]", ("store", 1, False)),
        ("bne.n", "8000 <loop>", ("branch", 0, False)),
        ("cbz", "r0, 8010 <done>", ("branch", 0, False)),
        ("tbb", "[pc, r3]", ("table_branch", 0, False)),
        ("sdiv", "r0, r1, r2", ("divide", 0, False)),
        ("sxtb16", "r1, r2", ("alu", 0, False)),
    ],
)
def test_classify(mnemonic, operands, expected):
    assert classify(mnemonic, operands) == expected


def block(*instructions: Instruction) -> tuple[Instruction, ...]:
    return tuple(instructions)


LOOP = block(
    Instruction(0x100, 2, "load", 1),
    Instruction(0x102, 2, "load", 1),
    Instruction(0x104, 2, "mac"),
    Instruction(0x106, 2, "store", 1),
    Instruction(0x108, 2, "alu"),
    Instruction(0x10A, 2, "branch", target=0x100, conditional=True),  # back edge: taken
)


def test_cortex_m0plus_follows_its_trm_table():
    # loads 2 + 2, MULS 1, store 2, add 1, taken branch 2
    assert CYCLE_MODELS["cortex-m0plus"](LOOP) == 10
    call_and_return = block(
        Instruction(0, 4, "branch", target=0x400, links=True),  # BL: 3
        Instruction(4, 2, "load_multiple", 3, writes_pc=True),  # POP {r4, r5, pc}: 3 + N
        Instruction(6, 2, "branch", target=0x20, conditional=True),  # forward: not taken, 1
    )
    assert CYCLE_MODELS["cortex-m0plus"](call_and_return) == 3 + 6 + 1


def test_cortex_m4_pipelines_back_to_back_loads():
    # ldr 2, ldr 1 (pipelined), mac 1, str 1, alu 1, taken branch 3
    assert CYCLE_MODELS["cortex-m4"](LOOP) == 9


def test_cortex_m7_is_bounded_by_its_busiest_pipe():
    # 6 instructions / 2 issue = 3; 3 load/store beats; 1 MAC; + 1 taken branch
    assert CYCLE_MODELS["cortex-m7"](LOOP) == 4


def test_the_m33_uses_the_m4_table():
    assert CYCLE_MODELS["cortex-m33"] is CYCLE_MODELS["cortex-m4"]


def test_every_board_core_has_a_cycle_model():
    from tflm_mcubert.boards import BOARDS

    assert {board.core for board in BOARDS.values()} <= set(CYCLE_MODELS)

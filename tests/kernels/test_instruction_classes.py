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


def mve(address: int, mnemonic: str, operands: str) -> Instruction:
    return Instruction(address, 4, "alu", mnemonic=mnemonic, operands=operands)


def m55_cycles(*named: tuple[str, str]) -> float:
    """The Cortex-M55 estimate of a block of (mnemonic, operands), four bytes each."""
    return CYCLE_MODELS["cortex-m55"](block(*(mve(4 * i, *pair) for i, pair in enumerate(named))))


def test_cortex_m55_overlaps_beats_on_different_pipes_only():
    """The two sequences LLVM's Cortex-M55 scheduling model draws: 5 cycles, and 6 when two loads meet."""
    store = ("vstrw.32", "q2, [r1]")
    assert m55_cycles(("vldrw.u32", "q0, [r0]"), ("vadd.i32", "q1, q0, q0"), ("vmul.f32", "q2, q1, q1"), store) == 5
    assert m55_cycles(("vldrw.u32", "q0, [r0]"), ("vldrb.u32", "q1, [r2]"), ("vadd.i32", "q2, q0, q1"), store) == 6


def test_cortex_m55_loop_body_costs_its_busiest_pipe_when_interleaved():
    """A low-overhead loop of 2 loads and 2 multiply-accumulates: 4 beats on each pipe. Interleaved, they overlap
    (LE is free, and the next iteration's first load overlaps this one's last multiply): 4 cycles. Issue is in
    order, so the same four grouped by pipe cost 6."""
    load_a, load_b = ("vldrb.s8", "q0, [r0], #16"), ("vldrb.s8", "q1, [r1], #16")
    mac_a, mac_b = ("vmladava.s8", "r2, q0, q1"), ("vmladava.s8", "r4, q0, q0")
    loop_end = ("le", "lr, 0 <loop>")
    assert m55_cycles(load_a, mac_a, load_b, mac_b, loop_end) == 4
    assert m55_cycles(load_a, load_b, mac_a, mac_b, loop_end) == 6
    assert m55_cycles(("adds", "r0, #1"), ("vctp.8", "r3")) == 2

"""QEMU's block log read into a block profile (measure/qemu_blocks.py), on a log as QEMU 7.2 writes it."""

from tflm_mcubert.measure.qemu_blocks import TracedRun, block_profile, segment_profiles

LOG = """\
----------------
IN: Reset_Handler
0x000000b0:  4817       ldr      r0, [pc, #0x5c]
0x000000b2:  e92d 4ff0  push.w   {r4, r5, r6, r7, r8, sb, sl, fp, lr}
0x000000b6:  d207       bhs      #0xca

Trace 0: 0x7eff70000100 [0080044a/000000b0/00000150/ff000200] Reset_Handler
----------------
IN: loop
0x000000ca:  fc2d 0e01  vmladava.s8 r2, q0, q1
0x000000ce:  f01f c001  le       lr, #-8

Trace 0: 0x7eff70000400 [0080044a/000000ca/00000150/ff000200] loop
Trace 0: 0x7eff70000400 [0080044a/000000ca/00000150/ff000200] loop
Trace 0: 0x7eff70000400 [0080044a/000000ca/00000150/ff000200] loop
----------------
IN: loop
0x000000ca:  fc2d 0e01  vmladava.s8 r2, q0, q1

Trace 0: 0x7eff70000500 [0080044a/000000ca/00000150/ff000200] loop
Trace 0: 0x7eff70000600 [0080044a/000000d2/00000150/ff000200] never translated
"""


def test_every_execution_counts_under_its_current_translation():
    assert block_profile(LOG.splitlines(keepends=True)) == {(0xB0, 8): 1, (0xCA, 8): 3, (0xCA, 4): 1}


def test_a_mark_block_opens_a_segment():
    lines = LOG.splitlines(keepends=True)
    first, *loops = segment_profiles(lines, marks=frozenset({0xCA}))
    assert first == {(0xB0, 8): 1}
    assert loops == [{(0xCA, 8): 1}, {(0xCA, 8): 1}, {(0xCA, 8): 1}, {(0xCA, 4): 1}]
    assert TracedRun(0, "", [first, *loops]).blocks == block_profile(lines)

"""The reference ops run inside ONE planned arena: same bytes as separate arrays, no stray writes.

Every op gets numpy views at its planned offsets (hidden state, inputs, its scratch block). Before
each op the rest of the arena is filled with poison, and the op's scratch with random garbage (an op
that read scratch before writing it would then change its output); after each op every byte outside
the op's planned write set must be unchanged.
"""

import numpy as np
import pytest

from tflm_mcubert.ops import attention, embedding, mlp, testing
from tflm_mcubert.schedule import planner
from tflm_mcubert.schedule.planner import KIB

POISON = 0xA5


def views(arena, plan, name, dtype, shape):
    buf = plan.buffer(name)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    assert nbytes <= buf.nbytes
    return arena[buf.offset : buf.offset + nbytes].view(dtype).reshape(shape)


def scratch_view(arena, plan, op):
    buf = plan.buffer(op.scratch)
    return arena[buf.offset : buf.offset + op.scratch_bytes]


def run_in_arena(encoder, plan, ids, types, mask, rng):
    s, d = encoder.embedding.seq_len, encoder.embedding.hidden
    arena = np.full(plan.planned_bytes, POISON, np.uint8)
    views(arena, plan, "input_ids", np.int32, (s,))[:] = ids
    views(arena, plan, "token_type_ids", np.int32, (s,))[:] = types
    views(arena, plan, "attention_mask", np.int8, (s,))[:] = mask
    hidden = views(arena, plan, "hidden", np.int8, (s, d))

    def step(op, fn):
        allowed = np.zeros(arena.size, bool)
        hb = plan.buffer("hidden")
        allowed[hb.offset : hb.offset + hb.nbytes] = True
        sb = plan.buffer(op.scratch)
        allowed[sb.offset : sb.offset + sb.nbytes] = True
        scratch = scratch_view(arena, plan, op)
        scratch[:] = rng.integers(0, 256, scratch.size, dtype=np.uint8)  # garbage, not zeros
        before = arena.copy()
        fn(scratch)
        changed = np.flatnonzero(arena != before)
        assert np.all(allowed[changed]), f"{op.name} wrote outside its planned regions"

    by_step = {op.step: op for op in plan.ops}
    step(
        by_step[0],
        lambda sc: embedding.run(
            encoder.embedding,
            views(arena, plan, "input_ids", np.int32, (s,)),
            views(arena, plan, "token_type_ids", np.int32, (s,)),
            hidden,
            sc,
        ),
    )
    for layer, (ap, mp) in enumerate(encoder.layers):
        a_op, m_op = by_step[2 * layer + 1], by_step[2 * layer + 2]
        mask_view = views(arena, plan, "attention_mask", np.int8, (s,))
        step(a_op, lambda sc: attention.run(ap, hidden, mask_view, sc))
        step(m_op, lambda sc: mlp.run(mp, hidden, sc))
    return hidden.copy()


@pytest.mark.parametrize(
    "name,dims,s,budget",
    [
        ("bert-tiny@128", dict(hidden=128, heads=2, ffn=512, layers=2), 128, 44 * KIB),
        ("odd", dict(hidden=48, heads=3, ffn=96, layers=2), 77, 24 * KIB),
        ("mini@300", dict(hidden=256, heads=4, ffn=1024, layers=1), 300, 190 * KIB),
    ],
)
def test_reference_in_one_planned_arena(name, dims, s, budget):
    plan = planner.plan_model(planner.Dims(**dims), s, budget)
    rng = np.random.default_rng(len(name))
    valid = np.arange(s) < s - 9
    encoder, _, ids, types, _ = testing.quantized_encoder(rng, seq_len=s, tiles=plan.tiles, valid=valid, **dims)
    mask = valid.astype(np.int8)
    separate = encoder.run(ids, types, mask)
    in_arena = run_in_arena(encoder, plan, ids, types, mask, rng)
    assert np.array_equal(in_arena, separate)
    assert plan.planned_bytes <= budget

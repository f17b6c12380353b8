"""Arena offsets for the int8 decoder: one token per invoke, each layer's KV cache kept between invokes.

A decoder step runs DECODER_EMBEDDING, then per layer CAUSAL_ATTENTION and DECODER_MLP, then LM_HEAD (steps
0, 2l+1, 2l+2, 2L+1). Its arena holds

    cache<l>       int8[2, n, d] per layer: state, alive across every step and every invoke (a TFLM variable
                   tensor at an offline offset, zeroed by ResetVariableTensors)
    input_id, position  int32[1]: the graph inputs
    hidden         int8[d]: the residual stream, rewritten op after op in place
    top            int32[2, k]: the head's k best ids and scores
    <op>.scratch   each op's scratch, alive during its own step only (so they share one offset)

placed as the encoder's plan places its buffers (planner.assign_offsets: greedy by size, first fit among
buffers alive together), 16-byte aligned. The caches dominate: L * 2 * n * d bytes.
"""

from __future__ import annotations

from tflm_mcubert.ops.scratch import align_up
from tflm_mcubert.ops.topology import DECODER
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.schedule.planner import Buffer, BudgetExceededError, OpPlan, Plan, assign_offsets

INPUT_BYTES = 4  # int32[1]


def decoder_dims(decoder) -> Dims:
    """Dims of a QuantizedDecoder (hidden, heads, ffn, layers)."""
    attention, mlp = decoder.layers[0]
    return Dims(hidden=decoder.hidden, heads=attention.heads, ffn=mlp.ffn, layers=len(decoder.layers))


# One step of the plan: (node name, the values it reads, the value it writes, its scratch bytes).
Step = tuple[str, tuple[str, ...], str, int]


def _buffers(steps: list[Step], context: int, hidden: int, top_k: int) -> list[Buffer]:
    last = len(steps) - 1
    sizes = {"input_id": INPUT_BYTES, "position": INPUT_BYTES, "hidden": hidden, "top": 8 * top_k}
    life = {"input_id": [0, 0], "position": [0, 0]}
    for step, (_, inputs, output, _) in enumerate(steps):
        for value in inputs:
            life.setdefault(value, [step, step])[1] = step
        life.setdefault(output, [step, step])[1] = step
    life["top"][1] = last  # the model's output
    buffers = []
    for value, (first, end) in life.items():
        if value.startswith("cache"):  # state: alive at every step
            buffers.append(Buffer(value, align_up(2 * context * hidden), 0, last))
        else:
            buffers.append(Buffer(value, align_up(sizes[value]), first, end))
    for step, (name, _, _, scratch) in enumerate(steps):
        buffers.append(Buffer(f"{name}.scratch", align_up(scratch), step, step))
    return assign_offsets(buffers)


def plan_decoder(decoder, sram_budget: int) -> Plan:
    """The arena of a QuantizedDecoder within `sram_budget` bytes (BudgetExceededError if it needs more,
    with the bytes it needs)."""
    nodes = decoder.nodes()
    steps = [(n.name, n.inputs, n.op.output, n.op.scratch_bytes(n.params)) for n in nodes]
    buffers = _buffers(steps, decoder.context, decoder.hidden, decoder.head.top_k)
    planned = max(b.offset + b.nbytes for b in buffers)
    if planned > sram_budget:
        raise BudgetExceededError(
            f"the decoder's arena needs {planned} bytes at a {decoder.context}-token context (budget "
            f"{sram_budget}): shorten the context or choose a larger board",
            planned,
        )
    ops = tuple(
        OpPlan(
            node.name,
            node.op.kind,
            step,
            None,
            f"{node.name}.scratch",
            node.op.scratch_bytes(node.params),
            sum(b.nbytes for b in buffers if b.first_step <= step <= b.last_step),
            0.0,
        )
        for step, node in enumerate(nodes)
    )
    return Plan(decoder.context, decoder_dims(decoder), sram_budget, planned, ops, tuple(buffers))


def decoder_arena_bytes(dims: Dims, context: int, top_k: int = 1) -> int:
    """The planned arena of a decoder of these dimensions at `context` positions, from the op definitions'
    planning sizes alone (no parameters): what `boards` uses to find each board's longest context
    (export/decoder_export.longest_context_on)."""

    steps = [
        (name, inputs, op.output, op.plan_scratch(context, dims, None))
        for op, name, inputs in DECODER.steps(dims.layers)
    ]
    return max(b.offset + b.nbytes for b in _buffers(steps, context, dims.hidden, top_k))

"""Tile choice and arena offsets for a whole model of any topology (ops/topology.py).

plan_model(config, seq_len, sram_budget, topology=...) picks, per tiled op kind, the cheapest tile whose
step fits the budget (cost from a pluggable CostModel; by default the kernels' fitted instruction counts,
schedule/kernel_cost.py), then places every arena buffer — the graph inputs, the hidden state, the state
kept between invokes, one scratch block per op, the output — at an offset, TFLM-style (greedy by size,
first fit among buffers whose lifetimes overlap). Buffers are 16-byte aligned; `planned_bytes` is the
exact arena size those offsets need. Steps follow the topology's op order (encoder: 0 = embedding,
2l+1 = attention of layer l, 2l+2 = its MLP, then the optional head).

A decoder's plan is one token's step: its values hold one position, and each layer's KV cache int8[2, n, d]
is state (a TFLM variable tensor at an offline offset, zeroed by ResetVariableTensors) alive at every step;
the caches dominate its arena, L * 2 * n * d bytes. Its ops have no tile, so it needs no budget to plan.

The budget for a board (tflm_mcubert.boards) is its largest contiguous SRAM region minus a reserve
for everything that is not the tensor arena (boards.DEFAULT_SRAM_RESERVE, 16 KiB by default)."""

from __future__ import annotations

import dataclasses
import math

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops import contract
from tflm_mcubert.ops.registry import op as op_of, TILED_KINDS
from tflm_mcubert.ops.topology import ENCODER, Topology
from tflm_mcubert.ops.scratch import align_up
from tflm_mcubert.schedule.cost import CostModel, OpShape
from tflm_mcubert.schedule.kernel_cost import KernelCostModel
from tflm_mcubert.schedule.memory import Dims, mask_bytes

KIB = 1024
SMALLEST_TILES = {kind: 1 for kind in TILED_KINDS}  # the smallest arena


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Buffer:
    name: str
    nbytes: int  # aligned size
    first_step: int
    last_step: int
    offset: int = -1

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.first_step <= other.last_step and other.first_step <= self.last_step

    def overlaps_in_space(self, other: "Buffer") -> bool:
        return self.offset < other.offset + other.nbytes and other.offset < self.offset + self.nbytes


@dataclasses.dataclass(frozen=True)
class OpPlan:
    name: str  # "embedding", "layer0.attention", ...
    kind: str  # contract.KINDS: "embedding" | "attention" | "mlp" | "head"
    step: int
    tile: int | None
    scratch: str  # name of its scratch buffer
    scratch_bytes: int  # exact bytes the op asks for (unaligned)
    live_bytes: int  # arena bytes live during this op (aligned buffers)
    cost: float


@dataclasses.dataclass(frozen=True)
class Plan:
    seq_len: int
    dims: Dims
    budget: int
    planned_bytes: int
    ops: tuple[OpPlan, ...]
    buffers: tuple[Buffer, ...]

    @property
    def tiles(self) -> dict[str, int]:
        return {op.kind: op.tile for op in self.ops if op.tile is not None}

    @property
    def offsets(self) -> dict[str, int]:
        return {b.name: b.offset for b in self.buffers}

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def op(self, name: str) -> OpPlan:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    def summary(self) -> str:
        lines = [
            f"s={self.seq_len} d={self.dims.hidden} h={self.dims.heads} ffn={self.dims.ffn} "
            f"layers={self.dims.layers}: {self.planned_bytes} bytes "
            f"({self.planned_bytes / KIB:.1f} KiB) of budget {self.budget / KIB:.1f} KiB, "
            f"tiles {self.tiles}"
        ]
        lines += [
            f"  {b.name:<28} @{b.offset:>8}  {b.nbytes:>8} B  steps {b.first_step}..{b.last_step}"
            for b in sorted(self.buffers, key=lambda b: (b.first_step, b.offset))
        ]
        return "\n".join(lines)


class BudgetExceededError(UserError):
    """No tile makes an op fit the SRAM budget."""

    def __init__(self, message: str, minimum_bytes: int):
        super().__init__(message)
        self.minimum_bytes = minimum_bytes


def _resident(s: int, d: int) -> list[tuple[str, int]]:
    return [("hidden", align_up(s * d)), ("attention_mask", align_up(mask_bytes(s)))]


def _scratch_bytes(kind: str, s: int, dims: Dims, tile: int) -> int:
    return op_of(kind).plan_scratch(s, dims, tile)


def choose_tile(kind: str, s: int, dims: Dims, budget: int, cost_model: CostModel) -> tuple[int, float]:
    """The tile t in [1, s] whose step fits `budget` with the smallest footprint among those within
    the cost model's `resolution` (relative; 0 when it has none) of the cheapest that fits."""
    resident = sum(n for _, n in _resident(s, dims.hidden))
    tolerance = getattr(cost_model, "resolution", 0.0)
    fits = []
    for t in range(1, s + 1):
        live = resident + align_up(_scratch_bytes(kind, s, dims, t))
        if live <= budget:
            fits.append((cost_model.cost(OpShape(kind, s, dims, t)), live, t))
    best = None
    if fits:
        cheapest = min(cost for cost, _, _ in fits)
        near = [f for f in fits if f[0] <= cheapest * (1 + tolerance)]
        cost, _, t = min(near, key=lambda f: (f[1], f[0], f[2]))
        best = ((cost, 0), t)
    if best is None:
        minimum = resident + align_up(_scratch_bytes(kind, s, dims, 1))
        raise BudgetExceededError(
            f"{kind} at seq_len {s} needs {minimum} bytes even with tile 1 "
            f"(budget {budget}); shorten the sequence or choose a larger board",
            minimum,
        )
    return best[1], best[0][0]


def assign_offsets(buffers: list[Buffer]) -> list[Buffer]:
    """Greedy by size (then by first step), lowest offset that clears every time-overlapping buffer."""
    placed: list[Buffer] = []
    for buf in sorted(buffers, key=lambda b: (-b.nbytes, b.first_step, b.name)):
        conflicts = sorted((p for p in placed if p.overlaps_in_time(buf)), key=lambda p: p.offset)
        offset = 0
        for p in conflicts:
            if offset + buf.nbytes <= p.offset:
                break
            offset = max(offset, p.offset + p.nbytes)
        placed.append(dataclasses.replace(buf, offset=offset))
    order = {b.name: i for i, b in enumerate(buffers)}
    return sorted(placed, key=lambda b: order[b.name])


def plan_model(
    config,
    seq_len: int,
    sram_budget: int,
    *,
    topology: Topology = ENCODER,
    cost_model: CostModel | None = None,
    tiles: dict[str, int] | None = None,
    output_bytes: int = 0,
) -> Plan:
    """Plan the arena of a whole model of `topology` (ops/topology.py). `tiles` forces a tile per tiled kind.

    `output_bytes`: of the last op's output (the encoder's int8 logits: its labels; the decoder's top-k: 8k).
    An encoder with 0 has no MCUBERT_CLASSIFIER_HEAD; otherwise the hidden state lives until the last op.
    The plan may need more than `sram_budget` where no tile choice is left to shrink it: the caller compares
    `planned_bytes` with its budget."""
    dims = Dims.of(config)
    s, d = seq_len, dims.hidden
    if not 1 <= s <= contract.MAX_SEQ_LEN:
        raise UserError(f"seq_len {s} is outside [1, {contract.MAX_SEQ_LEN}]")
    if d % dims.heads:
        raise UserError(f"hidden {d} is not a multiple of heads {dims.heads}")
    steps = topology.steps(dims.layers, bool(output_bytes))
    return _plan(topology, steps, s, dims, sram_budget, cost_model or KernelCostModel(), tiles or {}, output_bytes)


def _plan(topology, steps, s, dims, sram_budget, cost_model, tiles, output_bytes, scratch=None) -> Plan:
    """plan_model's work on the (op, node name, values read) of each step; `scratch`: a node's scratch bytes
    where its parameters are known (else the op's formula of the shape)."""
    d = dims.hidden
    chosen = _tiles(steps, s, dims, sram_budget, cost_model, tiles)
    buffers = _value_buffers(topology, steps, s, d, output_bytes)
    op_specs = []  # (name, kind, step, tile, scratch bytes, cost); step = position in the node list
    for step, (op, name, _) in enumerate(steps):
        t, cost = chosen.get(op.kind, (None, 0.0))
        nbytes = (scratch or {}).get(name, op.plan_scratch(s, dims, t))
        buffers.append(Buffer(f"{name}.scratch", align_up(nbytes), step, step))
        op_specs.append((name, op.kind, step, t, nbytes, cost))
    placed = assign_offsets(_in_plan_order(topology, buffers))
    planned = max(b.offset + b.nbytes for b in placed)
    ops = tuple(
        OpPlan(
            name,
            kind,
            step,
            t,
            f"{name}.scratch",
            nbytes,
            sum(b.nbytes for b in placed if b.first_step <= step <= b.last_step),
            cost,
        )
        for name, kind, step, t, nbytes, cost in op_specs
    )
    return Plan(s, dims, sram_budget, planned, ops, tuple(placed))


def plan_of(model, sram_budget: int) -> Plan:
    """The plan of a quantized model of any topology at its own shape and tiles (its nodes give both)."""
    nodes = model.nodes()
    per_layer = [n for n in nodes if n.op.per_layer]
    of_params = lambda field: next(getattr(n.params, field) for n in per_layer if hasattr(n.params, field))  # noqa: E731
    dims = Dims(
        hidden=model.hidden,
        heads=of_params("heads"),
        ffn=of_params("ffn"),
        layers=len(per_layer) // len(model.topology.layer),
    )
    last = nodes[-1]
    output_bytes = (
        last.op.output_elements(last.params) * last.op.output_dtype.itemsize if last.op in model.topology.ending else 0
    )
    tiles = {n.op.kind: n.params.tile for n in nodes if n.op.tiled}
    steps = [(n.op, n.name, n.inputs) for n in nodes]
    scratch = {n.name: n.op.scratch_bytes(n.params) for n in nodes}
    return _plan(
        model.topology, steps, model.seq_len, dims, sram_budget, KernelCostModel(), tiles, output_bytes, scratch
    )


def _tiles(steps, s: int, dims: Dims, budget: int, cost_model: CostModel, tiles: dict[str, int]) -> dict:
    """(tile, cost) per tiled kind of the model: forced by `tiles`, else chosen (choose_tile)."""
    kinds = [kind for kind in TILED_KINDS if any(op.kind == kind for op, _, _ in steps)]
    unknown = sorted(set(tiles) - set(kinds))
    if unknown:
        raise UserError(f"no tile for op kind(s) {unknown}: tiled kinds are {kinds}")
    chosen: dict[str, tuple[int, float]] = {}
    for kind in kinds:
        if kind in tiles:
            t = tiles[kind]
            if not 1 <= t <= s:
                raise UserError(f"{kind} tile {t} is outside [1, {s}]")
            chosen[kind] = (t, cost_model.cost(OpShape(kind, s, dims, t)))
        else:
            chosen[kind] = choose_tile(kind, s, dims, budget, cost_model)
    return chosen


def _value_bytes(topology: Topology, value: str, s: int, d: int, output_bytes: int) -> int:
    """Arena bytes of a graph value: a graph input, the state of one layer, the hidden state or the output."""
    inputs = {i.name: i for i in topology.inputs}
    if value in inputs:
        return inputs[value].dtype.itemsize * math.prod(inputs[value].shape(s))
    state = topology.state_of(value)
    if state is not None:
        return state.plan_bytes(s, d)
    if value == "hidden":
        return d if topology.one_position_per_invoke else s * d
    return output_bytes


def _value_buffers(topology: Topology, steps, s: int, d: int, output_bytes: int) -> list[Buffer]:
    """One buffer per graph value, alive from the step that writes it (graph inputs: 0) to the last step
    that reads it (the model's output: the last step); state lives across every step."""
    last = len(steps) - 1
    life: dict[str, list[int]] = {i.name: [0, 0] for i in topology.inputs}
    for step, (op, _, values) in enumerate(steps):
        for value in values:
            life.setdefault(value, [step, step])[1] = step
        life.setdefault(op.output, [step, step])[1] = step
    for value in life:
        if topology.is_state(value):
            life[value] = [0, last]
    return [
        Buffer(v, align_up(_value_bytes(topology, v, s, d, output_bytes)), first, end)
        for v, (first, end) in life.items()
    ]


def _in_plan_order(topology: Topology, buffers: list[Buffer]) -> list[Buffer]:
    """The plan's listing order: by first step; within a step the graph inputs and the hidden state, then
    the op's scratch, then the values it writes."""
    order = {name: i for i, name in enumerate([*(i.name for i in topology.inputs), "hidden"])}

    def key(b: Buffer):
        group = 0 if b.name in order else 1 if b.name.endswith(".scratch") else 2
        return (b.first_step, group, order.get(b.name, 0))

    return sorted(buffers, key=key)


def live_peak(buffers) -> int:
    """Brute force: the largest sum of sizes of buffers live at one step."""
    steps = range(min(b.first_step for b in buffers), max(b.last_step for b in buffers) + 1)
    return max(sum(b.nbytes for b in buffers if b.first_step <= st <= b.last_step) for st in steps)

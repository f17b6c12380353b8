"""What TFLM itself keeps in the tensor arena, on top of the planned tensors and scratch.

The arena a firmware must declare is `head + tail`:

  head  the non-persistent section: during AllocateTensors it holds the planner's temporary
        bookkeeping, afterwards the memory plan (every tensor and scratch at its offset). Its size is
        max(planned bytes, planning scratch); for every MCUBERT model the plan is far larger.
  tail  the persistent section, allocated downwards from the end and never freed. For one model
        with one subgraph (micro_allocator.cc, micro_interpreter.cc, single_arena_buffer_allocator.cc):

          SingleArenaBufferAllocator, GreedyMemoryPlanner, MicroAllocator objects   (MicroAllocator::Create)
          MicroBuiltinDataAllocator object, SubgraphAllocations[1]                  (StartModelAllocation)
          TfLiteEvalTensor[tensors]          every tensor, constants included
          NodeAndRegistration[ops]
          TfLiteTensor* [inputs], [outputs]  + one persistent TfLiteTensor per graph input/output,
                                             with TfLiteAffineQuantization and a copied zero-point
                                             array (TfLiteIntArray) when the tensor is quantized
          each custom kernel's OpData        (AllocatePersistentBuffer in Init; 16-byte aligned)
          no ScratchBufferHandles            (MCUBERT kernels request no arena scratch: theirs is planned)

Sizes are those of TFLM's TF_LITE_STATIC_MEMORY structs for a given pointer size (4 on Cortex-M,
8 on the 64-bit host build in the tflite-micro wheel, which tests/export uses to check this model on
builtin graphs). Every persistent allocation is rounded up to its alignment (4 or 8; kernel buffers
16), and 16 bytes cover the arena start's alignment. The kernels' OpData is the binding's own
(`kernel_op_data_bytes`: decoded params, scratch location, a flag).

Checked against the wheel (tests/export/test_tflm_arena_model.py: chains of RESHAPE with an offline
plan, whose only kernel memory is TFLM's parsed builtin options): the itemised model falls short of
the measured minimum by 68-232 bytes whatever the graph size (allocator bookkeeping not itemised
here, and the wheel's recording allocator), so UNITEMISED_BYTES is added to every estimate.
"""

from __future__ import annotations

import dataclasses

from tflm_mcubert.ops.scratch import align_up

ARENA_ALIGNMENT = 16  # MicroArenaBufferAlignment()
UNITEMISED_BYTES = 256  # measured residual of the itemised model, rounded up (see the module docstring)


@dataclasses.dataclass(frozen=True)
class StructSizes:
    """sizeof() of the TFLM structs in the arena, for one pointer size."""

    pointer: int

    def _align(self, n: int) -> int:
        return -(-n // self.pointer) * self.pointer

    @property
    def eval_tensor(self) -> int:  # {TfLitePtrUnion data; TfLiteIntArray* dims; TfLiteType type}
        return self._align(2 * self.pointer + 4)

    @property
    def node_and_registration(self) -> int:  # TfLiteNode {6 pointers, int} + registration pointer
        return self._align(6 * self.pointer + 4) + self.pointer

    @property
    def tflite_tensor(self) -> int:  # quantization {type, void*}, params {float, int32}, data,
        p = self.pointer  # dims, size_t bytes, type, allocation_type, bool
        return self._align(self._align(4) + p + 8 + p + p + p + 4 + 4 + 1)

    @property
    def affine_quantization(self) -> int:  # {TfLiteFloatArray* scale; TfLiteIntArray* zero_point; int32}
        return self._align(2 * self.pointer + 4)

    @property
    def arena_allocator(self) -> int:  # 2 vptrs, 5 uint8_t*, intptr_t, int
        return self._align(8 * self.pointer + 4)

    @property
    def greedy_planner(self) -> int:  # vptr, 2 ints, 4 pointers, 2 ints, pointer, bool
        return self._align(6 * self.pointer + 4 * 4 + 1)

    @property
    def micro_allocator(self) -> int:  # vptr, 4 pointers, bool, 2 size_t, pointer
        return self._align(6 * self.pointer + 1) + 2 * self.pointer

    @property
    def builtin_data_allocator(self) -> int:  # vptr, IPersistentBufferAllocator*
        return 2 * self.pointer

    @property
    def subgraph_allocations(self) -> int:  # {TfLiteEvalTensor*; NodeAndRegistration*}
        return 2 * self.pointer

    # Planning-time (temporary, head) structures
    @property
    def allocation_info(self) -> int:  # {size_t; void**; int; int; int32; bool}
        return self._align(2 * self.pointer + 3 * 4 + 1)

    planner_per_buffer: int = 40  # BufferRequirements 16 + 2 ints + ListEntry 12 + int
    scratch_request: int = 12  # {size_t bytes; int node_idx; int subgraph_idx} (32-bit)
    max_scratch_requests_per_op: int = 12  # kMaxScratchBuffersPerOp


CORTEX_M = StructSizes(pointer=4)
HOST_64 = StructSizes(pointer=8)


@dataclasses.dataclass(frozen=True)
class IoTensor:
    quantized: bool
    channels: int = 1  # entries of its scale / zero-point arrays


@dataclasses.dataclass(frozen=True)
class GraphShape:
    """What the overhead depends on: counts, not sizes of tensors."""

    tensors: int  # all tensors of the subgraph, constants included
    ops: int
    inputs: tuple[IoTensor, ...]
    outputs: tuple[IoTensor, ...]
    planned_buffers: int  # tensors the planner places (non-constant)
    kernel_data: tuple[int, ...] = ()  # persistent bytes each kernel allocates in Init/Prepare
    builtin_data: tuple[int, ...] = ()  # parsed builtin options (TfLite*Params) per builtin op


def kernel_op_data_bytes(params_bytes: int, params_alignment: int) -> int:
    """OpData of an MCUBERT kernel in custom_ops/tflm (`OpData<Params>`, allocated in Init): the decoded
    params struct, where its scratch is (two int32) and an options-ok flag, rounded to the params'
    alignment. It holds no pointers (Eval looks tensors up), so it is the same on 32- and 64-bit."""
    return align_up(params_bytes + 2 * 4 + 1, params_alignment)


@dataclasses.dataclass(frozen=True)
class ArenaEstimate:
    planned_bytes: int
    planning_bytes: int
    tail: dict[str, int]

    @property
    def tail_bytes(self) -> int:
        return sum(self.tail.values())

    @property
    def head_bytes(self) -> int:
        return max(self.planned_bytes, self.planning_bytes)

    @property
    def overhead_bytes(self) -> int:
        return self.arena_bytes - self.planned_bytes

    @property
    def arena_bytes(self) -> int:
        return self.head_bytes + self.tail_bytes + ARENA_ALIGNMENT

    def to_json(self) -> dict:
        return {
            "arena_bytes": self.arena_bytes,
            "planned_bytes": self.planned_bytes,
            "overhead_bytes": self.overhead_bytes,
            "head_bytes": self.head_bytes,
            "planning_scratch_bytes": self.planning_bytes,
            "tail_bytes": self.tail_bytes,
            "tail": dict(self.tail),
            "start_alignment_bytes": ARENA_ALIGNMENT,
        }


def estimate_arena(graph: GraphShape, planned_bytes: int, sizes: StructSizes = CORTEX_M) -> ArenaEstimate:
    """TFLM's arena for `graph` whose memory plan needs `planned_bytes` (see the module docstring)."""

    def persistent(n: int, alignment: int = None) -> int:
        return align_up(n, alignment or sizes.pointer)

    def io_bytes(tensors: tuple[IoTensor, ...]) -> int:
        total = persistent(sizes.pointer * len(tensors))
        for t in tensors:
            total += persistent(sizes.tflite_tensor)
            if t.quantized:
                total += persistent(sizes.affine_quantization) + persistent(4 + 4 * t.channels, 4)
        return total

    tail = {
        "allocator_objects": (
            persistent(sizes.arena_allocator)
            + persistent(sizes.greedy_planner)
            + persistent(sizes.micro_allocator)
            + persistent(sizes.builtin_data_allocator)
            + persistent(sizes.subgraph_allocations)
        ),
        "eval_tensors": persistent(sizes.eval_tensor * graph.tensors),
        "nodes_and_registrations": persistent(sizes.node_and_registration * graph.ops),
        "input_tensors": io_bytes(graph.inputs),
        "output_tensors": io_bytes(graph.outputs),
        "kernel_op_data": sum(align_up(n, ARENA_ALIGNMENT) for n in graph.kernel_data),
        "builtin_op_data": sum(persistent(n, 4) for n in graph.builtin_data),
        "unitemised": UNITEMISED_BYTES,
    }
    planning = (
        align_up(sizes.scratch_request * sizes.max_scratch_requests_per_op)
        + align_up(sizes.allocation_info * graph.tensors)
        + align_up(sizes.pointer)
        + sizes.planner_per_buffer * graph.planned_buffers
    )
    return ArenaEstimate(planned_bytes, planning, tail)

"""Run a parsed MCUBERT .tflite through the numpy reference inside ONE arena buffer.

Every tensor the model plans — inputs, the hidden state, each op's scratch, the logits — is a view
into a single uint8 arena at its offline offset, exactly as TFLM lays them out, so a run proves the
plan: nothing outside `planned_bytes` is touched (`ReferenceRun.touched_bytes`), and an op that
wrote into another live buffer would change the result (the tests poison the rest of the arena).
Run-time input checks are the kernels' (ids in range, types in range) plus the interpreter's: the
arena must hold the plan, and inputs must fit the model's sequence length.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tflite.mcubert_reader import McubertModel
from tflm_mcubert.tflite.mcubert_writer import INPUT_NAMES
from tflm_mcubert.ops.scratch import align_up

Trace = Callable[[str, np.ndarray], None]


class ReferenceInputError(UserError):
    """An input the model cannot take (wrong length, type or values), or an arena too small."""


@dataclasses.dataclass(frozen=True)
class ReferenceRun:
    outputs: dict[str, np.ndarray]  # int8, copied out of the arena
    touched_bytes: int  # end of the furthest arena region any op or input used


def _sequence(name: str, value, s: int, lo: int, hi: int) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "iub":
        raise ReferenceInputError(f"{name}: expected integers, got {array.dtype}")
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise ReferenceInputError(f"{name}: expected shape (1, {s}) or ({s},), got {np.shape(value)}")
    if array.size != s:
        relation = "longer" if array.size > s else "shorter"
        raise ReferenceInputError(
            f"{name}: {array.size} positions is {relation} than the model's "
            f"seq_len {s} (pad or truncate to exactly {s})"
        )
    if array.size and (int(array.min()) < lo or int(array.max()) > hi):
        raise ReferenceInputError(f"{name}: values must lie in [{lo}, {hi}]")
    return array


def run_reference(
    model: McubertModel,
    inputs: Mapping[str, np.ndarray],
    *,
    arena: np.ndarray | None = None,
    trace: Trace | None = None,
) -> ReferenceRun:
    """Run the model on one sequence. `inputs`: input_ids, and optionally attention_mask (default:
    all ones) and token_type_ids (default zeros), each [1, s] or [s]. `arena`: a uint8 buffer of at
    least planned_bytes (default: a fresh zeroed one); its contents outside the plan are left alone.
    """
    q = model.quantized
    s = q.seq_len
    unknown = set(inputs) - set(INPUT_NAMES)
    if unknown or "input_ids" not in inputs:
        raise ReferenceInputError(
            f"inputs must be input_ids and optionally attention_mask, token_type_ids; got {sorted(inputs)}"
        )
    int32 = np.iinfo(np.int32)
    ids = _sequence("input_ids", inputs["input_ids"], s, int32.min, int32.max)
    mask = _sequence("attention_mask", inputs.get("attention_mask", np.ones(s, np.int8)), s, 0, 1)
    types = _sequence("token_type_ids", inputs.get("token_type_ids", np.zeros(s, np.int32)), s, int32.min, int32.max)
    if arena is None:
        arena = np.zeros(model.planned_bytes, np.uint8)
    if not isinstance(arena, np.ndarray) or arena.dtype != np.uint8 or arena.ndim != 1:
        raise ReferenceInputError("arena: expected a 1-D uint8 numpy buffer")
    if arena.size < model.planned_bytes:
        raise ReferenceInputError(
            f"arena of {arena.size:,} bytes is smaller than the model's plan ({model.planned_bytes:,} bytes)"
        )
    touched = 0

    def view(index: int, raw: bool = False) -> np.ndarray:
        nonlocal touched
        t = model.tensor(index)
        touched = max(touched, t.offset + align_up(t.nbytes))
        region = arena[t.offset : t.offset + t.nbytes]
        return region if raw else region.view(t.dtype)

    view(model.inputs["input_ids"])[:] = ids
    view(model.inputs["attention_mask"])[:] = mask
    view(model.inputs["token_type_ids"])[:] = types
    for node in model.nodes:
        scratch = view(node.scratch, raw=True)  # the ops carve their scratch from bytes
        runtime = [view(index) for index in node.runtime_inputs]
        out = node.definition.reference(node.node.params, runtime, view(node.outputs[0]), scratch)
        if trace:
            trace(node.name, out.copy())
    outputs = {name: view(index).reshape(model.tensor(index).shape).copy() for name, index in model.outputs.items()}
    return ReferenceRun(outputs, touched)

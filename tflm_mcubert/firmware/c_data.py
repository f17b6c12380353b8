"""C source for the bare-metal checks (examples/baremetal): kernel calls as initialized C data.

One `KernelCall` (ops/kernel_abi.py) becomes its params struct, its weights struct with the constant
tensors it points to, and the tensor views mcubert_<op>_validate takes — the same options and constant
tensors the TFLM binding hands the kernels. The layer check (layer_check.py) and the bare-metal apps'
whole-model data (app_data.py) write their data with these helpers, so they cannot disagree about
field or tensor order.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.ops import kernel_abi
from tflm_mcubert.ops.registry import op as op_of

C_TYPES = {
    np.dtype(np.int8): "int8_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
}
DTYPE_ENUMS = {
    np.dtype(np.int8): "MCUBERT_DTYPE_INT8",
    np.dtype(np.int16): "MCUBERT_DTYPE_INT16",
    np.dtype(np.int32): "MCUBERT_DTYPE_INT32",
}


def values(array: np.ndarray) -> str:
    """The elements as the body of a C initializer, 24 a line."""
    items = [str(v) for v in array.reshape(-1).tolist()] or ["0"]
    return "    " + ",\n    ".join(", ".join(items[i : i + 24]) for i in range(0, len(items), 24))


def array(name: str, data: np.ndarray, attributes: str = "") -> str:
    """`const T name[n] = {...};` (n at least 1: C has no empty arrays)."""
    return f"const {C_TYPES[data.dtype]} {name}[{max(data.size, 1)}]{attributes} = {{\n{values(data)}\n}};\n"


def struct_name(op: str) -> str:
    """The C name of an op in mcubert_ops.h: mcubert_<this>_params, MCUBERT_<THIS>_NUM_TENSORS."""
    return op_of(op).c_name


def params(name: str, call) -> str:
    fields = []
    for field, ctype in call.params._fields_:
        value = getattr(call.params, field)
        if ctype is kernel_abi.ctypes.c_int64:
            literal = f"{value}LL"
        elif field == "spec_hash":
            literal = f"0x{value:08x}u"
        else:
            literal = str(value)
        fields.append(f"    .{field} = {literal},")
    return f"const mcubert_{struct_name(call.op)}_params {name} = {{\n" + "\n".join(fields) + "\n};\n"


def op_data(call, prefix: str, shared: dict | None = None, *, weights: bool = True) -> list[str]:
    """C definitions of `call`: the weights' arrays (static), then `<prefix>_params`, `<prefix>_weights`
    (unless not `weights`: a node table's call builds it) and `<prefix>_tensors` (validate's views;
    activations by dtype and size only). `shared` (content ->
    array name, filled as arrays are written): an array equal to one written before is not written again
    (a decoder's LM head reads the embedding's tables)."""
    short = struct_name(call.op)
    runtime = op_of(call.op).runtime_inputs
    fields = op_of(call.op).weight_fields
    names, out = {}, []
    for name in fields:
        data = call.tensors[name]
        key = (data.dtype.str, data.shape, data.tobytes()) if shared is not None and data.size else None
        if key is not None and key in shared:
            names[name] = shared[key]
            continue
        names[name] = f"{prefix}_{name}"
        if key is not None:
            shared[key] = names[name]
        out.append("static " + array(names[name], data))
    out.append(params(f"{prefix}_params", call))
    if weights:
        members = ",\n".join(f"    {names[name]}" for name in fields)
        out.append(f"const mcubert_{short}_weights {prefix}_weights = {{\n{members}\n}};\n")
    views = []
    for name, data in call.tensor_list:
        if name == "output":
            dtype = DTYPE_ENUMS[op_of(call.op).output_dtype]
            views.append(f"    {{NULL, {dtype}, {kernel_abi.output_elements(call)}}},  /* output */")
        elif name in runtime:
            views.append(f"    {{NULL, {DTYPE_ENUMS[data.dtype]}, {data.size}}},  /* {name} */")
        else:
            views.append(f"    {{{names[name]}, {DTYPE_ENUMS[data.dtype]}, {data.size}}},")
    count = f"MCUBERT_{short.upper()}_NUM_TENSORS"  # lets the compiler check the count against the API
    out.append(f"const mcubert_tensor_view {prefix}_tensors[{count}] = {{\n" + "\n".join(views) + "\n};\n")
    return out


@dataclasses.dataclass(frozen=True)
class AppNode:
    """One node of a whole model as a bare-metal app runs it: its name, its kernel call, and per tensor (the
    call's contract order) the graph value it reads or writes, None for a constant."""

    name: str  # "embedding", "layer0.attention", ...
    call: kernel_abi.KernelCall
    values: tuple[str | None, ...]


def app_nodes(topology, calls: list) -> list[AppNode]:
    """The nodes of `calls` (a model of `topology`, in run order): each tensor's graph value from the
    topology's steps (a run-time input's value, the op's output value), so no app names an op or a value."""
    steps = topology.steps(*topology.shape_of([op_of(call.op) for call in calls]))
    nodes = []
    for call, (op, name, inputs) in zip(calls, steps, strict=True):
        by_input = dict(zip(op.runtime_inputs, inputs))
        values = tuple(op.output if t == "output" else by_input.get(t) for t, _ in call.tensor_list)
        nodes.append(AppNode(name, call, values))
    return nodes


def value_names(nodes: list[AppNode]) -> list[str]:
    """The graph values the nodes read and write, in order of first use, those of one state (cache0,
    cache1, ...) kept together so an app binds them as VALUE_CACHE0 + layer."""
    seen = list(dict.fromkeys(v for node in nodes for v in node.values if v is not None))
    base = {v: v.rstrip("0123456789") for v in seen}
    first = {b: i for i, b in reversed(list(enumerate(base[v] for v in seen)))}
    return sorted(seen, key=lambda v: (first[base[v]], seen.index(v)))


def value_enum(prefix: str, nodes: list[AppNode]) -> str:
    """`enum { PREFIX_VALUE_<NAME>, ..., PREFIX_VALUES };`: the app's buffer of each graph value."""
    items = [f"{prefix.upper()}_VALUE_{name.upper()}" for name in value_names(nodes)]
    return "enum {\n    " + ",\n    ".join([*items, f"{prefix.upper()}_VALUES"]) + "\n};"


def model_data(generator: str, header: str, prefix: str, nodes: list[AppNode], vocab: bytes, *, shared=None) -> str:
    """A whole model's C data: each node's arrays, params and views (`<prefix>_<node name>_...`, op_data
    without the weights struct), the node table `<prefix>_nodes` that mcubert_app_run walks, and the
    tokenizer blob `<prefix>_vocab` (when there is one). `generator` and `header` name the script and the
    header it goes with."""
    parts = [
        f"/* Generated by tflm_mcubert/firmware/{generator}; see {header}. Do not edit. */\n"
        f'#include <stddef.h>\n\n#include "{header}"\n'
    ]
    index = {name: i for i, name in enumerate(value_names(nodes))}
    rows = []
    for node in nodes:
        name = f"{prefix}_{node.name.replace('.', '_')}"
        parts += op_data(node.call, name, shared, weights=False)
        slots = ", ".join(str(index[v]) if v is not None else "-1" for v in node.values)
        parts.append(f"static const int8_t {name}_values[{len(node.values)}] = {{{slots}}};\n")
        dims = ", ".join(str(int(d)) for d in node.call.dims())
        op = f"MCUBERT_APP_OP_{struct_name(node.call.op).upper()}"
        rows.append(f'    {{{op}, "{node.name}", &{name}_params, {name}_tensors, {name}_values, {{{dims}}}}},')
    count = f"{prefix.upper()}_NODES"
    parts.append(f"const mcubert_app_node {prefix}_nodes[{count}] = {{\n" + "\n".join(rows) + "\n};\n")
    if vocab:
        parts.append(blob(f"{prefix}_vocab", vocab))
    return "\n".join(parts)


def blob(name: str, data: bytes) -> str:
    """A byte blob read in place as u16/u32 fields (a tokenizer's): aligned as the export's model_vocab.cc."""
    return array(name, np.frombuffer(data, np.uint8), " __attribute__((aligned(16)))")


def report_written(write: Callable[[], tuple[Path, Path]]) -> int:
    """The end of a data command: the header and source `write()` wrote, named; or its UserError in one
    line (exit status 2)."""
    try:
        header, source = write()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {source} and {header}")
    return 0


def write_sources(out_dir, files: dict[str, str]) -> tuple[Path, ...]:
    """Write each name -> text of `files` into `out_dir` (created if needed); their paths, in order."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (out_dir / name).write_text(text)
    return tuple(out_dir / name for name in files)

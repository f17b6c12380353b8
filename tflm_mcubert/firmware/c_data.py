"""C source for the bare-metal checks (examples/baremetal): kernel calls as initialized C data.

One `KernelCall` (ops/kernel_abi.py) becomes its params struct, its weights struct with the constant
tensors it points to, and the tensor views mcubert_<op>_validate takes — the same options and constant
tensors the TFLM binding hands the kernels. The layer check (layer_check.py) and the bare-metal apps'
whole-model data (app_data.py) write their data with these helpers, so they cannot disagree about
field or tensor order.
"""

from __future__ import annotations

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


def op_data(call, prefix: str, shared: dict | None = None) -> list[str]:
    """C definitions of `call`: the weights' arrays (static), then `<prefix>_params`, `<prefix>_weights`
    and `<prefix>_tensors` (validate's views; activations by dtype and size only). `shared` (content ->
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


def layer_tables(call, prefix: str, op_prefixes: list[str], count_macro: str) -> list[str]:
    """Per-layer pointer tables of one op: `const mcubert_<op>_params *const <prefix>_<op>_params[N]` (and
    _weights, _tensors) pointing at each layer's `<op_prefix>_params` ... as op_data wrote them."""
    op = struct_name(call.op)

    def table(ctype: str, suffix: str, items: list[str]) -> str:
        return f"const {ctype} *const {prefix}_{op}_{suffix}[{count_macro}] = {{" + ", ".join(items) + "};\n"

    return [
        table(f"mcubert_{op}_params", "params", [f"&{p}_params" for p in op_prefixes]),
        table(f"mcubert_{op}_weights", "weights", [f"&{p}_weights" for p in op_prefixes]),
        table("mcubert_tensor_view", "tensors", [f"{p}_tensors" for p in op_prefixes]),
    ]


def model_data(
    generator: str,
    header: str,
    prefix: str,
    first,
    layers,
    last,
    vocab: bytes,
    *,
    shared: dict | None = None,
    after=(),
) -> str:
    """A whole model's C data: `<prefix>_<first op>`, each layer's `<prefix>_layer<i>_<op>`, the per-layer
    pointer tables (PREFIX_LAYERS of them), `<prefix>_head`, each op `after` it as `<prefix>_<its C name>`
    and the tokenizer blob `<prefix>_vocab` (when there is one). `generator` and `header` name the script
    and the header it goes with."""
    parts = [
        f"/* Generated by tflm_mcubert/firmware/{generator}; see {header}. Do not edit. */\n"
        f'#include <stddef.h>\n\n#include "{header}"\n'
    ]
    parts += op_data(first, f"{prefix}_embedding", shared)
    names = [(f"{prefix}_layer{i}_attention", f"{prefix}_layer{i}_mlp") for i in range(len(layers))]
    for (attention, mlp), (a_name, m_name) in zip(layers, names):
        parts += op_data(attention, a_name, shared)
        parts += op_data(mlp, m_name, shared)
    for column, call in enumerate(layers[0] if layers else ()):
        parts += layer_tables(call, prefix, [pair[column] for pair in names], f"{prefix.upper()}_LAYERS")
    parts += op_data(last, f"{prefix}_head", shared)
    for call in after:
        parts += op_data(call, f"{prefix}_{struct_name(call.op)}", shared)
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

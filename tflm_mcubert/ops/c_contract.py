"""The C side of the op contract, generated: `mcubert_contract.h` (params structs, option tables,
spec versions and hashes, the op list the TFLM registration walks), and the ctypes mirrors of the
same structs for the host tests and emulators.

One source, `ops/contract.py` plus the registry, so a new op or option needs no hand-written C table.
The header is not committed: it is written into custom_ops/include/mcubert/ (git-ignored) by
kernel_sources.custom_ops_dir(), which every Python consumer of the kernels goes through, and by the
kernels' CMake build at configure time; copies of the kernels (Arduino library, Mbed sources, export
bundles) take it with the other headers.

    python -m tflm_mcubert.ops.c_contract OUT_DIR     # writes OUT_DIR/mcubert_contract.h

Struct layout rule (stable across ABIs without packing pragmas): the 32-bit fields in option order
(header first; fields of later versions after the first version's), one `reserved` word when their
count is odd and 64-bit fields follow, then the 64-bit fields.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import sys
from pathlib import Path

from tflm_mcubert.ops import contract, contract_versions
from tflm_mcubert.ops.registry import OP_SPEC_HASHES, OPS, SPEC_HASH, SPEC_HASH_V2

HEADER_NAME = "mcubert_contract.h"
RESERVED = "reserved"
INT32_MIN = -(1 << 31)


@dataclasses.dataclass(frozen=True)
class CField:
    name: str
    ctype: str  # "int32_t", "uint32_t" or "int64_t"
    doc: str
    since: int  # the op version that added it (1 for the header and first fields; 0 for reserved)


def _ctype(field: contract.OptionField) -> str:
    if INT32_MIN <= field.lo and field.hi <= contract.INT32_MAX:
        return "int32_t"
    if 0 <= field.lo and field.hi < (1 << 32):
        return "uint32_t"
    return "int64_t"


def _since(op: str, name: str) -> int:
    return next(
        v for v in contract_versions.op_versions(op) if name in {f.name for f in contract_versions.option_fields(op, v)}
    )


def params_fields(op: str) -> list[CField]:
    """mcubert_<op>_params in struct order (the layout rule in the module docstring)."""
    latest = contract_versions.op_versions(op)[-1]
    fields = [
        CField(f.name, _ctype(f), f"[{f.lo}, {f.hi}] {f.doc}".strip(), _since(op, f.name))
        for f in contract_versions.option_fields(op, latest)
    ]
    narrow = [f for f in fields if f.ctype != "int64_t"]
    wide = [f for f in fields if f.ctype == "int64_t"]
    pad = [CField(RESERVED, "int32_t", "0; keeps the 64-bit fields 8-byte aligned on every ABI", 0)]
    return narrow + (pad if wide and len(narrow) % 2 else []) + wide


_CTYPES = {"int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64}


def ctypes_struct(op: str) -> type[ctypes.Structure]:
    """The ctypes mirror of mcubert_<op>_params (tests/kernels compare its layout with the C one)."""
    name = "".join(part.title() for part in OPS[op].c_name.split("_")) + "ParamsC"
    fields = [(f.name, _CTYPES[f.ctype]) for f in params_fields(op)]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def _upper(op: str) -> str:
    return OPS[op].c_name.upper()


def _macro(name: str, entries: list[str]) -> list[str]:
    """A list macro `name(X)` with one X(...) entry per line."""
    body = [f"    {entry}" for entry in entries]
    return [f"#define {name}(X) \\"] + [line + " \\" for line in body[:-1]] + body[-1:]


def _struct(op: str) -> list[str]:
    lines = ["typedef struct {"]
    for f in params_fields(op):
        lines.append(f"    {f.ctype} {f.name}; /* {f.doc.replace('*/', '* /')} */")
    lines.append(f"}} mcubert_{OPS[op].c_name}_params;")
    return lines


def _kind(ctype: str) -> str:
    return {"int32_t": "MCUBERT_FIELD_INT32", "uint32_t": "MCUBERT_FIELD_UINT32", "int64_t": "MCUBERT_FIELD_INT64"}[
        ctype
    ]


class _AnyParams:
    """Params whose every field is 0: how many arguments an op's get_buffer_size takes."""

    def __getattr__(self, name: str) -> int:
        return 0


def _call_macros(code: str) -> list[str]:
    """How a generic caller holding the op's tensors in contract order (`t`: void *const *, the output
    last) calls it: its weights struct's initializer, the kernel's tensor arguments, which tensor holds
    the result, and get_buffer_size's arguments from `d` (int32_t[4]). Host runners and table-driven
    apps dispatch through these (with MCUBERT_OPS) instead of naming ops."""
    op, upper = OPS[code], _upper(code)
    names = op.tensor_names
    weights = ", ".join(f"t[{names.index(n)}]" for n in op.weight_fields)
    arguments = [f"t[{names.index(n)}]" for n in op.runtime_inputs]
    arguments += [] if op.in_place else [f"t[{names.index('output')}]"]
    result = names.index(op.runtime_inputs[0]) if op.in_place else names.index("output")
    dims = ", ".join(f"d[{i}]" for i in range(len(op.buffer_size_args(_AnyParams()))))
    return [
        "/* A table-driven call (t: the tensors in contract order, output last; d: int32_t[4]). */",
        f"#define MCUBERT_{upper}_WEIGHT_TENSORS(t) {{{weights}}}",
        f"#define MCUBERT_{upper}_CALL_TENSORS(t) {', '.join(arguments)}",
        f"#define MCUBERT_{upper}_RESULT_TENSOR {result}",
        f"#define MCUBERT_{upper}_BUFFER_SIZE_ARGS(d) {dims}",
    ]


def header_text() -> str:
    """The generated mcubert_contract.h."""
    out = [
        "/* Generated by `python -m tflm_mcubert.ops.c_contract` from tflm_mcubert/ops/contract.py and",
        " * ops/registry.py. Do not edit: change the contract and regenerate (the CMake build does). */",
        "#ifndef MCUBERT_CONTRACT_H",
        "#define MCUBERT_CONTRACT_H",
        "",
        "#include <stdint.h>",
        "",
        "/* The contract-wide versions (SPEC.md section 8), which every op reads. */",
        f"#define MCUBERT_SPEC_VERSION {contract.SPEC_VERSION}",
        f"#define MCUBERT_SPEC_HASH 0x{SPEC_HASH:08x}u",
        f"#define MCUBERT_SPEC_VERSION_INT4 {contract.SPEC_VERSION_INT4}",
        f"#define MCUBERT_SPEC_HASH_V2 0x{SPEC_HASH_V2:08x}u",
        "",
        "/* The ops, in registry order (= mcubert_op_id): X(lower name, UPPER NAME, custom code). */",
        f"#define MCUBERT_OP_COUNT {len(OPS)}",
        "/* The most tensors any op has (its inputs and its output): a binding's validate list. */",
        f"#define MCUBERT_MAX_OP_TENSORS {max(len(d.tensor_names) for d in OPS.values())}",
        *_macro("MCUBERT_OPS", [f'X({d.c_name}, {_upper(code)}, "{code}")' for code, d in OPS.items()]),
    ]
    for code in OPS:
        upper = _upper(code)
        versions = [f"X({v}, 0x{h:08x}u)" for v, h in OP_SPEC_HASHES[code].items()]
        by_name = {f.name: f for f in params_fields(code)}
        latest = contract_versions.op_versions(code)[-1]
        options = [  # option order, as the Python codec checks them (reports agree on the first problem)
            f"X(mcubert_{OPS[code].c_name}_params, {f.name}, {_kind(by_name[f.name].ctype)}, {by_name[f.name].since})"
            for f in contract_versions.option_fields(code, latest)
        ]
        out += ["", f"/* {code} */", ""]
        out += [  # inputs 0..n-1 are computed at run time; every later input is a constant of the model
            "/* Inputs computed at run time (the first ones); the rest are constants (SPEC.md section 4). */",
            f"#define MCUBERT_{upper}_RUNTIME_INPUTS {len(OPS[code].runtime_inputs)}",
            "/* Spec versions it reads: X(version, hash). */",
        ]
        out += _call_macros(code)
        out += _macro(f"MCUBERT_{upper}_SPEC_VERSIONS", versions)
        out += ["/* Option fields: X(params type, field, kind, op version that added it). */"]
        out += _macro(f"MCUBERT_{upper}_OPTION_FIELDS", options)
        later = [f for f in params_fields(code) if f.since > 1]  # a field's first version, for validate
        out += [f"#define MCUBERT_{upper}_{f.name.upper()}_SINCE {f.since}" for f in later]
        out += _struct(code)
    out += ["", "#endif /* MCUBERT_CONTRACT_H */", ""]
    return "\n".join(out)


def write_header(directory: Path) -> Path:
    """`directory`/mcubert_contract.h, rewritten only when its text differs (so builds stay incremental)
    and atomically (so concurrent builds and test processes never read half a file)."""
    path = directory / HEADER_NAME
    text = header_text()
    if path.is_file() and path.read_text() == text:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory / f".{HEADER_NAME}.{os.getpid()}"
    staged.write_text(text)
    os.replace(staged, path)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tflm_mcubert.ops.c_contract OUT_DIR", file=sys.stderr)
        return 2
    try:
        write_header(Path(argv[0]))
    except OSError as error:
        print(f"error: cannot write {Path(argv[0]) / HEADER_NAME}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

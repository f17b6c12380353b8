"""The op table (`OPS`: custom code -> OpDef, ops/op_def.py), and SPEC_HASH: the fingerprint of the
numerics contract.

Every consumer (writer, reader, reference runner, kernel ABI, firmware data, op resolver) reads the
ops from `OPS` and `BY_KIND`; adding an op is its module plus one line here (docs/adding-an-op.md).

SPEC_HASH = FNV-1a 32 of contract_text(): the constants, every option field and range, every tensor
signature, and each op's scratch size at a few sample shapes (so a change of scratch layout, which
the planner and the kernel must agree on, changes the hash too). It is written into every op's
options; SPEC.md quotes it, and a test keeps the two in step.
"""

from __future__ import annotations

from tflm_mcubert.ops import (
    attention,
    causal_attention,
    classifier_head,
    contract,
    contract_versions,
    decoder_embedding,
    decoder_mlp,
    embedding,
    lm_head,
    mlp,
    sample,
)
from tflm_mcubert.ops.op_def import OpDef

# In contract order: the C op ids (mcubert_op_id) and the resolver's registration order follow it.
OPS: dict[str, OpDef] = {
    d.code: d
    for d in (
        embedding.DEFINITION,
        attention.DEFINITION,
        mlp.DEFINITION,
        classifier_head.DEFINITION,
        lm_head.DEFINITION,
        causal_attention.DEFINITION,
        decoder_mlp.DEFINITION,
        decoder_embedding.DEFINITION,
        sample.DEFINITION,
    )
}
BY_KIND: dict[str, OpDef] = {d.kind: d for d in OPS.values()}
TILED_KINDS = tuple(d.kind for d in OPS.values() if d.tiled)


def op(code_or_kind: str) -> OpDef:
    """The OpDef of a custom code ("MCUBERT_MLP") or a kind ("mlp")."""
    found = OPS.get(code_or_kind) or BY_KIND.get(code_or_kind)
    if found is None:
        raise KeyError(f"{code_or_kind!r} is not an MCUBERT op (known: {', '.join(OPS)})")
    return found


# (s, d, h or max_rank or ffn, t) sample shapes; odd ones catch alignment changes.
_SCRATCH_SAMPLES = ((128, 128, 2, 8), (77, 256, 4, 5), (512, 256, 4, 8))


def _scratch_lines() -> list[str]:
    lines = []
    for s, d, h, t in _SCRATCH_SAMPLES:
        lines.append(f"{contract.EMBEDDING}.scratch({s},{d})={embedding.scratch_bytes(s, d)}")
        lines.append(f"{contract.ATTENTION}.scratch({s},{d},{h},{t})={attention.scratch_bytes(s, d, h, t)}")
        lines.append(f"{contract.MLP}.scratch({s},{d},{4 * d},{t})={mlp.scratch_bytes(s, d, 4 * d, t)}")
        lines.append(f"{contract.CLASSIFIER_HEAD}.scratch({d})={classifier_head.scratch_bytes(d)}")
    return lines


def int4_contract_lines() -> list[str]:
    """What version 2 adds to the contract text (its hash covers version 1's text, then these)."""
    lines = [
        f"spec_version={contract.SPEC_VERSION_INT4}",
        "int4=two's complement nibble in [-8,7];value 2j in the low nibble of byte j;"
        "odd length pads a zero high nibble",
        f"embedding_int4_rows=cluster 0:uint16le row_scale,int4[d]:{contract.INT4_ROW_SCALE_BYTES}+ceil(d/2) bytes;"
        "cluster i>0:int4[r_i]:ceil(r_i/2) bytes",
        "embedding_int4_word=cluster 0:requantize(q*row_scale,Mw_0[c]);cluster i>0:as int8",
    ]
    for op, fields in contract_versions.VERSION_OPTIONS[
        contract.SPEC_VERSION_INT4
    ].items():  # version 2's own fields only
        for f in fields:
            values = f"v{contract.SPEC_VERSION_INT4};values {contract.EMBEDDING_WORD_BITS}"
            lines.append(f"{op}.option.{f.name}=int[{f.lo},{f.hi}];{values}")
    lines.append(f"{contract.EMBEDDING}.input3.word_rows=int8[sum n_i*row_bytes_i(word_bits)]")
    return lines


def contract_lines() -> list[str]:
    """The contract-wide text of versions 1 (and, below it, 2): shared constants, then every op's fields and tensors."""
    lines = contract.constants_text()
    for spec in (contract.CONTRACTS[op] for op in contract.CONTRACT_WIDE_OPS):
        for f in contract.HEADER_FIELDS + spec.options:
            lines.append(f"{spec.name}.option.{f.name}=int[{f.lo},{f.hi}]")
        for i, t in enumerate(spec.inputs):
            lines.append(f"{spec.name}.input{i}.{t.name}={t.dtype}{t.shape}")
        for i, t in enumerate(spec.outputs):
            lines.append(f"{spec.name}.output{i}.{t.name}={t.dtype}{t.shape}")
    return lines


def contract_text() -> str:
    return "\n".join(contract_lines() + _scratch_lines()) + "\n"


def fnv1a32(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def contract_text_v2() -> str:
    """Version 2: version 1's text, then the int4 embedding storage (int4_contract_lines)."""
    return contract_text() + "\n".join(int4_contract_lines()) + "\n"


SPEC_VERSION = contract.SPEC_VERSION
SPEC_HASH = fnv1a32(contract_text().encode("ascii"))
SPEC_VERSION_INT4 = contract.SPEC_VERSION_INT4
SPEC_HASH_V2 = fnv1a32(contract_text_v2().encode("ascii"))
# The contract-wide versions (1, 2), which every op reads.
SPEC_HASHES = {SPEC_VERSION: SPEC_HASH, SPEC_VERSION_INT4: SPEC_HASH_V2}
SPEC_VERSIONS = contract.SPEC_VERSIONS


def _own_scratch_lines() -> list[str]:
    """Scratch samples of the ops after the contract-wide versions (outside SPEC_HASH's text)."""
    lines = [f"{contract.LM_HEAD}.scratch({d})={lm_head.scratch_bytes(d)}" for _, d, _, _ in _SCRATCH_SAMPLES]
    code = contract.CAUSAL_ATTENTION
    return lines + [
        f"{code}.scratch({s},{d})={causal_attention.scratch_bytes(s, d)}" for s, d, _, _ in _SCRATCH_SAMPLES
    ]


def _scratch_samples_of(code: str) -> list[str]:
    return [line for line in _scratch_lines() + _own_scratch_lines() if line.startswith(f"{code}.scratch(")]


def op_version_text(code: str, version: int) -> str:
    """The hashed text of one op's own version (after the contract-wide ones): the shared constants,
    the op's lines at that version (contract_versions.op_lines) and its scratch samples, nothing of any other op."""
    lines = contract.constants_text() + contract_versions.op_lines(code, version) + _scratch_samples_of(code)
    return "\n".join(lines) + "\n"


def _version_hash(code: str, version: int) -> int:
    if version in SPEC_HASHES:
        return SPEC_HASHES[version]
    return fnv1a32(op_version_text(code, version).encode("ascii"))


# custom code -> {version: hash}: what each op's options may carry, oldest first (SPEC.md section 8).
OP_SPEC_HASHES: dict[str, dict[int, int]] = {
    code: {v: _version_hash(code, v) for v in contract_versions.op_versions(code)} for code in OPS
}


def spec_hash(code: str, version: int) -> int:
    """The hash `code`'s options carry at `version` (KeyError for a version the op does not have)."""
    return OP_SPEC_HASHES[code][version]


def versions_table() -> str:
    """The op-versions table of SPEC.md (its first section)."""
    rows = []
    for code, versions in OP_SPEC_HASHES.items():
        cells = ", ".join(f"{v} (`0x{h:08x}`)" for v, h in versions.items())
        rows.append(f"| `{code}` | {cells} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m tflm_mcubert.ops.registry [versions]: the text for SPEC.md
    import sys

    if sys.argv[1:] == ["versions"]:
        print(versions_table())
    else:
        print(f"SPEC_VERSION {SPEC_VERSION}  SPEC_HASH 0x{SPEC_HASH:08x}")
        print(f"SPEC_VERSION {SPEC_VERSION_INT4}  SPEC_HASH 0x{SPEC_HASH_V2:08x}")
        print(contract_text_v2(), end="")

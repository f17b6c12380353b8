"""Per-op spec versions: a new version of one op changes only that op's hash, the exporter writes each
op's lowest version, old versions keep loading, and the C tables follow the contract with no C edit
(the option parser and spec check are compiled from a header generated with a hypothetical version)."""

from __future__ import annotations

import ctypes
import importlib
import shutil
import subprocess
from pathlib import Path

import flatbuffers.flexbuffers as flexbuffers
import pytest

from tflm_mcubert.kernel_sources import custom_ops_dir, write_contract_header
from tflm_mcubert.ops import c_contract, contract, contract_versions, registry
from tflm_mcubert.ops.options import OptionsError, decode_options, encode_options

SPEC = Path(registry.__file__).with_name("SPEC.md").read_text()
# Taken once, before any test patches the contract (custom_ops_dir() rewrites the checkout's header).
KERNELS = custom_ops_dir()
A, M, E = contract.ATTENTION, contract.MLP, contract.EMBEDDING
NEW_FIELD = contract.OptionField("head_bits", 4, 8, "hypothetical: a later option of the attention op")
# The hypothetical version: after every real one (3: attention's and MLP's int4 weights; 4, 5: ops added later).
NEW = max(v for op in contract.CONTRACTS for v in contract_versions.op_versions(op)) + 1
ATTENTION_OPTIONS = {
    "seq_len": 8,
    "hidden": 8,
    "heads": 2,
    "tile": 4,
    "mask_mode": 0,
    "score_multiplier": 1 << 30,
    "score_shift": 0,
    "context_multiplier": 1 << 30,
    "context_shift": 0,
    "ln_eps": 1,
}
# Version 8's fields (a width per projection), which every later attention version carries on.
ATTENTION_LAYER_BITS = {"weight_bits": 8, "int4_layers": 0b1001}  # query and output int4


@pytest.fixture
def attention_new_version(monkeypatch):
    """The contract with a hypothetical new version (NEW) of the attention op only (a new option and a
    numerics line), and the registry's tables recomputed from it; both restored afterwards."""
    monkeypatch.setitem(contract_versions.VERSION_OPTIONS, NEW, {A: (NEW_FIELD,)})
    monkeypatch.setitem(contract_versions.VERSION_LINES, NEW, {A: ("heads=hypothetical layout",)})
    hashes = {
        code: {v: registry._version_hash(code, v) for v in contract_versions.op_versions(code)} for code in registry.OPS
    }
    monkeypatch.setattr(registry, "OP_SPEC_HASHES", hashes)
    options = importlib.import_module("tflm_mcubert.ops.options")
    monkeypatch.setattr(options, "OP_SPEC_HASHES", hashes)
    monkeypatch.setattr(c_contract, "OP_SPEC_HASHES", hashes)
    return hashes


def test_spec_md_lists_every_op_version_and_hash():
    block = SPEC.split("<!-- op versions:", 1)[1].split("<!-- end op versions -->", 1)[0]
    assert registry.versions_table() in block, "regenerate with python -m tflm_mcubert.ops.registry versions"


def test_the_contract_wide_versions_keep_their_hashes_for_every_op():
    for code in contract.CONTRACT_WIDE_OPS:
        versions = registry.OP_SPEC_HASHES[code]
        assert versions[1] == registry.SPEC_HASH and versions[2] == registry.SPEC_HASH_V2, code


def test_an_op_added_later_reads_only_its_own_versions_and_is_outside_the_contract_wide_text():
    assert contract_versions.op_versions(contract.LM_HEAD) == (
        contract.SPEC_VERSION_LM_HEAD,
        contract.SPEC_VERSION_DECODER_INT4,
    )
    assert contract.LM_HEAD not in registry.contract_text_v2()
    text = registry.op_version_text(contract.LM_HEAD, contract.SPEC_VERSION_LM_HEAD)
    assert f"{contract.LM_HEAD}.option.top_k=int[1,{contract.MAX_TOP_K}]" in text and "lm_head.gain_limit=" in text
    assert text[len("\n".join(contract.constants_text())) + 1 :] in SPEC  # quoted in SPEC.md section 8


def test_a_new_version_of_one_op_changes_only_that_op(attention_new_version):
    before = {code: dict(v) for code, v in registry.OP_SPEC_HASHES.items()}
    per_layer = contract.SPEC_VERSION_LAYER_BITS
    assert contract_versions.op_versions(A) == (1, 2, 3, per_layer, NEW)
    assert contract_versions.op_versions(M) == (1, 2, 3, per_layer) and contract_versions.op_versions(E) == (1, 2)
    assert set(attention_new_version[A]) == {1, 2, 3, per_layer, NEW}
    assert attention_new_version[A][NEW] not in (registry.SPEC_HASH, registry.SPEC_HASH_V2, before[A][3])
    assert attention_new_version[A][3] == before[A][3]  # an added version changes no earlier one
    for code in (M, E, contract.CLASSIFIER_HEAD):
        assert attention_new_version[code] == before[code]
    # Its hash covers its own lines only: the MLP's contract is not in it.
    text = registry.op_version_text(A, NEW)
    assert "heads=hypothetical layout" in text and f"{A}.option.head_bits=int[4,8]" in text
    assert f"{A}.option.weight_bits=int[4,8]" in text  # version 3's field carries on
    assert M not in text and E not in text


def test_a_new_version_is_written_only_where_its_fields_are_used(attention_new_version):
    old = decode_options(A, encode_options(A, ATTENTION_OPTIONS))  # an int8 attention: version 1, as before
    assert old == ATTENTION_OPTIONS
    raw = flexbuffers.Loads(encode_options(A, ATTENTION_OPTIONS))
    assert (raw["spec_version"], raw["spec_hash"]) == (1, registry.SPEC_HASH)
    raw = flexbuffers.Loads(encode_options(A, {**ATTENTION_OPTIONS, "weight_bits": 4}))
    assert (raw["spec_version"], raw["spec_hash"]) == (3, attention_new_version[A][3])  # 4 is not needed
    new = encode_options(A, {**ATTENTION_OPTIONS, **ATTENTION_LAYER_BITS, "head_bits": 4})
    raw = flexbuffers.Loads(new)
    assert (raw["spec_version"], raw["spec_hash"]) == (NEW, attention_new_version[A][NEW])
    assert decode_options(A, new)["head_bits"] == 4
    with pytest.raises(OptionsError, match="head_bits: unknown option"):
        encode_options(M, {"head_bits": 4, "seq_len": 8})
    stale = bytes(flexbuffers.Dumps({**raw, "spec_hash": registry.SPEC_HASH}))
    with pytest.raises(OptionsError, match="spec_hash: 0x.* does not match"):
        decode_options(A, stale)


def test_the_c_tables_follow_a_new_version_with_no_c_edit(attention_new_version, tmp_path):
    """mcubert_options.c and mcubert_validate.c, compiled against the header generated from the
    contract with a hypothetical new attention version, parse its new option into the generated struct field."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found")
    source = KERNELS
    include = tmp_path / "include" / "mcubert"
    shutil.copytree(source / "include" / "mcubert", include)
    header = write_contract_header(include)
    assert f"X({NEW}, 0x" in header.read_text() and "int32_t head_bits;" in header.read_text()
    library = tmp_path / "libparse.so"
    sources = [source / "src" / name for name in ("mcubert_options.c", "mcubert_validate.c")]
    flags = ["-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{tmp_path / 'include'}", f"-I{source / 'src'}"]
    subprocess.run(["gcc", *flags, *map(str, sources), "-o", str(library)], check=True)
    parse = ctypes.CDLL(str(library)).mcubert_attention_parse_options
    struct_type = c_contract.ctypes_struct(A)

    def run(buffer: bytes):
        params = struct_type()
        message = ctypes.create_string_buffer(128)
        data = (ctypes.c_uint8 * len(buffer)).from_buffer_copy(buffer)
        status = parse(data, ctypes.c_int32(len(buffer)), ctypes.byref(params), message)
        return status, message.value.decode(), params

    both = {**ATTENTION_OPTIONS, **ATTENTION_LAYER_BITS, "head_bits": 5}
    status, message, params = run(encode_options(A, both))
    assert (status, message) == (0, "") and params.head_bits == 5 and params.spec_version == NEW
    status, _, params = run(encode_options(A, ATTENTION_OPTIONS))  # version 1 still loads
    assert status == 0 and params.spec_version == 1 and params.head_bits == 0 and params.weight_bits == 0
    raw = flexbuffers.Loads(encode_options(A, both))
    status, message, _ = run(bytes(flexbuffers.Dumps({**raw, "spec_version": NEW + 1})))
    assert (
        message
        == f"{A}: spec_version: unsupported version {NEW + 1} (this build implements 1 and 2 and 3 and 8 and {NEW})"
    )
    assert decode_error(A, bytes(flexbuffers.Dumps({**raw, "spec_version": NEW + 1}))) == message


def decode_error(op: str, buffer: bytes) -> str:
    with pytest.raises(OptionsError) as caught:
        decode_options(op, buffer)
    return str(caught.value)


# ---- the real version 3: int4 weights of attention and MLP (SPEC.md 3.1.1) -------------------

MLP_OPTIONS = {"seq_len": 8, "hidden": 8, "ffn": 16, "tile": 4, "fc1_output_zero_point": 3, "ln_eps": 1}


@pytest.mark.parametrize("op,options", [(A, ATTENTION_OPTIONS), (M, MLP_OPTIONS)])
def test_version_3_carries_weight_bits_and_int8_stays_version_1(op, options):
    assert contract_versions.op_versions(op) == (1, 2, 3, 8)
    raw = flexbuffers.Loads(encode_options(op, options))
    assert (raw["spec_version"], raw["spec_hash"]) == (1, registry.SPEC_HASH) and "weight_bits" not in raw
    int4 = encode_options(op, {**options, "weight_bits": 4})
    raw = flexbuffers.Loads(int4)
    assert (raw["spec_version"], raw["spec_hash"]) == (3, registry.OP_SPEC_HASHES[op][3])
    assert decode_options(op, int4) == {**options, "weight_bits": 4}
    # 8 is expressible in version 3 too (a reader accepts it); the encoder never needs it
    eight = bytes(flexbuffers.Dumps({**raw, "weight_bits": 8}))
    assert decode_options(op, eight)["weight_bits"] == 8
    # version 1 has no weight_bits; version 3 needs it
    assert decode_error(op, bytes(flexbuffers.Dumps({**raw, "spec_version": 1, "spec_hash": registry.SPEC_HASH}))) == (
        f"{op}: weight_bits: unknown option"
    )
    missing = {k: v for k, v in raw.items() if k != "weight_bits"}
    assert decode_error(op, bytes(flexbuffers.Dumps(missing))) == f"{op}: weight_bits: missing"


@pytest.mark.parametrize("op,options", [(A, ATTENTION_OPTIONS), (M, MLP_OPTIONS)])
@pytest.mark.parametrize(
    "bits,problem",
    [
        (5, "5 is not a weight width (4: packed int4, 8: int8)"),
        (3, "3 is outside [4, 8]"),
        (16, "16 is outside [4, 8]"),
    ],
)
def test_a_corrupt_weight_bits_is_refused_naming_the_field(op, options, bits, problem):
    raw = flexbuffers.Loads(encode_options(op, {**options, "weight_bits": 4}))
    assert decode_error(op, bytes(flexbuffers.Dumps({**raw, "weight_bits": bits}))) == f"{op}: weight_bits: {problem}"


def test_version_3_hashes_cover_each_op_alone():
    hashes = {op: registry.OP_SPEC_HASHES[op][3] for op in (A, M)}
    assert hashes[A] != hashes[M]
    assert E not in registry.OP_SPEC_HASHES or 3 not in registry.OP_SPEC_HASHES[E]
    for op, other in ((A, M), (M, A)):
        text = registry.op_version_text(op, 3)
        assert f"{op}.option.weight_bits=int[4,8]" in text and "w4row=" in text and other not in text
        assert text[len("\n".join(contract.constants_text())) + 1 :] in SPEC  # quoted in SPEC.md section 8


# ---- the real version 8: a width per linear layer (SPEC.md 3.1.2) -----------------------------


@pytest.mark.parametrize("op,options,layers", [(A, ATTENTION_OPTIONS, 4), (M, MLP_OPTIONS, 2)])
def test_version_8_carries_a_width_per_layer(op, options, layers):
    mixed = encode_options(op, {**options, "weight_bits": 8, "int4_layers": 1})
    raw = flexbuffers.Loads(mixed)
    assert (raw["spec_version"], raw["spec_hash"]) == (8, registry.OP_SPEC_HASHES[op][8])
    assert decode_options(op, mixed) == {**options, "weight_bits": 8, "int4_layers": 1}
    top = (1 << layers) - 1
    assert decode_options(op, bytes(flexbuffers.Dumps({**raw, "int4_layers": top})))["int4_layers"] == top
    assert decode_error(op, bytes(flexbuffers.Dumps({**raw, "int4_layers": top + 1}))) == (
        f"{op}: int4_layers: {top + 1} is outside [0, {top}]"
    )
    assert decode_error(op, bytes(flexbuffers.Dumps({**raw, "weight_bits": 4}))).startswith(
        f"{op}: weight_bits: 4 with int4_layers"
    )
    missing = {k: v for k, v in raw.items() if k != "int4_layers"}
    assert decode_error(op, bytes(flexbuffers.Dumps(missing))) == f"{op}: int4_layers: missing"
    as_version_3 = {**raw, "spec_version": 3, "spec_hash": registry.OP_SPEC_HASHES[op][3]}
    assert decode_error(op, bytes(flexbuffers.Dumps(as_version_3))) == f"{op}: int4_layers: unknown option"

"""Custom options of the MCUBERT ops: a flexbuffer map of integers, versioned and verified.

Encoding uses the standard flexbuffers builder (so TFLM's flexbuffers.h reads it). Decoding does
not trust it: the Python flexbuffers reader has no verifier and indexes wherever offsets point, so
`decode_options` walks the buffer itself, bounds-checking every read before it happens. It accepts
exactly what the contract describes:

  * root: a map (type MAP) whose keys vector and values lie inside the buffer;
  * keys: NUL-terminated ASCII, strictly increasing (flexbuffers' binary-search order, no duplicates);
  * values: inline INT or UINT, nothing else (no floats, strings, vectors, indirect ints);
  * the key set equals the op's fields (contract.py) plus spec_version and spec_hash; each value
    within its range; then the op's cross-field checks.

Size arithmetic is written the way the C decoder must write it: offsets are compared against the
position they are subtracted from before subtracting, and element counts are compared against
(bytes left) / (bytes per element) instead of multiplying, so a hostile length cannot wrap. Every
error names the op and the field (or "options" for the container itself).
"""

from __future__ import annotations

from flatbuffers import flexbuffers

from tflm_mcubert.ops import contract, contract_versions
from tflm_mcubert.ops.registry import OP_SPEC_HASHES
from tflm_mcubert.ops.validation import OpSpecError

_TYPE_INT, _TYPE_UINT, _TYPE_MAP = 1, 2, 9
_TYPE_NAMES = {
    0: "null",
    1: "int",
    2: "uint",
    3: "float",
    4: "key",
    5: "string",
    6: "indirect int",
    7: "indirect uint",
    8: "indirect float",
    9: "map",
    10: "vector",
    25: "blob",
    26: "bool",
}
_WIDTHS = (1, 2, 4, 8)
MAX_OPTIONS_BYTES = 4096  # our options are ~200 bytes; refuse absurd buffers up front


class OptionsError(OpSpecError):
    """Malformed or incompatible custom options."""


def _contract(op: str) -> contract.OpContract:
    try:
        return contract.CONTRACTS[op]
    except KeyError:
        raise OptionsError(op, "op", f"unknown custom op (known: {', '.join(contract.CONTRACTS)})") from None


def encode_options(op: str, values: dict[str, int]) -> bytes:
    """The flexbuffer of `values` (the op's fields) with spec_version and spec_hash added: the lowest
    version that has every field (so an int8 model's options are version 1's, byte for byte)."""
    spec = _contract(op)
    plain = {k: v.item() if hasattr(v, "item") else v for k, v in values.items()}  # numpy -> int
    version = contract_versions.options_version(op, plain)
    full = {"spec_version": version, "spec_hash": OP_SPEC_HASHES[op][version], **plain}
    _check_schema(op, spec, full)
    return bytes(flexbuffers.Dumps(full))


class _Reader:
    """Bounds-checked little-endian reads over the options bytes."""

    def __init__(self, op: str, data: bytes):
        self.op, self.data = op, data

    def fail(self, problem: str) -> OptionsError:
        return OptionsError(self.op, "options", problem)

    def uint(self, pos: int, width: int) -> int:
        if width not in _WIDTHS:
            raise self.fail(f"invalid byte width {width}")
        if pos < 0 or pos > len(self.data) - width:
            raise self.fail(f"read of {width} bytes at {pos} is outside the {len(self.data)}-byte buffer")
        return int.from_bytes(self.data[pos : pos + width], "little", signed=False)

    def int(self, pos: int, width: int) -> int:
        value = self.uint(pos, width)
        return value - (1 << (8 * width)) if value >> (8 * width - 1) else value

    def back(self, pos: int, offset: int, what: str) -> int:
        """pos - offset, refusing offsets that point before the buffer (or nowhere)."""
        if offset == 0 or offset > pos:
            raise self.fail(f"{what} offset {offset} at {pos} points outside the buffer")
        return pos - offset


def _parse_map(op: str, data: bytes) -> dict[str, tuple[int, int]]:
    """{key: (type, value)} of the root map, every access bounds-checked."""
    r = _Reader(op, data)
    n = len(data)
    if n < 3:
        raise r.fail(f"truncated: {n} bytes")
    if n > MAX_OPTIONS_BYTES:
        raise r.fail(f"{n} bytes is larger than any valid options buffer ({MAX_OPTIONS_BYTES})")
    root_width = data[n - 1]
    if root_width not in _WIDTHS:
        raise r.fail(f"invalid root byte width {root_width}")
    if n < 2 + root_width:
        raise r.fail(f"truncated: {n} bytes cannot hold a {root_width}-byte root")
    packed = data[n - 2]
    if packed >> 2 != _TYPE_MAP:
        raise r.fail(f"root is a {_TYPE_NAMES.get(packed >> 2, f'type {packed >> 2}')}, not a map")
    width = 1 << (packed & 3)
    root_pos = n - 2 - root_width
    start = r.back(root_pos, r.uint(root_pos, root_width), "map")
    if start < 3 * width:
        raise r.fail("map header lies before the start of the buffer")
    size = r.uint(start - width, width)
    if size > (n - start) // (width + 1):  # values (width each) + one type byte each
        raise r.fail(f"map of {size} entries overruns the buffer")
    keys_field = start - 3 * width
    keys = r.back(keys_field, r.uint(keys_field, width), "keys vector")
    key_width = r.uint(start - 2 * width, width)
    if key_width not in _WIDTHS or keys < key_width:
        raise r.fail(f"invalid keys vector (byte width {key_width})")
    if r.uint(keys - key_width, key_width) != size:
        raise r.fail("keys vector and values disagree on the entry count")
    if size > (n - keys) // key_width:
        raise r.fail(f"keys vector of {size} entries overruns the buffer")
    entries: dict[str, tuple[int, int]] = {}
    previous = None
    for i in range(size):
        slot = keys + i * key_width
        at = r.back(slot, r.uint(slot, key_width), "key")
        end = data.find(b"\0", at)
        if end < 0:
            raise r.fail(f"key {i} is not NUL-terminated")
        raw = data[at:end]
        if not raw or any(b < 0x21 or b > 0x7E for b in raw):
            raise r.fail(f"key {i} is not a printable ASCII name")
        if previous is not None and raw <= previous:
            raise r.fail(f"keys are not strictly sorted at {raw.decode()!r} (duplicate or disorder)")
        previous = raw
        type_byte = data[start + size * width + i]
        value_type, value_width = type_byte >> 2, 1 << (type_byte & 3)
        key = raw.decode("ascii")
        if value_type not in (_TYPE_INT, _TYPE_UINT) or value_width > width:
            name = _TYPE_NAMES.get(value_type, f"type {value_type}")
            raise OptionsError(op, key, f"expected an inline integer, got {name}")
        pos = start + i * width
        value = r.int(pos, width) if value_type == _TYPE_INT else r.uint(pos, width)
        entries[key] = (value_type, value)
    return entries


def decode_options(op: str, buffer: bytes | bytearray | memoryview) -> dict[str, int]:
    """Verify and decode an op's options; raises OptionsError naming op and field."""
    spec = _contract(op)
    entries = _parse_map(op, bytes(buffer))
    values = {key: value for key, (_, value) in entries.items()}
    _check_schema(op, spec, values)
    return {k: v for k, v in values.items() if k not in ("spec_version", "spec_hash")}


def _check_schema(op: str, spec: contract.OpContract, values: dict[str, int]) -> None:
    # Version first: a newer model's fields would otherwise be reported as "unknown".
    if "spec_version" not in values:
        raise OptionsError(op, "spec_version", "missing")
    version = values["spec_version"]
    hashes = OP_SPEC_HASHES[op]
    if version not in hashes:
        implemented = " and ".join(str(v) for v in hashes)
        raise OptionsError(op, "spec_version", f"unsupported version {version} (this build implements {implemented})")
    expected = hashes[version]
    if values.get("spec_hash") != expected:
        got = values.get("spec_hash")
        raise OptionsError(
            op,
            "spec_hash",
            "missing" if got is None else f"0x{got:08x} does not match this build's contract 0x{expected:08x}",
        )
    fields = contract_versions.option_fields(op, version)
    known = {f.name for f in fields}
    for key in values:
        if key not in known:
            raise OptionsError(op, key, "unknown option")
    for f in fields:
        if f.name not in values:
            raise OptionsError(op, f.name, "missing")
        value = values[f.name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionsError(op, f.name, f"expected an integer, got {type(value).__name__}")
        if not f.lo <= value <= f.hi:
            raise OptionsError(op, f.name, f"{value} is outside [{f.lo}, {f.hi}]")
    problem = spec.cross_check(values)
    if problem:
        raise OptionsError(op, *problem)

"""The integrity record: CRC-32s that let a reader, or the device at boot, detect a corrupted model.

A model in Flash gets corrupted (a partial OTA update, a worn sector, a bad copy of model_data.cc) and
would otherwise run and answer wrongly without a word. `export` stores, as `.tflite` metadata named
MCUBERT_INTEGRITY, one buffer of little-endian uint32 words (ops/SPEC.md section 9):

    magic 0x4E49434D ("MCIN"), record version, file size in bytes,
    CRC of the whole file with this record's own data bytes read as zeros,
    buffer count B, then the CRC of every buffer's data (0 for the record's own),
    operator count O, then the CRC of every operator's custom options (subgraph 0).

CRC-32 is zlib's (IEEE 802.3, reflected, init and final xor 0xFFFFFFFF): it detects every error
burst of up to 32 bits, so every single corrupted byte, anywhere in the file. The whole-file CRC
decides; the per-buffer and per-operator ones only name what was hit. The C verifier
(custom_ops/src/mcubert_verify_model.c) implements the same check, streaming, with no heap.

The record cannot be switched off by a corruption: a model that uses MCUBERT ops (an operator code
`MCUBERT_...`) must have it, so a record hidden by a corrupted name or offset is an error; only a
model without MCUBERT ops (another tool's) may lack it. The root offset is checked before the walk.
The firmware files carry `expected_crc32` (and the size), which the device compares as well.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

import numpy as np
from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

INTEGRITY_METADATA = "MCUBERT_INTEGRITY"
INTEGRITY_MAGIC = 0x4E49434D
INTEGRITY_VERSION = 1
_HEADER_WORDS = 5  # magic, version, file size, file CRC, buffer count
MCUBERT_OP_PREFIX = b"MCUBERT_"  # a model with an operator code of this prefix must carry the record


class IntegrityError(ValueError):
    """The model's bytes differ from what was exported; the message names the tensor or op hit."""


def record_words(buffer_count: int, operator_count: int) -> int:
    return _HEADER_WORDS + buffer_count + 1 + operator_count


@dataclasses.dataclass(frozen=True)
class _Layout:
    """Where the record sits in a packed model, and what the CRCs cover."""

    start: int  # byte offset of the record's data
    length: int
    record_buffer: int
    buffers: list[bytes]  # data of every buffer (b"" when none)
    options: list[bytes]  # custom options of every operator of subgraph 0
    tensor_names: dict[int, str]  # buffer index -> name of the first tensor that uses it


def _vector_start(table, field_offset: int) -> int:
    offset = table._tab.Offset(field_offset)
    return table._tab.Vector(offset) if offset else 0


def _root(data: bytes):
    """The Model table, after the checks the C verifier makes: the root offset 4-aligned, past the
    file identifier and inside the file; at least one subgraph and one buffer."""
    (offset,) = struct.unpack_from("<I", data, 0)
    if offset % 4 or not 8 <= offset < len(data):
        raise IntegrityError(f"the root offset {offset} does not point at the model (corrupted)")
    model = schema.Model.GetRootAs(data, 0)
    if model.SubgraphsLength() < 1 or model.BuffersLength() < 1:
        raise IntegrityError("the root table has no subgraph or no buffer (corrupted)")
    return model


def uses_mcubert_ops(model) -> bool:
    """True when an operator code's custom_code begins with MCUBERT_: such a model must carry the record."""
    codes = (model.OperatorCodes(i).CustomCode() or b"" for i in range(model.OperatorCodesLength()))
    return any(code.startswith(MCUBERT_OP_PREFIX) for code in codes)


def _layout(data: bytes) -> _Layout | None:
    """The record's position and the covered parts, or None when the model has no record.

    Reads through the lazy flatbuffer API: a corrupt offset raises (IndexError, struct.error, ...),
    which the caller reports as a corrupt model. A model with MCUBERT ops and no record raises."""
    model = _root(data)
    record = None
    for i in range(model.MetadataLength()):
        meta = model.Metadata(i)
        if meta.Name() == INTEGRITY_METADATA.encode():
            record = meta.Buffer()
    if record is None:
        if uses_mcubert_ops(model):
            raise IntegrityError(
                f"{INTEGRITY_METADATA}: missing, but the model uses MCUBERT ops: corrupted (its name or "
                "an offset), or exported before the record existed (export it again)"
            )
        return None
    if not 0 <= record < model.BuffersLength():
        raise IntegrityError(f"{INTEGRITY_METADATA}: buffer index {record} is out of range")
    buffers = []
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        buffers.append(buffer.DataAsNumpy().tobytes() if buffer.DataLength() else b"")
    record_table = model.Buffers(record)
    start, length = _vector_start(record_table, 4), record_table.DataLength()
    subgraph = model.Subgraphs(0) if model.SubgraphsLength() else None
    options, names = [], {}
    if subgraph is not None:
        for k in range(subgraph.OperatorsLength()):
            operator = subgraph.Operators(k)
            options.append(operator.CustomOptionsAsNumpy().tobytes() if operator.CustomOptionsLength() else b"")
        for t in range(subgraph.TensorsLength()):
            tensor = subgraph.Tensors(t)
            names.setdefault(tensor.Buffer(), (tensor.Name() or b"").decode("utf-8", "replace") or f"tensor {t}")
    return _Layout(start, length, record, buffers, options, names)


def _file_crc(data: bytes, start: int, length: int) -> int:
    crc = zlib.crc32(data[:start])
    crc = zlib.crc32(bytes(length), crc)
    return zlib.crc32(data[start + length :], crc)


def add_integrity_record(packed: bytes) -> bytes:
    """`packed` (whose INTEGRITY_METADATA buffer holds record_words(...) zero words) with the record filled."""
    layout = _layout(packed)
    if layout is None or layout.length != 4 * record_words(len(layout.buffers), len(layout.options)):
        raise ValueError("add_integrity_record: the model has no zeroed record of the right size")
    buffer_crcs = [0 if i == layout.record_buffer else zlib.crc32(b) for i, b in enumerate(layout.buffers)]
    words = np.array(
        [
            INTEGRITY_MAGIC,
            INTEGRITY_VERSION,
            len(packed),
            _file_crc(packed, layout.start, layout.length),
            len(layout.buffers),
            *buffer_crcs,
            len(layout.options),
            *(zlib.crc32(o) for o in layout.options),
        ],
        dtype="<u4",
    )
    out = bytearray(packed)
    out[layout.start : layout.start + layout.length] = words.tobytes()
    return bytes(out)


def expected_crc32(data: bytes) -> int:
    """What the firmware files record for mcubert_verify_model_expected: the CRC-32 of the file with the
    record's own data read as zeros (the record's word 3), or of the whole file when it has no record."""
    layout = _layout(data)
    return zlib.crc32(data) if layout is None else _file_crc(data, layout.start, layout.length)


def verify_integrity(data: bytes) -> bool:
    """True when the record is present and every byte matches; False when there is no record (a
    model without MCUBERT ops only: one with them must have it).

    Raises IntegrityError naming the first corrupted constant tensor (by its buffer) or operator's
    options, or the structure when neither was hit. Errors of a corrupt flatbuffer (IndexError,
    struct.error, ...) propagate for the caller to report."""
    layout = _layout(data)
    if layout is None:
        return False
    words = np.frombuffer(data[layout.start : layout.start + layout.length], dtype="<u4")
    if layout.length % 4 or words.size < _HEADER_WORDS or words[0] != INTEGRITY_MAGIC:
        raise IntegrityError(f"{INTEGRITY_METADATA}: not an integrity record (corrupted)")
    if words[1] != INTEGRITY_VERSION:
        raise IntegrityError(f"{INTEGRITY_METADATA}: record version {words[1]} (this reader knows {INTEGRITY_VERSION})")
    if words.size != record_words(len(layout.buffers), len(layout.options)) or words[4] != len(layout.buffers):
        raise IntegrityError(
            f"{INTEGRITY_METADATA}: {words.size} words do not match {len(layout.buffers)} "
            f"buffers and {len(layout.options)} operators (corrupted)"
        )
    if words[2] != len(data):
        raise IntegrityError(
            f"the model is {len(data):,} bytes but was exported as {int(words[2]):,} (truncated or padded)"
        )
    if words[3] == _file_crc(data, layout.start, layout.length):
        return True
    buffer_crcs = words[_HEADER_WORDS : _HEADER_WORDS + len(layout.buffers)]
    for i, (expected, raw) in enumerate(zip(buffer_crcs, layout.buffers)):
        if i != layout.record_buffer and expected != zlib.crc32(raw):
            name = layout.tensor_names.get(i, f"buffer {i}")
            raise IntegrityError(
                f"{name}: constant data corrupted (buffer {i}: CRC-32 {zlib.crc32(raw):08x}, "
                f"exported {int(expected):08x})"
            )
    option_crcs = words[_HEADER_WORDS + len(layout.buffers) + 1 :]
    for k, (expected, raw) in enumerate(zip(option_crcs, layout.options)):
        if expected != zlib.crc32(raw):
            raise IntegrityError(f"operator {k}: custom options corrupted")
    raise IntegrityError(
        "the model's structure (tensor table, shapes, quantization or offsets) is corrupted: "
        "its CRC-32 differs from the exported one, but no constant or options did"
    )

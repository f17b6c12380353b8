"""Where the integrity record is, and every byte a verifier reads to find it or to require it (issue 28:
a corruption of any of them must not switch the check off). Shared by the verifier tests and the
mutation campaign (tests/fuzz/mutate_models.py)."""

from __future__ import annotations

import struct
import zlib

from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as schema

from tflm_mcubert.tflite.integrity import INTEGRITY_METADATA

RECORD_HEADER_BYTES = 20  # magic, version, size, file CRC, buffer count: the words the verifiers check


def record_span(data: bytes) -> tuple[int, int]:
    """[start, end) of the record's data bytes."""
    model = schema.Model.GetRootAs(data, 0)
    for i in range(model.MetadataLength()):
        if model.Metadata(i).Name() == INTEGRITY_METADATA.encode():
            buffer = model.Buffers(model.Metadata(i).Buffer())
            start = buffer._tab.Vector(buffer._tab.Offset(4))
            return start, start + buffer.DataLength()
    raise AssertionError("no record")


def _table_bytes(data: bytes, table: int) -> set[int]:
    """The table's soffset, its vtable, and the slots of its present fields (4 bytes each)."""
    (soffset,) = struct.unpack_from("<i", data, table)
    vtable = table - soffset
    vtable_size, _ = struct.unpack_from("<HH", data, vtable)
    found = set(range(table, table + 4)) | set(range(vtable, vtable + vtable_size))
    for slot in range((vtable_size - 4) // 2):
        (field,) = struct.unpack_from("<H", data, vtable + 4 + 2 * slot)
        if field:
            found |= set(range(table + field, table + field + 4))
    return found


def _vector_bytes(data: bytes, table_obj, field_offset: int, element: int, terminator: int = 0) -> set[int]:
    start = table_obj._tab.Vector(table_obj._tab.Offset(field_offset))
    (count,) = struct.unpack_from("<I", data, start - 4)
    return set(range(start - 4, start + count * element + terminator))


def record_path_bytes(data: bytes) -> list[int]:
    """Every byte the verifiers read to find the record and to decide that it must be there: the root
    offset, the root table, the metadata vector and entries with their names, the record's buffer
    entry and header, and the operator codes with their custom_code strings."""
    model = schema.Model.GetRootAs(data, 0)
    found = set(range(0, 4)) | _table_bytes(data, model._tab.Pos)
    found |= _vector_bytes(data, model, 16, 4)  # metadata
    found |= _vector_bytes(data, model, 12, 4)  # buffers (the vector's length and entries)
    found |= _vector_bytes(data, model, 6, 4)  # operator_codes
    for i in range(model.MetadataLength()):
        meta = model.Metadata(i)
        found |= _table_bytes(data, meta._tab.Pos) | _vector_bytes(data, meta, 4, 1, terminator=1)
        buffer = model.Buffers(meta.Buffer())
        found |= _table_bytes(data, buffer._tab.Pos)
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        found |= _table_bytes(data, code._tab.Pos) | _vector_bytes(data, code, 6, 1, terminator=1)
    start, _ = record_span(data)
    found |= set(range(start - 4, start + RECORD_HEADER_BYTES))
    return sorted(found)


def resealed(data: bytes, span: tuple[int, int]) -> bytes | None:
    """`data` (a mutation of the model whose record is at `span`) with the record's size and file CRC
    rewritten to agree with it, as a crafted file or a careless tool would: what is left for the
    verifiers is the structure. None when the record itself is not all in `data`."""
    start, end = span
    if end > len(data):
        return None
    out = bytearray(data)
    struct.pack_into("<I", out, start + 8, len(out))
    crc = zlib.crc32(bytes(end - start), zlib.crc32(out[:start]))
    struct.pack_into("<I", out, start + 12, zlib.crc32(out[end:], crc))
    return bytes(out)

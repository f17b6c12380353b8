"""The C byte-level BPE tokenizer (custom_ops/src/mcubert_bpe_tokenizer*.c) built for this machine and called
through ctypes (the same library as host.py's): what the tests compare with the reference and what
`python -m tflm_mcubert tokenize` runs on a GPT-2 checkpoint.

    tokenizer = HostBpeTokenizer(blob)             # mcubert_bpe_init: a bad blob is a UserError
    ids = tokenizer.encode(b"some text")           # mcubert_bpe_encode
    text = tokenizer.decode(ids, one_at_a_time=True)   # mcubert_bpe_decode + mcubert_utf8_finish
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer.host import _Message, build_library

STATE_BYTES = 1024  # room for a mcubert_bpe_tokenizer (about 330 bytes with 64-bit pointers)


class _Stream(ctypes.Structure):
    _fields_ = [("pending", ctypes.c_uint8 * 4), ("count", ctypes.c_uint32), ("tokens", ctypes.c_uint32)]


class HostBpeTokenizer:
    """One blob, checked by mcubert_bpe_init."""

    def __init__(self, blob: bytes, library: Path | None = None):
        self._lib = ctypes.CDLL(str(library or build_library()))
        for name in ("mcubert_bpe_get_buffer_size", "mcubert_bpe_decode_bound", "mcubert_utf8_finish"):
            getattr(self._lib, name).restype = ctypes.c_uint32
        self._blob = ctypes.create_string_buffer(bytes(blob), len(blob))
        self._state = ctypes.create_string_buffer(STATE_BYTES)
        message = _Message()
        status = self._lib.mcubert_bpe_init(self._state, self._blob, ctypes.c_uint32(len(blob)), ctypes.byref(message))
        if status != 0:
            raise UserError(f"the BPE tokenizer blob was rejected: {message.text.decode(errors='replace')}")
        self.buffer_bytes = int(self._lib.mcubert_bpe_get_buffer_size(self._state))
        self._buffer = (ctypes.c_uint32 * ((self.buffer_bytes + 3) // 4))()

    def encode(self, text: bytes | str, max_ids: int | None = None) -> list[int]:
        raw = text.encode() if isinstance(text, str) else bytes(text)
        capacity = 3 * len(raw) + 1 if max_ids is None else max_ids  # at most 3 ids a byte (U+FFFD)
        ids = np.zeros(max(capacity, 1), np.int32)
        count = ctypes.c_uint32(0)
        message = _Message()
        status = self._lib.mcubert_bpe_encode(
            self._state,
            raw,
            ctypes.c_uint32(len(raw)),
            ids.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_uint32(capacity),
            ctypes.byref(count),
            self._buffer,
            ctypes.c_uint32(self.buffer_bytes),
            ctypes.byref(message),
        )
        if status != 0:
            raise UserError(message.text.decode(errors="replace"))
        return [int(i) for i in ids[: count.value]]

    def decode(self, ids, one_at_a_time: bool = False) -> bytes:
        stream = _Stream()
        groups = [[i] for i in ids] if one_at_a_time else [list(ids)]
        out = b""
        for group in groups:
            out += self.decode_step(group, stream)
        tail = (ctypes.c_uint8 * 3)()
        n = self._lib.mcubert_utf8_finish(ctypes.byref(stream), tail)
        return out + bytes(tail[:n])

    def decode_step(self, ids, stream: _Stream, out_bytes: int | None = None) -> bytes:
        array = np.asarray(ids, np.int32)
        bound = out_bytes if out_bytes is not None else self._lib.mcubert_bpe_decode_bound(self._state, len(array))
        out = (ctypes.c_uint8 * max(bound, 1))()
        written = ctypes.c_uint32(0)
        message = _Message()
        status = self._lib.mcubert_bpe_decode(
            self._state,
            array.ctypes.data_as(ctypes.c_void_p),
            ctypes.c_uint32(len(array)),
            ctypes.byref(stream),
            out,
            ctypes.c_uint32(bound),
            ctypes.byref(written),
            ctypes.byref(message),
        )
        if status != 0:
            raise UserError(message.text.decode(errors="replace"))
        return bytes(out[: written.value])


class HostWordPieceDecoder:
    """One WordPiece detokenizer blob (wordpiece_decode.py), checked by mcubert_wordpiece_decoder_init."""

    def __init__(self, blob: bytes, library: Path | None = None):
        self._lib = ctypes.CDLL(str(library or build_library()))
        self._lib.mcubert_wordpiece_decode_bound.restype = ctypes.c_uint32
        self._blob = ctypes.create_string_buffer(bytes(blob), len(blob))
        self._state = ctypes.create_string_buffer(STATE_BYTES)
        message = _Message()
        status = self._lib.mcubert_wordpiece_decoder_init(
            self._state, self._blob, ctypes.c_uint32(len(blob)), ctypes.byref(message)
        )
        if status != 0:
            raise UserError(f"the WordPiece detokenizer blob was rejected: {message.text.decode(errors='replace')}")

    def decode(self, ids, one_at_a_time: bool = False, out_bytes: int | None = None) -> bytes:
        stream = _Stream()
        groups = [[i] for i in ids] if one_at_a_time else [list(ids)]
        out = b""
        for group in groups:
            array = np.asarray(group, np.int32)
            bound = self._lib.mcubert_wordpiece_decode_bound(self._state, len(array))
            bound = bound if out_bytes is None else out_bytes
            buffer = (ctypes.c_uint8 * max(bound, 1))()
            written = ctypes.c_uint32(0)
            message = _Message()
            status = self._lib.mcubert_wordpiece_decode(
                self._state,
                array.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_uint32(len(array)),
                ctypes.byref(stream),
                buffer,
                ctypes.c_uint32(bound),
                ctypes.byref(written),
                ctypes.byref(message),
            )
            if status != 0:
                raise UserError(message.text.decode(errors="replace"))
            out += bytes(buffer[: written.value])
        return out

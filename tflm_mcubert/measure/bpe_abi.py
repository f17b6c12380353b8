"""The C byte-level BPE tokenizer on an emulated Cortex-M core (measure/arm_emulator.py): the calls the
firmware makes (mcubert_bpe_init, mcubert_bpe_encode, mcubert_bpe_decode one id at a time), for
bit-exactness against the host build and the reference, and for instruction counts and stack use.

    emulated = EmulatedBpeTokenizer(ArmEmulator(elf, "cortex-m7"), blob)
    run = emulated.encode(b"some text", count_instructions=True)   # .ids, .instructions, .stack_bytes
    text = emulated.decode(ids)                                     # streamed, one id a call
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from tflm_mcubert.measure.arm_emulator import ArmEmulator, EmulatorError

STATE_BYTES = 256  # sizeof(mcubert_bpe_tokenizer) on a 32-bit core: about 170 B
MESSAGE_BYTES = 128


@dataclasses.dataclass(frozen=True)
class EmulatedEncode:
    ids: list[int]
    instructions: int | None
    stack_bytes: int


class EmulatedBpeTokenizer:
    """One blob initialised by mcubert_bpe_init inside the emulator."""

    def __init__(self, emu: ArmEmulator, blob: bytes):
        self.emu = emu
        self._blob = emu.put(bytes(blob), align=4)
        self._state = emu.alloc(STATE_BYTES, align=8)
        self._message = emu.alloc(MESSAGE_BYTES, align=4)
        result = emu.call("mcubert_bpe_init", self._state, self._blob, len(blob), self._message)
        if result.value != 0:
            raise EmulatorError(f"mcubert_bpe_init: {self._text()}")
        self.init_stack_bytes = result.stack_bytes
        self.buffer_bytes = emu.call("mcubert_bpe_get_buffer_size", self._state).value
        self._buffer = emu.alloc(self.buffer_bytes, align=4)
        self.step_bound = emu.call("mcubert_bpe_decode_bound", self._state, 1).value

    def _text(self) -> str:
        return self.emu.read(self._message, MESSAGE_BYTES).split(b"\0")[0].decode(errors="replace")

    def encode(self, text: bytes | str, *, count_instructions: bool = False) -> EmulatedEncode:
        raw = text.encode() if isinstance(text, str) else bytes(text)
        capacity = 3 * len(raw) + 1
        mark = self.emu.heap_mark()
        try:
            text_at = self.emu.put(raw or b"\0", align=4)
            ids, count = self.emu.alloc(4 * capacity, align=4), self.emu.alloc(4, align=4)
            result = self.emu.call(
                "mcubert_bpe_encode",
                self._state,
                text_at,
                len(raw),
                ids,
                capacity,
                count,
                self._buffer,
                self.buffer_bytes,
                self._message,
                count_instructions=count_instructions,
            )
            if result.value != 0:
                raise EmulatorError(f"mcubert_bpe_encode: {self._text()}")
            n = struct.unpack("<I", self.emu.read(count, 4))[0]
            out = np.frombuffer(self.emu.read(ids, 4 * n), np.int32).tolist() if n else []
            return EmulatedEncode(out, result.instructions, result.stack_bytes)
        finally:
            self.emu.release(mark)

    def decode(self, ids) -> tuple[bytes, int]:
        """The ids' text, one mcubert_bpe_decode call an id (as generation does), then mcubert_utf8_finish;
        and the most stack a call used."""
        mark = self.emu.heap_mark()
        try:
            stream = self.emu.put(bytes(12), align=4)  # a zeroed mcubert_utf8_stream
            one, out, written = (self.emu.alloc(n, align=4) for n in (4, self.step_bound, 4))
            text, stack = b"", 0
            for token_id in ids:
                self.emu.uc.mem_write(one, struct.pack("<i", token_id))
                result = self.emu.call(
                    "mcubert_bpe_decode", self._state, one, 1, stream, out, self.step_bound, written, self._message
                )
                if result.value != 0:
                    raise EmulatorError(f"mcubert_bpe_decode: {self._text()}")
                n = struct.unpack("<I", self.emu.read(written, 4))[0]
                text += self.emu.read(out, n)
                stack = max(stack, result.stack_bytes)
            n = self.emu.call("mcubert_utf8_finish", stream, out).value
            return text + self.emu.read(out, n), stack
        finally:
            self.emu.release(mark)


class EmulatedWordPieceDecoder:
    """A WordPiece detokenizer blob (tokenizer/wordpiece_decode.py) initialised inside the emulator."""

    def __init__(self, emu: ArmEmulator, blob: bytes):
        self.emu = emu
        self._blob = emu.put(bytes(blob), align=4)
        self._state = emu.alloc(STATE_BYTES, align=8)
        self._message = emu.alloc(MESSAGE_BYTES, align=4)
        result = emu.call("mcubert_wordpiece_decoder_init", self._state, self._blob, len(blob), self._message)
        if result.value != 0:
            raise EmulatorError("mcubert_wordpiece_decoder_init failed")
        self.init_stack_bytes = result.stack_bytes
        self.step_bound = emu.call("mcubert_wordpiece_decode_bound", self._state, 1).value

    def decode(self, ids) -> tuple[bytes, int]:
        """The ids' text, one mcubert_wordpiece_decode call an id; and the most stack a call used."""
        mark = self.emu.heap_mark()
        try:
            stream = self.emu.put(bytes(12), align=4)
            one, out, written = (self.emu.alloc(n, align=4) for n in (4, self.step_bound, 4))
            text, stack = b"", 0
            for token_id in ids:
                self.emu.uc.mem_write(one, struct.pack("<i", token_id))
                result = self.emu.call(
                    "mcubert_wordpiece_decode",
                    self._state,
                    one,
                    1,
                    stream,
                    out,
                    self.step_bound,
                    written,
                    self._message,
                )
                if result.value != 0:
                    raise EmulatorError("mcubert_wordpiece_decode failed")
                text += self.emu.read(out, struct.unpack("<I", self.emu.read(written, 4))[0])
                stack = max(stack, result.stack_bytes)
            return text, stack
        finally:
            self.emu.release(mark)

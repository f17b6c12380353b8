"""The C tokenizer on an emulated Cortex-M core (measure/arm_emulator.py): the same calls the firmware
makes, for bit-exactness against the reference and for instruction counts and stack use.

    emulated = EmulatedTokenizer(ArmEmulator(elf, "cortex-m7"), blob)
    run = emulated.encode(b"some text", 128, count_instructions=True)   # .encoded, .instructions, .stack_bytes
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np

from tflm_mcubert.measure import kernel_build
from tflm_mcubert.measure.arm_emulator import ArmEmulator, EmulatorError
from tflm_mcubert.tokenizer.reference import Encoded

STATE_BYTES = 128  # room for sizeof(mcubert_tokenizer) on a 32-bit core: 104 B with blob v5 (96 with v4)
MESSAGE_BYTES = 128


@dataclasses.dataclass(frozen=True)
class EmulatedRun:
    encoded: Encoded
    instructions: int | None
    stack_bytes: int


class EmulatedTokenizer:
    """One blob initialised by mcubert_tokenizer_init inside the emulator."""

    def __init__(self, emu: ArmEmulator, blob: bytes):
        self.emu = emu
        self._blob = emu.put(bytes(blob), align=4)
        self._state = emu.alloc(STATE_BYTES, align=8)
        self._message = emu.alloc(MESSAGE_BYTES, align=4)
        result = emu.call("mcubert_tokenizer_init", self._state, self._blob, len(blob), self._message)
        if result.value != 0:
            raise EmulatorError(f"mcubert_tokenizer_init: {self._text(self._message)}")
        self.init_stack_bytes = result.stack_bytes
        self.buffer_bytes = emu.call("mcubert_tokenizer_get_buffer_size", self._state).value
        self._buffer = emu.alloc(self.buffer_bytes, align=4)

    def _text(self, address: int) -> str:
        return self.emu.read(address, MESSAGE_BYTES).split(b"\0")[0].decode(errors="replace")

    def encode(
        self, text: bytes | str, seq_len: int, pair: bytes | str | None = None, *, count_instructions: bool = False
    ) -> EmulatedRun:
        raw = text.encode() if isinstance(text, str) else bytes(text)
        raw_pair = pair.encode() if isinstance(pair, str) else (bytes(pair) if pair is not None else None)
        mark = self.emu.heap_mark()
        try:
            text_at = self.emu.put(raw or b"\0", align=4)
            pair_at = self.emu.put(raw_pair or b"\0", align=4) if raw_pair is not None else 0
            ids, types, mask = (self.emu.alloc(n, align=4) for n in (4 * seq_len, 4 * seq_len, seq_len))
            valid = self.emu.alloc(4, align=4)
            result = self.emu.call(
                "mcubert_tokenize",
                self._state,
                text_at,
                len(raw),
                pair_at,
                len(raw_pair) if raw_pair is not None else 0,
                seq_len,
                ids,
                types,
                mask,
                valid,
                self._buffer,
                self.buffer_bytes,
                self._message,
                count_instructions=count_instructions,
            )
            if result.value != 0:
                raise EmulatorError(f"mcubert_tokenize: {self._text(self._message)}")
            encoded = Encoded(
                ids=np.frombuffer(self.emu.read(ids, 4 * seq_len), np.int32).copy(),
                token_types=np.frombuffer(self.emu.read(types, 4 * seq_len), np.int32).copy(),
                mask=np.frombuffer(self.emu.read(mask, seq_len), np.int8).copy(),
                valid=struct.unpack("<I", self.emu.read(valid, 4))[0],
            )
            return EmulatedRun(encoded, result.instructions, result.stack_bytes)
        finally:
            self.emu.release(mark)


def emulator_image(core: str, cache_dir: Path | None = None) -> Path:
    """custom_ops' emulator image (target mcubert_emu) for `core`, built once per source revision into a
    cache directory (measure/kernel_build.py). Raises KernelBuildError (a RuntimeError) saying what is
    missing (cmake, arm-none-eabi-gcc) or what failed."""
    return kernel_build.cached(kernel_build.Variant(core), "mcubert_emu", cache_dir=cache_dir).image("mcubert_emu")


def tokenize_cost(blob: bytes, text: str, seq_len: int, core: str = "cortex-m7") -> dict:
    """Executed instructions and stack of mcubert_tokenize on `text` (and of the blob check), emulated."""
    emulated = EmulatedTokenizer(ArmEmulator(emulator_image(core), core), blob)
    run = emulated.encode(text, seq_len, count_instructions=True)
    return {
        "core": core,
        "tokens": run.encoded.valid,
        "seq_len": seq_len,
        "instructions": run.instructions,
        "stack_bytes": max(run.stack_bytes, emulated.init_stack_bytes),
        "measure": "executed instructions under unicorn (tflm_mcubert/measure/tokenizer_abi.py)",
    }

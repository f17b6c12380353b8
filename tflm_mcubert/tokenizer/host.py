"""The C tokenizer (custom_ops/src/mcubert_tokenizer.c) built for this machine and called through ctypes:
what `python -m tflm_mcubert tokenize` runs and what the tests compare with the reference.

    tokenizer = HostTokenizer(blob)                  # mcubert_tokenizer_init: a bad blob is a UserError
    encoded = tokenizer.encode(b"some text", 128)    # reference.Encoded
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.kernel_sources import custom_ops_dir
from tflm_mcubert.tokenizer.reference import Encoded

SOURCES = (
    "mcubert_tokenizer.c",
    "mcubert_tokenizer_text.c",
    "mcubert_tokenizer_pieces.c",
    "mcubert_crc32.c",
    "mcubert_validate.c",
    "mcubert_bpe_tokenizer.c",
    "mcubert_bpe_tokenizer_encode.c",
    "mcubert_utf8_stream.c",
    "mcubert_wordpiece_decode.c",
)
STATE_BYTES = 512  # room for a mcubert_tokenizer (about 200 bytes with 64-bit pointers)


class _Message(ctypes.Structure):
    _fields_ = [("text", ctypes.c_char * 128)]


def build_library(out_dir: Path | None = None, extra_flags: tuple[str, ...] = ()) -> Path:
    """libmcubert_tokenizer.so from the package's C sources (cached by their hash and the flags)."""
    root = custom_ops_dir()
    sources = [root / "src" / name for name in SOURCES]
    headers = sorted((root / "src").glob("*.h")) + sorted((root / "include" / "mcubert").glob("*.h"))
    digest = hashlib.sha256(" ".join(extra_flags).encode())
    for path in sources + headers:
        digest.update(path.read_bytes())
    out_dir = out_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tflm_mcubert"
    library = Path(out_dir) / f"libmcubert_tokenizer-{digest.hexdigest()[:16]}.so"
    if library.is_file():
        return library
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise UserError("no C compiler (cc or gcc) to build the host tokenizer: install gcc, or set CC")
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        built = Path(tmp) / library.name
        command = [compiler, "-std=c99", "-O2", "-g", "-shared", "-fPIC", *extra_flags]
        command += ["-I", str(root / "include"), "-I", str(root / "src"), *map(str, sources), "-o", str(built)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise UserError(f"building the host tokenizer failed:\n{result.stderr[-2000:]}")
        os.replace(built, library)
    return library


class HostTokenizer:
    """One blob, checked by mcubert_tokenizer_init, tokenized by mcubert_tokenize."""

    def __init__(self, blob: bytes, library: Path | None = None):
        self._lib = ctypes.CDLL(str(library or build_library()))
        self._lib.mcubert_tokenizer_get_buffer_size.restype = ctypes.c_uint32
        self._blob = ctypes.create_string_buffer(bytes(blob), len(blob))
        self._state = ctypes.create_string_buffer(STATE_BYTES)
        message = _Message()
        status = self._lib.mcubert_tokenizer_init(
            self._state, self._blob, ctypes.c_uint32(len(blob)), ctypes.byref(message)
        )
        if status != 0:
            raise UserError(f"the tokenizer blob was rejected: {message.text.decode(errors='replace')}")
        self.buffer_bytes = int(self._lib.mcubert_tokenizer_get_buffer_size(self._state))
        self._buffer = (ctypes.c_uint32 * ((self.buffer_bytes + 3) // 4))()

    def encode(self, text: bytes | str, seq_len: int, pair: bytes | str | None = None) -> Encoded:
        raw = text.encode() if isinstance(text, str) else bytes(text)
        raw_pair = pair.encode() if isinstance(pair, str) else (bytes(pair) if pair is not None else None)
        ids = np.zeros(seq_len, np.int32)
        types = np.zeros(seq_len, np.int32)
        mask = np.zeros(seq_len, np.int8)
        valid = ctypes.c_uint32(0)
        message = _Message()
        status = self._lib.mcubert_tokenize(
            self._state,
            raw,
            ctypes.c_uint32(len(raw)),
            raw_pair,
            ctypes.c_uint32(len(raw_pair) if raw_pair is not None else 0),
            ctypes.c_uint32(seq_len),
            ids.ctypes.data_as(ctypes.c_void_p),
            types.ctypes.data_as(ctypes.c_void_p),
            mask.ctypes.data_as(ctypes.c_void_p),
            ctypes.byref(valid),
            self._buffer,
            ctypes.c_uint32(self.buffer_bytes),
            ctypes.byref(message),
        )
        if status != 0:
            raise UserError(message.text.decode(errors="replace"))
        return Encoded(ids=ids, token_types=types, mask=mask, valid=int(valid.value))

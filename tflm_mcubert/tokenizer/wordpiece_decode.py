"""The WordPiece detokenizer's table (ids -> text on the device, custom_ops/include/mcubert/mcubert_wordpiece_decode.h)
and its reference: Hugging Face's decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False),
that is the checkpoint's WordPiece decoder ('##' continuations joined, a space before every other token,
its own per-token `cleanup` when tokenizer.json says so) without transformers' extra whole-text clean-up.

The tokenizer blob (vocab_blob.py) holds only the pieces text can produce, sorted for lookup by bytes;
decoding needs every id, by id, so this is a second, small blob:

    header (32 B)  magic "MCWD", version, header bytes, total size, CRC-32 of bytes 16.., vocab size,
                   entries offset, blocks offset, bytes offset
    entries        u16 [vocab size]: the id's byte length | flags << 8 (1 special: skipped; 2 '##'
                   continuation: its first two bytes dropped after the first token; 4 glued: no space
                   before it after the first token, where the decoder's cleanup removes it: ". , ! ?")
    blocks         u32 [ceil(vocab size / 32)]: where the bytes of ids 32k, 32k + 1, ... start
    bytes          each id's text as the decoder writes it first (UTF-8)

An id's bytes are found from its block's start and the lengths of at most 31 ids before it.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib

import numpy as np

from tflm_mcubert.errors import UserError

MAGIC = b"MCWD"
VERSION = 1
HEADER_BYTES = 32
BLOCK = 32
FLAG_SPECIAL, FLAG_CONTINUATION, FLAG_GLUED = 1, 2, 4
_HEADER = struct.Struct("<4sHHIIIIII")
assert _HEADER.size == HEADER_BYTES
PREFIX = "##"


@dataclasses.dataclass(frozen=True)
class DecodeSpec:
    tokens: tuple[bytes, ...]  # [vocab size] each id's text as the first token
    flags: tuple[int, ...]


def cleanup(text: str) -> str:
    """`tokenizers`' WordPiece decoder cleanup (decoders/wordpiece.rs), applied to each token."""
    for dirty, clean in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" do not", " don't"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(dirty, clean)
    return text


def _entry(token: str, special: bool, clean: bool) -> tuple[bytes, int]:
    tidy = cleanup if clean else (lambda s: s)
    first = tidy(token)
    if token.startswith(PREFIX):
        later, flags = tidy(token[len(PREFIX) :]), FLAG_CONTINUATION
        ok = first.startswith(PREFIX) and later == first[len(PREFIX) :]
    else:
        later = tidy(" " + token)
        flags = FLAG_GLUED if later == first else 0
        ok = later in (first, " " + first)
    if not ok or len(first.encode()) > 255:
        raise UserError(
            f"the token {token!r} decodes as {first!r} first and {later!r} after others: the on-device "
            "detokenizer writes a token as itself, without '##', or after a space (and up to 255 bytes)"
        )
    return first.encode(), flags | (FLAG_SPECIAL if special else 0)


def spec_from_hf(tokenizer, permutation: np.ndarray | None = None) -> DecodeSpec:
    """The table of a Hugging Face WordPiece tokenizer (fast), ids mapped through `permutation`."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    config = json.loads(backend.to_str())
    decoder = config.get("decoder") or {}
    if decoder.get("type") != "WordPiece" or decoder.get("prefix", PREFIX) != PREFIX:
        raise UserError(f"the WordPiece detokenizer reproduces the WordPiece decoder with '##', not {decoder}")
    special = {i for i, token in backend.get_added_tokens_decoder().items() if token.special}
    size = max(backend.get_vocab(with_added_tokens=True).values()) + 1
    tokens, flags = [b""] * size, [FLAG_SPECIAL] * size  # an id no token has decodes to nothing
    for token_id in range(size):
        token = backend.id_to_token(token_id)  # (a normalized added token: as the normalizer wrote it)
        if token is None:
            continue
        new_id = int(permutation[token_id]) if permutation is not None else token_id
        tokens[new_id], flags[new_id] = _entry(token, token_id in special, bool(decoder.get("cleanup", True)))
    return DecodeSpec(tuple(tokens), tuple(flags))


def decode(spec: DecodeSpec, ids) -> bytes:
    """What the device writes for `ids` (all at once or one at a time: the same)."""
    out, written = b"", 0
    for token_id in ids:
        if not 0 <= token_id < len(spec.tokens):
            raise ValueError(f"id {token_id} is not below the vocabulary size {len(spec.tokens)}")
        token, flags = spec.tokens[token_id], spec.flags[token_id]
        if flags & FLAG_SPECIAL:
            continue
        if written and flags & FLAG_CONTINUATION:
            token = token[len(PREFIX) :]
        elif written and not flags & FLAG_GLUED:
            token = b" " + token
        out += token
        written += 1
    return out


def pack(spec: DecodeSpec) -> bytes:
    n = len(spec.tokens)
    entries = struct.pack(f"<{n}H", *(len(t) | f << 8 for t, f in zip(spec.tokens, spec.flags)))
    starts, at = [], 0
    for i, token in enumerate(spec.tokens):
        if i % BLOCK == 0:
            starts.append(at)
        at += len(token)
    entries_at = HEADER_BYTES
    blocks_at = entries_at + len(entries) + (-len(entries) % 4)
    bytes_at = blocks_at + 4 * len(starts)
    body = bytearray(HEADER_BYTES) + entries + bytes(-len(entries) % 4) + struct.pack(f"<{len(starts)}I", *starts)
    body += b"".join(spec.tokens) + bytes(-at % 4)
    body[:HEADER_BYTES] = _HEADER.pack(MAGIC, VERSION, HEADER_BYTES, len(body), 0, n, entries_at, blocks_at, bytes_at)
    struct.pack_into("<I", body, 12, zlib.crc32(bytes(body[16:])))
    return bytes(body)


def unpack(blob: bytes) -> DecodeSpec:
    if len(blob) < HEADER_BYTES or blob[:4] != MAGIC:
        raise UserError("not a WordPiece detokenizer blob (no 'MCWD' header)")
    _, version, header, size, crc, n, entries_at, _, bytes_at = _HEADER.unpack_from(blob)
    if version != VERSION or header != HEADER_BYTES:
        raise UserError(f"WordPiece detokenizer blob version {version}; this package reads {VERSION}")
    if size != len(blob) or zlib.crc32(blob[16:]) != crc:
        raise UserError("the WordPiece detokenizer blob is truncated or corrupted (size or CRC-32 mismatch)")
    entries = struct.unpack_from(f"<{n}H", blob, entries_at)
    tokens, at = [], bytes_at
    for entry in entries:
        tokens.append(blob[at : at + (entry & 0xFF)])
        at += entry & 0xFF
    return DecodeSpec(tuple(tokens), tuple(entry >> 8 for entry in entries))

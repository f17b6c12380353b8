"""The tokenizer blob the device reads from Flash: the character table, the special tokens and the
WordPiece vocabulary, packed (custom_ops/include/mcubert/mcubert_tokenizer.h reads the same layout).

Little-endian, sections 4-byte aligned, offsets from the blob's start:

    header (64 B)    magic "MCTK", version, total size, CRC-32 of bytes 16.., limits, special ids, offsets
    char ranges      48 bits: start | kind << 21 | mode << 23 | value << 25 (22 bits, signed; any
                     code point or delta fits)                       (unicode_table.CharRange)
    strings          u16 end offsets, then the UTF-8 bytes            (unicode_table.UnicodeTable.strings)
    special tokens   u8 length, the raw text ("[CLS]"), u16 id        (matched in the input before anything)
    word pieces      a list group of the pieces that start a word
    '##' pieces      a list group of the continuations, '##' dropped

A list group is u32 n (<= MAX_LISTS), u32 [n] blob offsets of its piece lists. A piece list
(tokenizer/piece_list.py) is sorted by UTF-8 bytes, front-coded in buckets of 32 and Huffman-coded. A
lookup binary-searches each list's bucket heads and decodes one bucket per list.

Ids are implicit (version 3): the export numbers each embedding cluster's pieces in byte order
(export/id_order.py), so each cluster's word pieces and its continuations are one list each whose ids are
base, base + 1, ... and no id is stored (those lists use buckets of 16: a lookup searches each). A
vocabulary whose ids are not in that order (a checkpoint's own tokenizer, an export that could not
reorder) splits into more runs than MAX_LISTS, or into runs whose code tables cost more than the ids:
it gets one list with explicit ids of the vocabulary's bit width, as version 2 stored them. Versions 1
and 2 are refused.

Only the pieces the tokenizer can produce are stored: a piece with a character no code point
normalizes to (upper case in an uncased vocabulary), or several characters one of which is a word of
its own (punctuation), never matches, so leaving it out changes no id.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import piece_list
from tflm_mcubert.tokenizer.unicode_table import (
    KIND_ISOLATE,
    KIND_LETTER,
    CharRange,
    UnicodeTable,
    apply_rule,
)

MAGIC = b"MCTK"
VERSION = 3
MAX_LISTS = 16  # per group: a lookup searches every list, so only a handful of clusters pay off
HEADER_BYTES = 64
RANGE_BYTES = 6
RANGE_VALUE_LIMIT = 1 << 21
_HEADER = struct.Struct("<4sHHII HH HHHH II II I II II")  # 64 bytes with the trailing reserved word
SPECIAL_NAMES = ("cls", "sep", "pad", "unk")
assert _HEADER.size == HEADER_BYTES


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """Everything the device tokenizer needs, in the export's id space."""

    table: UnicodeTable
    word_pieces: dict[str, int]  # pieces that start a word
    continuation_pieces: dict[str, int]  # '##' pieces, without the '##'
    specials: dict[str, int]  # cls, sep, pad, unk -> id
    special_tokens: dict[str, int]  # raw text matched in the input ("[CLS]", "[MASK]", ...) -> id
    max_chars_per_word: int
    vocab_size: int  # ids are < vocab_size

    @property
    def max_piece_bytes(self) -> int:
        return max(len(p.encode()) for p in [*self.word_pieces, *self.continuation_pieces])


def _align(blob: bytearray) -> None:
    blob.extend(bytes(-len(blob) % 4))


def id_runs(pieces: dict[str, int]) -> list[dict[str, int]]:
    """The pieces cut into runs of consecutive ids in byte order (each run a list with implicit ids)."""
    runs, previous = [], None
    for piece, piece_id in sorted(pieces.items(), key=lambda item: item[1]):
        if previous is None or piece_id != previous[1] + 1 or piece.encode() <= previous[0].encode():
            runs.append({})
        runs[-1][piece] = piece_id
        previous = (piece, piece_id)
    return runs


def _pack_group(body: bytearray, pieces: dict[str, int], id_bits: int) -> None:
    runs = id_runs(pieces)
    packed = [piece_list.pack(pieces, id_bits)]
    if len(runs) <= MAX_LISTS:
        shift = piece_list.BUCKET_SHIFT - (len(runs) > 1)  # several lists: each searched, so scan less of each
        implicit = [piece_list.pack(run, 0, shift) for run in runs]
        # Each list has its own code tables: a small vocabulary whose ids happen to fall into a few runs
        # is smaller (and as fast) with one explicit list.
        if sum(map(len, implicit)) + 4 * len(implicit) < len(packed[0]) + 4:
            packed = implicit
    at = len(body) + 4 + 4 * len(packed)
    offsets = []
    for data in packed:
        offsets.append(at)
        at += len(data)
    body += struct.pack(f"<I{len(packed)}I", len(packed), *offsets) + b"".join(packed)


def _unpack_group(blob: bytes, at: int) -> dict[str, int]:
    (count,) = struct.unpack_from("<I", blob, at)
    pieces = {}
    for offset in struct.unpack_from(f"<{count}I", blob, at + 4):
        pieces.update(piece_list.unpack(blob, offset))
    return pieces


def pack(spec: TokenizerSpec) -> bytes:
    if spec.vocab_size > 0xFFFF:
        raise UserError(f"the on-device tokenizer stores 16-bit ids; this vocabulary has {spec.vocab_size}")
    body = bytearray(HEADER_BYTES)
    ranges_at = len(body)
    for r in spec.table.ranges:
        if not -RANGE_VALUE_LIMIT <= r.value < RANGE_VALUE_LIMIT:
            raise UserError(f"a character range's value {r.value} does not fit the blob's 22 bits")
        word = r.start | r.kind << 21 | r.mode << 23 | (r.value & (2 * RANGE_VALUE_LIMIT - 1)) << 25
        body += word.to_bytes(RANGE_BYTES, "little")
    _align(body)
    strings_at = len(body)
    encoded = [s.encode() for s in spec.table.strings]
    ends, end = [], 0
    for s in encoded:
        end += len(s)
        ends.append(end)
    body += struct.pack(f"<{len(ends)}H", *ends) + b"".join(encoded)
    _align(body)
    specials_at = len(body)
    for text, special_id in spec.special_tokens.items():
        raw = text.encode()
        body += bytes([len(raw)]) + raw + struct.pack("<H", special_id)
    _align(body)
    word_at = len(body)
    id_bits = max(1, (spec.vocab_size - 1).bit_length())
    _pack_group(body, spec.word_pieces, id_bits)
    continuation_at = len(body)
    _pack_group(body, spec.continuation_pieces, id_bits)
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        HEADER_BYTES,
        len(body),
        0,
        spec.max_chars_per_word,
        len(spec.special_tokens),
        *(spec.specials[name] for name in SPECIAL_NAMES),
        len(spec.table.ranges),
        ranges_at,
        len(spec.table.strings),
        strings_at,
        specials_at,
        word_at,
        continuation_at,
        spec.vocab_size,
        spec.max_piece_bytes,
    )
    body[: len(header)] = header
    struct.pack_into("<I", body, 12, zlib.crc32(bytes(body[16:])))
    return bytes(body)


def unpack(blob: bytes) -> TokenizerSpec:
    """The spec a blob holds; UserError naming the problem for one that is not a valid blob."""
    if len(blob) < HEADER_BYTES or blob[:4] != MAGIC:
        raise UserError("not a tokenizer blob (no 'MCTK' header)")
    fields = _HEADER.unpack_from(blob, 0)
    _, version, header_bytes, total, crc, max_chars, n_special, cls, sep, pad, unk = fields[:11]
    n_ranges, ranges_at, n_strings, strings_at, specials_at, word_at, continuation_at, vocab_size, _ = fields[11:]
    if version != VERSION or header_bytes != HEADER_BYTES:
        raise UserError(f"tokenizer blob version {version} (header {header_bytes} B); this package reads {VERSION}")
    if total != len(blob) or zlib.crc32(blob[16:]) != crc:
        raise UserError("the tokenizer blob is truncated or corrupted (size or CRC-32 mismatch)")
    ranges = []
    for i in range(n_ranges):
        word = int.from_bytes(blob[ranges_at + RANGE_BYTES * i : ranges_at + RANGE_BYTES * (i + 1)], "little")
        value = ((word >> 25) ^ RANGE_VALUE_LIMIT) - RANGE_VALUE_LIMIT  # sign-extend 22 bits
        ranges.append(CharRange(word & 0x1FFFFF, (word >> 21) & 3, (word >> 23) & 3, value))
    ends = struct.unpack_from(f"<{n_strings}H", blob, strings_at)
    pool_at = strings_at + 2 * n_strings
    strings, begin = [], 0
    for end in ends:
        strings.append(blob[pool_at + begin : pool_at + end].decode())
        begin = end
    special_tokens, at = {}, specials_at
    for _ in range(n_special):
        length = blob[at]
        special_tokens[blob[at + 1 : at + 1 + length].decode()] = struct.unpack_from("<H", blob, at + 1 + length)[0]
        at += 3 + length
    return TokenizerSpec(
        table=UnicodeTable(tuple(ranges), tuple(strings)),
        word_pieces=_unpack_group(blob, word_at),
        continuation_pieces=_unpack_group(blob, continuation_at),
        specials=dict(zip(SPECIAL_NAMES, (cls, sep, pad, unk))),
        special_tokens=special_tokens,
        max_chars_per_word=max_chars,
        vocab_size=vocab_size,
    )


def producible_characters(table: UnicodeTable, alphabet: set[str]) -> tuple[set[str], set[str]]:
    """(characters a word can hold, characters that are words of their own), within `alphabet`."""
    letters, isolated = set(), set()
    for index, r in enumerate(table.ranges):
        if r.kind not in (KIND_LETTER, KIND_ISOLATE):
            continue
        end = table.ranges[index + 1].start if index + 1 < len(table.ranges) else 0x110000
        target = letters if r.kind == KIND_LETTER else isolated
        if r.mode == 0:  # delta: only the alphabet's characters can matter
            for ch in alphabet:
                if r.start <= ord(ch) - r.value < end:
                    target.add(ch)
        else:
            for cp in (r.start,) if r.mode != 3 else range(r.start, end):
                mapped = apply_rule(r.kind, r.mode, r.value, cp, table.strings)
                target.update(ch for ch in mapped if ch in alphabet)
    return letters, isolated

"""The tokenizer blob the device reads from Flash: the character table, the special tokens and the
WordPiece vocabulary, packed (custom_ops/include/mcubert/mcubert_tokenizer.h reads the same layout).

Little-endian, sections 4-byte aligned, offsets from the blob's start:

    header (80 B)    magic "MCTK", version, total size, CRC-32 of bytes 16.., limits, special ids (u32), offsets
    char ranges      code points [start, next start) share a rule (unicode_table.CharRange):
                     rules      u32 [rule count]: kind | mode << 2 | value << 4 (value 22 bits, signed:
                                any code point or delta fits)
                     planes     u16 [18]: the index of each plane's first range (every plane 0..16 has
                                one starting at its first code point), then the range count
                     starts     u16 [ranges]: each range's start less its plane's first code point
                     rule index u8 [ranges] (u16 when there are more than 256 rules)
    strings          u16 end offsets, then the UTF-8 bytes            (unicode_table.UnicodeTable.strings)
    added tokens     u8 flags (1: normalized), u8 length, the text, u32 id (matched in the input before
                     anything: the raw text as written ("[CLS]", "<s>"), or a normalized token's text as
                     the normalizer writes it ("[url]"), matched against the input's normalized characters)
    combining marks  u32 code point << 8 | canonical combining class, sorted: the marks the device reorders
    code sets        the Huffman codes the piece lists share (piece_list.py): one for the blob, or one per
                     kind, whichever is smaller
    word pieces      a list group of the pieces that start a word
    '##' pieces      a list group of the continuations, '##' dropped

A list group is u32 n (<= MAX_LISTS), u32 [n] blob offsets of its piece lists. A piece list
(tokenizer/piece_list.py) is sorted by UTF-8 bytes, front-coded in buckets of 16 and Huffman-coded with
its code set. A lookup binary-searches each list's bucket heads and decodes one bucket per list; a miss
also tells how long a prefix of the query any piece can match, so greedy longest-match skips the lengths
that cannot.

Ids are implicit: the export numbers each embedding cluster's pieces in byte order (export/id_order.py),
so each cluster's word pieces and its continuations are one list each whose ids are base, base + 1, ...
and no id is stored. A vocabulary whose ids are not in that order (a checkpoint's own tokenizer, an
export that could not reorder) splits into more runs than MAX_LISTS, or into runs that cost more than
the ids: it gets one list with explicit ids of the vocabulary's bit width. Version 4 shares
the code tables and stores the character ranges in 3 bytes instead of 6 (the measured pruned export's blob:
47,156 B in version 3, 38,880 B in version 4). Version 5 (this one) stores every added token of the
checkpoint's tokenizer with its `normalized` flag, 32-bit ids (vocabularies of up to 2^24 pieces) and the
combining classes of the marks the normalizer reorders;
versions 1 to 4 are refused with a message to export again.

Only the pieces the tokenizer can produce are stored: a piece with a character no code point
normalizes to (upper case in an uncased vocabulary), or several characters one of which is a word of
its own (punctuation), never matches, so leaving it out changes no id.
"""

from __future__ import annotations

import collections
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
VERSION = 5
MAX_LISTS = 16  # per group: a lookup searches every list, so only a handful of clusters pay off
HEADER_BYTES = 80
RANGE_VALUE_LIMIT = 1 << 21
PLANES = 17  # Unicode's planes: every one starts a range, so a range start is 16 bits
MAX_VOCAB = 1 << 24  # ids are u32 in the header, at most 24 bits in a piece list
MAX_CHARS_PER_WORD = 1000  # the word buffer (6 B a character) is the caller's RAM
FLAG_NORMALIZED = 1
_HEADER = struct.Struct("<4sHHII HH HH IIII IIII IIII II")
assert _HEADER.size == HEADER_BYTES
SPECIAL_NAMES = ("cls", "sep", "pad", "unk")


@dataclasses.dataclass(frozen=True)
class AddedToken:
    """One added token as the device matches it: `text` is the token's content when it is matched on the
    raw input, or the normalizer's output of it when `normalized` (matched on the normalized input)."""

    text: str
    id: int
    normalized: bool


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
    """Everything the device tokenizer needs, in the export's id space."""

    table: UnicodeTable
    word_pieces: dict[str, int]  # pieces that start a word
    continuation_pieces: dict[str, int]  # '##' pieces, without the '##'
    specials: dict[str, int]  # cls, sep, pad, unk -> id
    added_tokens: tuple[AddedToken, ...]  # matched in the input before anything ("[CLS]", "<s>", "[url]")
    max_chars_per_word: int
    vocab_size: int  # ids are < vocab_size
    # The canonical combining class of each mark the normalizer reorders (NFD, when it strips accents) and
    # the vocabulary holds: a mark moves before the marks of a higher class it follows (unicode_table).
    combining_classes: dict[str, int] = dataclasses.field(default_factory=dict)

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


def _group_lists(pieces: dict[str, int], id_bits: int) -> list[tuple[dict[str, int], int]]:
    """(pieces, id bits) of the lists a group stores: one implicit list per run of byte-ordered ids, or
    one list with explicit ids when there are too many runs or they cost more than the ids would."""
    runs = id_runs(pieces)
    explicit = [(pieces, id_bits)]
    if len(runs) > MAX_LISTS:
        return explicit
    implicit = [(run, 0) for run in runs]
    if len(pieces) * id_bits >= 8 * 64 * len(runs):  # the ids cost more than any list's overhead
        return implicit
    return implicit if _lists_bytes(implicit) < _lists_bytes(explicit) else explicit


def _counts(lists) -> list:
    total = [collections.Counter() for _ in range(piece_list.CODES)]
    for pieces, _ in lists:
        for k, counts in enumerate(piece_list.symbol_counts(pieces)):
            total[k] += counts
    return total


def _lists_bytes(lists) -> int:
    """Bytes of `lists` with a code set of their own."""
    codes = piece_list.code_set(_counts(lists))
    return len(piece_list.pack_code_set(codes)) + sum(len(piece_list.pack(p, bits, codes, 0)) + 4 for p, bits in lists)


def _pack_pieces(body: bytearray, spec: TokenizerSpec, id_bits: int) -> tuple[int, int]:
    """Appends the code sets and both list groups; (word group's offset, continuation group's)."""
    groups = [_group_lists(spec.word_pieces, id_bits), _group_lists(spec.continuation_pieces, id_bits)]
    sets_at = len(body)  # one code set for both groups, or one each: whichever is smaller
    one = [piece_list.code_set(_counts(groups[0] + groups[1]))]
    two = [piece_list.code_set(_counts(group)) for group in groups]
    candidates = []
    for sets in (one, two):
        packed_sets = [piece_list.pack_code_set(codes) for codes in sets]
        set_at = [sets_at + sum(map(len, packed_sets[:k])) for k in range(len(sets))]
        lists = [
            [piece_list.pack(pieces, bits, sets[g % len(sets)], set_at[g % len(sets)]) for pieces, bits in group]
            for g, group in enumerate(groups)
        ]
        candidates.append(
            (sum(map(len, packed_sets)) + sum(len(d) for group in lists for d in group), packed_sets, lists)
        )
    _, packed_sets, lists = min(candidates, key=lambda c: c[0])
    body += b"".join(packed_sets)
    group_at = []
    for group in lists:
        group_at.append(len(body))
        at = len(body) + 4 + 4 * len(group)
        offsets = []
        for data in group:
            offsets.append(at)
            at += len(data)
        body += struct.pack(f"<I{len(group)}I", len(group), *offsets) + b"".join(group)
    return group_at[0], group_at[1]


def _unpack_group(blob: bytes, at: int) -> dict[str, int]:
    (count,) = struct.unpack_from("<I", blob, at)
    pieces = {}
    for offset in struct.unpack_from(f"<{count}I", blob, at + 4):
        pieces.update(piece_list.unpack(blob, offset))
    return pieces


def _plane_split(ranges) -> list[CharRange]:
    """The ranges with one starting at each plane's first code point (the rule of the range it splits)."""
    out = []
    for index, r in enumerate(ranges):
        end = ranges[index + 1].start if index + 1 < len(ranges) else PLANES << 16
        out.append(r)
        for plane in range((r.start >> 16) + 1, ((end - 1) >> 16) + 1):
            out.append(dataclasses.replace(r, start=plane << 16))
    return out


def _pack_ranges(body: bytearray, ranges) -> tuple[int, int]:
    """Appends the character ranges; (range count, rule count)."""
    ranges = _plane_split(ranges)
    rules: dict[int, int] = {}
    for r in ranges:
        if not -RANGE_VALUE_LIMIT <= r.value < RANGE_VALUE_LIMIT:
            raise UserError(f"a character range's value {r.value} does not fit the blob's 22 bits")
        rules.setdefault(r.kind | r.mode << 2 | (r.value & (2 * RANGE_VALUE_LIMIT - 1)) << 4, len(rules))
    if len(ranges) > 0xFFFF or len(rules) > 0xFFFF:
        raise UserError(f"{len(ranges)} character ranges, {len(rules)} rules: more than the blob's 16-bit counts")
    planes = [sum(1 for r in ranges if r.start >> 16 < plane) for plane in range(PLANES)] + [len(ranges)]
    index_format = "B" if len(rules) <= 256 else "H"
    body += struct.pack(f"<{len(rules)}I", *rules)
    body += struct.pack(f"<{PLANES + 1}H", *planes)
    body += struct.pack(f"<{len(ranges)}H", *(r.start & 0xFFFF for r in ranges))
    body += struct.pack(
        f"<{len(ranges)}{index_format}",
        *(rules[r.kind | r.mode << 2 | (r.value & (2 * RANGE_VALUE_LIMIT - 1)) << 4] for r in ranges),
    )
    return len(ranges), len(rules)


def _unpack_ranges(blob: bytes, at: int, n_ranges: int, n_rules: int) -> tuple[CharRange, ...]:
    rules = struct.unpack_from(f"<{n_rules}I", blob, at)
    at += 4 * n_rules
    planes = struct.unpack_from(f"<{PLANES + 1}H", blob, at)
    at += 2 * (PLANES + 1)
    starts = struct.unpack_from(f"<{n_ranges}H", blob, at)
    index = struct.unpack_from(f"<{n_ranges}{'B' if n_rules <= 256 else 'H'}", blob, at + 2 * n_ranges)
    ranges: list[CharRange] = []
    for plane in range(PLANES):
        for i in range(planes[plane], planes[plane + 1]):
            rule = rules[index[i]]
            value = ((rule >> 4) ^ RANGE_VALUE_LIMIT) - RANGE_VALUE_LIMIT  # sign-extend 22 bits
            r = CharRange(plane << 16 | starts[i], rule & 3, (rule >> 2) & 3, value)
            if ranges and (ranges[-1].kind, ranges[-1].mode, ranges[-1].value) == (r.kind, r.mode, r.value):
                continue  # a plane's split (_plane_split)
            ranges.append(r)
    return tuple(ranges)


def _check_limits(spec: TokenizerSpec) -> None:
    if spec.vocab_size > MAX_VOCAB:
        raise UserError(
            f"the on-device tokenizer holds up to {MAX_VOCAB:,} pieces; this vocabulary has {spec.vocab_size:,}"
        )
    if not 1 <= spec.max_chars_per_word <= MAX_CHARS_PER_WORD:
        raise UserError(
            f"max_input_chars_per_word {spec.max_chars_per_word} is outside the on-device tokenizer's 1.."
            f"{MAX_CHARS_PER_WORD} (its word buffer is the caller's RAM)"
        )
    for token in spec.added_tokens:
        if not 0 < len(token.text.encode()) <= 255:
            raise UserError(f"the added token {token.text!r} is empty or longer than 255 bytes")


def _pack_added_tokens(tokens) -> bytes:
    out = bytearray()
    for token in tokens:
        raw = token.text.encode()
        out += bytes([FLAG_NORMALIZED if token.normalized else 0, len(raw)]) + raw + struct.pack("<I", token.id)
    return bytes(out)


def _unpack_added_tokens(blob: bytes, at: int, count: int) -> tuple[AddedToken, ...]:
    tokens = []
    for _ in range(count):
        flags, length = blob[at], blob[at + 1]
        (token_id,) = struct.unpack_from("<I", blob, at + 2 + length)
        tokens.append(AddedToken(blob[at + 2 : at + 2 + length].decode(), token_id, bool(flags & FLAG_NORMALIZED)))
        at += 6 + length
    return tuple(tokens)


def pack(spec: TokenizerSpec) -> bytes:
    _check_limits(spec)
    body = bytearray(HEADER_BYTES)
    ranges_at = len(body)
    n_ranges, n_rules = _pack_ranges(body, spec.table.ranges)
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
    body += _pack_added_tokens(spec.added_tokens)
    _align(body)
    combining_at = len(body)
    marks = sorted((ord(ch), ccc) for ch, ccc in spec.combining_classes.items())
    body += struct.pack(f"<{len(marks)}I", *(cp << 8 | ccc for cp, ccc in marks))
    id_bits = max(1, (spec.vocab_size - 1).bit_length())
    word_at, continuation_at = _pack_pieces(body, spec, id_bits)
    header = _HEADER.pack(
        MAGIC,
        VERSION,
        HEADER_BYTES,
        len(body),
        0,
        spec.max_chars_per_word,
        len(spec.added_tokens),
        n_ranges,
        n_rules,
        *(spec.specials[name] for name in SPECIAL_NAMES),
        ranges_at,
        len(spec.table.strings),
        strings_at,
        specials_at,
        word_at,
        continuation_at,
        spec.vocab_size,
        spec.max_piece_bytes,
        combining_at,
        len(marks),
    )
    body[: len(header)] = header
    struct.pack_into("<I", body, 12, zlib.crc32(bytes(body[16:])))
    return bytes(body)


def unpack(blob: bytes) -> TokenizerSpec:
    """The spec a blob holds; UserError naming the problem for one that is not a valid blob."""
    if len(blob) < 8 or blob[:4] != MAGIC:
        raise UserError("not a tokenizer blob (no 'MCTK' header)")
    _, version, header_bytes = struct.unpack_from("<4sHH", blob, 0)
    if version != VERSION or header_bytes != HEADER_BYTES or len(blob) < HEADER_BYTES:
        raise UserError(
            f"tokenizer blob version {version} (header {header_bytes} B); this package reads {VERSION}: "
            "export the model again"
        )
    fields = _HEADER.unpack_from(blob, 0)
    total, crc, max_chars, n_added, n_ranges, n_rules = fields[3:9]
    cls, sep, pad, unk = fields[9:13]
    ranges_at, n_strings, strings_at, specials_at, word_at, continuation_at, vocab_size = fields[13:20]
    combining_at, n_marks = fields[21:23]
    if total != len(blob) or zlib.crc32(blob[16:]) != crc:
        raise UserError("the tokenizer blob is truncated or corrupted (size or CRC-32 mismatch)")
    ranges = _unpack_ranges(blob, ranges_at, n_ranges, n_rules)
    ends = struct.unpack_from(f"<{n_strings}H", blob, strings_at)
    pool_at = strings_at + 2 * n_strings
    strings, begin = [], 0
    for end in ends:
        strings.append(blob[pool_at + begin : pool_at + end].decode())
        begin = end
    return TokenizerSpec(
        table=UnicodeTable(ranges, tuple(strings)),
        word_pieces=_unpack_group(blob, word_at),
        continuation_pieces=_unpack_group(blob, continuation_at),
        specials=dict(zip(SPECIAL_NAMES, (cls, sep, pad, unk))),
        added_tokens=_unpack_added_tokens(blob, specials_at, n_added),
        max_chars_per_word=max_chars,
        vocab_size=vocab_size,
        combining_classes={
            chr(entry >> 8): entry & 0xFF for entry in struct.unpack_from(f"<{n_marks}I", blob, combining_at)
        },
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

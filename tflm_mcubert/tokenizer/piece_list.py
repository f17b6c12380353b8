"""A sorted WordPiece list as the tokenizer blob stores it (version 4): front-coded, entropy-coded, ids
implicit (base + rank) or bit-packed, the Huffman codes in a code set several lists share.
custom_ops/src/mcubert_tokenizer_pieces.c decodes the same layout.

Little-endian, offsets from the list's start unless said otherwise:

    code set (shared: 4-byte aligned, at a blob offset lists name)
        u16 [5] each code's offset from the set's start and the end of the last, u16 0
        four canonical Huffman codes: suffix lengths, shared lengths, suffix bytes, first-byte deltas; each
        u8 peek bits P,
        u16 [1 << P] the symbol | length << 8 of the code the next P bits start (0: a longer code),
        u16 [15] the number of codes of each bit length 1..15, u8 [their sum] the symbols in code order
    list
        u32 count, u32 data bytes, u32 base id, u32 blob offset of its code set, u8 bucket shift, u8 id bits
            (0: implicit ids, the i-th piece's id is base + i), u8 offset bytes, u8 0
        bucket offsets   (offset bytes) [buckets]: byte offsets into the data
        ids              id bits each, packed (none when implicit)
        data             the buckets, each starting on a byte: the first piece as length + bytes, each next
                         one as shared length + suffix length + suffix bytes, all Huffman codes; where
                         the piece before goes on past the shared bytes, the first suffix byte is coded as
                         its difference from that one's byte there (sorted: >= 1, mostly small)
        (padded to 4 B)

Bits are read most significant first. Codes are canonical (zlib's puff.c decodes them the same way),
so the device needs no table in RAM: a short code (most letters) is one read of the peek table in the
blob, a longer one is found by counting codes per length. A piece's bytes cost about
4.5 bits instead of 8 (the vocabulary is mostly a-z) and its two lengths about 5 bits together. Ids in
byte order are random unless the export numbered the pieces in that order (export/id_order.py): then
they cost nothing; otherwise they take the vocabulary's bit width. A code set is about 0.7 KB: the lists
of one blob (one per embedding cluster and kind) share one, built from all their symbols (version 3 gave
each list its own). A bucket of 16 pieces is about one binary search step's worth of decoding (version 5;
version 4 used 32: 6% smaller blobs, but the scan then cost 40% more on English text).
"""

from __future__ import annotations

import collections
import heapq
import struct

from tflm_mcubert.errors import UserError

BUCKET_SHIFT = 4
# Codes at most this long decode with one table read; longer ones by counting (see the docstring).
PEEK_BITS_BYTES = 7
PEEK_BITS_LENGTHS = 5
MAX_CODE_BITS = 15
_HEAD = struct.Struct("<IIIIBBBB")
_CODE_SET = struct.Struct("<5HH")
CODES = 4  # suffix lengths, shared lengths, suffix bytes, first-byte deltas


def code_lengths(frequencies: dict[int, int]) -> dict[int, int]:
    """Huffman code lengths of the symbols, at most MAX_CODE_BITS (frequencies are flattened until the
    longest fits; a lone symbol gets a 1-bit code)."""
    frequencies = {s: f for s, f in frequencies.items() if f > 0}
    if len(frequencies) <= 1:
        return {s: 1 for s in frequencies}
    while True:
        heap = [(f, s, (s,)) for s, f in sorted(frequencies.items())]
        heapq.heapify(heap)
        lengths = collections.Counter()
        tiebreak = 256
        while len(heap) > 1:
            fa, _, a = heapq.heappop(heap)
            fb, _, b = heapq.heappop(heap)
            lengths.update(a + b)
            heapq.heappush(heap, (fa + fb, tiebreak, a + b))
            tiebreak += 1
        if max(lengths.values()) <= MAX_CODE_BITS:
            return dict(lengths)
        frequencies = {s: (f + 1) // 2 for s, f in frequencies.items()}


class Code:
    """A canonical Huffman code: symbols ordered by (length, symbol), consecutive codes per length."""

    def __init__(self, lengths: dict[int, int]):
        self.counts = [0] * (MAX_CODE_BITS + 1)
        for length in lengths.values():
            self.counts[length] += 1
        self.symbols = sorted(lengths, key=lambda s: (lengths[s], s))
        self.codes, code, at = {}, 0, 0
        for length in range(1, MAX_CODE_BITS + 1):
            for s in self.symbols[at : at + self.counts[length]]:
                self.codes[s] = (code, length)
                code += 1
            at += self.counts[length]
            code <<= 1
        self.decode = {v: s for s, v in self.codes.items()}

    def peek_table(self, peek_bits: int) -> list[int]:
        """symbol | length << 8 of the code the first peek_bits bits start, 0 where it is longer."""
        entries = [0] * (1 << peek_bits)
        for s, (code, length) in self.codes.items():
            if length <= peek_bits:
                low = code << (peek_bits - length)
                entries[low : low + (1 << (peek_bits - length))] = [s | length << 8] * (1 << (peek_bits - length))
        return entries

    def table(self, peek_cap: int) -> bytes:
        peek_bits = min(peek_cap, max((length for _, length in self.codes.values()), default=0))
        entries = self.peek_table(peek_bits)
        return (
            bytes([peek_bits])
            + struct.pack(f"<{len(entries)}H", *entries)
            + struct.pack(f"<{MAX_CODE_BITS}H", *self.counts[1:])
            + bytes(self.symbols)
        )

    @classmethod
    def read(cls, blob: bytes, at: int) -> tuple[Code, int]:
        at += 1 + (2 << blob[at])  # the peek table: redundant with the counts and symbols
        counts = struct.unpack_from(f"<{MAX_CODE_BITS}H", blob, at)
        at += 2 * MAX_CODE_BITS
        symbols = blob[at : at + sum(counts)]
        lengths, index = {}, 0
        for length, count in enumerate(counts, start=1):
            for s in symbols[index : index + count]:
                lengths[s] = length
            index += count
        return cls(lengths), at + sum(counts)


class BitWriter:
    """Bits most significant first: whole bytes go to `out`, the rest waits in a small integer (a list of
    bits made a 100,000-piece vocabulary's blob take a minute)."""

    def __init__(self):
        self.out = bytearray()
        self.pending, self.pending_bits = 0, 0

    @property
    def length(self) -> int:
        return 8 * len(self.out) + self.pending_bits

    def put(self, value: int, width: int) -> None:
        self.pending = self.pending << width | (value & ((1 << width) - 1))
        self.pending_bits += width
        while self.pending_bits >= 8:
            self.pending_bits -= 8
            self.out.append(self.pending >> self.pending_bits)
            self.pending &= (1 << self.pending_bits) - 1

    def code(self, code: Code, symbol: int) -> None:
        self.put(*code.codes[symbol])

    def align(self) -> None:
        self.put(0, -self.pending_bits % 8)

    def data(self) -> bytes:
        self.align()
        return bytes(self.out)


class BitReader:
    def __init__(self, data: bytes, bit: int = 0):
        self.data, self.bit = data, bit

    def get(self, width: int) -> int:
        value = 0
        for _ in range(width):
            value = value << 1 | (self.data[self.bit >> 3] >> (7 - (self.bit & 7))) & 1
            self.bit += 1
        return value

    def symbol(self, code: Code) -> int:
        value, length = 0, 0
        while (value, length) not in code.decode:
            value, length = value << 1 | self.get(1), length + 1
            if length > MAX_CODE_BITS:
                raise UserError("the tokenizer blob holds an invalid Huffman code")
        return code.decode[(value, length)]


def _front_coded(ordered: list[bytes], bucket_shift: int) -> list[tuple[int, int | None, bytes]]:
    """(shared length with the piece before in its bucket, its first differing byte's delta from the
    piece before's or None when that one ends there, the rest of the suffix) of each piece."""
    out, previous = [], b""
    for index, piece in enumerate(ordered):
        shared, delta = 0, None
        if index % (1 << bucket_shift):
            while shared < min(len(piece), len(previous)) and piece[shared] == previous[shared]:
                shared += 1
            if shared < len(previous):  # sorted: piece[shared] is above previous[shared]
                delta = piece[shared] - previous[shared]
        out.append((shared, delta, piece[shared:]))
        previous = piece
    return out


def implicit_base(pieces: dict[str, int]) -> int | None:
    """The base id when the pieces' ids are base, base + 1, ... in byte order (ids need not be stored)."""
    ordered = sorted((piece.encode(), piece_id) for piece, piece_id in pieces.items())
    if ordered and all(piece_id == ordered[0][1] + i for i, (_, piece_id) in enumerate(ordered)):
        return ordered[0][1]
    return None


def _coded(pieces: dict[str, int], bucket_shift: int):
    ordered = sorted((piece.encode(), piece_id) for piece, piece_id in pieces.items())
    if any(len(p) > 255 or not p for p, _ in ordered):
        raise UserError("a vocabulary piece is empty or longer than 255 bytes")
    return ordered, _front_coded([p for p, _ in ordered], bucket_shift)


def symbol_counts(pieces: dict[str, int], bucket_shift: int = BUCKET_SHIFT) -> list[collections.Counter]:
    """How often each symbol of the four codes occurs in the list of `pieces` (add several lists' to
    build the code set they share)."""
    _, coded = _coded(pieces, bucket_shift)
    bucket = 1 << bucket_shift
    lengths = collections.Counter(len(suffix) for _, _, suffix in coded)
    shared = collections.Counter(s for i, (s, _, _) in enumerate(coded) if i % bucket)
    symbols = collections.Counter(b"".join(suffix[delta is not None :] for _, delta, suffix in coded))
    deltas = collections.Counter(d for _, d, _ in coded if d is not None)
    return [lengths, shared, symbols, deltas]


def code_set(counts: list[collections.Counter]) -> tuple[Code, ...]:
    return tuple(Code(code_lengths(c)) for c in counts)


def pack_code_set(codes: tuple[Code, ...]) -> bytes:
    tables = [codes[0].table(PEEK_BITS_LENGTHS), codes[1].table(PEEK_BITS_LENGTHS)]
    tables += [codes[2].table(PEEK_BITS_BYTES), codes[3].table(PEEK_BITS_LENGTHS)]
    code_at = [_CODE_SET.size + sum(len(t) for t in tables[:k]) for k in range(CODES + 1)]
    out = _CODE_SET.pack(*code_at, 0) + b"".join(tables)
    return out + bytes(-len(out) % 4)


def read_code_set(blob: bytes, at: int) -> tuple[Code, ...]:
    code_at = _CODE_SET.unpack_from(blob, at)
    return tuple(Code.read(blob, at + code_at[k])[0] for k in range(CODES))


def pack(
    pieces: dict[str, int],
    id_bits: int,
    codes: tuple[Code, ...],
    codes_at: int,
    bucket_shift: int = BUCKET_SHIFT,
) -> bytes:
    """The list of `pieces`, coded with `codes` (which must hold its symbols: code_set of its
    symbol_counts, alone or summed with other lists'), that code set at blob offset `codes_at`;
    id_bits 0 stores no ids (implicit_base(pieces) must not be None)."""
    ordered, coded = _coded(pieces, bucket_shift)
    base = 0
    if id_bits == 0:
        base = implicit_base(pieces)
        if base is None:
            raise ValueError("implicit ids need consecutive ids in byte order")
    lengths, shared, symbols, deltas = codes
    bucket = 1 << bucket_shift
    writer, offsets = BitWriter(), []
    for index, (shared_length, delta, suffix) in enumerate(coded):
        if index % bucket == 0:
            writer.align()
            offsets.append(writer.length // 8)
        else:
            writer.code(shared, shared_length)
        writer.code(lengths, len(suffix))
        if delta is not None:
            writer.code(deltas, delta)
        for byte in suffix[delta is not None :]:
            writer.code(symbols, byte)
    data = writer.data()
    offset_bytes = 2 if not offsets or offsets[-1] <= 0xFFFF else 4
    ids = BitWriter()
    for _, piece_id in ordered if id_bits else ():
        ids.put(piece_id, id_bits)
    out = bytearray(_HEAD.pack(len(ordered), len(data), base, codes_at, bucket_shift, id_bits, offset_bytes, 0))
    out += b"".join(o.to_bytes(offset_bytes, "little") for o in offsets)
    out += ids.data() + data
    out += bytes(-len(out) % 4)
    return bytes(out)


def unpack(blob: bytes, offset: int) -> dict[str, int]:
    count, data_bytes, base, codes_at, bucket_shift, id_bits, offset_bytes, _ = _HEAD.unpack_from(blob, offset)
    lengths, shared, symbols, deltas = read_code_set(blob, codes_at)
    at = offset + _HEAD.size
    buckets = -(-count // (1 << bucket_shift))
    ids_at = at + offset_bytes * buckets
    data_at = ids_at + (count * id_bits + 7) // 8
    ids = BitReader(blob[ids_at:data_at])
    data = BitReader(blob[data_at : data_at + data_bytes])
    pieces, previous = {}, b""
    for index in range(count):
        shared_length = 0
        if index % (1 << bucket_shift) == 0:
            data.bit = -(-data.bit // 8) * 8
        else:
            shared_length = data.symbol(shared)
        length = data.symbol(lengths)
        suffix = b""
        if index % (1 << bucket_shift) and shared_length < len(previous) and length:
            suffix = bytes([previous[shared_length] + data.symbol(deltas)])
        suffix += bytes(data.symbol(symbols) for _ in range(length - len(suffix)))
        previous = previous[:shared_length] + suffix
        pieces[previous.decode()] = ids.get(id_bits) if id_bits else base + index
    return pieces

"""The on-device byte-level BPE tokenizer's reference: what custom_ops/src/mcubert_bpe_tokenizer*.c computes,
in Python, from the same spec (bpe_blob.py). Tests hold the C to this byte for byte and this to Hugging Face.

    spec = bpe_blob.spec_from_tokenizer(bpe_blob.read_checkpoint("gpt2-folder"))
    ids = encode(spec, "Hello world")        # GPT-2's ids
    text = decode(spec, ids)                  # UTF-8 bytes, as tokenizer.decode(ids, skip_special_tokens=True)

Invalid UTF-8 in the input: each maximal invalid subpart is one U+FFFD (bytes EF BF BD), so encode(bytes)
equals Hugging Face on bytes.decode("utf-8", "replace"). Decoding concatenates the ids' bytes and replaces
each maximal invalid subpart with U+FFFD, as the ByteLevel decoder's from_utf8_lossy does; a
StreamDecoder does it one id at a time, holding back an unfinished character.
"""

from __future__ import annotations

from tflm_mcubert.tokenizer.bpe_blob import CLASS_LETTER, CLASS_NUMBER, CLASS_OTHER, CLASS_SPACE, BpeSpec
from tflm_mcubert.tokenizer.reference import decode_utf8

REPLACEMENT = 0xFFFD
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")  # after "'": the regex's first alternatives


def code_points(data: bytes) -> list[int]:
    out, at = [], 0
    while at < len(data):
        cp, consumed = decode_utf8(data, at)
        out.append(REPLACEMENT if cp is None else cp)
        at += consumed
    return out


def _run(spec: BpeSpec, cps: list[int], at: int, cls: int) -> int:
    while at < len(cps) and spec.class_of(cps[at]) == cls:
        at += 1
    return at


def _whitespace_end(spec: BpeSpec, cps: list[int], at: int) -> int:
    """\\s+(?!\\S) else \\s+: a run of whitespace up to the last before a non-space, or one character
    (at least one, as the device takes it whatever the classes say)."""
    end = _run(spec, cps, at + 1, CLASS_SPACE)
    if end < len(cps) and end - at > 1:
        return end - 1
    return end


def pretoken_end(spec: BpeSpec, cps: list[int], at: int) -> int:
    """Where the pre-token starting at `at` ends: GPT-2's pattern
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+ (leftmost-first)."""
    cp = cps[at]
    if cp == ord("'"):
        for suffix in CONTRACTIONS:
            if [chr(c) for c in cps[at + 1 : at + 1 + len(suffix)]] == list(suffix):
                return at + 1 + len(suffix)
    start = at + 1 if cp == ord(" ") and at + 1 < len(cps) else at
    cls = spec.class_of(cps[start])
    if cls in (CLASS_LETTER, CLASS_NUMBER, CLASS_OTHER):
        return _run(spec, cps, start + 1, cls)
    return _whitespace_end(spec, cps, at)


def pretokens(spec: BpeSpec, cps: list[int]) -> list[list[int]]:
    out, at = [], 0
    while at < len(cps):
        end = pretoken_end(spec, cps, at)
        out.append(cps[at:end])
        at = end
    return out


def chunks(spec: BpeSpec, cps: list[int]) -> list[bytes]:
    """The pre-token's UTF-8 in pieces of whole characters of at most max_pretoken_bytes (one piece when
    it fits: the only case Hugging Face agrees with by construction)."""
    out, current = [], b""
    for cp in cps:
        raw = chr(cp).encode()
        if len(current) + len(raw) > spec.max_pretoken_bytes:
            out.append(current)
            current = b""
        current += raw
    return [*out, current] if current else out


def merge(spec: BpeSpec, data: bytes) -> list[int]:
    """BPE of one chunk: repeatedly the lowest-ranked adjacent pair, leftmost first (as `tokenizers`'
    priority queue of (rank, position) does)."""
    symbols = [spec.byte_ids[b] for b in data]
    ranks = spec.ranks
    while len(symbols) > 1:
        best, where = None, -1
        for i in range(len(symbols) - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None and (best is None or rank < best):
                best, where = rank, i
        if best is None:
            break
        symbols[where : where + 2] = [spec.merges[best][2]]
    return symbols


def added_token_at(spec: BpeSpec, data: bytes, at: int) -> tuple[int, int] | None:
    """(bytes, id) of the longest added token whose text starts at `at`."""
    best = None
    for token in spec.added_tokens:
        raw = token.text.encode()
        if data.startswith(raw, at) and (best is None or len(raw) > best[0]):
            best = (len(raw), token.id)
    return best


def encode(spec: BpeSpec, text: bytes | str) -> list[int]:
    data = text.encode() if isinstance(text, str) else bytes(text)
    out: list[int] = []
    segment_start, at = 0, 0
    while at <= len(data):
        found = added_token_at(spec, data, at) if at < len(data) else None
        if found is None and at < len(data):
            at += 1
            continue
        for pretoken in pretokens(spec, code_points(data[segment_start:at])):
            for chunk in chunks(spec, pretoken):
                out.extend(merge(spec, chunk))
        if found is None:
            break
        out.append(found[1])
        at += found[0]
        segment_start = at
    return out


def decode(spec: BpeSpec, ids) -> bytes:
    """UTF-8 of `ids` as Hugging Face's decode(ids, skip_special_tokens=True) gives it."""
    stream = StreamDecoder(spec)
    return b"".join(stream.feed(i) for i in ids) + stream.finish()


def repair_utf8(data: bytes) -> bytes:
    return data.decode("utf-8", "replace").encode()


class StreamDecoder:
    """One id at a time: the bytes of every complete character so far (an invalid subpart as U+FFFD),
    an unfinished character held back until the next id completes it or finish() replaces it."""

    def __init__(self, spec: BpeSpec):
        self.spec, self.pending = spec, b""

    def feed(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.spec.vocab_size:
            raise ValueError(f"id {token_id} is not below the vocabulary size {self.spec.vocab_size}")
        if token_id in self.spec.special:
            return b""
        data = self.pending + self.spec.tokens[token_id]
        keep = _unfinished_tail(data)
        self.pending = data[len(data) - keep :]
        return repair_utf8(data[: len(data) - keep])

    def finish(self) -> bytes:
        out, self.pending = repair_utf8(self.pending), b""
        return out


def _unfinished_tail(data: bytes) -> int:
    """Bytes at the end of `data` that start a valid UTF-8 sequence the next bytes could complete."""
    for back in (1, 2, 3):
        if back > len(data):
            break
        at = len(data) - back
        cp, consumed = decode_utf8(data, at)
        if cp is None and consumed == back and 0xC2 <= data[at] <= 0xF4:
            # the maximal subpart runs to the end: valid so far, only short (or invalid: then consumed < back)
            return back
        if data[at] < 0x80 or data[at] >= 0xC0:
            break
    return 0

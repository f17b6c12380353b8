"""The on-device tokenizer's reference: what custom_ops/src/mcubert_tokenizer.c computes, in Python,
from the same blob. Tests hold the C to this byte for byte and this to Hugging Face's tokenizer.

    spec = spec_from_hf(tokenizer, permutation)       # the export's id space
    encoded = encode(spec, "a sentence", seq_len=128)  # ids, token types, mask, valid length

The input is UTF-8 bytes (or a str): an invalid sequence is dropped the way the tokenizer drops U+FFFD,
as Python's decode(errors="replace") followed by the tokenizer would (each maximal invalid subpart is
one dropped character). An added token's text in the input ("[SEP]", "<s>", a normalized "[URL]" as
"[url]") is that token, as `tokenizers` splits them (added_token_at).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer.unicode_table import (
    KIND_ISOLATE,
    KIND_REMOVE,
    KIND_SPACE,
    canonical_order,
    check_bert_tokenizer,
    combining_classes,
    table_for,
)
from tflm_mcubert.tokenizer.vocab_blob import AddedToken, TokenizerSpec, producible_characters

CONTINUATION = "##"


@dataclasses.dataclass(frozen=True)
class Encoded:
    ids: np.ndarray  # int32 [seq_len]
    token_types: np.ndarray  # int32 [seq_len]
    mask: np.ndarray  # int8 [seq_len]: 1 for the valid tokens, 0 for padding
    valid: int


def added_tokens_of(backend, config: dict) -> list[tuple[dict, str]]:
    """(the tokenizer.json entry, the text the device matches) of every added token: its content, or
    for a `normalized` one the normalizer's output of it, which Hugging Face matches on the normalized
    input. `lstrip`/`rstrip` need nothing: the whitespace they take is a word boundary to BERT anyway."""
    out = []
    for entry in config["added_tokens"]:
        content = entry["content"]
        if entry.get("single_word"):
            raise UserError(
                f"the added token {content!r} is single_word: the on-device tokenizer matches added tokens "
                "anywhere (re-add it with single_word=False)"
            )
        text = backend.normalizer.normalize_str(content) if entry.get("normalized") else content
        if not text or (entry.get("normalized") and "".join(text.split()) != text):
            raise UserError(
                f"the added token {content!r} normalizes to {text!r}: the on-device tokenizer matches a normalized "
                "added token only when the normalizer leaves it non-empty and without whitespace"
            )
        out.append((entry, text))
    return out


def spec_from_hf(tokenizer, permutation: np.ndarray | None = None, keep: set[str] | None = None) -> TokenizerSpec:
    """The spec of a Hugging Face BERT tokenizer, ids mapped through `permutation` (old id -> new id).
    `keep`: the pieces a pruned vocabulary keeps (the others are [UNK]); None keeps all."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise UserError("the on-device tokenizer is built from a fast (Rust `tokenizers`) tokenizer; this one is not")
    config = check_bert_tokenizer(backend)
    vocab = tokenizer.get_vocab()
    remap = (lambda i: int(permutation[i])) if permutation is not None else int
    model = config["model"]
    specials = {name: vocab[getattr(tokenizer, f"{name}_token")] for name in ("cls", "sep", "pad", "unk")}
    added = added_tokens_of(backend, config)
    alphabet = set()
    for piece in model["vocab"]:
        alphabet.update(piece[2:] if piece.startswith(CONTINUATION) else piece)
    for entry, text in added:  # the table must map a normalized token's characters exactly
        alphabet.update(text if entry.get("normalized") else "")
    table = table_for(backend.to_str(), frozenset(alphabet))
    letters, isolated = producible_characters(table, alphabet)
    word_pieces, continuation_pieces = {}, {}
    for piece, piece_id in model["vocab"].items():  # the WordPiece model's own: added tokens never reach it
        if keep is not None and piece not in keep:
            continue
        if piece.startswith(CONTINUATION) and len(piece) > len(CONTINUATION):
            body = piece[len(CONTINUATION) :]
            if all(ch in letters for ch in body):
                continuation_pieces[body] = remap(piece_id)
        elif all(ch in letters for ch in piece) or (len(piece) == 1 and piece in isolated):
            word_pieces[piece] = remap(piece_id)
    combining = combining_classes(backend.normalizer.normalize_str, letters)
    for entry, text in added:
        if entry.get("normalized") and any(ch in combining for ch in text):
            raise UserError(
                f"the added token {entry['content']!r} holds a combining mark the normalizer reorders: the "
                "on-device tokenizer matches normalized added tokens before it reorders marks"
            )
    return TokenizerSpec(
        table=table,
        word_pieces=word_pieces,
        continuation_pieces=continuation_pieces,
        specials={name: remap(i) for name, i in specials.items()},
        added_tokens=tuple(
            AddedToken(text, remap(entry["id"]), bool(entry.get("normalized"))) for entry, text in added
        ),
        max_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
        vocab_size=max(vocab.values()) + 1,
        combining_classes=combining,
    )


def decode_utf8(data: bytes, at: int) -> tuple[int | None, int]:
    """(code point or None for an invalid sequence, bytes consumed): the maximal-subpart rule."""
    lead = data[at]
    if lead < 0x80:
        return lead, 1
    if 0xC2 <= lead <= 0xDF:
        need, low, high = 1, 0x80, 0xBF
    elif 0xE0 <= lead <= 0xEF:
        need, low, high = 2, (0xA0 if lead == 0xE0 else 0x80), (0x9F if lead == 0xED else 0xBF)
    elif 0xF0 <= lead <= 0xF4:
        need, low, high = 3, (0x90 if lead == 0xF0 else 0x80), (0x8F if lead == 0xF4 else 0xBF)
    else:
        return None, 1
    cp = lead & (0x3F >> need)
    for k in range(1, need + 1):
        if at + k >= len(data) or not (low if k == 1 else 0x80) <= data[at + k] <= (high if k == 1 else 0xBF):
            return None, k
        cp = cp << 6 | (data[at + k] & 0x3F)
    return cp, need + 1


def word_piece(spec: TokenizerSpec, word: str) -> list[int]:
    """Greedy longest-match-first WordPiece of one word; [UNK] for a word it cannot cover."""
    if len(word) > spec.max_chars_per_word:
        return [spec.specials["unk"]]
    out, start = [], 0
    while start < len(word):
        pieces = spec.word_pieces if start == 0 else spec.continuation_pieces
        for end in range(len(word), start, -1):
            found = pieces.get(word[start:end])
            if found is not None:
                out.append(found)
                start = end
                break
        else:
            return [spec.specials["unk"]]
    return out


def pieces(spec: TokenizerSpec, text: bytes) -> list[int]:
    """The ids of one text, before [CLS]/[SEP] and truncation."""
    out: list[int] = []
    word: list[str] = []

    def flush():
        if word:
            out.extend(word_piece(spec, canonical_order("".join(word), spec.combining_classes)))
            word.clear()

    at = 0
    while at < len(text):
        added = added_token_at(spec, text, at)
        if added is not None:
            flush()
            out.append(added[1])
            at += added[0]
            continue
        cp, consumed = decode_utf8(text, at)
        at += consumed
        if cp is None:
            continue
        kind, mapped = spec.table.lookup(cp)
        if kind == KIND_REMOVE:
            continue
        if kind == KIND_SPACE:
            flush()
        elif kind == KIND_ISOLATE:
            flush()
            word.append(mapped)
            flush()
        else:
            word.append(mapped)
    flush()
    return out


def raw_token_at(spec: TokenizerSpec, text: bytes, at: int) -> tuple[int, int] | None:
    """(bytes, id) of the longest added token matched on the raw input that starts at `at`."""
    best = None
    for token in spec.added_tokens:
        raw = token.text.encode()
        if not token.normalized and text.startswith(raw, at) and (best is None or len(raw) > best[0]):
            best = (len(raw), token.id)
    return best


def normalized_end(spec: TokenizerSpec, text: bytes, at: int, pattern: str) -> int | None:
    """Where the input's normalized characters from `at` spell `pattern` exactly (whole characters; the
    removed ones skipped, a space stops), or None."""
    matched = ""
    while len(matched) < len(pattern):
        if at >= len(text):
            return None
        cp, consumed = decode_utf8(text, at)
        at += consumed
        if cp is None:
            continue
        kind, mapped = spec.table.lookup(cp)
        if kind == KIND_SPACE:
            return None
        matched += mapped
        if not pattern.startswith(matched):
            return None
    return at


def added_token_at(spec: TokenizerSpec, text: bytes, at: int) -> tuple[int, int] | None:
    """(bytes, id) of the added token that starts at `at`, as `tokenizers` splits them: raw tokens
    first (leftmost, then longest); else the longest normalized one none of whose characters after the
    first starts a raw token (Hugging Face cuts the raw ones out of the input before it normalizes)."""
    raw = raw_token_at(spec, text, at)
    if raw is not None:
        return raw
    best = None
    for token in spec.added_tokens:
        if not token.normalized or (best is not None and len(token.text.encode()) <= best[2]):
            continue
        end = normalized_end(spec, text, at, token.text)
        if end is not None and not _raw_token_inside(spec, text, at, end):
            best = (end - at, token.id, len(token.text.encode()))
    return best[:2] if best is not None else None


def _raw_token_inside(spec: TokenizerSpec, text: bytes, start: int, end: int) -> bool:
    at = start + decode_utf8(text, start)[1]
    while at < end:
        if raw_token_at(spec, text, at) is not None:
            return True
        at += decode_utf8(text, at)[1]
    return False


def truncated_lengths(first: int, second: int | None, budget: int) -> tuple[int, int]:
    """Tokens kept of each text: `tokenizers`' LongestFirst truncation to `budget` tokens."""
    if second is None:
        return min(first, budget), 0
    if first + second <= budget:
        return first, second
    short, long_ = sorted((first, second))
    long_ = short if short > budget else max(short, budget - short)
    if short + long_ > budget:
        short = budget // 2
        long_ = short + budget % 2
    return (short, long_) if first <= second else (long_, short)


def encode(spec: TokenizerSpec, text: bytes | str, seq_len: int, pair: bytes | str | None = None) -> Encoded:
    """[CLS] text [SEP] (pair [SEP]), truncated to `seq_len`, padded with [PAD]. An empty pair is no
    pair, as in `transformers` (its tokenizers test the second text for truth)."""
    if pair is not None and len(pair) == 0:
        pair = None
    as_bytes = [t.encode() if isinstance(t, str) else bytes(t) for t in (text, pair) if t is not None]
    runs = [pieces(spec, b) for b in as_bytes]
    specials = 2 if pair is None else 3
    if seq_len < specials:
        raise UserError(f"seq_len {seq_len} leaves no room for [CLS] and [SEP]")
    kept = truncated_lengths(len(runs[0]), len(runs[1]) if pair is not None else None, seq_len - specials)
    ids = [spec.specials["cls"], *runs[0][: kept[0]], spec.specials["sep"]]
    types = [0] * len(ids)
    if pair is not None:
        ids += [*runs[1][: kept[1]], spec.specials["sep"]]
        types += [1] * (kept[1] + 1)
    valid = len(ids)
    padding = seq_len - valid
    return Encoded(
        ids=np.array(ids + [spec.specials["pad"]] * padding, np.int32),
        token_types=np.array(types + [0] * padding, np.int32),
        mask=np.array([1] * valid + [0] * padding, np.int8),
        valid=valid,
    )

"""The on-device tokenizer's reference: what custom_ops/src/mcubert_tokenizer.c computes, in Python,
from the same blob. Tests hold the C to this byte for byte and this to Hugging Face's tokenizer.

    spec = spec_from_hf(tokenizer, permutation)       # the export's id space
    encoded = encode(spec, "a sentence", seq_len=128)  # ids, token types, mask, valid length

The input is UTF-8 bytes (or a str): an invalid sequence is dropped the way the tokenizer drops U+FFFD,
as Python's decode(errors="replace") followed by the tokenizer would (each maximal invalid subpart is
one dropped character). Special tokens' text ("[SEP]") in the input is that token, as in `tokenizers`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer.unicode_table import KIND_ISOLATE, KIND_REMOVE, KIND_SPACE, check_bert_tokenizer, table_for
from tflm_mcubert.tokenizer.vocab_blob import TokenizerSpec, producible_characters

CONTINUATION = "##"


@dataclasses.dataclass(frozen=True)
class Encoded:
    ids: np.ndarray  # int32 [seq_len]
    token_types: np.ndarray  # int32 [seq_len]
    mask: np.ndarray  # int8 [seq_len]: 1 for the valid tokens, 0 for padding
    valid: int


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
    special_tokens = {a["content"]: vocab[a["content"]] for a in config["added_tokens"] if a["content"] in vocab}
    if any(
        a.get("normalized") or a.get("lstrip") or a.get("rstrip") or a.get("single_word")
        for a in config["added_tokens"]
    ):
        raise UserError(
            "the on-device tokenizer matches added tokens on the raw text only (normalized/strip flags set)"
        )
    alphabet = set()
    for piece in vocab:
        alphabet.update(piece[2:] if piece.startswith(CONTINUATION) else piece)
    table = table_for(backend.to_str(), frozenset(alphabet))
    letters, isolated = producible_characters(table, alphabet)
    word_pieces, continuation_pieces = {}, {}
    for piece, piece_id in vocab.items():
        if piece in special_tokens or (keep is not None and piece not in keep):
            continue
        if piece.startswith(CONTINUATION) and len(piece) > len(CONTINUATION):
            body = piece[len(CONTINUATION) :]
            if all(ch in letters for ch in body):
                continuation_pieces[body] = remap(piece_id)
        elif all(ch in letters for ch in piece) or (len(piece) == 1 and piece in isolated):
            word_pieces[piece] = remap(piece_id)
    return TokenizerSpec(
        table=table,
        word_pieces=word_pieces,
        continuation_pieces=continuation_pieces,
        specials={name: remap(i) for name, i in specials.items()},
        special_tokens={text: remap(i) for text, i in special_tokens.items()},
        max_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
        vocab_size=max(vocab.values()) + 1,
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
            out.extend(word_piece(spec, "".join(word)))
            word.clear()

    at = 0
    while at < len(text):
        if text[at] == ord("["):
            special = _special_at(spec, text, at)
            if special is not None:
                flush()
                out.append(spec.special_tokens[special])
                at += len(special.encode())
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


def _special_at(spec: TokenizerSpec, text: bytes, at: int) -> str | None:
    """The longest special token whose text starts at `at`."""
    best = None
    for special in spec.special_tokens:
        raw = special.encode()
        if text.startswith(raw, at) and (best is None or len(raw) > len(best.encode())):
            best = special
    return best


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

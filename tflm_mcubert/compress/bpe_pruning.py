"""Vocabulary pruning of a byte-level BPE decoder (GPT-2, GPT-Neo): keep the ids a corpus's text needs and
the merges that build them; the rest leave the vocabulary, the tied word table (so the LM head's choices)
and the on-device tokenizer blob.

    pruned = prune_decoder(model, tokenizer, "corpus.txt")       # .model, .tokenizer, .new_of_old, .report

Kept: the 256 byte tokens (any text still encodes), the added and special tokens, and every id encoding
the corpus creates, intermediate ones included: BPE builds "the" from "t", "h", "e" through "th", so "th"
stays too. With a top-N, only what builds the N most frequent final ids. A merge stays when its two
inputs and its result stay.

Why the corpus tokenizes exactly as before: BPE applies the lowest-ranked applicable merge at every step.
Every merge the corpus's encoding applied is kept; a dropped merge was never that lowest one, so taking it
away changes no decision. (A test checks it over the whole corpus.) Other text still encodes, in smaller
kept pieces down to bytes; the model predicts among the kept ids only.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import bpe_blob, bpe_reference
from tflm_mcubert.tokenizer.bpe_blob import BpeSpec


@dataclasses.dataclass(frozen=True)
class PrunedTokenizer:
    """The checkpoint's byte-level BPE with the pruned vocabulary, ids renumbered 0.. in the old order
    (the reference tokenizer, tokenizer/bpe_reference.py, which the device's matches)."""

    spec: BpeSpec

    def encode(self, text: str) -> list[int]:
        return bpe_reference.encode(self.spec, text)


@dataclasses.dataclass(frozen=True)
class PrunedDecoder:
    model: object
    tokenizer: PrunedTokenizer
    new_of_old: np.ndarray  # int32[old vocabulary]: each checkpoint id's new id, -1 when dropped
    report: dict


def built_ids(spec: BpeSpec, data: bytes) -> list[tuple[int, frozenset[int]]]:
    """BPE of one chunk as bpe_reference.merge does it, each final id with every id its merges created
    (itself included when it is one)."""
    symbols = [(spec.byte_ids[b], frozenset()) for b in data]
    ranks = spec.ranks
    while len(symbols) > 1:
        best, where = None, -1
        for i in range(len(symbols) - 1):
            rank = ranks.get((symbols[i][0], symbols[i + 1][0]))
            if rank is not None and (best is None or rank < best):
                best, where = rank, i
        if best is None:
            break
        merged = spec.merges[best][2]
        symbols[where : where + 2] = [(merged, symbols[where][1] | symbols[where + 1][1] | {merged})]
    return symbols


def _corpus_builds(spec: BpeSpec, sentences: list[str]) -> tuple[collections.Counter, dict[int, frozenset[int]]]:
    """(count of each final id over the corpus, the ids each final id's merges created)."""
    counts: collections.Counter = collections.Counter()
    builds: dict[int, frozenset[int]] = {}
    for sentence in sentences:
        for pretoken in bpe_reference.pretokens(spec, bpe_reference.code_points(sentence.encode())):
            for chunk in bpe_reference.chunks(spec, pretoken):
                for token, created in built_ids(spec, chunk):
                    counts[token] += 1
                    builds[token] = builds.get(token, frozenset()) | created
    return counts, builds


def ids_to_keep(spec: BpeSpec, sentences: list[str], top_n: int | None = None) -> list[int]:
    """Old ids to keep, ascending: bytes, added tokens, and what builds the corpus's (N most frequent) ids.
    Added tokens in the text are matched whole by the tokenizer and never built: they are kept anyway."""
    counts, builds = _corpus_builds(spec, sentences)
    finals = [token for token, _ in counts.most_common(top_n)]
    kept = set(spec.byte_ids) | {t.id for t in spec.added_tokens} | set(spec.special)
    for token in finals:
        kept |= builds[token] | {token}
    return sorted(kept)


def pruned_spec(spec: BpeSpec, kept: list[int]) -> BpeSpec:
    """`spec` over the `kept` ids only (new id k is old id kept[k]); merges of kept ids only, in rank order."""
    new = {old: k for k, old in enumerate(kept)}
    missing = [b for b in spec.byte_ids if b not in new]
    if missing:
        raise ValueError(f"pruned_spec: the byte token {missing[0]} must be kept")
    return dataclasses.replace(
        spec,
        byte_ids=tuple(new[i] for i in spec.byte_ids),
        merges=tuple((new[a], new[b], new[m]) for a, b, m in spec.merges if a in new and b in new and m in new),
        tokens=tuple(spec.tokens[old] for old in kept),
        special=frozenset(new[i] for i in spec.special),
        added_tokens=tuple(dataclasses.replace(t, id=new[t.id]) for t in spec.added_tokens),
    )


def prune_decoder(model, tokenizer, corpus: str, top_n: int | None = None) -> PrunedDecoder:
    """The decoder and its byte-level BPE pruned to `corpus` (a task name or a text/CSV file:
    compress/vocab_pruning.corpus_sentences), its word table cut to the kept rows."""
    from tflm_mcubert.compress.vocab_pruning import corpus_sentences  # Keras (the encoder's pruning)
    from tflm_mcubert.model.decoder import copy_decoder  # Keras

    if tokenizer is None:
        raise UserError("--prune-vocab needs a checkpoint with a tokenizer (vocab.json + merges.txt)")
    if top_n is not None and top_n < 1:
        raise UserError("--prune-top-n needs a count of 1 or more")
    sentences = corpus_sentences(corpus)
    if not sentences:
        raise UserError(f"--prune-vocab: {corpus} holds no text")
    spec = bpe_blob.spec_from_tokenizer(tokenizer)
    kept = ids_to_keep(spec, sentences, top_n)
    table = model.token_embeddings.numpy()
    new_of_old = np.full(spec.vocab_size, -1, np.int32)
    new_of_old[kept] = np.arange(len(kept), dtype=np.int32)
    pruned = pruned_spec(spec, kept)
    report = {
        "corpus": corpus,
        "corpus_sentences": len(sentences),
        "top_n": top_n,
        "tokens_kept": len(kept),
        "tokens_before": spec.vocab_size,
        "merges_kept": len(pruned.merges),
        "merges_before": len(spec.merges),
        "embedding_params_saved": (spec.vocab_size - len(kept)) * table.shape[1],
        "note": "kept: the 256 byte tokens, the added tokens, and every id the corpus's encoding builds (with "
        "top_n: what builds its N most frequent ids), with the merges among them; the corpus tokenizes as before",
    }
    return PrunedDecoder(copy_decoder(model, table=table[kept]), PrunedTokenizer(pruned), new_of_old, report)

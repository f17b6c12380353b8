"""The blob's id order: the token ids that let the tokenizer blob store no ids (tokenizer/vocab_blob.py).

Inside every contiguous range of ids the embedding treats alike (a cluster of a compressed embedding,
the whole vocabulary of a dense one) the order of the rows is free. Each range is numbered as: the pieces
that start a word, by UTF-8 bytes; then the '##' continuations, by their bytes after '##'; then everything
the tokenizer never produces (special tokens, [unusedN], unproducible pieces) in the order they had. Each
range's two piece lists then have ids base, base + 1, ... and cost no id bits. The export applies it to
the model (export/id_order.py); vocabulary pruning uses it to count the blob an export would write.
"""

from __future__ import annotations

import numpy as np


def blob_order(spec, boundaries: list[int]) -> np.ndarray:
    """model id -> reordered model id for `spec` (ids in the model's id space) and the ranges
    [boundaries[i], boundaries[i + 1]) whose rows may be reordered among themselves."""
    vocab_size = boundaries[-1]
    words = {i: p.encode() for p, i in spec.word_pieces.items()}
    continuations = {i: p.encode() for p, i in spec.continuation_pieces.items()}
    order = np.empty(vocab_size, np.int32)
    for start, end in zip(boundaries[:-1], boundaries[1:]):
        ids = range(start, end)
        ranked = sorted((i for i in ids if i in words), key=words.__getitem__)
        ranked += sorted((i for i in ids if i in continuations), key=continuations.__getitem__)
        ranked += [i for i in ids if i not in words and i not in continuations]
        order[np.asarray(ranked, np.int64)] = np.arange(start, end, dtype=np.int32)
    return order

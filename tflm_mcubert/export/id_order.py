"""The export's token ids in the tokenizer blob's order, so the blob stores no ids (tokenizer/vocab_blob.py):
each embedding range's rows reordered by `tokenizer.blob_order.blob_order`.

    order = blob_order(spec, boundaries)     # model id -> reordered model id
    reordered = compose(permutation, order)  # original id -> reordered model id
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.tokenizer import reference
from tflm_mcubert.tokenizer.blob_order import blob_order  # noqa: F401  (re-exported: the export's one order)


def compose(permutation: np.ndarray | None, order: np.ndarray) -> np.ndarray:
    """original id -> reordered model id: `permutation` (None: identity) then `order`."""
    return order.copy() if permutation is None else order[np.asarray(permutation)]


def reorder_for_blob(model, tokenizer, permutation: np.ndarray | None):
    """(model, tokenizer id -> model id) with each embedding range's rows in the blob's order, the
    tokenizer's ids through `permutation` (None: the model's own ids) then that order. Unchanged where
    the blob cannot use it (no tokenizer, one the device cannot reproduce, a vocabulary of another size,
    an embedding layer of another kind): that blob stores explicit ids instead."""
    from tflm_mcubert.model.bert import with_vocabulary  # the model modules load Keras
    from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, invert_permutation

    config, layer = model.config, model.embeddings.word_lookup
    if tokenizer is None or len(tokenizer.get_vocab()) != config.vocab_size:
        return model, permutation
    if layer is not None and not isinstance(layer, ClusteredLowRankEmbedding):
        return model, permutation
    try:
        spec = reference.spec_from_hf(tokenizer, permutation)
    except UserError:
        return model, permutation
    boundaries = [0, config.vocab_size] if layer is None else list(layer.boundaries)
    order = blob_order(spec, boundaries)
    rows = invert_permutation(order)  # reordered id -> model id: the row each new id takes
    if layer is None:
        return with_vocabulary(model, rows), compose(permutation, order)
    arrays = layer.to_arrays()
    arrays["table_0"] = arrays["table_0"][rows[boundaries[0] : boundaries[1]]]
    for i in range(1, len(boundaries) - 1):
        arrays[f"u_{i}"] = arrays[f"u_{i}"][rows[boundaries[i] : boundaries[i + 1]] - boundaries[i]]
    arrays["permutation"] = compose(layer.permutation, order)  # the layer's original ids -> its new ones
    reordered = ClusteredLowRankEmbedding.from_arrays(arrays, origin=layer.origin)
    pad = int(order[config.pad_token_id])
    return model.with_word_lookup(reordered, config=dataclasses.replace(config, pad_token_id=pad)), compose(
        permutation, order
    )

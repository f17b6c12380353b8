"""The word tables as the export stores them (`model/stored_tables.py`): the vectors the reference op computes,
gradients straight through, and the layer's `storage_bits` switch."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from mcubert_models import small_model  # noqa: E402
from tflm_mcubert.compress.baselines import adaptive_embedding  # noqa: E402
from tflm_mcubert.model.stored_tables import stored_word_vectors  # noqa: E402
from tflm_mcubert.ops.embedding import Z_TARGET, EmbeddingParams, word_terms  # noqa: E402
from tflm_mcubert.ops.quantization import TensorQuant  # noqa: E402
from tflm_mcubert.quantize.float_model import FloatBert  # noqa: E402


def _compressed_model():
    model = small_model(labels=2)
    table = model.embeddings.word_embeddings.numpy()
    frequency = -np.arange(table.shape[0], dtype=np.float64)
    layer = adaptive_embedding(table, frequency, cutoffs=(40, 120), ranks=(12, 5))
    return model.with_word_lookup(layer)


@pytest.mark.parametrize("bits", [8, 4])
def test_stored_vectors_are_the_reference_ops_word_terms(bits):
    """Up to the op's final requantization (half a step of the pre-norm scale) and int4's uint16 row scale."""
    model = _compressed_model()
    lookup = model.embeddings.word_lookup
    ids = np.arange(300, dtype=np.int32)
    stored = np.asarray(stored_word_vectors(lookup, ids[None], bits))[0]
    emb = FloatBert.from_keras(model).embedding_for(24)
    params = EmbeddingParams.quantize(emb, TensorQuant(1.0), word_bits=bits)
    word_max = np.max([np.abs(u if vt is None else u @ vt).max(axis=0) for u, vt in emb.clusters], axis=0)
    channel_max = word_max + np.abs(emb.position).max(axis=0) + np.abs(emb.token_type).max(axis=0)
    z_scale = float(channel_max.max()) / Z_TARGET
    reference = word_terms(params, ids) * z_scale
    floating = np.asarray(lookup(ids[None]))[0]
    tolerance = 0.51 * z_scale + (2e-4 if bits == 4 else 0.0) * np.abs(floating).max()
    assert np.abs(stored - reference).max() <= tolerance
    assert np.abs(stored - floating).max() > 4 * tolerance  # the storage's error is there, not rounded away


@pytest.mark.parametrize("bits", [8, 4])
def test_gradients_reach_every_table_and_the_layer_switches_to_its_storage(bits):
    lookup = _compressed_model().embeddings.word_lookup
    ids = tf.constant(np.arange(300, dtype=np.int32)[None])
    floating = np.asarray(lookup(ids))
    lookup.storage_bits = bits
    with tf.GradientTape() as tape:
        vectors = lookup(ids)
        loss = tf.reduce_sum(vectors**2)
    grads = tape.gradient(loss, [lookup.table, *lookup.us, *lookup.vts])
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    np.testing.assert_array_equal(np.asarray(vectors), np.asarray(stored_word_vectors(lookup, ids, bits)))
    lookup.storage_bits = None
    np.testing.assert_array_equal(np.asarray(lookup(ids)), floating)


def test_an_unknown_width_is_refused():
    with pytest.raises(ValueError, match="storage of 2 bits"):
        stored_word_vectors(_compressed_model().embeddings.word_lookup, np.zeros((1, 3), np.int32), 2)

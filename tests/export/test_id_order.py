"""export/id_order.py: the export numbers each embedding range's pieces in the tokenizer blob's order (no
stored ids) and the model computes the same for the same text: rows move with their ids."""

from __future__ import annotations

import numpy as np
import pytest

from tests.export.mcubert_models import small_model
from tflm_mcubert.data.calibration import random_samples
from tflm_mcubert.export.id_order import reorder_for_blob
from tflm_mcubert.export.mcubert_export import export_mcubert
from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, bert_tokenizer_with_vocab
from tflm_mcubert.quantize.float_model import FloatBert
from tflm_mcubert.tokenizer import reference, vocab_blob

SENTENCES = ["the film was not as good as the book", "a ##b", "unbelievable scenes, and [MASK] quiet ones"]


@pytest.fixture(scope="module")
def small_tokenizer(minilm_tokenizer, tmp_path_factory):
    """300 MiniLM tokens in vocabulary-id order (not byte order): specials, words and '##' pieces mixed."""
    vocab = sorted(minilm_tokenizer.get_vocab().items(), key=lambda item: item[1])
    words = [t for t, i in vocab if i >= 1996 and not t.startswith("##")][:200]
    continuations = [t for t, i in vocab if t.startswith("##")][:94]
    tokens = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [t for t, _ in vocab if t in set(words) | set(continuations)]
    return bert_tokenizer_with_vocab(tokens, minilm_tokenizer, tmp_path_factory.mktemp("small"))


def encoded(tokenizer, permutation=None):
    batch = tokenizer(SENTENCES, padding="max_length", max_length=24, truncation=True, return_tensors="np")
    ids = batch["input_ids"].astype(np.int32)
    types = batch["token_type_ids"].astype(np.int32)
    return (ids if permutation is None else permutation[ids].astype(np.int32)), types, batch["attention_mask"]


def clustered(model):
    rng = np.random.default_rng(0)
    table = model.embeddings.word_embeddings.numpy()
    layer = ClusteredLowRankEmbedding.from_dense(
        table, cutoffs=[60, 150], ranks=[16, 4], permutation=rng.permutation(table.shape[0])
    )
    return model.with_word_lookup(layer), layer.permutation


def float_outputs(model, ids, types, mask):
    float_model = FloatBert.from_keras(model)
    return np.stack([float_model.forward(i, t, m.sum())["logits"] for i, t, m in zip(ids, types, mask)])


@pytest.mark.parametrize("embedding", ["dense", "clustered"])
def test_reordered_model_gives_the_same_logits_and_a_blob_without_ids(small_tokenizer, embedding):
    model, before = small_model(), None
    if embedding == "clustered":
        model, before = clustered(model)
    tokenizer_ids = None if before is None else before  # the tokenizer's ids -> the model's
    reordered, permutation = reorder_for_blob(model, small_tokenizer, tokenizer_ids)
    want = float_outputs(model, *encoded(small_tokenizer, tokenizer_ids))
    got = float_outputs(reordered, *encoded(small_tokenizer, permutation))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # not by accident: the ids moved, and the old ids give other logits
    moved = encoded(small_tokenizer, permutation)[0] != encoded(small_tokenizer, tokenizer_ids)[0]
    assert moved.sum() > 10
    assert not np.allclose(float_outputs(reordered, *encoded(small_tokenizer, tokenizer_ids)), want, atol=1e-3)
    # each range's word pieces and continuations are one run of ids in byte order: lists without ids
    # (this small vocabulary's blob keeps explicit ids: its code tables would cost more than they save)
    spec = reference.spec_from_hf(small_tokenizer, permutation)
    runs = 1 if embedding == "dense" else 3
    assert len(vocab_blob.id_runs(spec.word_pieces)) == len(vocab_blob.id_runs(spec.continuation_pieces)) == runs
    assert vocab_blob.unpack(vocab_blob.pack(spec)).word_pieces == spec.word_pieces


def test_export_reorders_and_the_int8_model_is_unchanged(small_tokenizer):
    model = small_model()
    samples = random_samples(model.config.vocab_size, 24, 3, seed=0)
    kwargs = dict(seq_len=24, arena_budget=1 << 30, samples=samples, sentences=None, embedding="dense")
    plain = export_mcubert(model, None, **kwargs)
    reordered = export_mcubert(model, small_tokenizer, **kwargs)
    assert plain.permutation is None and reordered.permutation is not None
    ids, types, mask = encoded(small_tokenizer)
    for i, t, m in zip(ids, types, mask):
        want = plain.quantized.run(i, t, m.astype(np.int8))["logits"]
        got = reordered.quantized.run(reordered.permutation[i], t, m.astype(np.int8))["logits"]
        np.testing.assert_array_equal(got, want)

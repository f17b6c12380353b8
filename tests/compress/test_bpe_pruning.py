"""Vocabulary pruning of a byte-level BPE decoder (compress/bpe_pruning.py): the corpus tokenizes exactly as
before, other text still round-trips, and the export stores the pruned table and blob."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.gpt2_helpers import random_gpt2, train_byte_level_bpe
from tflm_mcubert.compress.bpe_pruning import built_ids, ids_to_keep, pruned_spec
from tflm_mcubert.data.calibration import builtin_sentences, evaluation_sentences
from tflm_mcubert.tokenizer import bpe_blob, bpe_reference

CORPUS = evaluation_sentences()
OTHER = [*builtin_sentences(), "Zebras quizzically juxtapose 1,234 ünïcödé words \u2014 and emoji \U0001f600!"]


@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory):
    """A GPT-2-style tokenizer (vocab.json + merges.txt) trained on both text sets: many merges the corpus
    alone never applies."""
    return train_byte_level_bpe(CORPUS + OTHER, 700, tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def spec(bpe_folder):
    return bpe_blob.spec_from_tokenizer(bpe_blob.read_checkpoint(bpe_folder))


def test_the_corpus_tokenizes_as_before_renumbered(spec):
    kept = ids_to_keep(spec, CORPUS)
    pruned = pruned_spec(spec, kept)
    assert len(kept) < spec.vocab_size and len(pruned.merges) < len(spec.merges)
    for sentence in CORPUS:
        before = bpe_reference.encode(spec, sentence)
        assert [kept[i] for i in bpe_reference.encode(pruned, sentence)] == before, sentence


def test_the_ids_merges_pass_through_are_kept_too(spec):
    """Keeping only the corpus's final ids drops ids that merges build on the way: then some sentence
    tokenizes differently. So the invariant above is not vacuous."""
    finals = sorted(set(spec.byte_ids) | spec.special | {i for s in CORPUS for i in bpe_reference.encode(spec, s)})
    intermediates = set(ids_to_keep(spec, CORPUS)) - set(finals)
    assert intermediates, "the corpus's encoding builds no id it does not output"
    too_few = pruned_spec(spec, finals)
    assert any([finals[i] for i in bpe_reference.encode(too_few, s)] != bpe_reference.encode(spec, s) for s in CORPUS)


def test_built_ids_follow_the_reference_merge(spec):
    for sentence in CORPUS[:20]:
        for pretoken in bpe_reference.pretokens(spec, bpe_reference.code_points(sentence.encode())):
            for chunk in bpe_reference.chunks(spec, pretoken):
                built = built_ids(spec, chunk)
                assert [token for token, _ in built] == bpe_reference.merge(spec, chunk)
                assert all(token in created or token in spec.byte_ids for token, created in built)


@pytest.mark.parametrize("top_n", [None, 1, 25])
def test_any_text_still_round_trips_through_the_pruned_tokenizer(spec, top_n):
    kept = ids_to_keep(spec, CORPUS, top_n)
    pruned = pruned_spec(spec, kept)
    for text in OTHER + CORPUS[:10]:
        ids = bpe_reference.encode(pruned, text)
        assert max(ids) < pruned.vocab_size
        assert bpe_reference.decode(pruned, ids) == text.encode()
    if top_n is not None:
        assert len(kept) <= 256 + 1 + top_n * 40


def test_the_pruned_blob_packs_and_unpacks(spec):
    pruned = pruned_spec(spec, ids_to_keep(spec, CORPUS))
    assert bpe_blob.unpack(bpe_blob.pack(pruned)) == pruned


def _cli(*argv) -> int:
    from tflm_mcubert.cli import main

    return main([str(a) for a in argv])


@pytest.fixture(scope="module")
def checkpoint(bpe_folder, tmp_path_factory):
    """A GPT-2 LM with that tokenizer (random weights, nudged off HF's init)."""
    vocab = len(json.loads((bpe_folder / "vocab.json").read_text()))
    folder = random_gpt2(
        tmp_path_factory.mktemp("lm"), vocab_size=vocab, n_positions=32, n_embd=32, n_layer=1, n_head=2
    )
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((bpe_folder / name).read_bytes())
    corpus = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n")
    return folder, corpus


def test_a_pruned_decoder_export_stores_the_kept_rows_and_their_tokenizer(checkpoint, tmp_path, spec):
    folder, corpus = checkpoint
    common = ("--checkpoint", folder, "--board", "nucleo-f746zg", "--calibration-samples", "4")
    assert _cli("export", *common, "--out", tmp_path / "full") == 0
    assert _cli("export", *common, "--prune-vocab", corpus, "--out", tmp_path / "pruned") == 0
    full, pruned = (json.loads((tmp_path / o / "report.json").read_text()) for o in ("full", "pruned"))
    pruning = pruned["model"]["vocab_pruning"]
    kept = pruning["tokens_kept"]
    assert pruned["model"]["vocab_size"] == kept < full["model"]["vocab_size"] == spec.vocab_size
    assert pruned["model_bytes"] < full["model_bytes"] and pruned["flash_bytes"] < full["flash_bytes"]
    blob = bpe_blob.unpack((tmp_path / "pruned" / "model_vocab.bin").read_bytes())
    assert blob.vocab_size == kept and len(blob.merges) == pruning["merges_kept"]
    model_ids = np.load(tmp_path / "pruned" / "model_ids.npy")
    assert model_ids.shape == (spec.vocab_size,) and (model_ids >= 0).sum() == kept
    for sentence in CORPUS[:25]:  # the device's tokenizer gives the checkpoint's ids, in the model's numbering
        assert bpe_reference.encode(blob, sentence) == [int(model_ids[i]) for i in bpe_reference.encode(spec, sentence)]


def test_pruning_a_decoder_without_a_tokenizer_is_refused(tmp_path, capsys):
    code = _cli("export", "--preset", "gpt2-d128x2", "--prune-vocab", "sst2", "--out", tmp_path / "o")
    assert code == 2
    assert "--prune-vocab needs a --checkpoint with a tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

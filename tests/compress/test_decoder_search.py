"""The two-stage search of a decoder's tied table with the LM loss (compress/decoder_search.py): within the
budget, one table for the embedding and the head, written as a checkpoint `export` stores as searched."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.cli.cli_helpers import assert_one_clean_error, run_cli
from tflm_mcubert.compress.decoder_search import LmSearchOptions, tokenizer_order_table, save_searched, search_decoder
from tflm_mcubert.model.decoder_import import load_decoder
from tflm_mcubert.tflite.mcubert_reader import read_decoder

VOCAB, DIM = 300, 32


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("gpt2")
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=DIM, n_layer=1, n_head=2)
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def _blocks(count: int, seed: int) -> np.ndarray:
    """Zipf-like ids, so that frequency clusters mean something."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.zipf(1.3, (count, 16)) - 1, VOCAB - 1).astype(np.int32)


@pytest.fixture(scope="module")
def searched(checkpoint, tmp_path_factory):
    model, _ = load_decoder(str(checkpoint))
    opts = LmSearchOptions(target_params=3000, steps=6, finetune_steps=4, batch_size=4, lr=1e-3)
    student, embedding, metrics = search_decoder(model, _blocks(24, 0), _blocks(4, 1), opts)
    out = tmp_path_factory.mktemp("searched")
    save_searched(student, embedding, metrics, checkpoint, out)
    return student, embedding, metrics, out


def test_the_search_writes_an_architecture_within_the_budget(searched):
    _, embedding, metrics, out = searched
    assert embedding.stored_params() <= 3000 < VOCAB * DIM
    assert metrics["params"] == embedding.stored_params() and metrics["mode"] == "two-stage"
    assert len(metrics["ranks"]) == 3 and sum(metrics["clusters"]) == VOCAB
    assert np.isfinite(metrics["dev_perplexity"])
    config = json.loads((out / "config.json").read_text())
    assert config["tflm_mcubert_searched_embedding"]["params"] == metrics["params"]


def test_one_table_serves_the_embedding_and_the_head(searched):
    """The student's tied table is the searched table's reconstruction, and reloading the checkpoint gives it."""
    student, embedding, _, out = searched
    table = tokenizer_order_table(embedding).numpy()
    assert np.allclose(student.token_embeddings.numpy(), table)
    reloaded, _ = load_decoder(str(out))
    assert np.allclose(reloaded.token_embeddings.numpy(), table, atol=1e-6)
    ids = np.array([[1, 2, 3, 4]], np.int32)
    assert np.allclose(reloaded(ids).numpy(), student.tied_logits(ids, table).numpy(), atol=1e-4)


def test_export_stores_the_searched_table(searched, tmp_path, capsys):
    _, embedding, _, out = searched
    code, stdout, err = run_cli(
        capsys, "export", "--checkpoint", out, "--sram", "64KB", "--flash", "400KB", "--out", tmp_path / "o"
    )
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["compression"]["method"] == "searched" and "searched" in stdout
    assert report["compression"]["ranks"] == list(embedding.ranks)
    assert np.array_equal(np.load(tmp_path / "o" / "model_ids.npy"), embedding.permutation)
    read = read_decoder((tmp_path / "o" / "model.tflite").read_bytes())
    assert read.quantized.greedy([1, 2, 3], 8) == report["check"]["greedy_model_ids"]


def test_the_adaptive_baseline_fine_tunes_the_equal_steps(checkpoint):
    model, _ = load_decoder(str(checkpoint))
    opts = LmSearchOptions(target_params=3000, mode="adaptive", steps=3, finetune_steps=2, batch_size=4)
    _, embedding, metrics = search_decoder(model, _blocks(24, 0), _blocks(4, 1), opts)
    assert embedding.stored_params() <= 3000 and metrics["finetune_steps"] == 2 * 3 + 2


def test_the_search_can_start_from_adaptive_embedding_scaled_to_the_budget(checkpoint):
    model, _ = load_decoder(str(checkpoint))
    opts = LmSearchOptions(target_params=3000, stage1_start="budget", steps=2, finetune_steps=1, batch_size=4)
    _, embedding, metrics = search_decoder(model, _blocks(24, 0), _blocks(4, 1), opts)
    assert embedding.stored_params() <= 3000 and metrics["options"]["stage1_start"] == "budget"


@pytest.mark.parametrize(
    "args,named",
    [
        (("--relaxation", "soft"), "--relaxation"),
        (("--mode", "svd", "--target-embedding-params", "3000"), "--mode svd"),
        ((), "--target-embedding-params"),
    ],
)
def test_bad_decoder_searches_are_one_clear_error(checkpoint, tmp_path, capsys, args, named):
    code, _, err = run_cli(
        capsys, "search", "--checkpoint", checkpoint, "--task", "rotten_tomatoes", *args, "--out", tmp_path / "s"
    )
    assert code != 0
    assert_one_clean_error(err, named)

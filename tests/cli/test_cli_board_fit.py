"""export fits the board's Flash before it is made (export/board_fit.py): the default embedding sized to what
the rest of the model leaves, `--weight-bits auto` with the fewest int4 ops, and `boards`' fit columns."""

import json

import numpy as np
import pytest

from tflm_mcubert.boards import BOARDS, DEFAULT_FLASH_RESERVE
from tflm_mcubert.cli import boards as boards_command
from tflm_mcubert.export.board_fit import fewest_int4_matrices
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.export.flash_budget import CONTAINER_SLACK, FlashTarget, tokenizer_blob_bytes, whole_model_budget
from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes
from tflm_mcubert.model.hf_import import load_checkpoint

from .cli_helpers import assert_one_clean_error, run_cli

SEQ = 16


@pytest.mark.parametrize("board", ["nucleo-f767zi", "nucleo-h7a3zi-q"])
def test_bert_mini_int4_fits_the_2mb_boards(capsys, tmp_path, board):
    """The preset's paper-shaped embedding (647,592 parameters) does not fit next to the int4 encoder: the
    export scales it down to the bytes left, and the report's budget is what the .tflite holds."""
    code, printed, err = run_cli(
        capsys, "export", "--preset", "bert-mini", "--board", board, "--weight-bits", 4, "--out", tmp_path / "o"
    )
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    fits, split = report["fits"], report["flash_budget"]
    assert fits["ok"] and fits["sram"]["arena_bytes"] <= fits["sram"]["budget_bytes"]
    assert split["budget_bytes"] == fits["flash"]["budget_bytes"] == BOARDS[board].flash_budget()
    sized = report["compression"]["sized_to_flash"]
    assert sized["budget_bytes"] == split["embedding_bytes"] >= report["params"]["stored_embedding_bytes"]
    assert report["params"]["stored_embedding"] < 647_592
    ops = {op["name"]: op["bytes"] for op in report["ops"]}
    assert sum(b for name, b in ops.items() if "layer" in name) == split["encoder_bytes"]
    assert ops["head"] == split["head_bytes"]
    assert ops["embedding"] - report["params"]["stored_embedding_bytes"] == split["embedding_fixed_bytes"]
    container = report["tflite_bytes"] - sum(ops.values())
    assert (
        0 <= split["container_bytes"] - container <= 2 * CONTAINER_SLACK
    )  # the twin's own structure differs by a few B
    assert 0 <= split["budget_bytes"] - report["flash_bytes"] <= 0.02 * split["budget_bytes"]
    assert "embedding sized to the board" in printed


def test_fewest_int4_matrices_prefers_fewer_then_least_sensitive():
    matrices = ("a", "b", "c", "d")
    saved = {"a": 10, "b": 10, "c": 25, "d": 25}
    sensitivity = {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.5}
    assert fewest_int4_matrices(matrices, sensitivity, saved, 20) == ["d"]  # one covers it: the least sensitive
    assert fewest_int4_matrices(matrices, sensitivity, saved, 30) == ["a", "d"]  # two needed: a + d is least
    assert fewest_int4_matrices(matrices, sensitivity, saved, 36) == ["d", "c"]  # a + d saves 35: too little
    assert fewest_int4_matrices(matrices, sensitivity, saved, 71) is None


def test_fewest_int4_matrices_equals_the_exhaustive_search():
    """Grouping by shape is exact: the same choice as trying every subset, smallest first."""
    import itertools

    rng = np.random.default_rng(0)
    for trial in range(30):
        names = [f"m{i}" for i in range(int(rng.integers(1, 9)))]
        saved = {n: int(rng.choice([8, 8, 24, 40])) for n in names}
        sensitivity = {n: round(float(rng.random()), 3) for n in names}
        missing = int(rng.integers(1, sum(saved.values()) + 10))
        want = None
        for count in range(1, len(names) + 1):
            fitting = [c for c in itertools.combinations(names, count) if sum(saved[n] for n in c) >= missing]
            if fitting:
                best = min(fitting, key=lambda c: (sum(sensitivity[n] for n in c), sorted(c)))
                want = sorted(best, key=lambda n: (sensitivity[n], n))
                break
        got = fewest_int4_matrices(names, sensitivity, saved, missing)
        assert (got is None) == (want is None), trial
        if got is not None:
            assert len(got) == len(want) and sum(sensitivity[n] for n in got) == pytest.approx(
                sum(sensitivity[n] for n in want)
            ), trial


@pytest.fixture
def tiny_checkpoint(tmp_path, make_hf_checkpoint):
    return make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)


def flash_of(checkpoint, widths, target=1 << 30) -> tuple[int, int]:
    """(the whole model's Flash at `widths` with its dense embedding as the budget counts it, the bytes
    `target` leaves for the word tables less the dense table's)."""
    loaded = load_checkpoint(checkpoint)
    config = loaded.model.config
    whole = whole_model_budget(
        config,
        FlashTarget(target, "probe"),
        seq_len=SEQ,
        widths=widths,
        vocab_bytes=tokenizer_blob_bytes(loaded.tokenizer),
    )
    dense = stored_embedding_bytes([config.vocab_size], [], config.hidden_size)
    return sum(whole.items.values()) + dense, whole.embedding_bytes - dense


def test_weight_bits_auto_makes_the_fewest_matrices_int4(capsys, tmp_path, tiny_checkpoint):
    (all8, _), (all4, _) = (flash_of(tiny_checkpoint, Widths.uniform(bits)) for bits in (8, 4))
    target = all8 - (all8 - all4) // 3  # a third of what int4 saves: some matrices, not all
    common = ["--checkpoint", tiny_checkpoint, "--seq-len", SEQ, "--sram", "8MB", "--embedding", "dense"]
    code, printed, err = run_cli(
        capsys, "export", *common, "--flash", target + DEFAULT_FLASH_RESERVE, "--weight-bits", "auto",
        "--out", tmp_path / "auto",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "auto" / "report.json").read_text())
    widths = report["weight_widths"]
    int4 = widths["int4_matrices"]
    assert report["fits"]["ok"] and 0 < len(int4) < len(widths["sensitivity"])
    assert set(int4) | set(widths["int8_matrices"]) == set(widths["sensitivity"])
    assert len(widths["sensitivity"]) == 2 * 6  # two layers: Q, K, V, O, FC1, FC2 each
    assert f"int4 matrices: {', '.join(int4)}" in printed
    assert report["encoder"]["weight_bits"] == [4, 8]

    def op_widths(int4_names) -> dict:
        out = {}
        for op in dict.fromkeys(name.rsplit(".", 1)[0] for name in widths["sensitivity"]):
            layers = [n for n in widths["sensitivity"] if n.rsplit(".", 1)[0] == op]
            bits = tuple(4 if n in int4_names else 8 for n in layers)
            out[op] = bits[0] if len(set(bits)) == 1 else bits
        return out

    chosen = op_widths(int4)
    assert report["flash_budget"]["weight_bits"] == {k: v if isinstance(v, int) else list(v) for k, v in chosen.items()}
    for name in int4:  # fewest: any one of them back at int8 misses the budget
        assert flash_of(tiny_checkpoint, Widths.per_matrix(dict.fromkeys(set(int4) - {name}, 4)), target)[1] < 0
    # the .tflite records each op's widths (version 8 where they mix) and the budget counted the written file
    assert 0 <= report["flash_budget"]["budget_bytes"] - report["flash_bytes"]

    code, _, err = run_cli(
        capsys, "export", *common, "--flash", all4 - 1000 + DEFAULT_FLASH_RESERVE, "--weight-bits", "auto",
        "--out", tmp_path / "none",
    )  # fmt: skip
    assert code == 2
    assert_one_clean_error(err, "does not fit even with every attention and MLP matrix at int4")


def test_boards_lists_what_fits_where_at_int8_and_int4(capsys):
    code, out, err = run_cli(capsys, "boards", "--json")
    assert code == 0, err
    rows = {row["name"]: row["sized_fits"] for row in json.loads(out)}
    mini4 = {name for name, fits in rows.items() if fits["bert-mini int4"]["fits"]}
    mini8 = {name for name, fits in rows.items() if fits["bert-mini int8"]["fits"]}
    assert {"nucleo-f767zi", "nucleo-h7a3zi-q"} <= mini4 and "nucleo-f746zg" not in mini4
    assert mini8 <= mini4 and "nucleo-f767zi" not in mini8  # int8 BERT-mini's encoder alone is 3.29 MB
    assert all(fits["bert-tiny int8"]["fits"] for fits in rows.values())
    for name, fits in rows.items():  # int4 leaves the embedding more of the same budget
        for model in ("bert-tiny", "bert-mini"):
            assert fits[f"{model} int4"]["embedding_bytes"] > fits[f"{model} int8"]["embedding_bytes"]
    code, out, _ = run_cli(capsys, "boards")
    assert "bert-mini int4 fits" in out and boards_command.SIZED_SEQ == 128


def test_a_real_vocabulary_sized_to_the_board_counts_the_blob_its_clusters_imply(
    capsys, tmp_path, minilm_tokenizer, make_hf_checkpoint
):
    """An uncompressed checkpoint with MiniLM's 30,522-piece tokenizer: the blob's piece lists follow the
    embedding's clusters, so sizing the embedding recounts the blob; the export fits, <= 2% unused."""
    checkpoint = make_hf_checkpoint(
        tmp_path, classifier=True, num_labels=2, vocab_size=len(minilm_tokenizer), max_position_embeddings=64
    )
    minilm_tokenizer.save_pretrained(str(checkpoint))
    config = load_checkpoint(checkpoint).model.config
    rest = whole_model_budget(
        config, FlashTarget(1 << 30, "probe"), seq_len=SEQ, vocab_bytes=tokenizer_blob_bytes(minilm_tokenizer, 4)
    )
    target = sum(rest.items.values()) + 60_000  # the paper's shape (~1 MB at d = 32) does not fit
    code, _, err = run_cli(
        capsys, "export", "--checkpoint", checkpoint, "--seq-len", SEQ, "--sram", "8MB",
        "--flash", target + DEFAULT_FLASH_RESERVE, "--out", tmp_path / "fw",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "fw" / "report.json").read_text())
    split = report["flash_budget"]
    assert report["compression"]["sized_to_flash"]["budget_bytes"] == split["embedding_bytes"]
    assert 0 < report["vocab_bytes"] <= split["vocab_bytes"]
    assert report["fits"]["ok"] and 0 <= target - report["flash_bytes"] <= 0.02 * target

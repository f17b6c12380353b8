"""finetune → distill → search from the command line: bad input, and a tiny end-to-end run."""

import json
import random

import numpy as np
import pytest

from .cli_helpers import assert_one_clean_error, run_cli

WORDS = ["the", "a", "cat", "dog", "sat", "on", "mat", "is", "was", "movie", "film", "and", "it", "this"]


def write_reviews(path, count=96, seed=0, labels=(0, 1), header="text,label"):
    """A sentiment CSV in the tiny test vocabulary: 'good/happy/very' vs 'bad/sad/not' among fillers."""
    rng = random.Random(seed)
    rows = [header]
    for i in range(count):
        label = labels[i % len(labels)]
        words = [rng.choice(["good", "happy", "very"] if label % 2 else ["bad", "sad", "not"]) for _ in range(2)]
        words += [rng.choice(WORDS) for _ in range(rng.randint(1, 5))]
        rng.shuffle(words)
        rows.append(f"{' '.join(words)},{label}")
    path.write_text("\n".join(rows) + "\n")
    return path


def run_search(capsys, checkpoint, out, budget, *extra):
    """`search` to --target-embedding-params `budget` with half-epoch stages: (exit code, printed fields)."""
    code, printed, _ = run_cli(
        capsys, "search", "--checkpoint", checkpoint, "--out", out, "--target-embedding-params", budget,
        "--epochs", 0.5, "--finetune-epochs", 0.5, *extra,
    )  # fmt: skip
    return code, dict(line.split(" ", 1) for line in printed.strip().splitlines())


@pytest.fixture
def classifier_checkpoint(tmp_path, make_hf_checkpoint):
    return make_hf_checkpoint(tmp_path, classifier=True, vocab_size=30, num_labels=2)


@pytest.mark.parametrize(
    "command, extra, data, fragments",
    [
        ("finetune", [], "nosuchtask", ["unknown task 'nosuchtask'", "rotten_tomatoes"]),
        ("finetune", [], "no_label_column", ["no column 'label'"]),
        ("finetune", [], "negative_label", ["has label -1, outside 0..1"]),
        ("distill", [], "three_labels", ["--teacher", "2 labels, the task 3"]),
        ("search", ["--target-embedding-params", "40"], "reviews", ["infeasible", "v + d = 30 + 32 = 62"]),
        ("search", ["--mode", "svd"], "reviews", ["--mode svd needs --target-embedding-params"]),
        ("search", ["--lambda", "1", "--target-embedding-params", "1k"], "reviews", ["not allowed with argument"]),
        ("search", ["--target-embedding-params", "1k", "--target-embedding-bytes", "5k"], "reviews", ["not allowed"]),
        # v = 30, d = 32: 4 clusters' tables take 4 x (8 + 8 x 32) = 1,056 B, the smallest embedding 62 parameters
        ("search", ["--target-embedding-bytes", "1100"], "reviews", ["1,100 is infeasible", "1,056 B", "62 param"]),
        ("search", ["--budget-control", "projected", "--lambda", "1"], "reviews", ["projected needs --target"]),
        (
            "search",
            ["--budget-control", "projected", "--mode", "one-stage", "--target-embedding-params", "1k"],
            "reviews",
            ["projected works on the exact search", "--relaxation exact"],
        ),
    ],
)
def test_bad_input_ends_in_one_clear_line(capsys, tmp_path, classifier_checkpoint, command, extra, data, fragments):
    files = {
        "reviews": write_reviews(tmp_path / "reviews.csv"),
        "no_label_column": write_reviews(tmp_path / "nolabel.csv", header="text,sentiment"),
        "negative_label": write_reviews(tmp_path / "negative.csv", labels=(0, 1, -1)),
        "three_labels": write_reviews(tmp_path / "three.csv", labels=(0, 1, 2)),
    }
    source = ["--teacher" if command == "distill" else "--checkpoint", classifier_checkpoint]
    code, _, err = run_cli(
        capsys, command, *source, "--task", files.get(data, data), "--out", tmp_path / "o", "--quiet", *extra
    )
    assert code == 2
    assert_one_clean_error(err, *fragments)
    assert not (tmp_path / "o" / "config.json").exists()


def test_finetune_distill_search_then_load(capsys, tmp_path, make_hf_checkpoint):
    from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding
    from tflm_mcubert.model.hf_import import load_checkpoint

    encoder = make_hf_checkpoint(tmp_path, vocab_size=30)  # a bare BertModel: finetune adds the head
    data = write_reviews(tmp_path / "reviews.csv", count=100)
    common = ["--task", data, "--batch-size", 16, "--quiet"]

    code, out, _ = run_cli(
        capsys, "finetune", "--checkpoint", encoder, "--out", tmp_path / "teacher", "--epochs", 1, "--lr", 1e-3, *common
    )
    assert code == 0 and "test_accuracy 0." in out
    code, out, _ = run_cli(
        capsys, "distill", "--teacher", tmp_path / "teacher", "--out", tmp_path / "student", "--epochs", 1, *common
    )
    assert code == 0 and "teacher_test_accuracy" in out
    student = load_checkpoint(tmp_path / "student")
    assert student.config.hidden_size == 128 and student.config.vocab_size == 30  # bert-tiny, same vocabulary

    budget = 30 * 128 // 4  # a quarter of the dense table
    code, printed = run_search(capsys, tmp_path / "student", tmp_path / "small", budget, *common)
    assert code == 0
    assert int(printed["embedding_params"]) <= budget
    # A quarter of the table on a task that two words decide: the compressed model keeps the
    # uncompressed one's validation accuracy to within two of the ten validation rows.
    assert abs(float(printed["validation_accuracy"]) - float(printed["uncompressed_validation_accuracy"])) <= 0.2

    loaded = load_checkpoint(tmp_path / "small")
    lookup = loaded.model.embeddings.word_lookup
    assert isinstance(lookup, ClusteredLowRankEmbedding) and lookup.stored_params() == int(printed["embedding_params"])
    assert loaded.tokenizer.pad_token_id == loaded.config.pad_token_id == lookup.permutation[0]
    metrics = json.loads((tmp_path / "small" / "metrics.json").read_text())
    # search, then train: below the smallest adaptive embedding the searched architecture is the only candidate
    assert [s["name"] for s in metrics["stages"]] == ["stage1-clustering", "stage2-ranks", "finetune-searched"]
    assert metrics["final_training"]["chosen"] == "searched" and "adaptive" in metrics["final_training"]["skipped"]
    assert metrics["target_embedding_params"] == budget and metrics["target_embedding_bytes"] is None
    assert metrics["embedding_bytes"] == lookup.stored_bytes(8) and metrics["embedding_storage_bits"] == 8
    # The checkpoint computes what the search measured: same test accuracy from the saved files.
    texts = ["good happy film", "bad sad movie"]
    ids = loaded.tokenizer(texts, padding=True, return_tensors="np")
    logits = loaded.model({k: ids[k].astype(np.int32) for k in ("input_ids", "attention_mask", "token_type_ids")})
    assert np.all(np.isfinite(logits["logits"].numpy()))


@pytest.mark.parametrize("bits", [None, 4])
def test_search_to_a_byte_budget_reports_params_and_bytes(capsys, tmp_path, classifier_checkpoint, bits):
    """A byte budget at the storage width (int8 by default, --embedding-bits 4), the accuracies of the tables
    as stored; int4 buys adaptive embedding more parameters for the same bytes."""
    from tflm_mcubert.model.hf_import import load_checkpoint

    data = write_reviews(tmp_path / "reviews.csv", count=60)
    budget = 2_000  # bytes: 4 cluster tables take 1,056; adaptive embedding gets 265 parameters at int8, 510 at int4
    width = [] if bits is None else ["--embedding-bits", bits]
    params = {}
    for mode in ("two-stage", "adaptive"):
        out = tmp_path / mode
        code, printed, err = run_cli(
            capsys, "search", "--checkpoint", classifier_checkpoint, "--task", data, "--out", out, "--quiet",
            "--mode", mode, "--target-embedding-bytes", budget, "--epochs", 0.5, "--finetune-epochs", 0.5, *width,
        )  # fmt: skip
        assert code == 0, (mode, err)
        printed = dict(line.split(" ", 1) for line in printed.strip().splitlines())
        metrics = json.loads((out / "metrics.json").read_text())
        lookup = load_checkpoint(out).model.embeddings.word_lookup
        stored = lookup.stored_bytes(bits or 8)
        assert int(printed["embedding_bytes"]) == metrics["embedding_bytes"] == stored <= budget
        assert metrics["embedding_params"] == lookup.stored_params() and metrics["target_embedding_bytes"] == budget
        assert metrics["embedding_storage_bits"] == (bits or 8) and metrics["accuracy_tables"] == (bits or "float")
        assert metrics["int8_embedding_bytes"] == lookup.stored_bytes(8)
        params[mode] = metrics["embedding_params"]
    # export stores the word tables at the width the search trained them for, unless told otherwise
    code, printed, err = run_cli(
        capsys, "export", "--checkpoint", tmp_path / "two-stage", "--seq-len", 16, "--sram", "8MB",
        "--flash", "64MB", "--out", tmp_path / "firmware",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "firmware" / "report.json").read_text())
    assert report["embedding"]["storage_bits"] == (bits or 8)
    assert ("stored in int4, the width the checkpoint's search fine-tuned them for" in printed) == (bits == 4)
    if bits == 4:  # the same bytes at int8 buy adaptive embedding fewer parameters
        from tflm_mcubert.compress.baselines import adaptive_for_budget, adaptive_params

        assert params["adaptive"] > adaptive_params(30, 32, *adaptive_for_budget(30, 32, budget, bits=8))


def test_distill_and_search_prune_the_vocabulary_and_export_needs_no_more(
    capsys, tmp_path, classifier_checkpoint, make_hf_checkpoint
):
    """--prune-vocab as a step of distill and search: training on the pruned tokenization, the budget over
    kept rows only, the pruned tokenizer in the checkpoint, and an export of it that prunes nothing more."""
    from tflm_mcubert.boards import get_board
    from tflm_mcubert.export.pipeline import ExportRequest, run_export
    from tflm_mcubert.model.hf_import import load_checkpoint

    data = write_reviews(tmp_path / "reviews.csv", count=64)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the good happy film\nthe cat sat on the mat\n")
    kept = 5 + 5 + 8  # special tokens, single characters (a ##s . , !), the corpus's words
    common = ["--task", data, "--batch-size", 16, "--quiet", "--prune-vocab", corpus]

    code, out, _ = run_cli(
        capsys, "distill", "--teacher", classifier_checkpoint, "--out", tmp_path / "student", "--epochs", 1, *common
    )
    assert code == 0
    printed = dict(line.split(" ", 1) for line in out.strip().splitlines())
    assert int(printed["tokens_kept"]) == kept
    student = load_checkpoint(tmp_path / "student")
    assert student.config.vocab_size == len(student.tokenizer.get_vocab()) == kept
    assert "bad" not in student.tokenizer.get_vocab() and "film" in student.tokenizer.get_vocab()
    metrics = json.loads((tmp_path / "student" / "metrics.json").read_text())
    pruning = metrics["vocab_pruning"]
    assert pruning["tokens_before"] == 30 and pruning["tokens_kept"] == kept
    assert pruning["vocab_bytes_saved"] == pruning["vocab_bytes_before"] - pruning["vocab_bytes_after"] > 0
    assert pruning["embedding_params_saved"] == (30 - kept) * student.config.hidden_size
    assert 0 <= metrics["teacher_test_accuracy"] <= 1  # the teacher read its own, unpruned tokenization

    budget = kept * 32 // 2  # half of the pruned table: the budget counts kept rows only
    code, printed = run_search(capsys, classifier_checkpoint, tmp_path / "small", budget, *common)
    assert code == 0
    assert int(printed["embedding_params"]) <= budget and int(printed["tokens_kept"]) == kept
    metrics = json.loads((tmp_path / "small" / "metrics.json").read_text())
    assert metrics["dense_embedding_params"] == kept * 32 and metrics["vocab_pruning"]["tokens_kept"] == kept
    small = load_checkpoint(tmp_path / "small")
    assert small.config.vocab_size == len(small.tokenizer.get_vocab()) == kept
    assert small.model.embeddings.word_lookup.stored_params() == int(printed["embedding_params"])

    report = run_export(
        ExportRequest(
            out_dir=tmp_path / "export",
            board=get_board("nucleo-f767zi"),
            seq_len=16,
            checkpoint=str(tmp_path / "small"),
        )
    )
    assert "vocab_pruning" not in report["model"]  # nothing left to prune: the checkpoint's tokenizer is pruned
    assert report["tokenizer"]["vocabulary_tokens"] == kept


def test_prune_top_n_needs_prune_vocab(capsys, tmp_path, classifier_checkpoint):
    data = write_reviews(tmp_path / "reviews.csv")
    code, _, err = run_cli(
        capsys,
        "distill",
        "--teacher",
        classifier_checkpoint,
        "--task",
        data,
        "--out",
        tmp_path / "o",
        "--prune-top-n",
        3,
    )
    assert code == 2
    assert_one_clean_error(err, "--prune-top-n needs --prune-vocab")


def test_distill_trains_any_shape_a_board_listing_names(capsys, tmp_path, classifier_checkpoint):
    from tflm_mcubert.model.hf_import import load_checkpoint

    data = write_reviews(tmp_path / "reviews.csv", count=32)
    code, out, err = run_cli(
        capsys, "distill", "--teacher", classifier_checkpoint, "--preset", "L1-H96-A3-F192", "--task", data,
        "--out", tmp_path / "student", "--epochs", 0.5, "--batch-size", 16, "--quiet",
    )  # fmt: skip
    assert code == 0, err
    config = load_checkpoint(tmp_path / "student").config
    shape = (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size)
    assert shape == (1, 96, 3, 192)
    code, _, err = run_cli(capsys, "distill", "--teacher", classifier_checkpoint, "--preset", "L2-H100-A3-F64",
                           "--task", data, "--out", tmp_path / "bad")  # fmt: skip
    assert code != 0
    assert_one_clean_error(err, "hidden", "100")

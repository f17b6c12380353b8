"""`distill --preset auto --board B` end to end on a tiny local teacher and task: the survivors it trains, the
same steps for each, the best on dev written to --out, a resumed search that trains nothing, and bad input."""

from __future__ import annotations

import json

import pytest

from tflm_mcubert.boards import get_board
from tflm_mcubert.export.shape_search import admitted, pareto_front
from tflm_mcubert.export.shape_space import shape_space

from .cli_helpers import assert_one_clean_error, run_cli
from .test_cli_compress import write_reviews

BOARD = "nucleo-f746zg"
SEQ = 16
# The task's own column names: the board path's search and evaluate read the file as distill does.
COLUMNS = ("--text-column", "review", "--label-column", "sentiment")
COMMON = ("--batch-size", 16, "--max-seq-len", SEQ, "--epochs", 1, "--quiet", *COLUMNS)
EXAMPLES = 60  # 48 train (80%): 3 steps of 16


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.cli import main

    root = tmp_path_factory.mktemp("shape-auto")
    data = write_reviews(root / "reviews.csv", count=EXAMPLES, header="review,sentiment")
    encoder = build_hf_checkpoint(root, vocab_size=30)
    argv = ["finetune", "--checkpoint", encoder, "--out", root / "teacher", "--task", data, *COMMON]
    assert main([str(a) for a in argv]) == 0
    return root / "teacher", data


@pytest.fixture(scope="module")
def front(teacher):
    """The board's front of shapes for this teacher, fastest first, priced as the command prices them."""
    from tflm_mcubert.cli.train import teacher_vocabulary

    vocab_size, labels, vocab_bytes = teacher_vocabulary(str(teacher[0]), SEQ)
    priced = shape_space(get_board(BOARD), SEQ, vocab_size=vocab_size, labels=labels, vocab_bytes=vocab_bytes)
    return pareto_front(admitted(priced, None, BOARD))


def auto(capsys, teacher, out, *extra):
    ckpt, data = teacher
    argv = ["distill", "--teacher", ckpt, "--task", data, "--out", out, *COMMON, "--preset", "auto", "--board", BOARD]
    return run_cli(capsys, *argv, *extra)


def test_the_best_candidate_on_dev_is_written_and_a_resumed_search_trains_nothing(
    teacher, front, tmp_path, capsys, monkeypatch
):
    from tflm_mcubert.cli import board_rank
    from tflm_mcubert.model.config import BertConfig
    from tflm_mcubert.train import workflows

    out = tmp_path / "auto"
    # The three fastest shapes of the front under the cap, two candidates: the fastest and the third.
    cap = ("--max-latency-ms", front[2].latency_ms, "--shape-candidates", 2)
    code, printed, err = auto(capsys, teacher, out, *cap)
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    report = metrics["shape_search"]
    rows = report["candidates"]
    assert [r["shape"] for r in rows] == [front[0].shape.name, front[2].shape.name]
    assert [r["steps"] for r in rows] == [3, 3]  # the same step budget for every candidate
    for row in rows:
        assert row["flash_bytes"] > 0 and row["arena_bytes"] > 0 and 0 < row["latency_ms"] <= front[2].latency_ms
        assert row["seconds"] > 0 and 0 <= row["validation_accuracy"] <= 1
        # ranked on the integer model as the board runs it: the search's model, evaluated at its widths
        evaluation = json.loads((out / "shapes" / row["shape"] / "board" / "evaluate.json").read_text())
        integer = "int8+w4" if row["weight_bits"] == 4 else "int8"
        for split in ("validation", "test"):
            assert row["board"][f"{split}_accuracy"] == evaluation["by_split"][split][f"{integer}_accuracy"]
        assert row["board"]["seconds"] > 0 and (out / "shapes" / row["shape"] / "board" / "model").is_dir()
    best = max(rows, key=lambda r: (r["board"]["validation_accuracy"], -r["latency_ms"]))
    assert report["chosen"] == best["shape"] and [r["chosen"] for r in rows] == [r is best for r in rows]
    assert "integer model on the board path" in report["rule"] and report["board_seconds"] > 0
    assert metrics["validation_accuracy"] == best["validation_accuracy"]  # OUT holds the distilled student
    written = BertConfig.from_json_file(out / "config.json")
    assert (written.num_hidden_layers, written.hidden_size) == (best["layers"], best["hidden"])
    assert f"chosen {best['shape']}" in printed and f"preset {best['shape'].rsplit('-w', 1)[0]}" in printed
    assert "dev accuracy on the board path" in printed and "measured on" not in printed  # the board path's on stderr
    assert (out / "shape_search.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "shape_search.png" in err

    trained, searched = [], []
    real_distill, real_search = workflows.distill, board_rank._run

    def counted(teacher_source, folder, *args, preset, **kwargs):
        trained.append(preset)
        return real_distill(teacher_source, folder, *args, preset=preset, **kwargs)

    def counted_search(argv):
        searched.append(argv[0])
        return real_search(argv)

    monkeypatch.setattr(workflows, "distill", counted)
    monkeypatch.setattr(board_rank, "_run", counted_search)
    code, _, err = auto(capsys, teacher, out, *cap, "--resume")
    assert code == 0, err
    assert trained == [] and searched == []
    assert json.loads((out / "metrics.json").read_text())["shape_search"]["candidates"] == rows

    (out / "shapes" / rows[1]["shape"] / "metrics.json").unlink()  # stopped after training, before its metrics
    code, _, err = auto(capsys, teacher, out, *cap, "--resume")
    assert code == 0, err
    assert trained == [rows[1]["shape"].rsplit("-w", 1)[0]] and searched == []  # the same student: read back

    evaluation = out / "shapes" / rows[0]["shape"] / "board" / "evaluate.json"
    evaluation.write_text(json.dumps(json.loads(evaluation.read_text()) | {"student": "an earlier student"}))
    code, _, err = auto(capsys, teacher, out, *cap, "--resume")
    assert code == 0, err
    assert searched == ["search", "evaluate"]  # its board path measured again, for this student
    again = json.loads((out / "metrics.json").read_text())["shape_search"]["candidates"][0]["board"]
    for split in ("validation", "test"):  # measured again the same: the search and evaluation are seeded
        assert again[f"{split}_accuracy"] == rows[0]["board"][f"{split}_accuracy"]

    code, _, err = auto(capsys, teacher, out, *cap)
    assert code == 2
    assert_one_clean_error(err, "holds an earlier shape search", "--resume")
    code, _, err = auto(capsys, teacher, out, "--max-latency-ms", front[2].latency_ms, "--resume")
    assert code == 2
    assert_one_clean_error(err, "different shape search", "candidates")


def test_the_board_paths_word_tables_take_the_width_asked_and_another_width_is_measured_again(
    teacher, front, tmp_path, capsys, monkeypatch
):
    from tflm_mcubert.cli import board_rank

    out, one = tmp_path / "auto", ("--max-latency-ms", front[0].latency_ms, "--shape-candidates", 1)
    code, printed, err = auto(capsys, teacher, out, *one, "--embedding-bits", 4)
    assert code == 0, err
    row = json.loads((out / "metrics.json").read_text())["shape_search"]["candidates"][0]
    board = out / "shapes" / row["shape"] / "board"
    evaluation = json.loads((board / "evaluate.json").read_text())
    integer = "int4+w4" if row["weight_bits"] == 4 else "int4"  # the integer model with int4 tables
    assert row["board"]["embedding_bits"] == 4 and evaluation["tables"] == "4"
    assert row["board"]["validation_accuracy"] == evaluation["by_split"]["validation"][f"{integer}_accuracy"]
    assert (
        json.loads((board / "model" / "config.json").read_text())["mcubert_compression"]["search"]["embedding_bits"]
        == 4
    )
    assert "int4 word tables" in printed

    searched = []
    real_search = board_rank._run
    monkeypatch.setattr(board_rank, "_run", lambda argv: searched.append(argv) or real_search(argv))
    code, printed, err = auto(capsys, teacher, out, *one, "--resume", "--embedding-bits", "auto")
    assert code == 0, err
    assert [a[0] for a in searched] == ["search", "evaluate"]  # other tables: the board path measured again
    assert searched[0][searched[0].index("--embedding-bits") + 1] == "auto"
    widths = json.loads((board / "model" / "metrics.json").read_text())["width_search"]
    again = json.loads((out / "metrics.json").read_text())["shape_search"]["candidates"][0]["board"]
    assert again["embedding_bits"] == {"w8-e8": 8, "w8-e4": 4, "w4-e8": 8, "w4-e4": 4}[widths["chosen"]]


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (("--preset", "auto"), ("--preset auto needs --board",)),
        (("--preset", "auto", "--board", "nucleo-f999"), ("unknown board 'nucleo-f999'",)),
        (("--board", BOARD), ("--board: only with --preset auto",)),
        (("--preset", "L1-H96-A3-F192", "--max-latency-ms", 5), ("--max-latency-ms: only with --preset auto",)),
        (("--preset", "auto", "--board", BOARD, "--qat-weight-bits", 4), ("drop --qat-weight-bits",)),
        (("--preset", "auto", "--board", BOARD, "--shape-candidates", 0), ("--shape-candidates must be at least 1",)),
        (("--preset", "auto", "--board", BOARD, "--max-latency-ms", 0), ("--max-latency-ms must be positive",)),
        (("--preset", "bert-tiny", "--rank-by", "student"), ("--rank-by: only with --preset auto",)),
        (("--preset", "bert-tiny", "--embedding-bits", 4), ("--embedding-bits: only with --preset auto",)),
        (
            ("--preset", "auto", "--board", BOARD, "--rank-by", "student", "--embedding-bits", 4),
            ("--rank-by student takes none",),
        ),
    ],
)
def test_bad_arguments_are_refused_before_any_work(capsys, tmp_path, extra, fragments):
    argv = ["distill", "--teacher", tmp_path / "absent", "--task", "rotten_tomatoes", "--out", tmp_path / "out"]
    code, _, err = run_cli(capsys, *argv, *extra)
    assert code == 2
    assert_one_clean_error(err, *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "extra, fragments",
    [
        (("--max-latency-ms", "FASTEST/2"), ("no shape that fits nucleo-f746zg at 16 tokens is that fast", "L1-H")),
        (("--board", "nano33ble"), ("nano33ble (cortex-m4)", "priced for Cortex-M7 boards")),
        (("--export-seq-len", 65), ("--export-seq-len 65 exceeds the model's 64 position embeddings",)),
    ],
)
def test_a_search_nothing_can_survive_is_refused_before_training(teacher, front, tmp_path, capsys, extra, fragments):
    """(No shape of the space fits no Cortex-M7 board at any sequence the ops allow: tests/export covers
    that refusal on made-up prices.)"""
    extra = [f"{front[0].latency_ms / 2}" if value == "FASTEST/2" else value for value in extra]
    code, _, err = auto(capsys, teacher, tmp_path / "out", *extra)
    assert code == 2
    assert_one_clean_error(err, *fragments)
    assert not (tmp_path / "out" / "shapes").exists()


def test_a_teacher_every_shape_can_be_cut_from_distils_each_candidate_with_the_layers_recipe(tmp_path, capsys):
    """Every candidate gets the default recipe: a student cut from the teacher's layers, the intermediate
    terms, teacher-labelled augmentation (a teacher as wide as the space's widest shape, heads of 32)."""
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.cli import main
    from tflm_mcubert.cli.train import teacher_vocabulary
    from tflm_mcubert.train.layer_kd import DEFAULT_RECIPE

    wide = dict(hidden_size=320, num_attention_heads=10, intermediate_size=1280, num_hidden_layers=2)
    data = write_reviews(tmp_path / "reviews.csv", count=EXAMPLES, header="review,sentiment")
    encoder = build_hf_checkpoint(tmp_path, vocab_size=30, **wide)
    argv = ["finetune", "--checkpoint", encoder, "--out", tmp_path / "teacher", "--task", data, *COMMON]
    assert main([str(a) for a in argv]) == 0
    vocab_size, labels, vocab_bytes = teacher_vocabulary(str(tmp_path / "teacher"), SEQ)
    priced = shape_space(get_board(BOARD), SEQ, vocab_size=vocab_size, labels=labels, vocab_bytes=vocab_bytes)
    fastest = pareto_front(admitted(priced, None, BOARD))[0]

    out = tmp_path / "auto"
    cap = ("--max-latency-ms", fastest.latency_ms, "--shape-candidates", 1, "--rank-by", "student")
    code, _, err = auto(capsys, (tmp_path / "teacher", data), out, *cap)
    assert code == 0, err
    assert DEFAULT_RECIPE == "layers" and "distill recipe: layers" in err
    candidate = json.loads((out / "shapes" / fastest.shape.name / "metrics.json").read_text())
    settings = json.loads((out / "shapes" / fastest.shape.name / "run" / "run.json").read_text())
    assert candidate["validation_accuracy"] == json.loads((out / "metrics.json").read_text())["validation_accuracy"]
    assert settings["init"] == "projected" and settings["intermediate_kd"]["weight"] == 1.0
    assert settings["augment"]["per_sentence"] == 1 and candidate["init"]["init"] == "projected"
    assert not (out / "shapes" / fastest.shape.name / "board").exists()  # ranked on the student: no board path
    search = json.loads((out / "shape_search.json").read_text())
    assert search["training"]["layers"] == {"init": "projected", "intermediate_kd": settings["intermediate_kd"]}

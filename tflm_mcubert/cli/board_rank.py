"""`distill --preset auto`'s ranking on the board path (`--rank-by board`, the default).

Each candidate student goes the way its export will: the word tables searched under the board's Flash at
the student's weight width, then the integer model evaluated as the firmware computes it (the ops' numpy
reference). The candidates are ranked on that model's validation accuracy. The float student's accuracy
misleads where the board squeezes the word tables: on the NUCLEO-F767ZI a six-layer int4 student led
BERT-tiny by 1.75 test points as a float model and trailed it by 0.13 as the exported one, its encoder
leaving the tables a fifth of BERT-tiny's bytes.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tflm_mcubert.cli import COLUMN_FLAGS, given_flags, run_inside
from tflm_mcubert.cli.export import trained_storage_bits
from tflm_mcubert.compress.width_search import WidthCandidate
from tflm_mcubert.errors import UserError

BOARD_DIR = "board"  # in the candidate's folder: the searched model and its evaluation
EVALUATION = "evaluate.json"
TABLE_WIDTHS = ("8", "4", "auto")  # distill --embedding-bits: the board path's word tables (search's)
# A short search, as the board benchmarks measure students: adaptive word tables (the NAS's equal at board
# budgets), half an epoch of search and one of quantization-aware fine-tune.
SEARCH = ("--mode", "adaptive", "--epochs", "0.5", "--finetune-epochs", "1")
DATA_FLAGS = ("task", *COLUMN_FLAGS, "max_seq_len", "max_train_examples")


def board_accuracy(args, weight_bits: int, student: Path, seq_len: int) -> dict:
    """The validation and test accuracy (and the seconds taken, and the word tables' width) of `student`'s
    integer model on `args.board` at `seq_len` tokens, its tables searched at `args.embedding_bits` (8, 4,
    auto or None: search's default); read back when its evaluation is there and of this student and tables,
    the search resumed when it stopped."""
    from tflm_mcubert.train.workflows import checkpoint_fingerprint

    folder = student / BOARD_DIR
    evaluation = folder / EVALUATION
    measured_for = {"student": checkpoint_fingerprint(str(student)), "tables": getattr(args, "embedding_bits", None)}
    if evaluation.is_file() and _measured_for(json.loads(evaluation.read_text())) != measured_for:
        shutil.rmtree(folder)  # an earlier student of this folder, or other tables: measured again
    if not evaluation.is_file():
        began = time.monotonic()
        model = folder / "model"
        bits = str(weight_bits)
        search = ["search", "--checkpoint", student, "--out", model, "--resume", "--board", args.board, *SEARCH]
        search += ["--weight-bits", bits, "--qat-weight-bits", bits, "--export-seq-len", seq_len]
        search += ["--batch-size", args.batch_size, "--seed", args.seed, *given_flags(args, DATA_FLAGS)]
        search += ["--embedding-bits", measured_for["tables"]] if measured_for["tables"] else []
        search += ["--quiet"] if args.quiet else []
        _run(search)
        tables = trained_storage_bits(model) or 8  # with auto: the width the search kept
        partial = folder / f"{EVALUATION}.partial"
        evaluate = ["evaluate", "--checkpoint", model, "--task", args.task, "--seq-len", seq_len]
        evaluate += ["--split", "validation", "test", "--weight-bits", bits, "--embedding-bits", tables]
        evaluate += ["--json", partial]
        evaluate += ["--samples", args.max_eval_examples] if args.max_eval_examples else []
        evaluate += given_flags(args, COLUMN_FLAGS)
        _run(evaluate)
        result = json.loads(partial.read_text())
        result |= {**measured_for, "embedding_bits": tables, "seconds": round(time.monotonic() - began, 1)}
        partial.write_text(json.dumps(result, indent=2) + "\n")
        partial.replace(evaluation)  # whole or absent: a stopped evaluation is run again
    return _accuracies(json.loads(evaluation.read_text()), weight_bits, student)


def _measured_for(evaluation: dict) -> dict:
    """The student and the tables requested an evaluation was made for (one made before --embedding-bits
    reached distill has none: search's default)."""
    return {"student": evaluation.get("student"), "tables": evaluation.get("tables")}


def _accuracies(evaluation: dict, weight_bits: int, student: Path) -> dict:
    tables = evaluation.get("embedding_bits", 8)
    key = f"{WidthCandidate(weight_bits, tables).integer_model}_accuracy"
    splits = evaluation.get("by_split", {})
    missing = [split for split in ("validation", "test") if key not in splits.get(split, {})]
    if missing:
        raise UserError(f"{student / BOARD_DIR / EVALUATION}: no {key} on {', '.join(missing)}; delete it")
    return {
        "validation_accuracy": splits["validation"][key],
        "test_accuracy": splits["test"][key],
        "seconds": evaluation.get("seconds", 0.0),
        "embedding_bits": tables,
    }


def _run(argv: list) -> None:
    module = {"search": "tflm_mcubert.cli.search", "evaluate": "tflm_mcubert.cli.evaluate"}[argv[0]]
    if run_inside(argv, module) != 0:
        raise UserError(f"the board path stopped at `{' '.join(str(a) for a in argv)}`")

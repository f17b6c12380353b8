"""How close the int8 MCUBERT model comes to the float one on a task: accuracy of both, and the cosine between
their mean-pooled sentence embeddings, for each checkpoint given, as `evaluate` measures them (the int8 model
is the integer reference of the exported ops, calibrated and stored as `export` does). Not a test: prints a
table and, with --summary, writes the committed summary.

    python -m tflm_mcubert distill --teacher teacher/ --task rotten_tomatoes --max-seq-len 64 --out student/
    python -m tflm_mcubert search --checkpoint student/ --task rotten_tomatoes --max-seq-len 64 \\
        --export-seq-len 64 --epochs 0.5 --finetune-epochs 1 --mode adaptive --board nucleo-f746zg \\
        --weight-bits 8 --out compressed/
    python bench/int8_accuracy.py --model "distilled BERT-tiny=student/" \\
        --model "the same, compressed for the F746ZG=compressed/" [--task rotten_tomatoes] \\
        [--summary bench/results/int8_accuracy.json]

Each --model LABEL=CHECKPOINT runs `python -m tflm_mcubert evaluate --checkpoint CHECKPOINT --task TASK`
(its default sequence length and splits; the test split's figures are kept). --summary writes the figures,
the commands and the provenance (each checkpoint's SHA-256); bench/report.py makes the int8-accuracy page's
table of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

SPLIT = "test"  # evaluate's JSON holds its last split at the top level


def evaluate_command(checkpoint: str, task: str) -> list[str]:
    return ["evaluate", "--checkpoint", checkpoint, "--task", task]


def evaluate(checkpoint: str, task: str, out: Path) -> dict:
    """One `evaluate` run's JSON (in a subprocess, as a user runs it)."""
    command = [sys.executable, "-m", "tflm_mcubert", *evaluate_command(checkpoint, task), "--json", str(out)]
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.read_text())


def row(label: str, result: dict) -> dict:
    """The summary's row of one evaluate JSON: accuracy in %, cosine int8 vs float."""
    count = len(result["labels"])
    return {
        "model": label,
        "how": "`evaluate`",
        "texts": f"{result['model']['task']['task'].replace('_', '-')} {SPLIT} ({count:,})",
        "seq_len": result["seq_len"],
        "float": round(100 * result["float_accuracy"], 2),
        "int8": round(100 * result["int8_accuracy"], 2),
        "cosine_min": result["int8_cosine"]["min"],
        "cosine_mean": result["int8_cosine"]["mean"],
        "argmax_agreement": result["int8_argmax_agreement"],
    }


def markdown_table(summary: dict) -> str:
    """Float against int8: accuracy where measured, and the mean-pooled cosine of int8 to float (int8 page)."""
    out = [
        "| model | measured with | texts | float | int8 | cosine int8 vs float, min / mean |",
        "|---|---|---|---:|---:|---|",
    ]
    for r in summary["rows"]:
        accuracy = [f"{r[k]:.2f}%" if k in r else "" for k in ("float", "int8")]
        out.append(
            f"| {r['model']} | {r['how']} | {r['texts']} | {accuracy[0]} | {accuracy[1]} | "
            f"{r['cosine_min']:g} / {r['cosine_mean']:g} |"
        )
    return "\n".join(out)


def parse_model(text: str) -> tuple[str, str]:
    label, sep, checkpoint = text.rpartition("=")
    if not sep or not label or not checkpoint:
        raise argparse.ArgumentTypeError(f"{text!r}: expected LABEL=CHECKPOINT")
    return label, checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model",
        type=parse_model,
        action="append",
        required=True,
        metavar="LABEL=CHECKPOINT",
        help="a fine-tuned classifier and the table's words for it (repeat for more rows)",
    )
    parser.add_argument("--task", default="rotten_tomatoes", help="evaluate's --task (default rotten_tomatoes)")
    parser.add_argument("--summary", type=Path, help="write the committed summary (bench/results/int8_accuracy.json)")
    args = parser.parse_args(argv)
    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="int8_accuracy_") as tmp:
        for i, (label, checkpoint) in enumerate(args.model):
            rows.append(row(label, evaluate(checkpoint, args.task, Path(tmp) / f"{i}.json")))
    summary = {"bench": "int8_accuracy", "rows": rows}
    print("\n" + markdown_table(summary))
    print(f"measured in {time.time() - started:.0f} s")
    if args.summary:
        from provenance import provenance

        models = " ".join(f'--model "{label}=CHECKPOINT{i + 1}"' for i, (label, _) in enumerate(args.model))
        task = "" if args.task == "rotten_tomatoes" else f" --task {args.task}"
        summary["command"] = f"python bench/int8_accuracy.py {models}{task} --summary {args.summary}"
        summary["commands"] = {
            "evaluate": "python -m tflm_mcubert " + " ".join(evaluate_command("CHECKPOINT", args.task))
        }
        checkpoints = {f"CHECKPOINT{i + 1}": checkpoint for i, (_, checkpoint) in enumerate(args.model)}
        summary["provenance"] = provenance(checkpoints)
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

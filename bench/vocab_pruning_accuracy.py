"""The accuracy cost of vocabulary pruning: one fine-tuned classifier evaluated on a task's test split with
its full vocabulary and with the vocabulary pruned to a corpus, on the same sentences (paired), and the
tokenizer blob each needs. Prints a table; not a test.

    python bench/vocab_pruning_accuracy.py --checkpoint FINETUNED [FINETUNED ...] [--task rotten_tomatoes]
                                           [--corpus rotten_tomatoes] [--seq-len 64] [--top-n N] [--summary FILE]

No training is involved (the pruned model is the fine-tuned one with rows dropped), so one model and a
paired exact McNemar test on the test split say everything: the accuracies, the sentences whose
prediction changed either way, and the two-sided p-value. Several checkpoints (fine-tunes of one model with
different seeds) are measured one after the other; --summary writes the committed summary
(bench/results/vocab_pruning_accuracy.json: the mean and sd over them, each one's difference and p-value and
per-example correctness bits, and the checkpoints' SHA-256), whose table bench/report.py puts on the tokenizer
page.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def predictions(model, tokenizer, texts: list[str], seq_len: int, batch: int = 64) -> np.ndarray:
    out = []
    for start in range(0, len(texts), batch):
        encoded = tokenizer(
            texts[start : start + batch], padding="max_length", truncation=True, max_length=seq_len, return_tensors="np"
        )
        inputs = {
            k: v.astype(np.int32) for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")
        }
        out.append(np.argmax(model(inputs)["logits"].numpy(), axis=-1))
    return np.concatenate(out)


def mcnemar_p(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar test (binomial on the discordant pairs)."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    k = min(only_first, only_second)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def seed_of(checkpoint: str) -> int | None:
    """The seed `finetune` recorded for a checkpoint (run/run.json), if it did."""
    run = Path(checkpoint) / "run" / "run.json"
    return json.loads(run.read_text()).get("seed") if run.is_file() else None


def measure(checkpoint: str, args) -> dict:
    """One fine-tuned classifier with its full and its pruned vocabulary on the test split (printed)."""
    from tflm_mcubert.compress.vocab_pruning import corpus_sentences, prune_vocabulary
    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.model.hf_import import load_checkpoint
    from tflm_mcubert.tokenizer import reference, vocab_blob

    from results_bits import pack

    started = time.time()
    loaded = load_checkpoint(checkpoint)
    test = load_task(args.task)["test"]
    texts, labels = list(test["text"]), np.asarray(test["label"])
    with tempfile.TemporaryDirectory() as tmp:
        pruned = prune_vocabulary(loaded.model, loaded.tokenizer, corpus_sentences(args.corpus), Path(tmp), args.top_n)
        full_blob = len(vocab_blob.pack(reference.spec_from_hf(loaded.tokenizer)))
        pruned_blob = len(vocab_blob.pack(reference.spec_from_hf(pruned.tokenizer)))
        full = predictions(loaded.model, loaded.tokenizer, texts, args.seq_len) == labels
        cut = predictions(pruned.model, pruned.tokenizer, texts, args.seq_len) == labels
    only_full, only_pruned = int(np.sum(full & ~cut)), int(np.sum(cut & ~full))
    hidden = loaded.model.config.hidden_size
    print(f"{checkpoint} on {args.task} test ({len(texts):,} sentences, seq_len {args.seq_len})")
    name = f"pruned to {args.corpus}" + (f" (top {args.top_n})" if args.top_n else "")
    rows = [
        ("full", pruned.report["tokens_before"], full_blob, full.mean()),
        (name, len(pruned.kept_ids), pruned_blob, cut.mean()),
    ]
    print(f"{'vocabulary':<34}{'tokens':>8}{'blob B':>10}{'int8 table B':>15}{'test accuracy':>15}")
    for label, tokens, blob, accuracy in rows:
        print(f"{label:<34}{tokens:>8,}{blob:>10,}{tokens * hidden:>15,}{accuracy:>15.2%}")
    p = mcnemar_p(only_full, only_pruned)
    print(
        f"difference {100 * (cut.mean() - full.mean()):+.2f} points; right only with the full vocabulary "
        f"{only_full}, only pruned {only_pruned}; exact McNemar p = {p:.3f}"
    )
    print(f"measured in {time.time() - started:.0f} s")
    return {
        "checkpoint": checkpoint,
        "seed": seed_of(checkpoint),
        "texts": len(texts),
        "tokens": {"full": rows[0][1], "pruned": rows[1][1]},
        "blob_bytes": {"full": full_blob, "pruned": pruned_blob},
        "accuracy": {"full": round(100 * float(full.mean()), 2), "pruned": round(100 * float(cut.mean()), 2)},
        "difference_points": round(100 * float(cut.mean() - full.mean()), 2),
        "only_full_right": only_full,
        "only_pruned_right": only_pruned,
        "mcnemar_exact_p": round(p, 3),
        "correct": {"full": pack(full), "pruned": pack(cut)},
    }


def summary(runs: list[dict], args) -> dict:
    """The committed summary: mean ± sd (ddof 1) over the checkpoints, and each one's figures and bits."""
    from provenance import provenance

    def mean_sd(values) -> dict:
        values = np.asarray(values, np.float64)
        sd = values.std(ddof=1) if values.size > 1 else 0.0
        return {"mean": round(float(values.mean()), 2), "sd": round(float(sd), 2)}

    flags = "".join(
        f" --{flag} {value}"
        for flag, value, default in (
            ("task", args.task, "rotten_tomatoes"),
            ("corpus", args.corpus, "rotten_tomatoes"),
            ("seq-len", args.seq_len, 64),
            ("top-n", args.top_n, None),
        )
        if value != default
    )
    return {
        "bench": "vocab_pruning_accuracy",
        "commands": {
            "finetune": f"python -m tflm_mcubert finetune --checkpoint MINILM --task {args.task} --epochs 1 "
            f"--max-seq-len {args.seq_len} --out ft-k --seed k",
            "bench": "python bench/vocab_pruning_accuracy.py --checkpoint ft-0 ft-1 ..."
            + f"{flags} --summary {args.summary}",
        },
        "setting": {
            "model": args.model,
            "texts": f"{args.task.replace('_', '-')} test split ({runs[0]['texts']:,} sentences), each model with "
            "both vocabularies (paired)",
            "pruned_to": f"the {args.corpus.replace('_', '-')} training split"
            + (f", its {args.top_n} most frequent pieces" if args.top_n else ""),
        },
        "seeds": [run["seed"] for run in runs],
        "accuracy": {which: mean_sd([run["accuracy"][which] for run in runs]) for which in ("full", "pruned")},
        "difference_points": [run["difference_points"] for run in runs],
        "mcnemar_exact_p": [run["mcnemar_exact_p"] for run in runs],
        "runs": runs,
        "provenance": provenance({f"seed {run['seed']}": run["checkpoint"] for run in runs}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--checkpoint",
        required=True,
        nargs="+",
        help="fine-tuned classifiers (python -m tflm_mcubert finetune), e.g. one per seed",
    )
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument(
        "--corpus", default="rotten_tomatoes", help="what the vocabulary is pruned to (its train split)"
    )
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--top-n", type=int, default=None)
    parser.add_argument("--summary", type=Path, help="write the committed summary (over every --checkpoint)")
    parser.add_argument(
        "--model",
        default="all-MiniLM-L6-v2 fine-tuned one epoch at seq 64",
        help="the summary's words for what the checkpoints are",
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "bench"))
    runs = [measure(checkpoint, args) for checkpoint in args.checkpoint]
    if args.summary:
        args.summary.write_text(json.dumps(summary(runs, args), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

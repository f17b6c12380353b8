"""The accuracy cost of vocabulary pruning: one fine-tuned classifier evaluated on a task's test split with
its full vocabulary and with the vocabulary pruned to a corpus, on the same sentences (paired), and the
tokenizer blob each needs. Prints a table; not a test.

    python bench/vocab_pruning_accuracy.py --checkpoint FINETUNED [--task rotten_tomatoes]
                                           [--corpus rotten_tomatoes] [--seq-len 64] [--top-n N]

No training is involved (the pruned model is the fine-tuned one with rows dropped), so one model and a
paired exact McNemar test on the test split say everything: the accuracies, the sentences whose
prediction changed either way, and the two-sided p-value.
"""

from __future__ import annotations

import argparse
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a fine-tuned classifier (python -m tflm_mcubert finetune)")
    parser.add_argument("--task", default="rotten_tomatoes")
    parser.add_argument(
        "--corpus", default="rotten_tomatoes", help="what the vocabulary is pruned to (its train split)"
    )
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--top-n", type=int, default=None)
    args = parser.parse_args(argv)

    from tflm_mcubert.compress.vocab_pruning import corpus_sentences, prune_vocabulary
    from tflm_mcubert.data.tasks import load_task
    from tflm_mcubert.model.hf_import import load_checkpoint
    from tflm_mcubert.tokenizer import reference, vocab_blob

    started = time.time()
    loaded = load_checkpoint(args.checkpoint)
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
    print(f"{args.checkpoint} on {args.task} test ({len(texts):,} sentences, seq_len {args.seq_len})")
    name = f"pruned to {args.corpus}" + (f" (top {args.top_n})" if args.top_n else "")
    rows = [
        ("full", pruned.report["tokens_before"], full_blob, full.mean()),
        (name, len(pruned.kept_ids), pruned_blob, cut.mean()),
    ]
    print(f"{'vocabulary':<34}{'tokens':>8}{'blob B':>10}{'int8 table B':>15}{'test accuracy':>15}")
    for label, tokens, blob, accuracy in rows:
        print(f"{label:<34}{tokens:>8,}{blob:>10,}{tokens * hidden:>15,}{accuracy:>15.2%}")
    print(
        f"difference {100 * (cut.mean() - full.mean()):+.2f} points; right only with the full vocabulary "
        f"{only_full}, only pruned {only_pruned}; exact McNemar p = {mcnemar_p(only_full, only_pruned):.3f}"
    )
    print(f"measured in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

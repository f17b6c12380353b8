"""int4 against int8 embedding tables (ops/SPEC.md 4.1.1): Flash bytes and the embedding op's executed
instructions on emulated Cortex-M cores, from two exports of one checkpoint.

    python -m tflm_mcubert export --checkpoint CKPT --embedding-bits 8 --out OUT8
    python -m tflm_mcubert export --checkpoint CKPT --embedding-bits 4 --out OUT4
    python bench/embedding_int4.py --int8 OUT8 --int4 OUT4 [--sentences 16] [--cores cortex-m7,cortex-m4]
                                   [--json FILE]
    python -m tflm_mcubert evaluate --checkpoint CKPT --task rotten_tomatoes --split test --embedding-bits 8 4
                                    [--qat-steps 300] --json EVAL
    python bench/embedding_int4.py ... --checkpoint CKPT --evaluate ptq=EVAL [--evaluate qat_300_steps=EVAL]
                                   --summary bench/results/embedding_int4.json

Not a test: prints a table (and JSON). The op runs on the exported models' own tables (read back from
model.tflite) with real token ids: the rotten-tomatoes test sentences through the export's tokenizer
(tokenizer/, the permuted vocabulary), padded to the export's sequence length, so the share of tokens
in each cluster is the real one. Every run is checked byte for byte against the numpy reference.
Needs arm-none-eabi-gcc, a host C compiler and `unicorn` (pip install -e .[bench]).

--summary writes the committed summary: these figures, each --evaluate run of `evaluate --embedding-bits 8 4`
(accuracy of float, int8 and int4 word tables on the same texts, with the per-example correctness as packed
bits), the commands and the provenance (the checkpoint's SHA-256); bench/report.py makes docs/int4.md's tables
of it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.ops import embedding, kernel_abi  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_stats import format_p, mcnemar  # noqa: E402
from results_bits import compact, correct  # noqa: E402
from tflm_mcubert.tflite.mcubert_reader import read_model  # noqa: E402


def exported(out_dir: Path):
    """(embedding params, report.json) of an export directory."""
    model = read_model((out_dir / "model.tflite").read_bytes())
    return model.quantized.embedding, json.loads((out_dir / "report.json").read_text())


def token_ids(out_dir: Path, seq_len: int, count: int) -> list[np.ndarray]:
    """int32[s] ids of the first `count` rotten-tomatoes test sentences, through the export's tokenizer."""
    from transformers import AutoTokenizer

    from tflm_mcubert.data.tasks import TEXT, load_task

    tokenizer = AutoTokenizer.from_pretrained(out_dir / "tokenizer", local_files_only=True)
    test = load_task("rotten_tomatoes", seed=0)["test"]
    texts = list(test.select(range(min(count, len(test))))[TEXT])
    encoded = tokenizer(texts, max_length=seq_len, truncation=True, padding="max_length", return_tensors="np")
    return [row.astype(np.int32) for row in encoded["input_ids"]]


def emulator(core: str, build: Path):
    from tflm_mcubert.measure import kernel_build
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    image = kernel_build.build(kernel_build.Variant(core), build, "mcubert_emu").image("mcubert_emu")
    return ArmEmulator(image, core)


def instructions(emu, params, sequences: list[np.ndarray]) -> list[int]:
    """Executed instructions of one embedding call per sequence, each output checked against the reference."""
    from tflm_mcubert.measure.arm_emulator import run_kernel

    counts = []
    types = np.zeros(params.seq_len, np.int32)
    for ids in sequences:
        run = run_kernel(emu, kernel_abi.embedding_call(params, ids, types), count_instructions=True)
        want = embedding.run(params, ids, types, np.zeros((params.seq_len, params.hidden), np.int8))
        if run.status != kernel_abi.OK or not np.array_equal(run.output, want.reshape(-1)):
            raise SystemExit(f"the kernel disagrees with the reference ({run.message or 'output differs'})")
        counts.append(run.instructions)
    return counts


def flash_table(summary: dict) -> str:
    """Per word-table width: bytes, Flash against the board's budget, the embedding op's instructions per
    sequence under unicorn (docs/int4.md)."""
    entries = summary["flash_and_instructions"]["bits"]
    cores = list(next(iter(entries.values()))["instructions"])
    header = ["word tables", "word-table bytes", "embedding op bytes", "`.tflite`", "`flash_bytes`", "fits"]
    header.append(
        "embedding op, instructions / sequence, " + " / ".join(c.removeprefix("cortex-").upper() for c in cores)
    )
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for bits, e in entries.items():
        spare = e["flash_budget"] - e["flash_bytes"]
        fits = f"yes, {spare:,} B to spare" if e["fits"] else f"no: misses by {-spare:,} B"
        cells = [f"int{bits}", *(f"{e[k]:,}" for k in ("embedding_bytes", "op_bytes", "tflite_bytes", "flash_bytes"))]
        cells += [f"{fits} (budget {e['flash_budget']:,} B)"]
        cells.append(" / ".join(f"{e['instructions'][c]['mean']:,.0f}" for c in cores))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def accuracy_table(summary: dict) -> str:
    """Per evaluation (PTQ, and after the QAT fine-tune): test accuracy of float, int8 and int4 word tables,
    argmax agreement with float, and int4 − int8 with its exact McNemar p recomputed from the per-example bits."""
    header = ["evaluation", "float", "int8", "int4", "argmax agreement with float, int8 / int4"]
    header += ["int4 − int8 (only int8 right / only int4 right)", "McNemar p"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, e in summary["evaluate"].items():
        right = {model: correct(e, None, model) for model in ("float", "int8", "int4")}
        int8_only, int4_only = int(np.sum(right["int8"] & ~right["int4"])), int(np.sum(right["int4"] & ~right["int8"]))
        cells = [name.replace("_", " ").replace("ptq", "PTQ").replace("qat", "QAT")]
        cells += [f"{100 * right[m].mean():.2f}" for m in ("float", "int8", "int4")]
        cells.append(" / ".join(f"{100 * e['argmax_agreement'][m]:.1f}" for m in ("int8", "int4")))
        difference = 100 * (right["int4"].mean() - right["int8"].mean())
        cells.append(f"{difference:+.2f} ({int8_only} / {int4_only})")
        cells.append(format_p(mcnemar(right["int4"], right["int8"])))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def evaluation(path: Path) -> dict:
    """One `evaluate --embedding-bits 8 4 --json` run as the summary keeps it: accuracy, argmax agreement and
    cosine per model, int8 against int4 (exact McNemar), and each model's per-example correctness bits."""
    run = json.loads(path.read_text())
    run = {**run, **run.get("by_split", {}).get("test", {})}
    right = {model: np.asarray(run["predictions"][model]) == np.asarray(run["labels"]) for model in ("int8", "int4")}
    int8_only, int4_only = int(np.sum(right["int8"] & ~right["int4"])), int(np.sum(right["int4"] & ~right["int8"]))
    return {
        "texts": run["texts"],
        "accuracy": {model: run[f"{model}_accuracy"] for model in ("float", "int8", "int4")},
        "argmax_agreement": {model: run[f"{model}_argmax_agreement"] for model in ("int8", "int4")},
        "cosine": {model: run[f"{model}_cosine"] for model in ("int8", "int4")},
        "int8_vs_int4_mcnemar": {
            "int8_only_right": int8_only,
            "int4_only_right": int4_only,
            "exact_p": round(mcnemar(right["int8"], right["int4"]), 4),
        },
        **compact(
            {"predictions": {m: run["predictions"][m] for m in ("float", "int8", "int4")}, "labels": run["labels"]}
        ),
    }


def summary(args, results: dict) -> dict:
    from provenance import provenance

    evaluations = dict(item.split("=", 1) for item in args.evaluate)
    flags = f" --sentences {args.sentences}" + (f" --cores {args.cores}" if args.cores != "cortex-m7,cortex-m4" else "")
    return {
        "student": args.student or str(args.checkpoint),
        "commands": {
            "export": "python -m tflm_mcubert export --checkpoint STUDENT --embedding-bits {8,4} --out OUT{8,4}",
            "bench": f"python bench/embedding_int4.py --int8 OUT8 --int4 OUT4{flags} --checkpoint STUDENT "
            + " ".join(f"--evaluate {name}=EVAL" for name in evaluations)
            + f" --summary {args.summary}",
            "evaluate": "python -m tflm_mcubert evaluate --checkpoint STUDENT --task rotten_tomatoes --split test "
            "--embedding auto --embedding-bits 8 4 [--qat-steps 300] --json EVAL",
        },
        "flash_and_instructions": results,
        "evaluate": {name: evaluation(Path(path)) for name, path in evaluations.items()},
        "provenance": provenance({"student": args.checkpoint}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--int8", type=Path, required=True, help="export directory (--embedding-bits 8)")
    parser.add_argument("--int4", type=Path, required=True, help="export directory (--embedding-bits 4)")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--cores", default="cortex-m7,cortex-m4")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--checkpoint", type=Path, help="the checkpoint both exports are of (its SHA-256 is recorded)")
    parser.add_argument("--student", help="the summary's words for the checkpoint (default: its path)")
    parser.add_argument(
        "--evaluate", action="append", default=[], metavar="NAME=FILE", help="an `evaluate --embedding-bits 8 4 --json`"
    )
    parser.add_argument("--summary", type=Path, help="write the committed summary (bench/results/embedding_int4.json)")
    args = parser.parse_args()
    if args.summary and not args.checkpoint:
        parser.error("--summary needs --checkpoint")
    models = {8: exported(args.int8), 4: exported(args.int4)}
    (p8, _), (p4, _) = models[8], models[4]
    geometry = [(v.end - v.start, v.rank) for v in p8.cluster_views]
    if geometry != [(v.end - v.start, v.rank) for v in p4.cluster_views] or p8.word_bits != 8 or p4.word_bits != 4:
        raise SystemExit("--int8 and --int4 must be exports of one checkpoint at 8 and 4 bits")
    sequences = token_ids(args.int4, p4.seq_len, args.sentences)
    ids = np.concatenate(sequences)
    ends = np.cumsum([n for n, _ in geometry])
    share = np.bincount(np.searchsorted(ends, ids, side="right"), minlength=len(geometry)) / ids.size
    results = {
        "clusters": [{"rows": n, "rank": r, "token_share": round(float(s), 4)} for (n, r), s in zip(geometry, share)],
        "sentences": len(sequences),
        "seq_len": p4.seq_len,
        "bits": {},
    }
    with tempfile.TemporaryDirectory() as build:
        emulators = {core: emulator(core, Path(build)) for core in args.cores.split(",")}
        for bits, (params, report) in models.items():
            entry = {
                "embedding_bytes": params.storage_bytes,
                "embedding_bytes_formula": embedding.embedding_storage_bytes(geometry, params.hidden, bits),
                "op_bytes": report["embedding"]["op_bytes"],
                "tflite_bytes": report["tflite_bytes"],
                "flash_bytes": report["flash_bytes"],
                "flash_budget": report["fits"]["flash"]["budget_bytes"],
                "fits": report["fits"]["ok"],
                "instructions": {},
            }
            for core, emu in emulators.items():
                counts = instructions(emu, params, sequences)
                entry["instructions"][core] = {"mean": float(np.mean(counts)), "min": min(counts), "max": max(counts)}
            results["bits"][bits] = entry
    print(f"{len(sequences)} rotten-tomatoes test sentences at seq_len {p4.seq_len}; clusters (rows, rank, share):")
    print("  " + ", ".join(f"({c['rows']}, {c['rank']}, {c['token_share']:.3f})" for c in results["clusters"]))
    header = f"{'bits':>4} {'word tables B':>14} {'op B':>9} {'.tflite B':>10} {'Flash B':>10} {'fits':>5}"
    print(header + "".join(f" {core + ' instr/seq':>22}" for core in emulators))
    for bits, e in results["bits"].items():
        row = f"{bits:>4} {e['embedding_bytes']:>14,} {e['op_bytes']:>9,} {e['tflite_bytes']:>10,} "
        row += f"{e['flash_bytes']:>10,} {str(e['fits']):>5}"
        print(row + "".join(f" {e['instructions'][c]['mean']:>22,.0f}" for c in emulators))
    for core in emulators:
        ratio = results["bits"][4]["instructions"][core]["mean"] / results["bits"][8]["instructions"][core]["mean"]
        print(f"  {core}: int4 / int8 instructions {ratio:.3f}")
    saved = results["bits"][8]["flash_bytes"] - results["bits"][4]["flash_bytes"]
    print(f"  Flash saved by int4 tables: {saved:,} B")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.summary:
        args.summary.write_text(json.dumps(summary(args, results), separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

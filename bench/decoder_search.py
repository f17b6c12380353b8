"""The decoder's embedding search against adaptive embedding at the same parameter budget: each run is one
`search` of the demonstration decoder's tied word table with the LM loss, then `evaluate` of what it wrote
(test perplexity, float and int8 as `export` writes it for the board, and the export's Flash). Not a test:
prints the tables and, with --summary, writes the committed summary.

    python -m tflm_mcubert train-lm --vocab-size 2048 --context 256 --epochs 12 --out runs/lm/rt-d128x2
    python bench/decoder_search.py --checkpoint runs/lm/rt-d128x2 --out runs/lm/search-lm \\
        [--summary bench/results/decoder_search.json]

The runs (ROWS and SEED_RUNS below; each budget in parameters of the 262,144-parameter table):

    searched (two-stage), --arch-lr 1e-3   69,728 and 33,717, seed 0
    adaptive, fine-tuned                   69,728 and 33,717, seeds 0, 1, 2 at 33,717
    searched, --arch-lr 1e-2               69,728, and 33,770 with seeds 0, 1, 2

each `python -m tflm_mcubert search --checkpoint CKPT --task rotten_tomatoes --target-embedding-params N
--epochs 1 --finetune-epochs 1 --batch-size 8 --lr 3e-4 --kd-weight 0 --stage1-start budget [--mode adaptive]
[--arch-lr A] [--seed k] --out OUT/<run>`, then `python -m tflm_mcubert evaluate --checkpoint OUT/<run> --task
rotten_tomatoes --board nucleo-f746zg --split test --json OUT/<run>/evaluate.json`. A run whose folder holds
both JSON files is read, not run again, so an interrupted bench continues where it stopped, and the summary
can be written again from the folders alone. On 2 cores shared with other jobs train-lm takes about 6 minutes
and a run about 8-9: the search's 540 training steps of 8 blocks, 2-3 minutes, then evaluate's float model and
its two int8 models (dense, and as exported), one token a step over the test split's 181 blocks, about 6; the
ten about 85. The summary's seconds are the runs' own (search and evaluate, as each recorded them), summed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import recorded_results  # noqa: E402

SEARCHED, ADAPTIVE, SEARCHED_FAST = "searched (two-stage)", "adaptive, fine-tuned", "searched, `--arch-lr 1e-2`"
TRAINING = ["--epochs", "1", "--finetune-epochs", "1", "--batch-size", "8", "--lr", "3e-4", "--kd-weight", "0"]


@dataclasses.dataclass(frozen=True)
class Run:
    table: str  # the summary's name of the method
    budget: int
    seed: int = 0

    @property
    def name(self) -> str:
        method = {SEARCHED: "two-stage", ADAPTIVE: "adaptive", SEARCHED_FAST: "two-stage-arch-lr-1e-2"}[self.table]
        return f"{method}-{self.budget}-s{self.seed}"

    def search(self, checkpoint: str, task: str, out: str) -> list[str]:
        mode = (
            ["--mode", "adaptive"]
            if self.table == ADAPTIVE
            else ["--arch-lr", "1e-3" if self.table == SEARCHED else "1e-2"]
        )
        return ["search", "--checkpoint", checkpoint, "--task", task, "--target-embedding-params", str(self.budget),
                *TRAINING, "--stage1-start", "budget", *mode, "--seed", str(self.seed), "--out", out]  # fmt: skip


# The rows, in the page's order, then the seeds at the smaller budget (SEED_BUDGET for the searched table;
# adaptive embedding's shape within it is the same as at 33,717).
ROWS = [Run(SEARCHED, 69728), Run(ADAPTIVE, 69728), Run(SEARCHED, 33717), Run(ADAPTIVE, 33717)]
ROWS += [Run(SEARCHED_FAST, 69728), Run(SEARCHED_FAST, 33770)]
SEED_BUDGET, SEEDS = 33770, (0, 1, 2)
SEED_RUNS = {SEARCHED_FAST: [Run(SEARCHED_FAST, SEED_BUDGET, s) for s in SEEDS]}
SEED_RUNS[ADAPTIVE] = [Run(ADAPTIVE, 33717, s) for s in SEEDS]


def cli(args: list[str]) -> None:
    command = [sys.executable, "-m", "tflm_mcubert", *args]
    print("$ python -m tflm_mcubert " + " ".join(args), flush=True)
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def measure(run: Run, opts) -> dict:
    """The summary's row of one run: its search's metrics.json and its evaluate.json (each made if missing)."""
    folder = opts.out / run.name
    if not (folder / "metrics.json").is_file():
        cli(run.search(str(opts.checkpoint), opts.task, str(folder)))
    evaluation = folder / "evaluate.json"
    if not evaluation.is_file():
        cli(["evaluate", "--checkpoint", str(folder), "--task", opts.task, "--board", opts.board, "--split", "test",
             "--json", str(evaluation)])  # fmt: skip
    metrics, result = json.loads((folder / "metrics.json").read_text()), json.loads(evaluation.read_text())
    return {
        "table": run.table,
        "budget": run.budget,
        "seed": run.seed,
        "used": metrics["params"],
        "clusters": metrics["clusters"],
        "ranks": metrics["ranks"],
        "moved_from_frequency": metrics.get("moved_from_frequency"),
        "dev_before_finetune": round(metrics["dev_perplexity_before_finetune"], 2),
        "dev_finetuned": round(metrics["dev_perplexity"], 2),
        "test_float": round(result["float_perplexity"], 2),
        "test_int8": round(result["int8_exported_perplexity"], 2),
        "flash_bytes": result["exported"]["flash_bytes"],
        "seconds": round(metrics["seconds"] + result["seconds"]),
    }


def summarize(rows: list[dict], seeds: dict[str, list[dict]], metrics: dict, opts) -> dict:
    from provenance import provenance

    runs = {(r["table"], r["budget"], r["seed"]): r for r in rows + [r for runs in seeds.values() for r in runs]}
    return {
        "bench": "decoder_search",
        "command": f"python bench/decoder_search.py --checkpoint CKPT --out OUT --summary {opts.summary}",
        "commands": {
            run.name: "python -m tflm_mcubert " + " ".join(run.search("CKPT", opts.task, f"OUT/{run.name}"))
            for run in dict.fromkeys(ROWS + [r for runs in SEED_RUNS.values() for r in runs])
        },  # fmt: skip
        "setting": {
            "model": opts.model,
            "table_params": metrics["dense_params"],
            "steps": "540 steps of 8 blocks (search: 180 Stage-1 + 180 Stage-2 + 180 fine-tune; adaptive: 540 "
            "fine-tune)",
            "texts": f"perplexity on the test split's blocks; int8 as export writes it for the {opts.board}",
            "runs": "one run each (seed 0); the seeds table adds seeds 1 and 2",
            "dense_dev": round(metrics["dense_dev_perplexity"], 2),
            "seconds": sum(r["seconds"] for r in runs.values()),
            "seconds_are": "each run's search (its training) and evaluate, as they recorded them, summed over the runs",
        },
        "rows": [{k: v for k, v in r.items() if k not in ("seed", "seconds")} for r in rows],
        "seeds": {
            "budget": SEED_BUDGET,
            "seeds": list(SEEDS),
            "methods": [
                {
                    "table": table,
                    "test_int8": [r["test_int8"] for r in runs],
                    "dev_finetuned": [r["dev_finetuned"] for r in runs],
                    "used": [r["used"] for r in runs],
                }
                for table, runs in seeds.items()
            ],
        },
        "provenance": provenance({"decoder": opts.checkpoint}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="the decoder (train-lm's output)")
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs (one sub-folder each)")
    parser.add_argument("--task", default="rotten_tomatoes", help="the text searched and measured on")
    parser.add_argument("--board", default="nucleo-f746zg", help="the board the int8 model is exported for")
    parser.add_argument(
        "--model",
        default=recorded_results.DEMONSTRATION_DECODER,
        help="the summary's words for the checkpoint",
    )
    parser.add_argument("--summary", type=Path, help="write the committed summary (bench/results/decoder_search.json)")
    opts = parser.parse_args(argv)
    rows = [measure(run, opts) for run in ROWS]
    seeds = {table: [measure(run, opts) for run in runs] for table, runs in SEED_RUNS.items()}
    metrics = json.loads((opts.out / ROWS[0].name / "metrics.json").read_text())
    summary = summarize(rows, seeds, metrics, opts)
    print(
        "\n" + recorded_results.decoder_search_table(summary) + "\n\n" + recorded_results.decoder_seeds_table(summary)
    )
    if opts.summary:
        opts.summary.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

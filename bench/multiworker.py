"""Two workers on this machine (`--strategy multiworker`, TF_CONFIG on 127.0.0.1): how often a fresh run
starts and finishes, and training steps per second against one process.

Prints figures, not a test (tests/train/test_multiworker.py checks the behaviour). A tiny classifier and
a 96-row local task are built in a temporary folder; every run is docs/several-machines.md's `finetune` command.

    python bench/multiworker.py [--runs 20] [--epochs 30]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cli.test_cli_compress import write_reviews  # noqa: E402
from tests.conftest import build_hf_checkpoint  # noqa: E402
from tests.train.cluster_runner import Cluster  # noqa: E402


def finetune(checkpoint: Path, data: Path, out: Path, epochs: float) -> list:
    return ["finetune", "--checkpoint", checkpoint, "--task", data, "--epochs", epochs, "--batch-size", 8,
            "--out", out, "--quiet"]  # fmt: skip


def steps_per_second(out: Path) -> float:
    stage = json.loads((out / "metrics.json").read_text())["stages"][0]
    return stage["steps"] / max(stage["seconds"], 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh two-worker runs (default 20)")
    parser.add_argument("--epochs", type=float, default=30, help="epochs of the throughput runs (default 30)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="multiworker-bench-"))
    checkpoint = build_hf_checkpoint(root, classifier=True, vocab_size=30, num_labels=2)
    data = write_reviews(root / "reviews.csv", count=96)

    finished = 0
    for run in range(args.runs):
        out = root / f"fresh-{run}"
        cluster = Cluster(
            root / f"logs-{run}", lambda i: [*finetune(checkpoint, data, out, 1), "--strategy", "multiworker"]
        )
        codes = cluster.wait(300)
        cluster.kill()
        finished += codes == [0, 0]
        print(f"fresh run {run + 1}: exit codes {codes}", flush=True)
    print(f"fresh two-worker runs that started and finished: {finished} of {args.runs}")

    single = root / "single"
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "tflm_mcubert", *map(str, finetune(checkpoint, data, single, args.epochs))],
                   check=True, capture_output=True)  # fmt: skip
    one_wall = time.monotonic() - began
    two = root / "two"
    began = time.monotonic()
    cluster = Cluster(
        root / "logs-two", lambda i: [*finetune(checkpoint, data, two, args.epochs), "--strategy", "multiworker"]
    )
    codes = cluster.wait(600)
    two_wall = time.monotonic() - began
    if codes != [0, 0]:
        print(f"the two-worker throughput run failed: {codes}")
        return 1
    one, both = steps_per_second(single), steps_per_second(two)
    print(
        f"global batch 8, {args.epochs:g} epochs of 77 examples: one process {one:.1f} steps/s ({one_wall:.0f} s "
        f"wall), two workers {both:.1f} steps/s ({two_wall:.0f} s wall), ratio {both / one:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Writes a bench script's summary.json as it is committed under bench/results/: every run's predictions and
the data set's labels replaced by its per-example correctness as packed bits (results_bits.py), written
compact. What a docs page quotes is recomputed from these bits (tests/bench/test_results_data.py).

    python bench/compact_results.py runs/budgets/summary.json --out bench/results/nas_vs_adaptive.json
    python bench/compact_results.py bench/results/*.json          # in place
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_bits import compact  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("summaries", type=Path, nargs="+", help="summary.json files of the bench scripts")
    parser.add_argument("--out", type=Path, help="with one summary: where to write it (default: in place)")
    args = parser.parse_args(argv)
    if args.out and len(args.summaries) != 1:
        parser.error("--out takes one summary")
    for source in args.summaries:
        target = args.out or source
        before = source.stat().st_size
        target.write_text(json.dumps(compact(json.loads(source.read_text())), separators=(",", ":")) + "\n")
        print(f"{target}: {before:,} -> {target.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""int4 weights' clip rule, measured: every clip ratio 1 (the plain maximum) against the ratios chosen by
least squared error (`ops.linear.int4_clip_ratios`, SPEC.md 3.1.1), by the export's calibration fidelity: the
mean pooled cosine of the integer model to the float one over the export's first calibration samples.

Each preset is exported with seeded random weights (`export --preset P --weight-bits 4`, nothing downloaded)
twice in this process, the second time with `int4_clip_ratios` replaced by ones; everything else is the
export's own code path. Prints one row a preset; `--summary` writes the committed summary (SPEC.md quotes it).

    python bench/int4_clip.py [--presets bert-tiny bert-mini] [--summary bench/results/int4_clip.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))
from provenance import provenance  # noqa: E402
from tflm_mcubert.boards import get_board  # noqa: E402
from tflm_mcubert.errors import DoesNotFitError  # noqa: E402
from tflm_mcubert.export.pipeline import run_export  # noqa: E402
from tflm_mcubert.export.request import ExportRequest  # noqa: E402
from tflm_mcubert.ops import linear  # noqa: E402

RULES = ("max", "mse")
BOARD = "nucleo-f767zi"  # holds both presets with int4 weights; the fidelity does not depend on the board


def fidelity(preset: str, rule: str, seed: int) -> dict:
    """report.json's calibration_fidelity of `export --preset P --weight-bits 4` under clip rule `rule`."""
    plain = mock.patch.object(linear, "int4_clip_ratios", lambda w: np.ones(np.asarray(w).shape[0]))
    with tempfile.TemporaryDirectory() as out, plain if rule == "max" else contextlib.nullcontext():
        request = ExportRequest(Path(out), get_board(BOARD), preset=preset, weight_bits=4, seed=seed, vocab=False)
        try:
            report = run_export(request)
        except DoesNotFitError:  # the files are written all the same; the figure does not need a fit
            report = json.loads((Path(out) / "report.json").read_text())
    return report["calibration_fidelity"]


def rows(presets: list[str], seed: int) -> list[dict]:
    out = []
    for preset in presets:
        row = {"preset": preset}
        for rule in RULES:
            measured = fidelity(preset, rule, seed)
            row[rule] = {k: measured[k] for k in ("samples", "mean_pooled_cosine_min", "mean_pooled_cosine_mean")}
        out.append(row)
        print(
            f"{preset:10s} mean pooled cosine to float: max {row['max']['mean_pooled_cosine_mean']:.5f}, "
            f"MSE {row['mse']['mean_pooled_cosine_mean']:.5f} ({row['mse']['samples']} samples)",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="int4 weights' clip rule: the plain maximum against MSE-chosen clip ratios, by the export's "
        "calibration fidelity on the random-weight presets"
    )
    parser.add_argument("--presets", nargs="+", default=["bert-tiny", "bert-mini"], help="default bert-tiny bert-mini")
    parser.add_argument("--seed", type=int, default=0, help="the presets' weight seed (default 0)")
    parser.add_argument("--summary", type=Path, help="write the summary (command, rows, provenance) here")
    args = parser.parse_args(argv)
    measured = rows(args.presets, args.seed)
    if args.summary:
        summary = {
            "bench": "int4_clip",
            "command": "python bench/int4_clip.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "board": BOARD,
            "seed": args.seed,
            "rows": measured,
            "provenance": provenance({}),
        }
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

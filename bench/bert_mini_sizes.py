"""BERT-mini's Flash at int8 and int4 (docs/int4.md): what each width stores, measured by exporting.

    python bench/bert_mini_sizes.py [--summary bench/results/bert_mini_sizes.json]

Runs `python -m tflm_mcubert export --preset bert-mini` (seeded random weights: the sizes are real, the
accuracy meaningless) at seq 128 for each row and reads the bytes back from report.json and model.tflite:

- the paper-shaped adaptive embedding (647,592 parameters) at weights int8/int4 and word tables int8/int4,
  exported for a board with room for all of them (`--sram 512KB --flash 16MB`: the NUCLEO-F767ZI's SRAM,
  so the same tiles), their fit then judged against the NUCLEO-F767ZI's Flash budget;
- the default export for each 2 MB board at int4 weights, which scales the embedding down to what the
  rest of the model leaves of the board's budget: where that budget goes.

Each export's model.tflite SHA-256 is kept, so a run at the same commit can be checked byte for byte.
bench/report.py makes the int4 page's tables of the summary. Not a test; about 15 s an export.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.boards import get_board, human_bytes  # noqa: E402

BUDGET_BOARD = "nucleo-f767zi"  # the paper-shaped rows' fit is judged against its Flash budget
ROOM = ("--sram", "512KB", "--flash", "16MB")  # a board as the F767ZI, with Flash for every paper-shaped row
# (label, weight bits, embedding bits, the export's target)
PAPER = [("paper", w, e, ROOM) for w, e in ((8, 8), (4, 8), (8, 4), (4, 4))]
BOARD_SIZED = [
    (board, 4, e, ("--board", board)) for board in ("nucleo-f767zi", "nucleo-h7a3zi-q") for e in (8, 4)
]  # fmt: skip


def export(out: Path, weight_bits: int, embedding_bits: int, target: tuple[str, ...]) -> tuple[list[str], dict]:
    """(the command's arguments, report.json) of one export of the random-weight BERT-mini."""
    args = ["export", "--preset", "bert-mini", "--seq-len", "128", "--weight-bits", str(weight_bits)]
    args += ["--embedding-bits", str(embedding_bits), *target, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    done = subprocess.run([sys.executable, "-m", "tflm_mcubert", *args], cwd=ROOT, env=env, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"export {' '.join(args)} failed:\n{done.stderr.decode()[-2000:]}")
    return args[:-2], json.loads((out / "report.json").read_text())


def measure(out: Path, label: str, weight_bits: int, embedding_bits: int, target: tuple[str, ...]) -> dict:
    """One row: the export's bytes by what stores them, read from report.json and the model itself."""
    from tflm_mcubert.export.storage_report import encoder_storage_report
    from tflm_mcubert.tflite.mcubert_reader import read_model

    args, report = export(out, weight_bits, embedding_bits, target)
    tflite = (out / "model.tflite").read_bytes()
    ops = {op["name"]: op["bytes"] for op in report["ops"]}
    encoder = encoder_storage_report(read_model(tflite).quantized, ops)
    by_kind = {kind: sum(op["bytes"] for op in report["ops"] if op["op"] in kinds) for kind, kinds in
               (("encoder", ("attention", "mlp")), ("embedding", ("embedding",)), ("head", ("head",)))}  # fmt: skip
    compression = report["compression"]
    return {
        "label": label,
        "command": "python -m tflm_mcubert " + " ".join(args) + " --out OUT",
        "weight_bits": weight_bits,
        "embedding_bits": embedding_bits,
        "embedding": {k: compression[k] for k in ("params", "cutoffs", "ranks")},
        "word_table_bytes": report["embedding"]["embedding_bytes"],
        "word_table_stored_bytes": report["params"]["stored_embedding_bytes"],  # with requantization, clusters
        "linear_weight_bytes": encoder["linear_weight_bytes"],
        "channel_bytes": encoder["channel_bytes"],
        "op_bytes": by_kind,
        "tflite_bytes": report["tflite_bytes"],
        "structure_bytes": report["tflite_bytes"] - sum(ops.values()),
        "flash_bytes": report["flash_bytes"],
        "arena_bytes": report["arena_bytes"],
        "flash_budget": report.get("flash_budget"),
        "sized_to_flash": "sized_to_flash" in compression,
        "tflite_sha256": hashlib.sha256(tflite).hexdigest(),
    }


def paper_table(summary: dict) -> str:
    """The paper-shaped embedding at each width: bytes by what stores them, and the fit on the budget board."""
    budget = summary["budget"]
    out = [
        "| weights | embedding tables | linear weights | encoder ops | embedding op | head | model (.tflite) | "
        f"fits the {budget['board']} ({budget['bytes']:,} B) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in (r for r in summary["rows"] if r["label"] == "paper"):
        miss = r["flash_bytes"] - budget["bytes"]
        fits = f"yes, {human_bytes(-miss)} to spare" if miss <= 0 else f"no (misses by {human_bytes(miss)})"
        cells = [f"int{r['weight_bits']}", f"int{r['embedding_bits']}", f"{r['linear_weight_bytes']:,}"]
        cells += [f"{r['op_bytes'][k]:,}" for k in ("encoder", "embedding", "head")]
        out.append("| " + " | ".join(cells + [f"{r['tflite_bytes']:,}", fits]) + " |")
    return "\n".join(out)


def board_table(summary: dict) -> str:
    """The default export per 2 MB board at int4 weights: where the board's Flash budget goes."""
    out = [
        "| board | embedding tables | budget | encoder ops | head | embedding op's other tables | .tflite "
        "structure, allowed (measured) | left for the word tables | word tables as stored: bytes (parameters) | "
        "cut-offs / ranks | model | arena |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for r in (r for r in summary["rows"] if r["label"] != "paper"):
        b = r["flash_budget"]
        cells = [r["label"].upper(), f"int{r['embedding_bits']}"]
        cells += [f"{b[k]:,}" for k in ("budget_bytes", "encoder_bytes", "head_bytes", "embedding_fixed_bytes")]
        cells += [f"{b['container_bytes']:,} ({r['structure_bytes']:,})", f"{b['embedding_bytes']:,}"]
        shape = "/".join(map(str, r["embedding"]["cutoffs"])) + " / " + "/".join(map(str, r["embedding"]["ranks"]))
        cells += [f"{r['word_table_stored_bytes']:,} ({r['embedding']['params']:,})", shape, f"{r['flash_bytes']:,}"]
        cells.append(f"{r['arena_bytes']:,}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--summary", type=Path, help="write the summary here (bench/results/bert_mini_sizes.json)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bert_mini_sizes_") as tmp:
        for i, (label, w, e, target) in enumerate(PAPER + BOARD_SIZED):
            rows.append(measure(Path(tmp) / str(i), label, w, e, target))
            r = rows[-1]
            print(f"{label:>16} w{w} e{e}: .tflite {r['tflite_bytes']:>9,} B, word tables {r['word_table_bytes']:,} B")
    summary = {
        "bench": "bert_mini_sizes",
        "command": "python bench/bert_mini_sizes.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "weights": "the bert-mini preset with seeded random weights (seed 0): sizes only",
        "budget": {"board": BUDGET_BOARD.upper(), "bytes": get_board(BUDGET_BOARD).flash_budget()},
        "rows": rows,
    }
    print(paper_table(summary) + "\n\n" + board_table(summary))
    if args.summary:
        from provenance import provenance

        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The arena, the tiles and the encoder latency estimate `export` reports, and the stock graph's arena and
Flash (docs/memory.md, docs/stock-baseline.md): measured by exporting.

    python bench/export_memory.py [--summary bench/results/export_memory.json]

Runs `python -m tflm_mcubert export` on the random-weight presets (the sizes, arenas and estimates do not
depend on the weights' values) for a board with room for every row (`--sram 4MB --flash 64MB`: the fit
check passes, nothing else depends on the board) and reads report.json: for the MCUBERT schedule the
arena (`arena_bytes`, `planned_bytes`), the tiles and the NUCLEO-F767ZI's encoder latency estimate (with
and without the Flash stalls); for `--schedule stock` the smallest arena the real TFLM interpreter
accepts (measured by the export, on this 64-bit host) and the .tflite's bytes. bench/report.py makes the
pages' tables of the summary. Not a test; a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROOM = ("--sram", "4MB", "--flash", "64MB")
LATENCY_BOARD = "nucleo-f767zi"
MCUBERT = [("bert-tiny", 128), ("bert-tiny", 512), ("bert-mini", 512)]
STOCK = [("bert-tiny", 128, precision) for precision in ("int8", "int16x8", "float32")]


def export(out: Path, args: list[str]) -> dict:
    """report.json of `python -m tflm_mcubert export ARGS --out OUT`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    command = [sys.executable, "-m", "tflm_mcubert", "export", *args, *ROOM, "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"export {' '.join(args)} failed:\n{done.stderr.decode()[-2000:]}")
    return json.loads((out / "report.json").read_text())


def mcubert_row(out: Path, preset: str, seq_len: int) -> dict:
    args = ["--preset", preset, "--seq-len", str(seq_len)]
    report = export(out, args)
    latency = report["latency_estimate"]["boards"][LATENCY_BOARD]
    return {
        "command": "python -m tflm_mcubert export " + " ".join([*args, *ROOM]) + " --out OUT",
        "preset": preset,
        "seq_len": seq_len,
        "arena_bytes": report["arena_bytes"],
        "planned_bytes": report["planned_bytes"],
        "tiles": report["tiles"],
        "encoder_ms": latency["encoder_ms"],
        "encoder_ms_with_flash": latency["flash"]["encoder_ms_with_flash"],
        "tflite_bytes": report["tflite_bytes"],
    }


def stock_row(out: Path, preset: str, seq_len: int, precision: str) -> dict:
    args = ["--preset", preset, "--seq-len", str(seq_len), "--schedule", "stock", "--precision", precision]
    report = export(out, args)
    return {
        "command": "python -m tflm_mcubert export " + " ".join([*args, *ROOM]) + " --out OUT",
        "preset": preset,
        "seq_len": seq_len,
        "precision": precision,
        "arena_bytes": report["arena_bytes"],
        "tflite_bytes": report["tflite_bytes"],
    }


def schedule_peaks(preset: str = "bert-tiny", tile: int = 4, seq_lens=(64, 128, 256, 512)) -> dict:
    """Peak activation bytes of every schedule under the one memory model (`python -m tflm_mcubert plan`'s
    table): computed, not measured, so the page's figures follow the model."""
    from tflm_mcubert.cli.plan import memory_table
    from tflm_mcubert.model.config import preset as preset_config

    table = memory_table(preset_config(preset), list(seq_lens), tile)
    return {"preset": preset, "tile": tile, "seq_lens": list(seq_lens), "bytes": table}


def _name(preset: str) -> str:
    return {"bert-tiny": "BERT-tiny", "bert-mini": "BERT-mini"}.get(preset, preset)


def memory_table(summary: dict) -> str:
    """Per MCUBERT export: arena, plan, tiles, the encoder latency estimate, and the stock int8 arena."""
    stock = {(r["preset"], r["seq_len"]): r["arena_bytes"] for r in summary["stock"] if r["precision"] == "int8"}
    board = summary["latency_board"].upper()
    out = [
        f"| model | seq | arena_bytes | planned_bytes | tiles (attention, MLP) | encoder latency, {board} (estimate) | "
        "with Flash stalls (estimate) | stock TFLM int8 arena |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in summary["mcubert"]:
        arena = f"{r['arena_bytes']:,} B ({r['arena_bytes'] / 1024:.1f} KB)"
        stock_arena = stock.get((r["preset"], r["seq_len"]))
        cells = [_name(r["preset"]), str(r["seq_len"]), arena, f"{r['planned_bytes']:,} B"]
        cells += [f"{r['tiles']['attention']}, {r['tiles']['mlp']}", f"{r['encoder_ms']:,.0f} ms"]
        cells += [f"{r['encoder_ms_with_flash']:,.0f} ms", "–" if stock_arena is None else f"{stock_arena:,} B"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def stock_table(summary: dict) -> str:
    """Per stock precision: the smallest arena the TFLM interpreter accepts and the .tflite's size."""
    out = ["| model | seq | precision | arena | Flash (`.tflite`) |", "|---|---:|---|---:|---:|"]
    for r in summary["stock"]:
        flash = f"{r['tflite_bytes']:,} B"
        out.append(f"| {_name(r['preset'])} | {r['seq_len']} | {r['precision']} | {r['arena_bytes']:,} B | {flash} |")
    return "\n".join(out)


def peaks_table(summary: dict) -> str:
    """Per sequence length: each schedule's peak activation memory in KiB (memory page)."""
    peaks = summary["schedule_peaks"]
    names = {"mcubert": "MCUBERT", "cmsis-nn": "CMSIS-NN-style (untiled)", "burrello": "Burrello-style"}
    names["flash"] = "FlashAttention-style"
    out = [
        "| seq | " + " | ".join(names.get(n, n) for n in peaks["bytes"]) + " |",
        "|---:" * (1 + len(peaks["bytes"])) + "|",
    ]
    for i, s in enumerate(peaks["seq_lens"]):
        out.append(f"| {s} | " + " | ".join(f"{v[i] / 1024:.1f}" for v in peaks["bytes"].values()) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--summary", type=Path, help="write the summary here (bench/results/export_memory.json)")
    args = parser.parse_args(argv)
    summary = {
        "bench": "export_memory",
        "command": "python bench/export_memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "weights": "the presets with seeded random weights (seed 0): sizes, arenas and estimates only",
        "latency_board": LATENCY_BOARD,
        "mcubert": [],
        "stock": [],
    }
    with tempfile.TemporaryDirectory(prefix="export_memory_") as tmp:
        for i, (preset, seq_len) in enumerate(MCUBERT):
            summary["mcubert"].append(mcubert_row(Path(tmp) / f"m{i}", preset, seq_len))
            print(summary["mcubert"][-1])
        for i, (preset, seq_len, precision) in enumerate(STOCK):
            summary["stock"].append(stock_row(Path(tmp) / f"s{i}", preset, seq_len, precision))
            print(summary["stock"][-1])
    summary["schedule_peaks"] = schedule_peaks()
    print(memory_table(summary) + "\n\n" + stock_table(summary) + "\n\n" + peaks_table(summary))
    if args.summary:
        from provenance import provenance

        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

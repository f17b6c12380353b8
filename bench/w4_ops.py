"""Whole-op instructions with int4 (w4row) against int8 (pair4) linear weights, on an emulated core.

Prints a table; not a test. For each model shape (BERT-tiny: d 128, 2 heads, ffn 512; BERT-mini: d 256,
4 heads, ffn 1024) one realistic attention and one MLP op (testing.float_* weights, calibrated on
random hidden states) are quantized twice from the same float weights, with weight_bits 8 and 4
(SPEC.md 3.1.1), run by the library under unicorn (mcubert_emu, the kernel build's own flags;
Cortex-M7 by default), every result checked bit-exact against the numpy reference, and the executed
instructions of the op call counted (validate excluded). The ratio W4/W8 is the whole op's:
projections, scores, softmax, P.V, requantization, residual and LayerNorm.

Then, per board with a Flash model (boards.FlashTiming), ESTIMATED cycles with Flash wait states:
the instruction-class cycle estimate of the executed blocks (measure/instruction_classes.py) plus the
op's weight-stream stall (schedule/flash_traffic.stall_cycles, weight_bits-aware: int4 halves the
weight bytes, the channel tables stay), for W8 and W4; both parts are estimates, labelled so.

    python bench/w4_ops.py [--tokens 128] [--cores cortex-m7] [--tiles 4,4] [--json out.json] [--summary FILE]

--summary writes the committed summary (bench/results/w4_ops.json: the rows, the command and provenance);
bench/report.py makes the kernels page's int4 tables of it with ops_table and flash_table.

Needs arm-none-eabi-gcc and the `unicorn` package (pip install -e .[bench]).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.measure import kernel_build  # noqa: E402
from tflm_mcubert.boards import BOARDS  # noqa: E402
from tflm_mcubert.measure.arm_emulator import ArmEmulator, run_kernel  # noqa: E402
from tflm_mcubert.measure.instruction_classes import InstructionProfile  # noqa: E402
from tflm_mcubert.ops import attention, kernel_abi, mlp, testing  # noqa: E402
from tflm_mcubert.ops.attention import AttentionParams  # noqa: E402
from tflm_mcubert.ops.mlp import MLPParams  # noqa: E402
from tflm_mcubert.ops.quantization import TensorQuant  # noqa: E402
from tflm_mcubert.schedule.cost import OpShape  # noqa: E402
from tflm_mcubert.schedule.flash_traffic import stall_cycles  # noqa: E402
from tflm_mcubert.schedule.memory import Dims  # noqa: E402

MODELS = {"bert-tiny": (128, 2, 512), "bert-mini": (256, 4, 1024)}  # d, heads, ffn


def op_calls(model: str, s: int, tiles: tuple[int, int], seed: int = 0):
    """{(kind, bits): (call, expected)} for one model shape, both widths from the same float weights."""
    d, h, f = MODELS[model]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(s, d))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    fa, fm = testing.float_attention(rng, d, h), testing.float_mlp(rng, d, f)
    aq = fa.calibrate(inq.dequantize(xq), np.ones(s, bool), inq)
    mq = fm.calibrate(inq.dequantize(xq), inq)
    mask = np.ones(s, np.int8)
    calls = {}
    for bits in (8, 4):
        ap = AttentionParams.quantize(fa, aq, seq_len=s, tile=tiles[0], weight_bits=bits)
        mp = MLPParams.quantize(fm, mq, seq_len=s, tile=tiles[1], weight_bits=bits)
        calls["attention", bits] = (kernel_abi.attention_call(ap, xq, mask), attention.run(ap, xq.copy(), mask))
        calls["mlp", bits] = (kernel_abi.mlp_call(mp, xq), mlp.run(mp, xq.copy()))
    return calls


def measure(emu: ArmEmulator, call, expected):
    """(executed instructions, per-block executions) of the op call, after checking it bit-exact."""
    run = run_kernel(emu, call, count_instructions=True)
    if run.status != kernel_abi.OK:
        raise RuntimeError(run.message)
    if not np.array_equal(run.output, expected.reshape(-1)):
        raise RuntimeError(f"{call.op}: the kernel differs from the reference")
    return int(run.instructions), run.blocks


def flash_boards(cpu: str) -> dict:
    """The boards with this core and a Flash model (the F7 and H7 NUCLEOs for the Cortex-M7)."""
    return {name: b for name, b in BOARDS.items() if b.core == cpu and b.flash_timing is not None}


def cycles_with_flash(row: dict, model: str, kind: str, tiles, tokens: int, cpu: str) -> dict:
    """Per board: {"w8": cycles, "w4": cycles} ESTIMATED, compute (instruction classes) + Flash stall."""
    d, h, f = MODELS[model]
    out = {}
    for name, board in flash_boards(cpu).items():
        per_bits = {}
        for bits in (8, 4):
            dims = Dims(hidden=d, heads=h, ffn=f, layers=1, weight_bits=bits)
            shape = OpShape(kind, tokens, dims, tiles[0] if kind == "attention" else tiles[1])
            per_bits[f"w{bits}"] = row[f"w{bits}_compute_cycles"] + stall_cycles(shape, board)
        out[name] = per_bits
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--cores", default="cortex-m7")
    parser.add_argument("--tiles", default="4,4", help="attention,mlp tiles (default 4,4: the F767ZI plan)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--summary", type=Path, help="also write the summary here (bench/results/w4_ops.json)")
    args = parser.parse_args(argv)
    tiles = tuple(int(t) for t in args.tiles.split(","))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cpu in args.cores.split(","):
            image = kernel_build.build(kernel_build.Variant(cpu), Path(tmp), "mcubert_emu").image("mcubert_emu")
            emu, profile = ArmEmulator(image, cpu), InstructionProfile(image)
            for model in MODELS:
                calls = op_calls(model, args.tokens, tiles)
                for kind in ("attention", "mlp"):
                    row = {"core": cpu, "model": model, "op": kind}
                    for bits in (8, 4):
                        instructions, blocks = measure(emu, *calls[kind, bits])
                        row[f"w{bits}"] = instructions
                        row[f"w{bits}_compute_cycles"] = profile.cycles(blocks, cpu)
                    row["ratio"] = row["w4"] / row["w8"]
                    row["cycles_with_flash_estimate"] = cycles_with_flash(row, model, kind, tiles, args.tokens, cpu)
                    rows.append(row)
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "tiles": tiles, "rows": rows}, indent=2) + "\n")
    if args.summary:
        from provenance import provenance

        command = "python bench/w4_ops.py " + " ".join(argv if argv is not None else sys.argv[1:])
        summary = {"bench": "w4_ops", "command": command, "tokens": args.tokens, "tiles": tiles, "rows": rows}
        args.summary.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")
    return 0


def ops_table(summary: dict) -> str:
    """Executed instructions of each op with int8 and int4 weights, per core (the kernels page's table)."""
    out = ["| core | model | op | W8 | W4 | W4/W8 |", "|---|---|---|---:|---:|---:|"]
    for r in summary["rows"]:
        out.append(f"| {r['core']} | {r['model']} | {r['op']} | {r['w8']:,} | {r['w4']:,} | {r['ratio']:.3f} |")
    return "\n".join(out)


def flash_table(summary: dict) -> str:
    """ESTIMATED cycles with Flash wait states, W4/W8 per op, on each board with a Flash model."""
    boards = list(dict.fromkeys(b for r in summary["rows"] for b in r["cycles_with_flash_estimate"]))
    out = ["| model | op | " + " | ".join(boards) + " |", "|---|---|" + "---:|" * len(boards)]
    for r in summary["rows"]:
        estimates = r["cycles_with_flash_estimate"]
        if estimates:
            cells = [f"{estimates[b]['w4'] / estimates[b]['w8']:.3f}" if b in estimates else "" for b in boards]
            out.append(f"| {r['model']} | {r['op']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def print_rows(rows: list[dict]) -> None:
    print(f"{'core':<10} {'model':<10} {'op':<10} {'W8 instructions':>16} {'W4 instructions':>16} {'W4/W8':>7}")
    for r in rows:
        print(f"{r['core']:<10} {r['model']:<10} {r['op']:<10} {r['w8']:>16,} {r['w4']:>16,} {r['ratio']:>7.3f}")
    print("\nESTIMATED cycles with Flash wait states (instruction classes + weight-stream stall; W4/W8):")
    print(f"{'board':<16} {'model':<10} {'op':<10} {'W8 cycles':>14} {'W4 cycles':>14} {'W4/W8':>7}")
    for r in rows:
        for board, c in r["cycles_with_flash_estimate"].items():
            print(
                f"{board:<16} {r['model']:<10} {r['op']:<10} {c['w8']:>14,.0f} {c['w4']:>14,.0f} "
                f"{c['w4'] / c['w8']:>7.3f}"
            )


if __name__ == "__main__":
    sys.exit(main())

"""Instructions of the W4 gemm (w4row int4 weights) against the W8 one (pair4 int8), on emulated cores.

Prints tables; not a test. Both kernels run the same loop nest (custom_ops/test/gemm_driver.c: row
blocks of 4 widened once, then chunks of 8 channels through the micro-kernel) on the same int4-valued
weights, under unicorn (Cortex-M7 and M4, DSP path, the kernel build's own flags), executed
instructions counted per translated block. Every result is first checked bit-exact against the numpy
reference (ops/linear_int4.py).

Counted: the library's functions only (row widening, the chunk function and its K tail, the
micro-kernel); the driver's own loop and accumulator copy are left out, as the ops have their
output stage there instead. Per shape: instructions per MAC of each, the W4/W8 ratio, and a split
by instruction class —

    load      LDR / LDRD / LDM (weights and widened activations) and POP
    unpack    the instructions that turn weight words into int16 pairs and widen the
              activations: SXTB16, UXTB16, PKHBT/PKHTB, AND/BIC/UBFX/LSL/LSR/ASR
    smlad     SMLAD (and any other multiply)
    store     STR / STRD / STM / PUSH
    loop      branches, compares, pointer and counter arithmetic, moves: everything else

— and the requantize share of a whole W8 linear layer (the library's mcubert_linear_to_s8 via the
baselines image, same shape and tokens), from which the W4 layer's ratio is ESTIMATED as
(W4 gemm + that output stage) / (W8 layer): the output stage is unchanged by the weight format.
Also an ESTIMATE of cycles from instruction classes (measure/instruction_classes.py), labelled so.

With a CMSIS-NN checkout (CMSIS_NN_DIR or --cmsis-nn-dir; TFLM's pin 4ab83cc has the s4 kernels), also
the real kernel TFLM 90b983c runs for int4 weights, arm_fully_connected_s4 (one arm_nn_vec_mat_mult_t_s4
per token, per-tensor quantization: TFLM refuses per-channel int4), on the same activations and int4
weights, all its instructions counted, output checked within one unit (bench/kernel_cost_cmsis_nn.py),
against our whole W4 layer: the W4 gemm plus our output stage, both measured (the output stage is the W8
layer's, the same code whatever the weight format).

    python bench/w4_gemm.py [--tokens 128] [--cores cortex-m7,cortex-m4] [--cmsis-nn-dir DIR] [--json out.json]
                            [--summary FILE]

--summary writes the committed summary (bench/results/w4_gemm.json: the rows, the CMSIS-NN revision, the
command and provenance); bench/report.py makes the kernels page's arm_fully_connected_s4 table of it.

Needs arm-none-eabi-gcc, a host C compiler and the `unicorn` package (pip install -e .[bench]).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kernel_cost_cmsis_nn  # noqa: E402  (bench/, on sys.path as this script's folder)
from tflm_mcubert.measure import kernel_build  # noqa: E402
from tflm_mcubert.measure.arm_emulator import ArmEmulator  # noqa: E402
from tflm_mcubert.measure.baseline_abi import run_linear  # noqa: E402
from tflm_mcubert.measure.gemm_abi import run_gemm  # noqa: E402
from tflm_mcubert.measure.instruction_classes import InstructionProfile  # noqa: E402
from tflm_mcubert.ops.linear import Linear, int_matmul, pack_weights  # noqa: E402
from tflm_mcubert.ops.linear_int4 import matmul_int4, pack_weights_int4  # noqa: E402

SHAPES = {  # (K in, N out) of the encoder's linear layers: Q/K/V/O, FC1, FC2
    "bert-tiny": [(128, 128), (128, 512), (512, 128)],
    "bert-mini": [(256, 256), (256, 1024), (1024, 256)],
}
CLASSES = ("load", "unpack", "smlad", "store", "loop")
_UNPACK = re.compile(r"^(sxtb16|uxtb16|sxtab16|pkhbt|pkhtb|and|ands|bic|bics|ubfx|sbfx|lsl|lsls|lsr|lsrs|asr|asrs)$")
DRIVER = {"mcubert_gemm_driver", "store_chunk", "mcubert_bench_linear_s8"}


def mnemonic_class(mnemonic: str) -> str:
    base = mnemonic.split(".")[0].lower()
    if base.startswith(("smla", "smul", "smmla", "mul", "mla")):
        return "smlad"
    if base.startswith(("ldr", "ldm", "pop")):
        return "load"
    if base.startswith(("str", "stm", "push")):
        return "store"
    return "unpack" if _UNPACK.match(base) else "loop"


class Disassembly:
    """Per address: mnemonic class and the function (symbol) it belongs to."""

    def __init__(self, elf: Path):
        objdump = shutil.which("arm-none-eabi-objdump")
        nm = shutil.which("arm-none-eabi-nm")
        text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(elf)], capture_output=True, text=True).stdout
        self.klass: dict[int, str] = {}
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and parts[0].strip().endswith(":") and parts[1].strip():
                try:
                    self.klass[int(parts[0].strip()[:-1], 16)] = mnemonic_class(parts[1].strip())
                except ValueError:
                    continue
        self.functions: list[tuple[int, int, str]] = []
        for line in subprocess.run(
            [nm, "-S", "--defined-only", str(elf)], capture_output=True, text=True
        ).stdout.splitlines():
            fields = line.split()
            if len(fields) == 4 and fields[2].lower() == "t":
                start = int(fields[0], 16) & ~1
                self.functions.append((start, start + int(fields[1], 16), fields[3]))

    def function(self, address: int) -> str:
        for start, end, name in self.functions:
            if start <= address < end:
                return name
        return "?"

    def split(self, blocks: dict[tuple[int, int], int], profile: InstructionProfile) -> dict[str, dict[str, int]]:
        """{function: {class: executed instructions}} of a block profile."""
        out: dict[str, dict[str, int]] = {}
        for (address, size), count in blocks.items():
            for instruction in profile.block(address, size):
                per = out.setdefault(self.function(instruction.address), dict.fromkeys(CLASSES, 0))
                per[self.klass.get(instruction.address, "loop")] += count
        return out


def library_part(split: dict[str, dict[str, int]]) -> dict[str, int]:
    total = dict.fromkeys(CLASSES, 0)
    for name, classes in split.items():
        if name not in DRIVER:
            for klass, count in classes.items():
                total[klass] += count
    return total


def cycles_of(profile: InstructionProfile, blocks, disassembly: Disassembly, cpu: str) -> float:
    kept = {key: n for key, n in blocks.items() if disassembly.function(key[0]) not in DRIVER}
    return profile.cycles(kept, cpu)


def measure_real_s4(rows: list[dict], cpu: str, tokens: int, cmsis_nn_dir: Path, build_root: Path) -> None:
    """Adds `real_s4` (instructions of CMSIS-NN's arm_fully_connected_s4 on the row's shape) to `rows`."""
    image = kernel_cost_cmsis_nn.build_image(cmsis_nn_dir, cpu, build_root / "cmsis-nn-s4")
    emu = ArmEmulator(image, cpu)
    for row in rows:
        k, n = row["k"], row["n"]
        x, w, _ = row_operands(k, n, tokens)
        bias = np.random.default_rng(n).integers(-5000, 5000, n).astype(np.int32)
        _, call = kernel_cost_cmsis_nn.run_fc_s4(emu, x, w, bias, 1 << 30, -9)
        row["real_s4"] = call.instructions


def row_operands(k: int, n: int, tokens: int):
    """(activations, int4-valued weights, the generator for what else the shape needs), seeded: every
    kernel sees the same."""
    rng = np.random.default_rng(k * 7 + n)
    x = rng.integers(-128, 128, size=(tokens, k)).astype(np.int8)
    return x, rng.integers(-7, 8, size=(n, k)).astype(np.int8), rng


def measure(cpu: str, tokens: int, build_root: Path) -> list[dict]:
    gemm_elf = kernel_build.build(kernel_build.Variant(cpu), build_root, "mcubert_gemm_emu").image("mcubert_gemm_emu")
    linear_elf = kernel_build.build(kernel_build.Variant(cpu), build_root, "mcubert_baselines_emu").image(
        "mcubert_baselines_emu"
    )
    gemm_emu, linear_emu = ArmEmulator(gemm_elf, cpu), ArmEmulator(linear_elf, cpu)
    gemm_dis, linear_dis = Disassembly(gemm_elf), Disassembly(linear_elf)
    gemm_profile, linear_profile = InstructionProfile(gemm_elf), InstructionProfile(linear_elf)
    rows = []
    for model, shapes in SHAPES.items():
        for k, n in shapes:
            x, w, rng = row_operands(k, n, tokens)
            macs = tokens * k * n
            row = {"model": model, "cpu": cpu, "k": k, "n": n, "tokens": tokens, "macs": macs}
            for kind, packed, expected in (
                (8, pack_weights(w), int_matmul(x, w.T)),
                (4, pack_weights_int4(w), matmul_int4(x, pack_weights_int4(w), n, k)),
            ):
                acc, call = run_gemm(gemm_emu, kind, x, packed, n, count_instructions=True)
                if not np.array_equal(acc, expected):
                    raise SystemExit(f"W{kind} {cpu} {k}x{n}: not bit-exact with the reference")
                classes = library_part(gemm_dis.split(call.blocks, gemm_profile))
                row[f"w{kind}"] = classes
                row[f"w{kind}_cycles_estimate"] = cycles_of(gemm_profile, call.blocks, gemm_dis, cpu)
            channels = np.stack(
                [rng.integers(-5000, 5000, n), rng.integers(1 << 29, 1 << 30, n), np.full(n, -9)], axis=1
            ).astype(np.int32)
            layer = Linear(k, n, pack_weights(w), channels)
            y, call = run_linear(linear_emu, "ours", x, layer, count_instructions=True)
            split = linear_dis.split(call.blocks, linear_profile)
            gemm_names = {name for name in split if "gemm" in name or "widen" in name or "dsp_4xn" in name}
            row["w8_linear"] = sum(sum(c.values()) for name, c in split.items() if name not in DRIVER)
            row["w8_linear_gemm"] = sum(sum(split[name].values()) for name in gemm_names)
            rows.append(row)
    return rows


def print_rows(rows: list[dict]) -> None:
    head = f"{'model':10} {'K x N':>10} {'core':10} {'W8 i/MAC':>9} {'W4 i/MAC':>9} {'W4/W8':>6}"
    print(head + "   W4 layer/W8 layer (ESTIMATE)")
    for r in rows:
        w8, w4 = sum(r["w8"].values()), sum(r["w4"].values())
        requant = r["w8_linear"] - r["w8_linear_gemm"]
        layer_ratio = (w4 + requant) / r["w8_linear"]
        print(
            f"{r['model']:10} {r['k']:>4} x {r['n']:<4} {r['cpu']:10} {w8 / r['macs']:9.4f} {w4 / r['macs']:9.4f} "
            f"{w4 / w8:6.3f}   {layer_ratio:.3f} (requantize {requant / r['macs']:.4f} i/MAC)"
        )
    print("\ninstruction classes per MAC (library functions of the gemm):")
    print(
        f"{'K x N':>10} {'core':10} {'kind':4} "
        + " ".join(f"{c:>7}" for c in CLASSES)
        + f" {'cycles/MAC (ESTIMATE)':>22}"
    )
    for r in rows:
        for kind in (8, 4):
            classes = r[f"w{kind}"]
            print(
                f"{r['k']:>4} x {r['n']:<4} {r['cpu']:10} W{kind}   "
                + " ".join(f"{classes[c] / r['macs']:7.4f}" for c in CLASSES)
                + f" {r[f'w{kind}_cycles_estimate'] / r['macs']:22.4f}"
            )


def print_real_s4(rows: list[dict], revision: str) -> None:
    print(f"\nour whole W4 layer against CMSIS-NN's arm_fully_connected_s4 (CMSIS-NN {revision}), all instructions:")
    print(f"{'model':10} {'K x N':>10} {'core':10} {'real s4 i/MAC':>14} {'ours W4 i/MAC':>14} {'ours/real':>10}")
    for r in rows:
        ours = sum(r["w4"].values()) + r["w8_linear"] - r["w8_linear_gemm"]
        print(
            f"{r['model']:10} {r['k']:>4} x {r['n']:<4} {r['cpu']:10} {r['real_s4'] / r['macs']:14.4f} "
            f"{ours / r['macs']:14.4f} {ours / r['real_s4']:10.3f}"
        )


NAMES = {"bert-tiny": "BERT-tiny", "bert-mini": "BERT-mini"}


def gemm_table(summary: dict) -> str:
    """The gemm alone, W8 against W4 per MAC, the W8 layer's output stage, and the ESTIMATED whole-layer and
    cycle ratios (docs/w4-gemm.md, from bench/results/w4_gemm.json)."""
    out = [
        "| model | K x N | core | W8 instr/MAC | W4 instr/MAC | W4/W8 | output stage instr/MAC | "
        "W4 layer / W8 layer (est.) | W4/W8 cycles (est.) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in summary["rows"]:
        w8, w4, macs = sum(r["w8"].values()), sum(r["w4"].values()), r["macs"]
        requant = r["w8_linear"] - r["w8_linear_gemm"]
        out.append(
            f"| {NAMES.get(r['model'], r['model'])} | {r['k']} x {r['n']} | {r['cpu']} | {w8 / macs:.4f} | "
            f"{w4 / macs:.4f} | {w4 / w8:.3f} | {requant / macs:.3f} | {(w4 + requant) / r['w8_linear']:.3f} | "
            f"{r['w4_cycles_estimate'] / r['w8_cycles_estimate']:.3f} |"
        )
    return "\n".join(out)


def classes_table(summary: dict, model: str = "bert-tiny", k: int = 128, n: int = 128) -> str:
    """Instructions per MAC by class, W8 and W4, of one shape on each core (docs/w4-gemm.md)."""
    out = ["| core | weights | " + " | ".join(CLASSES) + " |", "|---|---|" + "---:|" * len(CLASSES)]
    for r in summary["rows"]:
        if (r["model"], r["k"], r["n"]) == (model, k, n):
            for kind in ("w8", "w4"):
                cells = " | ".join(f"{r[kind][c] / r['macs']:.3f}" for c in CLASSES)
                out.append(f"| {r['cpu']} | {kind.upper()} | {cells} |")
    return "\n".join(out)


def real_s4_table(summary: dict) -> str:
    """Our whole W4 layer against CMSIS-NN's arm_fully_connected_s4, executed instructions (kernels page)."""
    out = ["| shape | core | `arm_fully_connected_s4` (per token) | ours W4 layer | ours / it |"]
    out.append("|---|---|---:|---:|---:|")
    for r in summary["rows"]:
        ours = sum(r["w4"].values()) + r["w8_linear"] - r["w8_linear_gemm"]
        out.append(
            f"| {r['model']} {r['k']}→{r['n']} | {r['cpu']} | {r['real_s4'] / 1e6:.2f} M | {ours / 1e6:.2f} M | "
            f"{ours / r['real_s4']:.3f} |"
        )
    return "\n".join(out)


def write_summary(path: Path, rows: list[dict], cmsis_nn_dir: Path | None) -> None:
    from provenance import provenance

    summary = {
        "bench": "w4_gemm",
        "command": "python bench/w4_gemm.py " + " ".join(sys.argv[1:]),
        "cmsis_nn": kernel_cost_cmsis_nn.revision(cmsis_nn_dir) if cmsis_nn_dir else None,
        "rows": rows,
    }
    path.write_text(json.dumps(summary | {"provenance": provenance({})}, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--cores", default="cortex-m7,cortex-m4")
    parser.add_argument("--build", type=Path, default=None, help="build folder (default: the kernel build cache)")
    parser.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    parser.add_argument(
        "--summary", type=Path, default=None, help="also write the summary (bench/results/w4_gemm.json)"
    )
    parser.add_argument(
        "--cmsis-nn-dir",
        type=Path,
        default=os.environ.get("CMSIS_NN_DIR") or None,
        help="a CMSIS-NN checkout with the s4 kernels (default: $CMSIS_NN_DIR): also measure arm_fully_connected_s4",
    )
    args = parser.parse_args()
    build_root = args.build or kernel_build.cache_root() / f"kernels-{kernel_build.sources_digest()}"
    rows = []
    for cpu in args.cores.split(","):
        cpu_rows = measure(cpu, args.tokens, build_root)
        if args.cmsis_nn_dir:
            if not kernel_cost_cmsis_nn.has_s4(args.cmsis_nn_dir):
                missing = ", ".join(kernel_cost_cmsis_nn.S4_SOURCES)
                raise SystemExit(f"{args.cmsis_nn_dir}: this CMSIS-NN has no s4 kernels ({missing})")
            measure_real_s4(cpu_rows, cpu, args.tokens, args.cmsis_nn_dir, build_root)
        rows += cpu_rows
    print_rows(rows)
    if args.cmsis_nn_dir:
        print_real_s4(rows, kernel_cost_cmsis_nn.revision(args.cmsis_nn_dir))
    else:
        print("\n(no CMSIS-NN checkout: set CMSIS_NN_DIR or --cmsis-nn-dir to compare with arm_fully_connected_s4)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.summary:
        write_summary(args.summary, rows, args.cmsis_nn_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

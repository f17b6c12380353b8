"""Our kernels on every core the boards use: executed instructions of one BERT encoder layer.

Prints a table; not a test. The same realistic layer as bench/kernel_cost.py (its `layer_params`),
built for each core with `make emu` and run under unicorn, outputs checked byte for byte against the
numpy reference. kernel_cost.py compares against re-implemented baselines and estimates cycles on
the Cortex-M7 and M4, which its instruction-class model covers; this script adds the cores of the
hobbyist boards, where only instructions are counted:

    Cortex-M33 (Raspberry Pi Pico 2): the DSP path;
    Cortex-M0+ (Raspberry Pi Pico): the plain C path, run on unicorn's Cortex-M0 model (the same
    ARMv6-M instruction set; unicorn has no M0+ model).

    python bench/kernel_cores.py [--seq 128] [--tiles attention=4,mlp=4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_cost import ROOT, attention_call, mlp_call  # noqa: E402

CORES = ("cortex-m7", "cortex-m4", "cortex-m33", "cortex-m0plus")


def measure(core: str, build: Path, model: str, seq: int, tiles: dict[str, int]) -> dict[str, int]:
    from tflm_mcubert.measure.arm_emulator import ArmEmulator, run_kernel

    subprocess.run(
        ["make", "-C", str(ROOT / "custom_ops"), f"BUILD={build}", "-j2", "emu", f"CPU={core}"],
        check=True,
        capture_output=True,
        text=True,
    )
    emu = ArmEmulator(build / core / "mcubert_emu.elf", core)
    counts = {}
    for kind, (call, expected) in (
        ("attention", attention_call(model, seq, tiles["attention"])),
        ("mlp", mlp_call(model, seq, tiles["mlp"])),
    ):
        run = run_kernel(emu, call, count_instructions=True)
        if run.status != 0 or not (run.output == expected).all():
            raise SystemExit(f"{core} {kind}: not bit-exact with the reference ({run.message})")
        counts[kind] = run.instructions
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert-tiny", choices=("bert-tiny", "bert-mini"))
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--tiles", default="attention=4,mlp=4")
    args = parser.parse_args(argv)
    tiles = {k: int(v) for k, v in (item.split("=") for item in args.tiles.split(","))}
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mcubert_cores_") as build:
        rows = {core: measure(core, Path(build), args.model, args.seq, tiles) for core in CORES}
    reference = sum(rows["cortex-m7"].values())
    print(
        f"{args.model}, seq {args.seq}, tiles {tiles}: one encoder layer, executed instructions "
        "(bit-exact on every core)"
    )
    print(f"{'core':<15}{'path':<8}{'attention':>14}{'mlp':>14}{'layer':>14}{'vs M7':>8}")
    for core, counts in rows.items():
        layer = sum(counts.values())
        path = "plain" if core == "cortex-m0plus" else "DSP"
        print(f"{core:<15}{path:<8}{counts['attention']:>14,}{counts['mlp']:>14,}{layer:>14,}{layer / reference:>8.2f}")
    print(f"measured in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

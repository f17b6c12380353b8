"""What mcubert_verify_model costs at boot: instructions per KB on emulated Cortex-M7 and M4.

Prints figures, not a test. The default BERT-tiny export for the NUCLEO-F746ZG (seq 128, seeded
random weights: the size is what matters) is written, the library is built for each core and
mcubert_verify_model runs on the export under unicorn, executed instructions counted. Milliseconds
are an ESTIMATE: cycles from instruction classes (tflm_mcubert/measure/instruction_classes.py,
zero-wait-state memory) at the core clock given; Flash wait states on a real board add to it.

    python bench/verify_model_cost.py [--mhz 216] [--quick] [--summary bench/results/verify_model_cost.json]

--quick: Cortex-M7 only (the per-KB figure; tests/bench/test_readme_costs.py runs it in CI). --summary: also
write the figures, the command and their provenance (commit, environment) as a summary, from which
bench/report.py generates docs/reliability.md's figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tflm_mcubert.measure import kernel_build  # noqa: E402
from tflm_mcubert.measure.arm_emulator import ArmEmulator  # noqa: E402
from tflm_mcubert.measure.instruction_classes import InstructionProfile  # noqa: E402
from tflm_mcubert.ops import kernel_abi  # noqa: E402
from provenance import provenance  # noqa: E402

CPUS = ("cortex-m7", "cortex-m4")


def export_default(out: Path) -> bytes:
    subprocess.run(
        [sys.executable, "-m", "tflm_mcubert", "export", "--out", str(out)], check=True, cwd=ROOT, capture_output=True
    )
    return (out / "model.tflite").read_bytes()


def build(cpu: str, build_dir: Path) -> Path:
    return kernel_build.build(kernel_build.Variant(cpu), build_dir, "mcubert_emu").image("mcubert_emu")


def measure(elf: Path, cpu: str, model: bytes) -> dict:
    emu = ArmEmulator(elf, cpu, ram_size=max(16 << 20, 2 * len(model)))
    model_at, result_at = emu.put(model), emu.alloc(16)
    message_at = emu.alloc(kernel_abi.MESSAGE_CAPACITY)
    run = emu.call("mcubert_verify_model", model_at, len(model), result_at, message_at, count_instructions=True)
    if run.value != 0:
        message = emu.read(message_at, kernel_abi.MESSAGE_CAPACITY).split(b"\0")[0].decode()
        raise SystemExit(f"{cpu}: mcubert_verify_model refused the export: {message}")
    cycles = InstructionProfile(elf).cycles(run.blocks, cpu)
    return {"instructions": run.instructions, "cycles_estimate": cycles, "stack_bytes": run.stack_bytes}


def measure_all(cpus: tuple[str, ...] = CPUS) -> tuple[int, dict[str, dict]]:
    """The default export's size and, per core, measure()'s figures plus `per_kb` (instructions per KB)."""
    with tempfile.TemporaryDirectory() as tmp:
        model = export_default(Path(tmp) / "export")
        figures = {cpu: measure(build(cpu, Path(tmp) / "build"), cpu, model) for cpu in cpus}
    for cpu_figures in figures.values():
        cpu_figures["per_kb"] = cpu_figures["instructions"] / (len(model) / 1024)
    return len(model), figures


def write_summary(path: Path, size: int, by_cpu: dict[str, dict], mhz: float, command: str) -> None:
    summary = {
        "bench": "verify_model_cost",
        "command": command,
        "model": "the default export: BERT-tiny, seq 128, nucleo-f746zg, seeded random weights",
        "tflite_bytes": size,
        "mhz": mhz,
        "cycles": "ESTIMATE from instruction classes (zero-wait-state memory)",
        "rows": [{"core": cpu, **figures} for cpu, figures in by_cpu.items()],
        "provenance": provenance({}),
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mhz", type=float, default=216.0, help="core clock for the ms ESTIMATE (F746: 216)")
    parser.add_argument("--quick", action="store_true", help="Cortex-M7 only")
    parser.add_argument("--summary", type=Path, help="also write the figures and their provenance here (JSON)")
    args = parser.parse_args(argv)
    size, by_cpu = measure_all(CPUS[:1] if args.quick else CPUS)
    if args.summary:
        command = "python bench/verify_model_cost.py" + " --quick" * args.quick + f" --summary {args.summary}"
        write_summary(args.summary, size, by_cpu, args.mhz, command)
    print(f"BERT-tiny @ 128 for nucleo-f746zg: {size:,} bytes ({size / 1024:.1f} KB)")
    print(
        f"{'core':<10} {'instructions':>13} {'per KB':>8} {'cycles (ESTIMATE)':>18} "
        f"{'ms @ ' + format(args.mhz, 'g') + ' MHz (ESTIMATE)':>24} {'stack B':>8}"
    )
    for cpu, figures in by_cpu.items():
        ms = figures["cycles_estimate"] / (args.mhz * 1e3)
        print(
            f"{cpu:<10} {figures['instructions']:>13,} {figures['per_kb']:>8,.0f} "
            f"{figures['cycles_estimate']:>18,.0f} {ms:>24.1f} {figures['stack_bytes']:>8}"
        )


if __name__ == "__main__":
    main()

"""Instruction counts of the MCUBERT kernels against re-implemented baselines, on emulated cores.

Prints tables and writes JSON + PNG; not a test. Every number is measured in this run: the
library and the baselines (custom_ops/baselines/, re-implementations of CMSIS-NN's per-token
1x2x4 strategy in an untiled graph, Burrello et al.'s per-head attention and a FlashAttention-style
schedule) are built for Cortex-M7 and Cortex-M4 and run under unicorn, executed instructions counted
per translated block (deterministic for the fixed seeds here).

* per op and per encoder layer (attention + MLP) of BERT-tiny (d 128, 2 heads, ffn 512) and
  BERT-mini (d 256, 4 heads, ffn 1024) at seq 64/128/256/512, one layer each (layers are identical
  in cost), realistic quantized weights (random BERT-like floats through the ops' own offline
  quantization), mask mode 0 with every key attending; ours at the tiles given by --tiles;
* linear layers alone (the model's shapes, 128 tokens): ours vs 1x2x4 per token, and, given a
  CMSIS-NN checkout (CMSIS_NN_DIR or --cmsis-nn-dir; bench/kernel_cost_cmsis_nn.py), vs the real
  kernels TFLM runs: arm_convolve_1x1_s8_fast / arm_nn_mat_mult_nt_t_s8 (rank-3 inputs) and
  arm_fully_connected_per_channel_s8 (per token); without one that table is skipped, saying so;
* the SMLAD bound (MACs / 2: one SMLAD is two 16x16 MACs) and our efficiency against it;
* an ESTIMATE of cycles from instruction classes (tflm_mcubert/measure/instruction_classes.py:
  Cortex-M4 TRM cycle table; Cortex-M7 as a dual-issue / one-MAC / one-load-store throughput
  model; zero-wait-state memory) — labelled as such everywhere;
* the tile sweep of the paper's Figure 8 (BERT-tiny, seq 128, Cortex-M7): cost and live memory
  per op against the tile, and the smallest tile within 5% of the best cost;
* the fitted cost formulas of tflm_mcubert/schedule/kernel_cost.py checked against every measured
  layer (--fit refits them first, from extra small shapes, and prints the coefficients).

    python bench/kernel_cost.py [--quick] [--fit] [--before REV] [--cores cortex-m33,cortex-m0plus]
                                [--cmsis-nn-dir DIR] [--jobs 2] [--out runs/kernel_cost]

* ours on every core the boards use (--cores, default Cortex-M33 for the Pico 2 with the DSP path
  and Cortex-M0+ for the Pico with the plain C path, run on unicorn's Cortex-M0 model: the same
  ARMv6-M instruction set), one layer of each model at seq 128, next to the M7 and M4; the
  re-implemented baselines are DSP-only and do not run there.

Needs arm-none-eabi-gcc, a host C compiler (the emulator's block counter) and the `unicorn`
package (pip install -e .[bench]). About two minutes on two cores (the block counter is compiled C,
so whole layers are measured directly, seq 512 included: no sampling or extrapolation).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tflm_mcubert.ops import attention, contract, mlp, testing  # noqa: E402
from tflm_mcubert.ops.attention import AttentionParams  # noqa: E402
from tflm_mcubert.ops.fixed_point import saturate  # noqa: E402
from tflm_mcubert.ops.linear import Linear  # noqa: E402
from tflm_mcubert.ops.mlp import MLPParams  # noqa: E402
from tflm_mcubert.ops.quantization import TensorQuant  # noqa: E402
from tflm_mcubert.ops import kernel_abi  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_cost_cmsis_nn  # noqa: E402
from kernel_cost_analysis import (  # noqa: E402
    BOARD_CORES_SEQ,
    MODELS,
    SWEEP_TILES,
    cost_model_check,
    fitted_formulas,
    macs,
    linear_rows,
    summarize,
    summarize_board_cores,
    tile_sweep,
)
from kernel_cost_fit import FIT_ATTENTION, FIT_MLP, fit_call, fit_tasks, print_fitted  # noqa: E402
from kernel_cost_report import BASELINES, plot, print_tables, summary  # noqa: E402

CPUS = ("cortex-m7", "cortex-m4")  # ours and the baselines
BOARD_CORES = ("cortex-m33", "cortex-m0plus")  # ours only
SEQS = (64, 128, 256, 512)
FLASH_BLOCK = 32  # keys (and queries) per FlashAttention block


# ---------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------


def build_images(build: Path, cpus=CPUS, cores=()) -> dict[str, Path]:
    """The emulator images: with the baselines for `cpus`, the library alone for `cores`."""
    from tflm_mcubert.measure import kernel_build

    images = {}
    for cpu, target in [(c, "mcubert_baselines_emu") for c in cpus] + [
        (c, "mcubert_emu") for c in cores if c not in cpus
    ]:
        images[cpu] = kernel_build.build(kernel_build.Variant(cpu), build, target).image(target)
    return images


# ---------------------------------------------------------------------------------------------
# Cases (deterministic)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def layer_params(model: str, s: int) -> tuple[AttentionParams, MLPParams, np.ndarray]:
    """A realistic quantized layer of `model` at seq s, and its int8 input."""
    dims = MODELS[model]
    rng = np.random.default_rng(1000 + s + dims.hidden)
    fa = testing.float_attention(rng, dims.hidden, dims.heads, sharpness=2.0)
    fm = testing.float_mlp(rng, dims.hidden, dims.ffn)
    x = rng.normal(size=(s, dims.hidden))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    valid = np.ones(s, bool)
    aq = fa.calibrate(inq.dequantize(xq), valid, inq)
    ap = AttentionParams.quantize(fa, aq, seq_len=s, tile=1)
    y = fa.forward(inq.dequantize(xq), valid)
    mp = MLPParams.quantize(fm, fm.calibrate(y, aq.output), seq_len=s, tile=1)
    return ap, mp, xq


def attention_call(model: str, s: int, tile: int):
    ap, _, xq = layer_params(model, s)
    params = dataclasses.replace(ap, tile=tile).validate()
    mask = np.ones(s, np.int8)
    expected = attention.run(params, xq.copy(), mask).reshape(-1)
    return kernel_abi.attention_call(params, xq, mask), expected


def mlp_call(model: str, s: int, tile: int):
    _, mp, xq = layer_params(model, s)
    params = dataclasses.replace(mp, tile=tile).validate()
    expected = mlp.run(params, xq.copy()).reshape(-1)
    return kernel_abi.mlp_call(params, xq), expected


def linear_layer(k: int, n: int, tokens: int) -> tuple[Linear, np.ndarray]:
    rng = np.random.default_rng(7 * k + n)
    weight = rng.normal(0, 1 / math.sqrt(k), (n, k))
    bias = rng.normal(0, 0.05, n)
    x = rng.normal(size=(tokens, k))
    inq = TensorQuant.observe(x, symmetric=False)
    xq = inq.quantize(x)
    out = inq.dequantize(xq) @ weight.T + bias
    return Linear.from_float(weight, bias, inq, float(np.abs(out).max()) / 127), xq


# ---------------------------------------------------------------------------------------------
# Worker side: one emulator per CPU and process
# ---------------------------------------------------------------------------------------------

_IMAGES: dict[str, Path] = {}


@functools.lru_cache(maxsize=None)
def _emulator(image: str):
    """The emulator of an image key: a core ("cortex-m7") or a core's real CMSIS-NN ("cortex-m7/cmsis-nn")."""
    from tflm_mcubert.measure.arm_emulator import ArmEmulator

    return ArmEmulator(_IMAGES[image], image.split("/")[0])


@functools.lru_cache(maxsize=None)
def _profile(image: str):
    from tflm_mcubert.measure.instruction_classes import InstructionProfile

    return InstructionProfile(_IMAGES[image])


def _init_worker(images: dict[str, Path]) -> None:
    _IMAGES.update(images)


def _measured(cpu: str, run, expected=None) -> dict:
    profile = _profile(cpu)
    result = {
        "instructions": run.instructions,
        "classes": profile.classes(run.blocks),
        "cycles_estimate": profile.cycles(run.blocks, cpu),
    }
    if expected is not None:
        diff = np.abs(run.output.astype(np.int32) - expected.astype(np.int32))
        result["max_abs_diff"] = int(diff.max())
        result["bytes_different"] = float(np.mean(diff > 0))
    return result


def task_op(cpu: str, model: str, s: int, kind: str, impl: str, tile: int) -> dict:
    """One op call: impl "ours" (the library) or a baseline schedule."""
    from tflm_mcubert.measure.arm_emulator import run_kernel
    from tflm_mcubert.measure.baseline_abi import run_baseline

    emu = _emulator(cpu)
    if kind == "attention":
        call, expected = attention_call(model, s, FLASH_BLOCK if impl == "flash" else tile)
    else:
        call, expected = mlp_call(model, s, tile)
    if impl == "ours":
        run = run_kernel(emu, call, count_instructions=True)
    else:
        run = run_baseline(emu, impl, call, count_instructions=True)
    if run.status != kernel_abi.OK:
        raise RuntimeError(f"{impl} {kind} {model} s={s} on {cpu}: {run.message}")
    result = _measured(cpu, run, expected)
    if impl != "flash" and result["max_abs_diff"] != 0:  # only flash may round differently
        raise RuntimeError(f"{impl} {kind} {model} s={s} on {cpu} differs from the reference")
    return result


def task_linear(cpu: str, k: int, n: int, tokens: int, impl: str) -> dict:
    """impl: "ours", "cmsis" (the re-implemented 1x2x4 strategy) or "real-conv1x1" / "real-fc" (CMSIS-NN)."""
    from tflm_mcubert.measure.baseline_abi import run_linear

    linear, xq = linear_layer(k, n, tokens)
    image = f"{cpu}/cmsis-nn" if impl.startswith("real-") else cpu
    if impl.startswith("real-"):
        y, call = kernel_cost_cmsis_nn.run_linear(_emulator(image), impl.removeprefix("real-"), xq, linear)
    else:
        y, call = run_linear(_emulator(image), impl, xq, linear, count_instructions=True)
    expected = saturate(linear.requantized(xq), -128, 127, np.int8)
    profile = _profile(image)
    difference = int(np.abs(y.astype(np.int32) - expected.astype(np.int32)).max())
    if difference > (1 if impl.startswith("real-") else 0):
        raise RuntimeError(f"{impl} linear {k}x{n} on {cpu}: output differs from the reference by {difference}")
    return {
        "instructions": call.instructions,
        "classes": profile.classes(call.blocks),
        "cycles_estimate": profile.cycles(call.blocks, cpu),
        "bit_exact": difference == 0,
    }


# ---------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------


def layer_tasks(cpus, models, seqs, tiles) -> list[tuple]:
    tasks = []
    for cpu in cpus:
        for model in models:
            for s in seqs:
                for kind in contract.TILED_KINDS:
                    t = min(tiles[kind], s)
                    tasks.append(("op", cpu, model, s, kind, "ours", t))
                    impls = BASELINES if kind == "attention" else ("cmsis",)
                    tasks += [("op", cpu, model, s, kind, impl, t) for impl in impls]
    return tasks


def board_core_tasks(cores, models, tiles) -> list[tuple]:
    s = BOARD_CORES_SEQ
    return [
        ("op", cpu, model, s, kind, "ours", min(tiles[kind], s))
        for cpu in cores
        for model in models
        for kind in contract.TILED_KINDS
    ]


def linear_shapes(models) -> list[tuple[str, int, int]]:
    shapes = []
    for model in models:
        d, f = MODELS[model].hidden, MODELS[model].ffn
        shapes += [(f"{model} Q/K/V/O", d, d), (f"{model} FC1", d, f), (f"{model} FC2", f, d)]
    return shapes


def sweep_tasks(model: str, s: int) -> list[tuple]:
    return [
        ("op", "cortex-m7", model, s, kind, "ours", t) for kind in contract.TILED_KINDS for t in SWEEP_TILES if t <= s
    ]


def task_fit(kind: str, *shape: int) -> dict:
    """One synthetic op of the formula fit (bench/kernel_cost_fit.py), measured on the M7."""
    from tflm_mcubert.measure.arm_emulator import run_kernel

    run = run_kernel(_emulator("cortex-m7"), fit_call(kind, *shape), count_instructions=True)
    return _measured("cortex-m7", run)


def run_task_any(task: tuple) -> tuple[tuple, dict, float]:
    started = time.time()
    name, *args = task
    if name in ("fit_attention", "fit_mlp"):
        result = task_fit(name.removeprefix("fit_"), *args)
    else:
        result = {"op": task_op, "linear": task_linear}[name](*args)
    return task, result, time.time() - started


def task_weight(task: tuple) -> float:
    """Rough cost (for scheduling the largest first)."""
    name, *args = task
    if name == "op":
        cpu, model, s, kind, impl, t = args
        w = macs(kind, s, MODELS[model]) * (1.0 if impl == "ours" else 2.2)
        return w * (4 / min(t, 4) if impl == "ours" else 1)
    if name == "linear":
        cpu, k, n, tokens, impl = args
        return k * n * tokens * (1.0 if impl == "ours" else 2.2)
    _, s, d, second, t = task
    return s * d * second


def execute(tasks: list[tuple], images: dict[str, Path], jobs: int) -> dict[tuple, dict]:
    results: dict[tuple, dict] = {}
    ordered = sorted(set(tasks), key=task_weight, reverse=True)
    if jobs <= 1:
        _init_worker(images)
        for task in ordered:
            key, result, _ = run_task_any(task)
            results[key] = result
        return results
    with concurrent.futures.ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(images,)) as pool:
        for key, result, _ in pool.map(run_task_any, ordered, chunksize=1):
            results[key] = result
    return results


def measure_before(rev: str, cpus, models, seq: int, tiles) -> list[dict]:
    """Ours at git revision `rev` (custom_ops as committed there), for the before/after table."""
    import re
    from tflm_mcubert.measure import kernel_build
    from tflm_mcubert.measure.arm_emulator import ArmEmulator, run_kernel

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "old"
        tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev, "custom_ops"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        header = (tree / "custom_ops/include/mcubert/mcubert_ops.h").read_text()
        old_hash = int(re.search(r"#define MCUBERT_SPEC_HASH (0x[0-9a-fA-F]+)u", header).group(1), 16)
        # The sources as committed at `rev`, built by today's build description (revisions before it
        # had a Makefile with the same flags).
        shutil.rmtree(tree / "custom_ops" / "cmake", ignore_errors=True)
        shutil.copyfile(ROOT / "custom_ops" / "CMakeLists.txt", tree / "custom_ops" / "CMakeLists.txt")
        shutil.copytree(ROOT / "custom_ops" / "cmake", tree / "custom_ops" / "cmake")
        for cpu in cpus:
            old = kernel_build.Variant(cpu)
            built = kernel_build.build(old, Path(tmp) / "build", "mcubert_emu", source=tree / "custom_ops")
            emu = ArmEmulator(built.image("mcubert_emu"), cpu)
            for model in models:
                ap, mp, xq = layer_params(model, seq)
                for kind, params in (("attention", ap), ("mlp", mp)):
                    params = dataclasses.replace(params, tile=min(tiles[kind], seq)).validate()
                    call = (
                        kernel_abi.attention_call(params, xq, np.ones(seq, np.int8), old_hash)
                        if kind == "attention"
                        else kernel_abi.mlp_call(params, xq, old_hash)
                    )
                    run = run_kernel(emu, call, count_instructions=True)
                    out.append({"cpu": cpu, "model": model, "seq": seq, "op": kind, "before": run.instructions})
    return out


def parse_arguments(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "kernel_cost")
    parser.add_argument("--build", type=Path, default=None, help="build directory (default: a temporary one)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="seq 64 and 128 only, no tile sweep")
    parser.add_argument("--fit", action="store_true", help="refit kernel_cost's formulas and print them")
    parser.add_argument(
        "--tiles",
        default="attention=4,mlp=4",
        help="our tiles (default: 4 and 4, the smallest within 5%% of the best cost)",
    )
    parser.add_argument("--before", default=None, help="git revision: also measure ours as committed there")
    parser.add_argument(
        "--cpus",
        default=",".join(CPUS),
        help=f"cores to measure (default {','.join(CPUS)}, the cores the instruction-class cycle model covers)",
    )
    parser.add_argument(
        "--cores",
        default=",".join(BOARD_CORES),
        help=f"more cores, ours only at seq {BOARD_CORES_SEQ} (default {','.join(BOARD_CORES)}; '' for none)",
    )
    parser.add_argument(
        "--cmsis-nn-dir",
        type=Path,
        default=os.environ.get("CMSIS_NN_DIR") or None,
        help="a CMSIS-NN checkout (default: $CMSIS_NN_DIR): also measure the real kernels TFLM runs",
    )
    parser.add_argument(
        "--summary", type=Path, default=None, help="also write the run's summary here (bench/results/kernel_cost.json)"
    )
    parser.add_argument(
        "--cmsis-nn-rev", default=None, help="the checkout's revision, for the table (default: git's, when it is one)"
    )
    return parser.parse_args(argv)


def before_after(rev: str, rows: list[dict], cpus, models, tiles) -> list[dict]:
    """Ours at `rev` against this run's layers (seq 128)."""
    before = measure_before(rev, cpus, models, 128, tiles)
    for b in before:
        r = next(r for r in rows if (r["cpu"], r["model"], r["seq"]) == (b["cpu"], b["model"], b["seq"]))
        b["after"] = r["ops"][b["op"]]["ours"]["instructions"]
    return before


def main(argv=None) -> int:
    args = parse_arguments(argv)
    started = time.time()
    tiles = {k: int(v) for k, v in (item.split("=") for item in args.tiles.split(","))}
    cpus = tuple(args.cpus.split(","))
    cores = tuple(c for c in args.cores.split(",") if c)
    table_cores = tuple(dict.fromkeys(("cortex-m7",) + cpus + cores)) if cores else ()
    seqs = SEQS[:2] if args.quick else SEQS
    models = tuple(MODELS)
    build = args.build or Path(tempfile.mkdtemp(prefix="mcubert_bench_"))
    images = build_images(build, cpus, table_cores)
    real_impls = ()
    if args.cmsis_nn_dir:
        real_impls = ("real-conv1x1", "real-fc")
        for cpu in cpus:
            images[f"{cpu}/cmsis-nn"] = kernel_cost_cmsis_nn.build_image(args.cmsis_nn_dir, cpu, build / "cmsis-nn")
    print(f"built images in {time.time() - started:.0f} s")

    tasks = layer_tasks(cpus, models, seqs, tiles)
    linear_specs = [(cpu, name, k, n) for cpu in cpus for name, k, n in linear_shapes(models)]
    impls = ("ours", "cmsis", *real_impls)
    tasks += [("linear", cpu, k, n, 128, impl) for cpu, _, k, n in linear_specs for impl in impls]
    sweep_on = not args.quick and "cortex-m7" in cpus
    if sweep_on:
        tasks += sweep_tasks("bert-tiny", 128)
    if args.fit:
        tasks += fit_tasks()
    tasks += board_core_tasks(table_cores, models, tiles)
    results = execute(tasks, images, args.jobs)
    measured_at = time.time()
    print(f"measured {len(results)} runs in {measured_at - started:.0f} s")

    rows = summarize(results, cpus, models, seqs, tiles)
    linear = linear_rows(results, linear_specs, real_impls)
    sweep = tile_sweep(results, "bert-tiny", 128) if sweep_on else None
    board_cores = summarize_board_cores(results, table_cores, models, tiles) if table_cores else []

    fitted = fitted_formulas(results, FIT_ATTENTION, FIT_MLP) if args.fit else None
    if fitted:
        print_fitted(fitted)
    model_check = cost_model_check(rows, sweep, results, fitted)

    before = before_after(args.before, rows, cpus, models, tiles) if args.before else None

    real_note = (
        f"CMSIS-NN {args.cmsis_nn_rev or kernel_cost_cmsis_nn.revision(args.cmsis_nn_dir)}"
        if args.cmsis_nn_dir
        else None
    )
    text = print_tables(rows, linear, sweep, model_check, before, board_cores, real_note)
    elapsed = time.time() - started
    document = {
        "meta": run_meta(elapsed, cpus, tiles, real_note),
        "layers": rows,
        "linear": linear,
        "tile_sweep": sweep,
        "board_cores": board_cores,
        "cost_model_check": model_check,
        "before_after": before,
        "fitted": ({f"{k}/{q}": v for (k, q), v in fitted.items()} if fitted else None),
    }
    stem = write_outputs(args, argv, document, text, rows, sweep)
    print(
        f"\nwrote {args.out / stem}.json/.md/.png; took {elapsed:.0f} s "
        f"({time.time() - measured_at:.0f} s after measuring)"
    )
    return 0


def run_meta(elapsed: float, cpus, tiles: dict, real_note: str | None) -> dict:
    return {
        "seconds": elapsed,
        "cpus": cpus,
        "tiles": tiles,
        "flash_block": FLASH_BLOCK,
        "measure": "executed instructions (unicorn, per translated block)",
        "cycles": "ESTIMATE from instruction classes (tflm_mcubert/measure/instruction_classes.py)",
        "cmsis_nn": real_note,
        "git": subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }


def write_outputs(args: argparse.Namespace, argv, document: dict, text: str, rows, sweep) -> str:
    """The run's JSON, Markdown and PNG under --out, and the committed summary when --summary names one;
    returns the files' stem."""
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "kernel_cost_quick" if args.quick else "kernel_cost"
    (args.out / f"{stem}.json").write_text(json.dumps(document, indent=1))
    (args.out / f"{stem}.md").write_text(text + "\n")
    plot(rows, sweep, args.out / f"{stem}.png")
    if args.summary:
        command = "python bench/kernel_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
        args.summary.write_text(json.dumps(summary(document, command), indent=1) + "\n")
    return stem


if __name__ == "__main__":
    sys.exit(main())

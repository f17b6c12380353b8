"""bench/kernel_cost.py's measured runs read as its tables: per layer and op against the baselines and the
SMLAD bound, the linear layers, the tile sweep, the board cores against the Cortex-M7, and the fitted cost
formulas (tflm_mcubert/schedule/kernel_cost.py) checked against every measured layer. Pure arithmetic on the
results, keyed as kernel_cost's tasks are: ("op", cpu, model, seq, kind, impl, tile), ("linear", cpu, k, n,
tokens, impl), ("fit_<kind>", *shape).
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.ops import attention, contract, kernel_events, mlp
from tflm_mcubert.ops.scratch import align_up
from tflm_mcubert.schedule import kernel_cost
from tflm_mcubert.schedule.cost import OpShape
from tflm_mcubert.schedule.memory import Dims

from kernel_cost_report import BASELINES

MODELS = {
    "bert-tiny": Dims(hidden=128, heads=2, ffn=512, layers=2),
    "bert-mini": Dims(hidden=256, heads=4, ffn=1024, layers=4),
}
BOARD_CORES_SEQ = 128  # the sequence the board cores are measured at
PLAIN_CORES = {"cortex-m0plus"}  # no DSP extension: the kernels' plain C path
SWEEP_TILES = tuple(range(1, 17)) + (20, 24, 28, 32, 48, 64, 96, 128)
WITHIN = 0.05  # "within 5% of the best"
LINEAR_TOKENS = 128


def macs(kind: str, s: int, dims: Dims) -> int:
    d, f = dims.hidden, dims.ffn
    if kind == "attention":
        return 4 * s * d * d + 2 * s * s * d  # Q, K, V, O projections; scores; P.V
    return 2 * s * d * f


def summarize(results: dict, cpus, models, seqs, tiles) -> list[dict]:
    rows = []
    for cpu in cpus:
        for model in models:
            dims = MODELS[model]
            for s in seqs:
                entry = {
                    "cpu": cpu,
                    "model": model,
                    "seq": s,
                    "tiles": {k: min(tiles[k], s) for k in contract.TILED_KINDS},
                    "ops": {},
                }
                for kind in contract.TILED_KINDS:
                    t = min(tiles[kind], s)
                    impls = ("ours",) + (BASELINES if kind == "attention" else ("cmsis",))
                    op = {impl: results[("op", cpu, model, s, kind, impl, t)] for impl in impls}
                    if kind == "mlp":  # every baseline runs the same untiled MLP
                        op["burrello"] = op["flash"] = op["cmsis"]
                    op["macs"] = macs(kind, s, dims)
                    op["smlad_bound"] = op["macs"] // 2
                    rows_ratio = {b: op["ours"]["instructions"] / op[b]["instructions"] for b in BASELINES}
                    op["ratio_vs"] = rows_ratio
                    op["cycle_ratio_vs"] = {
                        b: op["ours"]["cycles_estimate"] / op[b]["cycles_estimate"] for b in BASELINES
                    }
                    op["smlad_efficiency"] = op["smlad_bound"] / op["ours"]["instructions"]
                    entry["ops"][kind] = op
                layer = {
                    impl: sum(entry["ops"][k][impl]["instructions"] for k in contract.TILED_KINDS)
                    for impl in ("ours",) + BASELINES
                }
                cycles = {
                    impl: sum(entry["ops"][k][impl]["cycles_estimate"] for k in contract.TILED_KINDS)
                    for impl in ("ours",) + BASELINES
                }
                bound = sum(entry["ops"][k]["smlad_bound"] for k in contract.TILED_KINDS)
                entry["layer"] = {
                    "instructions": layer,
                    "cycles_estimate": cycles,
                    "smlad_bound": bound,
                    "smlad_efficiency": bound / layer["ours"],
                    "ratio_vs": {b: layer["ours"] / layer[b] for b in BASELINES},
                    "cycle_ratio_vs": {b: cycles["ours"] / cycles[b] for b in BASELINES},
                }
                rows.append(entry)
    return rows


def tile_sweep(results: dict, model: str, s: int) -> dict:
    dims = MODELS[model]
    resident = align_up(s * dims.hidden) + align_up(s)
    sweep = {}
    for kind in contract.TILED_KINDS:
        points = []
        for t in SWEEP_TILES:
            if t > s:
                continue
            count = results[("op", "cortex-m7", model, s, kind, "ours", t)]["instructions"]
            scratch = (
                attention.scratch_bytes(s, dims.hidden, dims.heads, t)
                if kind == "attention"
                else mlp.scratch_bytes(s, dims.hidden, dims.ffn, t)
            )
            points.append({"tile": t, "instructions": count, "live_bytes": resident + align_up(scratch)})
        best = min(p["instructions"] for p in points)
        smallest = min(p["tile"] for p in points if p["instructions"] <= (1 + WITHIN) * best)
        sweep[kind] = {
            "points": points,
            "best_instructions": best,
            "best_tile": min(points, key=lambda p: (p["instructions"], p["tile"]))["tile"],
            "smallest_tile_within_5pct": smallest,
        }
    return sweep


def summarize_board_cores(results: dict, cores, models, tiles) -> list[dict]:
    """Ours per layer on each core, with the ratio to the Cortex-M7 (measured in the same run)."""
    s = BOARD_CORES_SEQ
    rows = []
    for model in models:
        per_core = {}
        for cpu in cores:
            ops = {
                kind: results[("op", cpu, model, s, kind, "ours", min(tiles[kind], s))] for kind in contract.TILED_KINDS
            }
            per_core[cpu] = {
                "model": model,
                "seq": s,
                "cpu": cpu,
                "path": "plain" if cpu in PLAIN_CORES else "DSP",
                **{kind: ops[kind]["instructions"] for kind in contract.TILED_KINDS},
                "instructions": sum(op["instructions"] for op in ops.values()),
                "cycles_estimate": sum(op["cycles_estimate"] for op in ops.values()),
            }
        reference = per_core["cortex-m7"]
        for row in per_core.values():
            row["vs_m7"] = row["instructions"] / reference["instructions"]
            row["cycles_vs_m7"] = row["cycles_estimate"] / reference["cycles_estimate"]
            rows.append(row)
    return rows


def fit_coefficients(samples: list[tuple[str, dict, float]], features: tuple[str, ...]) -> dict[str, float]:
    """Least squares of measured values on the event counts (features of kernel_cost)."""
    a = np.array([[feats[name] for name in features] for _, feats, _ in samples], np.float64)
    b = np.array([value for _, _, value in samples], np.float64)
    scale = np.maximum(np.abs(a).max(axis=0), 1.0)
    solution, *_ = np.linalg.lstsq(a / scale, b, rcond=None)
    return {name: float(c) for name, c in zip(features, solution / scale)}


def formula(coefficients: dict[str, float], feats: dict[str, float]) -> float:
    return sum(coefficients.get(name, 0.0) * value for name, value in feats.items())


def linear_rows(results: dict, specs: list[tuple], real_impls: tuple[str, ...]) -> list[dict]:
    """Per (cpu, name, k, n) of `specs`: ours against the 1x2x4 baseline and the real CMSIS-NN kernels."""
    rows = []
    for cpu, name, k, n in specs:
        measured = {
            impl: results[("linear", cpu, k, n, LINEAR_TOKENS, impl)] for impl in ("ours", "cmsis", *real_impls)
        }
        ours, base = measured["ours"], measured["cmsis"]
        rows.append(
            {
                "real_cmsis_nn": {
                    impl: {**measured[impl], "ratio": ours["instructions"] / measured[impl]["instructions"]}
                    for impl in real_impls
                },
                "cpu": cpu,
                "name": name,
                "in": k,
                "out": n,
                "tokens": LINEAR_TOKENS,
                "ours": ours,
                "cmsis": base,
                "ratio": ours["instructions"] / base["instructions"],
                "cycle_ratio": ours["cycles_estimate"] / base["cycles_estimate"],
                "smlad_bound": LINEAR_TOKENS * k * n // 2,
                "smlad_efficiency": LINEAR_TOKENS * k * n / 2 / ours["instructions"],
            }
        )
    return rows


def fitted_formulas(results: dict, attention_shapes, mlp_shapes) -> dict[tuple[str, str], dict[str, float]]:
    """(kind, "instructions" | "cycles") -> the cost formula's coefficients, fitted to the fit shapes' runs."""
    fitted = {}
    for kind, features_of, shapes, features in (
        ("attention", kernel_events.attention_features, attention_shapes, kernel_events.ATTENTION_FEATURES),
        ("mlp", kernel_events.mlp_features, mlp_shapes, kernel_events.MLP_FEATURES),
    ):
        train = [(shape, features_of(*shape), results[(f"fit_{kind}",) + shape]) for shape in shapes]
        for quantity, key in (("instructions", "instructions"), ("cycles", "cycles_estimate")):
            fitted[(kind, quantity)] = fit_coefficients([(sh, f, r[key]) for sh, f, r in train], features)
    return fitted


def cost_model_check(rows: list[dict], sweep: dict | None, results: dict, fitted: dict | None) -> list[dict]:
    """The cost formulas (`fitted`, else the package's) against every measured Cortex-M7 layer and sweep point."""
    checks = [
        (r["model"], r["seq"], kind, r["tiles"][kind], r["ops"][kind]["ours"])
        for r in rows
        if r["cpu"] == "cortex-m7"
        for kind in contract.TILED_KINDS
    ]
    if sweep:
        checks += [
            ("bert-tiny", 128, kind, p["tile"], results[("op", "cortex-m7", "bert-tiny", 128, kind, "ours", p["tile"])])
            for kind in contract.TILED_KINDS
            for p in sweep[kind]["points"]
        ]
    out = []
    for model, s, kind, t, measured in checks:
        shape = OpShape(kind, s, MODELS[model], t)
        feats = kernel_cost.op_features(shape)
        for quantity, key in (("instructions", "instructions"), ("cycles", "cycles_estimate")):
            if fitted:
                predicted = formula(fitted[(kind, quantity)], feats)
            elif getattr(
                kernel_cost, f"{kind.upper()}_{'INSTRUCTIONS' if quantity == 'instructions' else 'CYCLES_M7'}"
            ):
                predicted = kernel_cost.predict(shape, quantity)
            else:
                continue
            out.append(
                {
                    "model": model,
                    "seq": s,
                    "op": kind,
                    "tile": t,
                    "quantity": quantity,
                    "measured": measured[key],
                    "predicted": predicted,
                    "relative_error": predicted / measured[key] - 1,
                }
            )
    return out

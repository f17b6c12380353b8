"""The tables and the figure of bench/kernel_cost.py (what it measured, printed as Markdown)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tflm_mcubert.ops import contract

BASELINES = ("cmsis", "burrello", "flash")


NAMES = {"bert-tiny": "BERT-tiny", "bert-mini": "BERT-mini"}


def layers_markdown(layers: list[dict]) -> str:
    """One encoder layer per core, model and sequence: ours, ours / each re-implemented baseline, and the
    SMLAD bound / ours, in executed instructions (the kernels page's table, bench/report.py, from
    bench/results/kernel_cost.json)."""
    out = [
        "| core | model | seq | ours | vs CMSIS-NN strategy | vs Burrello et al. | vs FlashAttention-style | "
        "SMLAD bound / ours |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in layers:
        lay = r["layer"]
        ratios = " | ".join(f"{lay['ratio_vs'][b]:.2f}" for b in BASELINES)
        out.append(
            f"| {r['cpu']} | {NAMES.get(r['model'], r['model'])} | {r['seq']} | "
            f"{_mega(lay['instructions']['ours'])} | {ratios} | {lay['smlad_efficiency']:.0%} |"
        )
    return "\n".join(out)


def cmsis_nn_markdown(linear: list[dict]) -> str:
    """Linear layers, ours against the real CMSIS-NN kernels TFLM runs: executed instructions, and the
    estimated-cycle ratio and SMLAD bound / estimated cycles (kernels page, from kernel_cost.json)."""
    out = [
        "| core | layer | ours | ours / re-implemented 1x2x4 | "
        "`arm_convolve_1x1_s8_fast` → `arm_nn_mat_mult_nt_t_s8` | ours / it | est. cycles, ours / it | "
        "`arm_fully_connected_per_channel_s8` (per token) | ours / it | "
        "SMLAD bound / ours, instructions / est. cycles |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for item in linear:
        ours, mat_mult, per_token = item["ours"], *(item["real_cmsis_nn"][k] for k in ("real-conv1x1", "real-fc"))
        model, layer = item["name"].split(" ", 1)
        cells = [
            item["cpu"],
            f"{NAMES.get(model, model)} {layer} {item['in']}→{item['out']}",
            _mega(ours["instructions"]),
            f"{item['ratio']:.2f}",
            _mega(mat_mult["instructions"]),
            f"{mat_mult['ratio']:.3f}",
            f"{ours['cycles_estimate'] / mat_mult['cycles_estimate']:.2f}",
            _mega(per_token["instructions"]),
            f"{per_token['ratio']:.3f}",
            f"{item['smlad_efficiency']:.0%} / {item['smlad_bound'] / ours['cycles_estimate']:.0%}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def tile_sweep_markdown(sweep: dict) -> str:
    """The tile sweep: each tile's instructions over the best tile's, per op (kernels page)."""
    tiles = [p["tile"] for p in sweep["attention"]["points"]]
    out = ["| op | smallest tile within 5% of the best | " + " | ".join(f"t={t}" for t in tiles) + " |"]
    out.append("|---|---:|" + "---:|" * len(tiles))
    for kind in contract.TILED_KINDS:
        sw = sweep[kind]
        cells = " | ".join(f"{p['instructions'] / sw['best_instructions']:.2f}" for p in sw["points"])
        out.append(f"| {kind} | {sw['smallest_tile_within_5pct']} | {cells} |")
    return "\n".join(out)


def board_cores_markdown(cores: list[dict]) -> str:
    """Ours on every core the boards use: instructions, estimated cycles, and the ratio to the M7 (the
    kernels page's table, bench/report.py, from bench/results/kernel_cost.json)."""
    out = ["| model | seq | core | path | attention | MLP | layer | vs M7 | est. cycles | est. vs M7 |"]
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for c in cores:
        out.append(
            f"| {c['model']} | {c['seq']} | {c['cpu']} | {c['path']} | {_mega(c['attention'])} | "
            f"{_mega(c['mlp'])} | {_mega(c['instructions'])} | {c['vs_m7']:.2f} | {_mega(c['cycles_estimate'])} | "
            f"{c['cycles_vs_m7']:.2f} |"
        )
    return "\n".join(out)


def board_cores_table(cores: list[dict]) -> list[str]:
    """Ours on every core the boards use: instructions, estimated cycles, and the ratio to the M7."""
    out = ["\n### every board core, ours only: one encoder layer (instructions; estimated cycles)\n"]
    out.append(board_cores_markdown(cores))
    out.append(
        "\n(Cortex-M0+ runs on unicorn's Cortex-M0 model, the same ARMv6-M instruction set; its cycles use "
        "the M0+ TRM table, the M33's the M4's: see tflm_mcubert/measure/instruction_classes.py.)"
    )
    return out


def _mega(n: float) -> str:
    return f"{n / 1e6:.2f}M"


def real_cmsis_nn_table(linear: list[dict], note: str | None) -> list[str]:
    """Ours against the real CMSIS-NN kernels TFLM runs (or why that table is missing)."""
    if note is None:
        return [
            "\n(real CMSIS-NN: skipped; set CMSIS_NN_DIR to a CMSIS-NN checkout, e.g. the one TFLM's Makefile "
            "downloads, to measure arm_nn_mat_mult_nt_t_s8 and arm_fully_connected_per_channel_s8 here)"
        ]
    out = [f"\n### linear layers (128 tokens) against the real kernels TFLM runs ({note})\n"]
    out.append(
        "| cpu | layer | in -> out | ours | arm_convolve_1x1_s8_fast (mat_mult_nt_t) | ours / it | "
        "arm_fully_connected_per_channel_s8 | ours / it | SMLAD bound |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for item in linear:
        mat_mult, per_token = item["real_cmsis_nn"]["real-conv1x1"], item["real_cmsis_nn"]["real-fc"]
        cells = [
            item["cpu"],
            item["name"],
            f"{item['in']} -> {item['out']}",
            _mega(item["ours"]["instructions"]),
            _mega(mat_mult["instructions"]),
            f"{mat_mult['ratio']:.3f}",
            _mega(per_token["instructions"]),
            f"{per_token['ratio']:.3f}",
            _mega(item["smlad_bound"]),
        ]
        out.append("| " + " | ".join(cells) + " |")
    return out


def print_tables(rows, linear, sweep, model_check, before, cores, real_note=None):
    out = []
    fmt = _mega
    for cpu in sorted({r["cpu"] for r in rows}, reverse=True):
        out.append(f"\n### {cpu}: instructions per layer (ours | ratio ours/baseline: cmsis, burrello, flash)\n")
        out.append(
            "| model | seq | attention | att. vs cmsis / burrello / flash | MLP | MLP vs cmsis | "
            "layer | layer vs cmsis / burrello / flash | SMLAD bound | efficiency |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["cpu"] != cpu:
                continue
            a, m, lay = r["ops"]["attention"], r["ops"]["mlp"], r["layer"]
            out.append(
                f"| {r['model']} | {r['seq']} | {fmt(a['ours']['instructions'])} | "
                + " / ".join(f"{a['ratio_vs'][b]:.2f}" for b in BASELINES)
                + f" | {fmt(m['ours']['instructions'])} | {m['ratio_vs']['cmsis']:.2f} | "
                + f"{fmt(lay['instructions']['ours'])} | "
                + " / ".join(f"{lay['ratio_vs'][b]:.2f}" for b in BASELINES)
                + f" | {fmt(lay['smlad_bound'])} | {lay['smlad_efficiency']:.0%} |"
            )
        out.append(f"\n### {cpu}: estimated cycles per layer (instruction-class model; ours | ratio)\n")
        out.append("| model | seq | ours | vs cmsis / burrello / flash |")
        out.append("|---|---|---|---|")
        for r in rows:
            if r["cpu"] == cpu:
                lay = r["layer"]
                out.append(
                    f"| {r['model']} | {r['seq']} | {fmt(lay['cycles_estimate']['ours'])} | "
                    + " / ".join(f"{lay['cycle_ratio_vs'][b]:.2f}" for b in BASELINES)
                    + " |"
                )
    out.append("\n### linear layers alone (128 tokens): ours vs 1x2x4 per token\n")
    out.append("| cpu | layer | in -> out | ours | 1x2x4 | ratio | SMLAD bound | efficiency |")
    out.append("|---|---|---|---|---|---|---|---|")
    for item in linear:
        out.append(
            f"| {item['cpu']} | {item['name']} | {item['in']} -> {item['out']} | "
            f"{fmt(item['ours']['instructions'])} | {fmt(item['cmsis']['instructions'])} | "
            f"{item['ratio']:.2f} | {fmt(item['smlad_bound'])} | {item['smlad_efficiency']:.0%} |"
        )
    out += real_cmsis_nn_table(linear, real_note)
    if cores:
        out += board_cores_table(cores)
    if sweep:
        out.append("\n### tile sweep (BERT-tiny, seq 128, Cortex-M7)\n")
        out.append(
            "| op | best tile | smallest tile within 5% | "
            + " | ".join(f"t={p['tile']}" for p in sweep["attention"]["points"])
            + " |"
        )
        out.append("|---|---|---|" + "---|" * len(sweep["attention"]["points"]))
        for kind in contract.TILED_KINDS:
            sw = sweep[kind]
            out.append(
                f"| {kind} | {sw['best_tile']} | {sw['smallest_tile_within_5pct']} | "
                + " | ".join(f"{p['instructions'] / sw['best_instructions']:.2f}" for p in sw["points"])
                + " |"
            )
    if model_check:
        for quantity in ("instructions", "cycles"):
            errors = [abs(c["relative_error"]) for c in model_check if c["quantity"] == quantity]
            if errors:
                out.append(
                    f"\nkernel_cost formulas ({quantity}) vs the {len(errors)} measured Cortex-M7 "
                    f"layers and sweep points: largest error {max(errors):.2%}"
                )
    if before:
        out.append("\n### before / after (ours, instructions)\n")
        out.append("| cpu | model | seq | op | before | after | after / before |")
        out.append("|---|---|---|---|---|---|---|")
        for b in before:
            out.append(
                f"| {b['cpu']} | {b['model']} | {b['seq']} | {b['op']} | {fmt(b['before'])} | "
                f"{fmt(b['after'])} | {b['after'] / b['before']:.2f} |"
            )
    text = "\n".join(out)
    print(text)
    return text


def plot(rows, sweep, path: Path):
    from figures import pyplot, save_figure

    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3 if sweep else 1, figsize=(17 if sweep else 7, 4.6))
    axes = np.atleast_1d(axes)
    ax = axes[0]
    m7 = [r for r in rows if r["cpu"] == "cortex-m7"]
    labels = [f"{r['model'].replace('bert-', '')}\n{r['seq']}" for r in m7]
    x = np.arange(len(m7))
    for i, b in enumerate(BASELINES):
        ax.bar(x + (i - 1) * 0.27, [r["layer"]["ratio_vs"][b] for r in m7], 0.27, label=f"vs {b}")
    ax.axhline(0.6, color="k", ls="--", lw=0.8, label="target 0.6")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("instructions, ours / baseline")
    ax.set_title("Encoder layer, Cortex-M7 (lower is better)")
    ax.legend(fontsize=8)
    if sweep:
        for ax, kind in zip(axes[1:], contract.TILED_KINDS):
            pts = sweep[kind]["points"]
            t = [p["tile"] for p in pts]
            ax.plot(t, [p["instructions"] / 1e6 for p in pts], "o-", color="C0")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tile t (tokens)")
            ax.set_ylabel("instructions (M)", color="C0")
            twin = ax.twinx()
            twin.plot(t, [p["live_bytes"] / 1024 for p in pts], "s--", color="C3")
            twin.set_ylabel("live memory (KiB)", color="C3")
            ax.axvline(sweep[kind]["smallest_tile_within_5pct"], color="gray", ls=":")
            ax.set_title(f"BERT-tiny s=128 {kind}: cost and memory vs tile")
    save_figure(plt, fig, path, dpi=130)


def _without_classes(value):
    """`value` without the per-class instruction histograms (the run's JSON keeps them; a summary does not)."""
    if isinstance(value, dict):
        return {k: _without_classes(v) for k, v in value.items() if k != "classes"}
    return [_without_classes(v) for v in value] if isinstance(value, list) else value


def summary(document: dict, command: str) -> dict:
    """The committed summary of a run (bench/results/kernel_cost.json; bench/report.py makes the kernels
    page's tables of it): the layers, the linear layers, the tile sweep and every board core, without the
    instruction-class histograms, with the run's settings, the command and provenance."""
    from provenance import provenance

    meta = {k: document["meta"][k] for k in ("seconds", "cpus", "tiles", "measure", "cycles", "cmsis_nn")}
    parts = {k: _without_classes(document[k]) for k in ("layers", "linear", "tile_sweep", "board_cores")}
    return {"bench": "kernel_cost", "command": command, "meta": meta, **parts, "provenance": provenance({})}

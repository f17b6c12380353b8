"""The tables of the decoder page's QAT and embedding-search summaries (bench/decoder_qat.py and
bench/decoder_search.py write them, naming a commit, an environment and the checkpoint's SHA-256) and of the
vocabulary-pruning accuracy run, recorded before its summary named any: its checkpoints are gone, so it cannot
be measured again as it was (MiniLM's int8 cosines, which could, were: bench/minilm_fidelity.py,
bench/results/minilm_fidelity.json); its summary holds the figures as committed, the commands that made them,
and says that its provenance was not recorded, naming the commits that committed the figures.
bench/report.py makes the pages' tables of them with these functions; every derived figure (a mean, an sd, a
relative change) is computed here from the recorded ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stats import paired_t  # noqa: E402

# The summaries' words for the demonstration decoder, the checkpoint bench/decoder_qat.py and
# bench/decoder_search.py read by default (their --model).
DEMONSTRATION_DECODER = (
    "the demonstration decoder (GPT-2, d 128, 2 layers, 2,048 ids; train-lm --vocab-size 2048 --context 256 "
    "--epochs 12)"
)


def _change(new: float, old: float) -> str:
    return f"{100 * (new / old - 1):+.1f}%"


def decoder_qat_table(summary: dict) -> str:
    """Perplexity of the int8 decoder after PTQ and after QAT, and of the float model (decoder page)."""
    steps, lr = summary["setting"]["qat_steps"], summary["setting"]["lr"]
    out = [f"| int8 model | PTQ | after QAT ({steps} steps, lr {lr}) | float |", "|---|---:|---:|---:|"]
    for r in summary["rows"]:
        qat = f"{r['qat']:.2f}" + (f" ({_change(r['qat'], r['ptq'])})" if r["float"] is None else "")
        float_ = "" if r["float"] is None else f"{r['float']:.2f}"
        out.append(f"| {r['model']} | {r['ptq']:.2f} | {qat} | {float_} |")
    return "\n".join(out)


def _share(params: int, table: int) -> str:
    return f"{params:,} ({params / table:.0%})"


def decoder_search_table(summary: dict) -> str:
    """Searched against adaptive word tables at the same budget: perplexities and Flash (decoder page)."""
    table = summary["setting"]["table_params"]
    out = [
        "| table | budget | clusters (ids) / ranks | dev ppl, fine-tuned | test ppl, float | test ppl, int8 as "
        "exported | Flash (model + tokenizer) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in summary["rows"]:
        budget = _share(r["budget"], table) + ("" if r["used"] == r["budget"] else f": used {_share(r['used'], table)}")
        shape = "/".join(f"{c:,}" for c in r["clusters"]) + ", " + "/".join(str(k) for k in r["ranks"])
        out.append(
            f"| {r['table']} | {budget} | {shape} | {r['dev_finetuned']:.2f} | {r['test_float']:.2f} | "
            f"{r['test_int8']:.2f} | {r['flash_bytes']:,} B |"
        )
    return "\n".join(out)


def _mean_sd(values) -> str:
    values = np.asarray(values, np.float64)
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"


def decoder_seeds_table(summary: dict) -> str:
    """The search's smaller budget over several seeds: each seed's perplexities and parameters (decoder page)."""
    seeds = summary["seeds"]
    share = seeds["budget"] / summary["setting"]["table_params"]
    head = f"| {share:.0%} of the table, seeds {seeds['seeds'][0]}-{seeds['seeds'][-1]} |"
    out = [head + " int8 test ppl as exported | dev ppl, fine-tuned | parameters used |", "|---|---:|---:|---:|"]
    for m in seeds["methods"]:
        test = " / ".join(f"{v:.2f}" for v in m["test_int8"]) + f" ({_mean_sd(m['test_int8'])})"
        dev = " / ".join(f"{v:.2f}" for v in m["dev_finetuned"])
        used = " / ".join(f"{v:,}" for v in dict.fromkeys(m["used"]))
        out.append(f"| {m['table']} | {test} | {dev} | {used} |")
    return "\n".join(out)


def decoder_seeds_difference(summary: dict) -> str:
    """The seeds table's first method less its second, seed by seed, on int8 test perplexity: the mean
    difference, the mean ± sd of the relative one and the paired t over the seeds (decoder page)."""
    a, b = (np.asarray(m["test_int8"], np.float64) for m in summary["seeds"]["methods"][:2])
    t, p = paired_t(a, b)
    relative = 100 * (a / b - 1)
    return (
        f"{(a - b).mean():+.1f} int8 test perplexity ({relative.mean():+.1f}% ± {relative.std(ddof=1):.1f}%); "
        f"paired t = {t:.1f} ({a.size - 1} degrees of freedom, p = {p:.2g})"
    )


def decoder_seeds_fewer_params(summary: dict) -> str:
    """How many fewer parameters the seeds table's first method used than its second, as a span of percents."""
    a, b = (np.asarray(m["used"], np.float64) for m in summary["seeds"]["methods"][:2])
    fewer = 100 * (1 - a / b)
    low, high = f"{fewer.min():.0f}", f"{fewer.max():.0f}"
    return f"{low}%" if low == high else f"{low}-{high}%"


def vocab_pruning_table(summary: dict) -> str:
    """Test accuracy with the full and the pruned vocabulary, same models (tokenizer page)."""
    full, pruned = summary["accuracy"]["full"], summary["accuracy"]["pruned"]
    differences = summary["difference_points"]
    out = [
        "| seeds | full vocabulary | pruned vocabulary | pruned − full, per seed (mean ± sd) | "
        "exact McNemar p, per seed |",
        "|---|---:|---:|---|---|",
        f"| {len(summary['seeds'])} | {full['mean']:.2f} ± {full['sd']:.2f}% | "
        f"{pruned['mean']:.2f} ± {pruned['sd']:.2f}% | "
        + " / ".join(f"{d:+.2f}" for d in differences)
        + f" ({_mean_sd(differences)}) | "
        + " / ".join(f"{p:g}" for p in summary["mcnemar_exact_p"])
        + " |",
    ]
    return "\n".join(out)

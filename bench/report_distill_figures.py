"""The distillation and teacher-recipe pages' inline figures (docs/benchmarks/distillation.md,
docs/compression.md), each from its committed summary: NAME -> the figure as the sentence reads it. Read by
bench/report.py beside report_figures.py; not a script."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import distill_augment  # noqa: E402
import teacher_recipe  # noqa: E402
from report_figures import summary  # noqa: E402

# ---- docs/benchmarks/distillation.md and docs/compression.md: the recipes (distill_augment.json) ----


def _distill_arm(arm: str) -> dict:
    return summary("distill_augment")["statistics"]["arms"][arm]


def _distill_test(arm: str, path: str) -> str:
    """Mean ± sd over the seeds of `arm`'s test accuracy (path "student" or "board:integer")."""
    test = _distill_arm(arm)[path]["test"]
    return f"{test['mean']:.2f} ± {test['sd']:.2f}"


def _distill_gain(arm: str, path: str) -> str:
    """`arm`'s paired test gain on the first arm: "+3.10 points (paired t p = 0.0004, 6 seeds)"."""
    entry = summary("distill_augment")["statistics"]["differences"][arm][path]
    test = entry["test"]
    return f"{test['points']:+.2f} points (paired t p = {test['paired_t_p']:.2g}, {len(entry['seeds'])} seeds)"


def _distill_minutes(arm: str) -> str:
    return f"{_distill_arm(arm)['student_minutes']['mean']:.0f}"


def _gap_closed() -> str:
    """How much of the teacher's lead on the logits-only integer model (its mean) the layers recipe's
    paired gain closes."""
    gap = distill_augment.teacher_gap(summary("distill_augment")["runs"], "ikd")
    return f"{gap['gain']['points']:.2f} of its {gap['lead']:.2f} points ({100 * gap['closed']:.0f}%)"


def _recipes_versus(name: str, arm: str, path: str, against: str | None = None) -> str:
    """`arm` against `against` (default: the first arm) of distill_recipes_<name>.json, recomputed from the
    bits: "+2.31 dev / -2.53 test points (paired t p = 0.005 / 0.045; test's paired bootstrap p = 0.28; 10
    seeds)"."""
    stats = distill_augment.summarize(summary(f"distill_recipes_{name}")["runs"])
    if against is None or against == stats["against"]:
        entry = stats["differences"][arm][path]
    else:
        pair = next(p for p in stats["pairs"] if (p["arm"], p["against"]) == (arm, against))
        entry = pair["versus"][path]
    dev, test = entry["validation"], entry["test"]
    return (
        f"{dev['points']:+.2f} dev / {test['points']:+.2f} test points (paired t p = {dev['paired_t_p']:.2g} / "
        f"{test['paired_t_p']:.2g}; test's paired bootstrap p = {test['paired_bootstrap_p']:.2g}; "
        f"{len(entry['seeds'])} seeds)"
    )


# Besides rotten tomatoes' BERT-tiny: bench/results/distill_recipes_<name>.json, each with its task, student
# and board path, and the arm that is `distill`'s default recipe at that board's weight width.
DISTILL_RECIPES = {
    "party_speeches": ("party_speeches", "BERT-tiny, F746ZG int8", "layers-q8"),
    "debate_speakers": ("debate_speakers", "BERT-tiny, F746ZG int8", "layers-q8"),
    "debate_speakers_bert-mini": ("debate_speakers", "BERT-mini, F767ZI int4", "layers-q4"),
}


def _recipes_test(name: str, arm: str, path: str) -> str:
    """Mean ± sd over the seeds of `arm`'s test accuracy in distill_recipes_<name>.json, from the bits."""
    test = distill_augment.summarize(summary(f"distill_recipes_{name}")["runs"])["arms"][arm][path]["test"]
    return f"{test['mean']:.2f} ± {test['sd']:.2f}"


DISTILL: dict[str, Callable[[], str]] = {
    **{
        f"distill_recipes_{stem}.{name}": (lambda s=stem, a=arm, p=path: _recipes_versus(s, a, p))
        for stem, (_, _, arm) in DISTILL_RECIPES.items()
        for name, path in (("board_versus", "board:integer"), ("student_versus", "student"))
    },
    # more copies of each sentence for the layers recipe, on the task with the fewest sentences
    "distill_recipes_debate_speakers.aug4_board_versus": (
        lambda: _recipes_versus("debate_speakers", "layers-q8-aug4", "board:integer", against="layers-q8")
    ),
    **{
        f"distill_recipes_{stem}.{arm}_{name}_test": (lambda s=stem, a=arm, p=path: _recipes_test(s, a, p))
        for stem in ("debate_speakers", "debate_speakers_bert-mini")
        for arm in ("base",)
        for name, path in (("board", "board:integer"), ("student", "student"))
    },
    "distill_recipes_debate_speakers_bert-mini.teacher_test": lambda: (
        f"{distill_augment.teacher_accuracy(summary('distill_recipes_debate_speakers_bert-mini')['runs'])['test']:.2f}"
    ),
    "distill_recipes_debate_speakers.aug4_board_versus_base": (
        lambda: _recipes_versus("debate_speakers", "layers-q8-aug4", "board:integer")
    ),
    "distill_augment.teacher_test": lambda: (
        f"{distill_augment.teacher_accuracy(summary('distill_augment')['runs'])['test']:.2f}"
    ),
    "distill_augment.gap_closed": _gap_closed,
    **{
        f"distill_augment.{arm}_board_test": (lambda a=arm: _distill_test(a, "board:integer"))
        for arm in ("base", "ikd")
    },
    "distill_augment.ikd_student_test": lambda: _distill_test("ikd", "student"),
    "distill_augment.ikd_board_gain": lambda: _distill_gain("ikd", "board:integer"),
    "distill_augment.ikd_student_gain": lambda: _distill_gain("ikd", "student"),
    **{f"distill_augment.{arm}_minutes": (lambda a=arm: _distill_minutes(a)) for arm in ("base", "ikd")},
}

# ---- docs/benchmarks/distillation.md and docs/compression.md: the teacher's recipe (teacher_recipe_*.json) ----


def _teacher_recipe(task: str) -> dict:
    """The summary's statistics recomputed from its runs' bits (teacher_recipe.summarize)."""
    return teacher_recipe.summarize(summary(f"teacher_recipe_{task}")["runs"])


def _teacher_chosen_gain(task: str) -> str:
    """The arm chosen on dev against the first on test: "+3.70 points (paired t p = 0.0085, paired bootstrap
    p = 0.11, 5 seeds)"."""
    stats = _teacher_recipe(task)
    entry = stats["differences"][stats["selected_on_dev"]]
    test = entry["test"]
    return (
        f"{test['points']:+.2f} points (paired t p = {test['paired_t_p']:.2g}, paired bootstrap p = "
        f"{test['paired_bootstrap_p']:.2g}, {len(entry['seeds'])} seeds)"
    )


def _teacher_arm_test(task: str, which: str) -> str:
    """Test mean ± sd of the arm chosen on dev (`which` "chosen") or the first arm ("first")."""
    stats = _teacher_recipe(task)
    arm = stats["selected_on_dev"] if which == "chosen" else stats["against"]
    test = stats["arms"][arm]["test"]
    return f"{test['mean']:.2f} ± {test['sd']:.2f}"


def _teacher_figures(task: str) -> dict[str, Callable[[], str]]:
    return {
        f"teacher_recipe_{task}.chosen": lambda: teacher_recipe.arm_label(_teacher_recipe(task)["selected_on_dev"]),
        f"teacher_recipe_{task}.chosen_gain": lambda: _teacher_chosen_gain(task),
        f"teacher_recipe_{task}.chosen_test": lambda: _teacher_arm_test(task, "chosen"),
        f"teacher_recipe_{task}.first_test": lambda: _teacher_arm_test(task, "first"),
    }


TEACHER_TASKS = ("debate_speakers", "rotten_tomatoes")
TEACHER: dict[str, Callable[[], str]] = {k: v for task in TEACHER_TASKS for k, v in _teacher_figures(task).items()}

FIGURES: dict[str, Callable[[], str]] = {**DISTILL, **TEACHER}

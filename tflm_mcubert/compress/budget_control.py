"""How a budgeted exact search holds its budget (`search --budget-control`).

- `multiplicative` (the default): the size penalty λ·soft_size/(v·d) on the architecture loss, λ multiplied
  by exp(0.05·clip(log(hard_size/target), −1, 1)) after every step (`nas.SizePenalty`). Under Adam the update
  of α/β does not depend on λ's size, only on the sign of the gradient: at a small arch-lr nothing moves, at
  a large one everything moves to cheaper clusters once the penalty dominates and the search undershoots.
- `projected`: the constraint is taken out of the gradient. α learns from the task loss alone (λ = 0), β
  against a fixed price per parameter (λ = 1, not steered), and every step's hard choice is the best one
  WITHIN the budget. Stage 1: each token's argmax α, then,
  while over budget, the demotion losing the least α-preference per parameter saved (the Lagrangian
  relaxation of this knapsack with its multiplier solved each step, `budget.demote_to_budget`); Stage 2:
  the components of largest importance per parameter that fit (already `ExactRankSearch.choose`). So the
  hard size never exceeds the target at any step, and a token promoted to a dearer cluster is paid for by
  others demoted to cheaper ones: moves are trades the task loss asks for.

  With the budget held by the choice, α's start margin only sets how much task evidence a move needs; it is
  smaller here (PROJECTED_ALPHA_MARGIN) so that Adam at the default arch-lr can move tokens within half an
  epoch. Equal preferences (every token at its start) are broken by frequency: the rarest are demoted first,
  as adaptive embedding would.

  Use it with `--stage1-start budget`: from the paper's start (2-4x over a small budget) the first projection
  must demote thousands of tokens whose preferences are still equal, and per parameter saved a dense token's
  demotion is the cheapest, so the dense cluster empties (measured at 2%: 0 dense tokens).
"""

from __future__ import annotations

import numpy as np

from tflm_mcubert.compress import budget as budgets
from tflm_mcubert.compress import exact_space
from tflm_mcubert.compress.baselines import frequency_ranking
from tflm_mcubert.compress.choices import BUDGET_CONTROLS
from tflm_mcubert.errors import UserError

# Adam at arch-lr 1e-3 changes a logit gap by up to ~2e-3 a step: a token needs ~5 steps of consistent task
# gradient to cross, where the default margin (exact_space.ALPHA_MARGIN, 0.25) needs more than a half-epoch
# search stage has. Measured on the BERT-tiny student at 2% (seed 0, 160 steps): 2,261 tokens moved at 0.01,
# 102 at 0.05.
PROJECTED_ALPHA_MARGIN = 0.01
# Far below one Adam step: it only orders tokens whose preferences are otherwise equal.
FREQUENCY_TIE_BREAK = 1e-5
PROJECTED_MODES = ("two-stage", "clustering-only")


def check_options(opts, has_budget: bool) -> None:
    """Refuse the combinations `projected` cannot serve (it needs a budget and the exact search's choices)."""
    if opts.budget_control not in BUDGET_CONTROLS:
        raise UserError(f"unknown --budget-control {opts.budget_control!r} (choose from: {', '.join(BUDGET_CONTROLS)})")
    if opts.alpha_margin is not None and not opts.alpha_margin > 0:
        raise UserError(f"--alpha-margin must be positive, got {opts.alpha_margin}")
    if opts.budget_control != "projected":
        return
    if not has_budget:
        raise UserError("--budget-control projected needs --target-embedding-params/-bytes (the budget it holds)")
    if opts.mode not in PROJECTED_MODES or opts.relaxation != "exact":
        raise UserError(
            "--budget-control projected works on the exact search's hard choices: --relaxation exact with "
            f"--mode {' or '.join(PROJECTED_MODES)}"
        )
    if opts.lambda_ is not None:
        raise UserError("--budget-control projected sets its own size penalty: leave out --lambda")


def penalty_lambda(opts, default_lambda: float, stage: str) -> tuple[float, int | None]:
    """(λ's starting value, the target λ is steered toward, or None for a fixed λ) of `stage`'s size penalty."""
    if opts.budget_control == "projected":
        # Stage 1: the budget is held by the choice, α learns from the task loss alone. Stage 2: a fixed
        # price per parameter, against which each β's task gradient competes (under Adam only which of the two
        # wins matters): the β it leaves high rank the components the masks keep within the budget.
        return (0.0 if stage == "stage1-clustering" else default_lambda), None
    return (default_lambda if opts.lambda_ is None else opts.lambda_), opts.target_params


def alpha_margin(opts) -> float:
    """How far above the others each token's start-cluster logit starts (--alpha-margin, else the control's)."""
    if opts.alpha_margin is not None:
        return opts.alpha_margin
    return PROJECTED_ALPHA_MARGIN if opts.budget_control == "projected" else exact_space.ALPHA_MARGIN


def project_clustering(logits: np.ndarray, ranks, dim: int, budget: int) -> np.ndarray:
    """The best clustering within `budget`: argmax of `logits`, demoted while over (`demote_to_budget`)."""
    assignment = np.argmax(logits, axis=-1)
    if budgets.assignment_params(assignment, ranks, dim) <= budget:
        return assignment
    return budgets.demote_to_budget(assignment, logits, ranks, dim, budget)


def frequency_tie_break(frequency: np.ndarray, start: np.ndarray, num_clusters: int) -> np.ndarray:
    """A bonus on each token's start cluster, FREQUENCY_TIE_BREAK × its frequency quantile (1: the most
    frequent), so that among equal preferences the rarest tokens are demoted first."""
    vocab_size = len(frequency)
    quantile = np.empty(vocab_size, np.float64)
    quantile[frequency_ranking(frequency)] = np.linspace(1.0, 0.0, vocab_size)
    bonus = np.zeros((vocab_size, num_clusters), np.float64)
    bonus[np.arange(vocab_size), np.asarray(start)] = FREQUENCY_TIE_BREAK * quantile
    return bonus


class ProjectedClusteringSearch(exact_space.ExactClusteringSearch):
    """Stage 1 whose every hard clustering fits `budget` parameters (module docstring)."""

    budget: int | None = None
    tie_break: np.ndarray | None = None

    @classmethod
    def within_budget(cls, layer_args: dict, *, budget: int, frequency: np.ndarray, margin: float):
        """`ExactClusteringSearch.from_frequency(**layer_args)` at α margin `margin`, projected on `budget`."""
        layer = cls.from_frequency(**layer_args, margin=margin, frequency=frequency)
        layer.budget = int(budget)
        layer.tie_break = frequency_tie_break(frequency, layer_args["start"], layer_args["num_clusters"])
        layer.choose()
        return layer

    def choose(self) -> None:
        if self.budget is None:  # while being built: the plain argmax
            return super().choose()
        logits = np.asarray(self.effective_logits().numpy(), np.float64) + self.tie_break
        assignment = project_clustering(logits, self.ranks, self.dim, self.budget)
        self.assignment.assign(assignment.astype(np.int32))

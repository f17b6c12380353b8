"""The search's named choices, in a module that imports nothing: the command line offers them (and
answers --help) without loading TensorFlow, and the modules that implement them read them from here."""

# compress/nas.py: the paper's NAS variants and the baselines it compares with.
NAS_MODES = ("two-stage", "one-stage", "ratio-then-clustering", "clustering-only")
BASELINE_MODES = ("adaptive", "svd", "fwsvd")
MODES = NAS_MODES + BASELINE_MODES
# Where the exact Stage 1 starts with a budget: "paper", adaptive embedding's paper shape (d/4^i; over a
# smaller budget Stage 1 demotes tokens and Stage 2 cuts ranks to fit), or "budget", adaptive embedding
# scaled to the budget (`adaptive_for_budget`: the baseline itself). bench/nas_vs_adaptive.py compares them.
STAGE1_STARTS = ("paper", "budget")

# compress/budget_control.py: how the exact search holds its budget.
BUDGET_CONTROLS = ("multiplicative", "projected")

# compress/final_training.py: what is trained after the search, and among which architectures.
FINAL_TRAININGS = ("select", "retrain", "continue")
CANDIDATES = ("adaptive", "searched", "projected")  # also the preference among equal dev scores
# `projected` costs a second search (two more stages) and a third fine-tune, ~1.5x a select run's
# compute on top of searched + adaptive; ask for it with --candidates.
DEFAULT_CANDIDATES = ("searched", "adaptive")

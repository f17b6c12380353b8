"""bench/board_accuracy.py's board paths: each configuration's student, board, weight and table widths and
vocabulary (`search` arguments), the points that compare them, and the names of the variants measured.
Kept apart from the runner so the benchmarks that reuse a board path (bench/distill_augment.py) read one
definition."""

from __future__ import annotations

import dataclasses

F767, F746 = "nucleo-f767zi", "nucleo-f746zg"


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # "tiny" or "mini": which student
    board: str
    weight_bits: int  # the encoder's width the budget is split for (search --weight-bits)
    embedding_bits: int | None  # search --embedding-bits (None: float-trained tables, exported int8)
    prune: bool  # search --prune-vocab TASK
    evaluate_bits: tuple[int, ...]  # evaluate --weight-bits; the first is the configuration's own
    prune_top_n: int | None = None  # search --prune-top-n: only the task's N most frequent pieces (and characters)
    qat_weight_bits: int | None = None  # search --qat-weight-bits: the final fine-tune's weights fake-quantized

    def search_args(self, task: str) -> list[str]:
        args = ["--mode", "adaptive", "--board", self.board, "--weight-bits", str(self.weight_bits)]
        if self.embedding_bits is not None:
            args += ["--embedding-bits", str(self.embedding_bits)]
        args += ["--prune-vocab", task] if self.prune else []
        args += ["--prune-top-n", str(self.prune_top_n)] if self.prune_top_n else []
        return args + (["--qat-weight-bits", str(self.qat_weight_bits)] if self.qat_weight_bits else [])

    def describe(self) -> str:
        tables = "float→int8" if self.embedding_bits is None else f"int{self.embedding_bits}"
        vocab = "full" if not self.prune else f"pruned to {self.prune_top_n:,} pieces" if self.prune_top_n else "pruned"
        qat = f", fine-tuned with int{self.qat_weight_bits} weights (QAT)" if self.qat_weight_bits else ""
        return (
            f"BERT-{self.model}, {self.board}, int{self.weight_bits} weights, {tables} tables, {vocab} vocabulary{qat}"
        )


CONFIGS = {
    "tiny-f767-w8e8p": Config("tiny", F767, 8, 8, True, (8,)),
    "mini-f767-w4e4p": Config("mini", F767, 4, 4, True, (4,)),
    "tiny-f746-default": Config("tiny", F746, 8, None, False, (8,)),
    "tiny-f746-w4e4p": Config("tiny", F746, 4, 4, True, (4,)),
    "tiny-f767-w8e8": Config("tiny", F767, 8, 8, False, (8,)),
    "tiny-f746-w8e8p": Config("tiny", F746, 8, 8, True, (8,)),
    "mini-f767-w4e4p-top4k": Config("mini", F767, 4, 4, True, (4,), prune_top_n=4000),
    "mini-f767-w4e4p-qat": Config("mini", F767, 4, 4, True, (4,), qat_weight_bits=4),
    # quantization-aware board paths at the F746ZG: the layers recipe's own (bench/board_shape_latency.py's
    # BERT-tiny) and two that spend the Flash on more word-table numbers
    "tiny-f746-default-q8": Config("tiny", F746, 8, None, False, (8,), qat_weight_bits=8),
    "tiny-f746-w4e4p-q4": Config("tiny", F746, 4, 4, True, (4,), qat_weight_bits=4),
    "tiny-f746-w8e4p-q8": Config("tiny", F746, 8, 4, True, (8,), qat_weight_bits=8),
}
QAT_OF = {"mini-f767-w4e4p-qat": "mini-f767-w4e4p"}  # a search-QAT configuration: its PTQ twin (point Q-search)
DEFAULT_CONFIGS = ("tiny-f767-w8e8p", "mini-f767-w4e4p", "tiny-f746-default", "tiny-f746-w4e4p")
# Point: (label, side a's candidates, side b's candidates, target difference on test, needs p < 0.05)
POINTS = {
    "A": (
        "F767ZI Flash: best BERT-mini − best BERT-tiny",
        ["mini-f767-w4e4p", "mini-f767-w4e4p-top4k", "mini-f767-w4e4p-qat"],
        ["tiny-f767-w8e8p", "tiny-f767-w8e8"],
        2.0,
        True,
    ),
    "C": (
        "F746ZG Flash: best found − today's default (BERT-tiny, int8 weights)",
        ["tiny-f746-default", "tiny-f746-w4e4p", "tiny-f746-w8e8p"],
        ["tiny-f746-default"],
        1.0,
        False,
    ),
    "D": (
        "F746ZG Flash, quantization-aware: best found − int8 weights and tables",
        ["tiny-f746-w4e4p-q4", "tiny-f746-w8e4p-q8"],
        ["tiny-f746-default-q8"],
        0.0,
        True,
    ),
}
B_TARGET = -0.7  # BERT-mini int4 weights − float, on test
REFERENCES = {  # the float models each run is also measured as
    "trained": "the model as trained (float encoder weights and activations, word tables as stored)",
    "float": "evaluate's float model (float everything, word tables included)",
}
SETTINGS = ("task", "tiny_student", "mini_student", "epochs", "finetune_epochs", "max_seq_len", "export_seq_len")
QAT = "+qat"  # the suffix of a variant measured after evaluate --qat-steps


def variant(config: str, bits: int) -> str:
    """A configuration measured at one weight width: `mini-f767-w4e4p@w4`."""
    return f"{config}@w{bits}"


def quantized_name(config: Config, bits: int) -> str:
    """evaluate's name for the integer model (word tables at the trained width, int8 by default)."""
    return ("int4" if config.embedding_bits == 4 else "int8") + ("+w4" if bits == 4 else "")

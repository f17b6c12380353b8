"""`distill`'s intermediate-layer options (train/intermediate.py does the work): a light module, so the
command line can check them before TensorFlow loads."""

from __future__ import annotations

import dataclasses
import math

from tflm_mcubert.errors import UserError
from tflm_mcubert.model.config import BertConfig

INITS = ("random", "projected")

# `distill --recipe`: the values each recipe gives --augment, --init, --intermediate-kd and
# --intermediate-epochs when they are not given. "layers": TinyBERT's two phases (the teacher's layers
# first, then its logits) over a student started from the teacher's projected layers, with one
# teacher-labelled copy of each sentence, the default (about 3 BERT-tiny test points over "logits" on the
# board, for about 3x the wall time); "logits": logits-only KD from fresh layers
# (docs/benchmarks/distillation.md measures both).
RECIPES = {
    "layers": {"augment": 1, "init": "projected", "intermediate_kd": 1.0, "intermediate_epochs": 2.0},
    "logits": {"augment": 0, "init": "random", "intermediate_kd": 0.0, "intermediate_epochs": 0.0},
}
DEFAULT_RECIPE = "layers"


@dataclasses.dataclass
class LayerKD:
    """`distill`'s intermediate-layer options (--intermediate-kd, --intermediate-epochs, --relation-heads,
    --init). `epochs` > 0: a first stage of that many epochs trains on the intermediate terms alone, then
    the usual logits stage runs (TinyBERT's two phases); 0: the terms are added to every logits step."""

    weight: float = 0.0
    epochs: float = 0.0
    relation_heads: int = 8
    init: str = "random"

    def validate(self) -> "LayerKD":
        if not (math.isfinite(self.weight) and self.weight >= 0):
            raise UserError(f"--intermediate-kd must be a non-negative number, got {self.weight}")
        if not (math.isfinite(self.epochs) and self.epochs >= 0):
            raise UserError(f"--intermediate-epochs must be a non-negative number, got {self.epochs}")
        if self.epochs > 0 and self.weight == 0:
            raise UserError("--intermediate-epochs needs --intermediate-kd WEIGHT > 0 (the stage's only loss)")
        if self.relation_heads < 1:
            raise UserError(f"--relation-heads must be positive, got {self.relation_heads}")
        if self.init not in INITS:
            raise UserError(f"--init must be one of {', '.join(INITS)}, got {self.init!r}")
        return self

    @property
    def active(self) -> bool:
        return self.weight > 0

    def settings(self) -> dict:
        """What a resumed run must share; empty at the defaults, so runs from before these options resume."""
        out = {} if self.init == "random" else {"init": self.init}
        if self.active:
            out["intermediate_kd"] = {
                "weight": self.weight,
                "epochs": self.epochs,
                "relation_heads": self.relation_heads,
            }
        return out


def projection_misfit(teacher: BertConfig, student: BertConfig) -> str | None:
    """Why --init projected cannot cut `student` from `teacher`'s layers (a student head is whole teacher
    heads side by side, its FFN a subset of the teacher's units, its width at most the teacher's), or None."""
    merge = student.head_size // teacher.head_size
    if (
        student.hidden_size > teacher.hidden_size
        or student.head_size % teacher.head_size
        or student.num_attention_heads * merge > teacher.num_attention_heads
        or student.intermediate_size > teacher.intermediate_size
    ):
        return (
            f"--init projected: a student of {student.num_attention_heads} heads of {student.head_size} and "
            f"{student.intermediate_size} FFN units cannot be cut from a teacher of {teacher.num_attention_heads} "
            f"heads of {teacher.head_size} and {teacher.intermediate_size} units (a student head must be whole "
            "teacher heads; use --init random)"
        )
    return None


def relation_misfit(teacher_width: int, student_width: int, relation_heads: int) -> str | None:
    """Why Q/K/V of these widths cannot be split into `relation_heads` relation heads, or None."""
    for name, width in (("student", student_width), ("teacher", teacher_width)):
        if width % relation_heads:
            return f"--relation-heads {relation_heads} must divide both widths; the {name} is {width} wide"
    return None

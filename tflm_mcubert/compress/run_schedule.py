"""The weights' learning rate over a search run (`search --lr-schedule`), and the baselines' equal steps.

A NAS run trains its weights in every search stage and then fine-tunes them; a baseline only fine-tunes,
for as many steps as the two-stage search's stages and fine-tune together (`equal_steps`). Schedules:

  warmup-linear  (default) search stages at the constant peak rate, then the fine-tune's own 6% warm-up and
                 linear decay
  constant       the constant peak rate everywhere (the paper's)
  whole-run      one 6% warm-up and linear decay over every weight update of the run, search stages
                 included: the searched model's weights follow the curve a baseline's fine-tune follows, so
                 equal steps also means the same learning rates (for a baseline it is `warmup-linear`)
"""

from __future__ import annotations

import math

from tflm_mcubert.train.batches import steps_per_epoch
from tflm_mcubert.train.trainer import WarmupLinearDecay

LR_SCHEDULES = ("warmup-linear", "constant", "whole-run")
EQUAL_STEPS_STAGES = 2  # the two-stage search's stages, whose steps the baselines' fine-tune gets
SEARCH_STAGE_COUNT = {"two-stage": 2, "ratio-then-clustering": 2, "one-stage": 1, "clustering-only": 1}


class RunSchedule:
    """Steps and learning rates of one search run's stages, in the order they run."""

    def __init__(self, opts, train_size: int, batch_size: int):
        self.opts = opts
        self.per_epoch = steps_per_epoch(train_size, batch_size)
        self.stage_steps = max(1, math.ceil(opts.epochs * self.per_epoch))  # a search stage's (Trainer.total_steps)
        baseline = opts.mode not in SEARCH_STAGE_COUNT
        finetune = max(1, math.ceil(opts.finetune_epochs * self.per_epoch))
        if baseline and opts.equal_steps:  # the search's steps, spent on fine-tuning
            finetune += EQUAL_STEPS_STAGES * self.stage_steps
        self.finetune_steps = finetune
        self.total = SEARCH_STAGE_COUNT.get(opts.mode, 0) * self.stage_steps + finetune
        self.done = 0  # steps of the stages already scheduled

    def finetune_epochs(self) -> float:
        """Epochs for which the trainer's ceil(epochs · steps per epoch) is exactly `finetune_steps`."""
        if self.finetune_steps == max(1, math.ceil(self.opts.finetune_epochs * self.per_epoch)):
            return self.opts.finetune_epochs
        return (self.finetune_steps - 0.5) / self.per_epoch

    def search_stage_lr(self):
        return self._next(self.stage_steps, fine_tune=False)

    def finetune_lr(self):
        return self._next(self.finetune_steps, fine_tune=True)

    def _next(self, steps: int, fine_tune: bool):
        offset, self.done = self.done, self.done + steps
        peak, schedule = self.opts.lr, self.opts.lr_schedule
        if schedule == "whole-run":
            return WarmupLinearDecay(peak, self.total, offset=offset)
        if schedule == "warmup-linear" and fine_tune:
            return WarmupLinearDecay(peak, steps)
        return peak

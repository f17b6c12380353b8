"""The student shapes a board can hold, priced before any training: Flash, arena and latency per candidate.

A candidate is an encoder shape (layers, hidden width, heads, FFN size) at one weight width. For each, at a
board and a sequence length:

    flash      the whole-model budget (export/flash_budget.py): encoder, head, the embedding op's fixed
               tables, the .tflite's structure and the tokenizer blob, from the ops' contracts
               (`estimate_shape`); what is left is the word tables' budget, which must buy at least the
               smallest embedding of the vocabulary
    arena      the planner's plan at the sequence plus TFLM's bookkeeping, as `export` computes it
    latency    the kernels' fitted cycle model with the board's Flash stalls (schedule/latency.py), encoder
               layers only: an estimate, not a measurement

`price` is milliseconds per candidate (after a one-off fit of a few seconds, see `estimate_shape`), so
`shape_space` can prune hundreds of shapes to what fits before one is trained.
"""

from __future__ import annotations

import dataclasses
import itertools

from tflm_mcubert.boards import BOARDS, Board
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.flash_budget import FlashTarget, WholeModelBudget, estimate_shape
from tflm_mcubert.export.mcubert_export import choose_plan
from tflm_mcubert.model.config import BertConfig, shape_name
from tflm_mcubert.schedule.latency import FITTED_CORE, predict_latency
from tflm_mcubert.schedule.memory import Dims

LAYERS = (1, 2, 3, 4, 5, 6)
HIDDEN = (96, 128, 160, 192, 256, 320)  # multiples of 32: the kernels' tiles and int4 pairs divide them
HEAD_SIZES = (32, 64)
FFN_RATIOS = (2, 4)
WEIGHT_BITS = (8, 4)


@dataclasses.dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    ffn: int
    weight_bits: int

    @property
    def preset(self) -> str:
        """The shape as `distill --preset` and `export --preset` read it."""
        return shape_name(self.config(0, 0))

    @property
    def name(self) -> str:
        """The preset, then its weight width."""
        return f"{self.preset}-w{self.weight_bits}"

    def config(self, vocab_size: int, labels: int) -> BertConfig:
        return BertConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            intermediate_size=self.ffn,
            num_labels=labels,
        )


@dataclasses.dataclass(frozen=True)
class Priced:
    shape: Shape
    flash_bytes: int  # everything but the word tables
    embedding_bytes: int  # what the board's Flash leaves the word tables (negative: over budget)
    embedding_params: int | None  # the parameters those bytes buy; None: not the smallest embedding
    arena_bytes: int
    arena_fits: bool
    latency_ms: float  # estimate: fitted kernel cycles plus Flash stalls over the board's clock

    @property
    def fits(self) -> bool:
        return self.arena_fits and self.embedding_params is not None

    def to_json(self) -> dict:
        return {"shape": self.shape.name, **dataclasses.asdict(self.shape), "fits": self.fits} | {
            k: v for k, v in dataclasses.asdict(self).items() if k != "shape"
        }


def candidates(
    layers=LAYERS, hidden=HIDDEN, head_sizes=HEAD_SIZES, ffn_ratios=FFN_RATIOS, weight_bits=WEIGHT_BITS
) -> list[Shape]:
    """Every combination, heads = hidden / head size where it divides."""
    return [
        Shape(n, d, d // size, d * ratio, bits)
        for n, d, size, ratio, bits in itertools.product(layers, hidden, head_sizes, ffn_ratios, weight_bits)
        if d % size == 0
    ]


def price(shape: Shape, board: Board, seq_len: int, *, vocab_size: int, labels: int, vocab_bytes: int) -> Priced:
    """The costs of `shape` on `board` at `seq_len` tokens with a vocabulary of `vocab_size` ids whose
    tokenizer blob takes `vocab_bytes`, classifying into `labels`."""
    config = shape.config(vocab_size, labels)
    model_shape = estimate_shape(config, widths=(shape.weight_bits,))
    op_bits = dict.fromkeys(model_shape.encoder_ops, shape.weight_bits)
    budget = WholeModelBudget(FlashTarget.of_board(board), model_shape, seq_len, op_bits, 8, vocab_bytes)
    try:
        params = budget.embedding_params()
    except UserError:
        params = None
    choice = choose_plan(config, seq_len, board.arena_budget(), labels)
    dims = dataclasses.replace(Dims.of(config), weight_bits=shape.weight_bits)
    latency = predict_latency(dims, seq_len, board, tiles=choice.plan.tiles)
    stalls = latency.encoder_flash_stall_cycles if latency.flash_timing else 0.0
    return Priced(
        shape,
        sum(budget.items.values()),
        budget.embedding_bytes,
        params,
        choice.plan.planned_bytes + choice.overhead,
        choice.fits,
        (latency.encoder_cycles + stalls) * 1e3 / board.clock_hz,
    )


def shape_space(
    board: Board,
    seq_len: int,
    *,
    vocab_size: int,
    labels: int,
    vocab_bytes: int,
    max_latency_ms: float | None = None,
    shapes: list[Shape] | None = None,
) -> list[Priced]:
    """Every candidate priced, those that fit (and meet `max_latency_ms`) first, each group by latency."""
    if board.core != FITTED_CORE:  # a latency estimated on another core's pipeline would mislead the choice
        fitted = ", ".join(b.name for b in BOARDS.values() if b.core == FITTED_CORE)
        raise UserError(
            f"{board.name} ({board.core}): the latency model is fitted on Cortex-M7 cycles only, so student shapes "
            f"are priced for Cortex-M7 boards ({fitted}); pick a shape by hand (`distill --preset`, `export --board`)"
        )
    priced = [
        price(s, board, seq_len, vocab_size=vocab_size, labels=labels, vocab_bytes=vocab_bytes)
        for s in (shapes if shapes is not None else candidates())
    ]

    def admitted(p: Priced) -> bool:
        return p.fits and (max_latency_ms is None or p.latency_ms <= max_latency_ms)

    return sorted(priced, key=lambda p: (not admitted(p), p.latency_ms))

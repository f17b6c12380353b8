"""One Flash budget for the whole model (issues #25 and #27): what an MCUBERT export keeps in Flash besides
the word embedding's tables, and the bytes (and parameters) that leaves for them.

    flash_bytes = word tables (clustered_embedding.stored_embedding_bytes, at their storage width)
                + the rest of the embedding op (position and token-type tables, their requantization, LayerNorm)
                + each attention and MLP op's constants, at its weight width
                + the classifier head
                + the .tflite's own structure (tensors, options, offline plan, integrity record, alignment)
                + the tokenizer blob (model_vocab.cc), when there is one

`measure_shape` writes a random-weight twin of the model (same configuration but a small dense vocabulary,
seq FLASH_PROBE_SEQ) at each weight width asked for and reads every item off the .tflite, so the accounting
is the writer's own rather than a second formula of it (the twins of the standard configurations ship with
the package, export/flash_probes.py, so pricing them exports nothing); only the position table grows with
the sequence (one int8 row of `hidden` bytes per position). `whole_model_budget` is the one place that splits
a Flash budget: `search --board`, export's sizing of its default embedding and `--weight-bits auto`, and
`boards` call it, and export's report.json sets the same items next to what it measured.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from tflm_mcubert.boards import DEFAULT_FLASH_RESERVE, Board, human_bytes
from tflm_mcubert.data.calibration import Calibration
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.flash_probes import shipped_twin
from tflm_mcubert.export.id_order import blob_order
from tflm_mcubert.export.mcubert_export import UNBOUNDED, export_mcubert
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.model.embedding_bytes import params_for_bytes, stored_embedding_bytes
from tflm_mcubert.ops.constant_sizes import constant_bytes, tensor_bytes
from tflm_mcubert.ops.linear import stored_size
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.tokenizer import reference, vocab_blob

FLASH_PROBE_SEQ = 8  # the twin's sequence: every item but the position table is independent of it
WIDTHS = (8, 4)
TWIN_VOCAB = 64
# What the twin's .tflite structure may differ from the real model's by: the alignment padding of the
# four word-table buffers (at most 15 B each, their sizes differ) and the flexbuffer width of option values
# that depend on the weights (multipliers, zero points). Measured differences are below 64 B.
CONTAINER_SLACK = 256
# The word tables' clusters when nobody says otherwise (the paper's c, `search --clusters`): each cluster's
# pieces are a list of their own in the tokenizer blob, so the blob, and what it leaves the tables, follows it.
DEFAULT_CLUSTERS = 4


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Flash items of one model configuration, measured from its twin's .tflite."""

    hidden: int
    vocab_size: int
    encoder_ops: tuple[str, ...]  # "layer0.attention", "layer0.mlp", ...
    op_bytes: dict  # {bits: {op name: constant bytes}} for the attention and MLP ops
    layer_savings: dict  # {op name: bytes each linear layer saves at int4, in its op's layer order}
    head_bytes: int
    embedding_fixed_bytes: int  # at FLASH_PROBE_SEQ: the embedding op's constants less its word tables
    container_bytes: int  # the .tflite less every op's constants (the larger of the two twins')

    def embedding_fixed_at(self, seq_len: int) -> int:
        return self.embedding_fixed_bytes + (seq_len - FLASH_PROBE_SEQ) * self.hidden

    def encoder_bytes(self, op_bits: dict) -> int:
        """The encoder ops' constants with each op at its width: one (an int) or one per layer (a tuple,
        SPEC 3.1.2: the int8 op less what each int4 layer saves)."""
        return sum(self.op_at(name, op_bits[name]) for name in self.encoder_ops)

    def op_at(self, name: str, bits) -> int:
        if isinstance(bits, int):
            return self.op_bytes[bits][name]
        return self.op_bytes[8][name] - sum(s for s, b in zip(self.layer_savings[name], bits) if b == 4)


def _shape_key(config) -> tuple:
    return (
        config.vocab_size,
        config.hidden_size,
        config.num_hidden_layers,
        config.num_attention_heads,
        config.intermediate_size,
        config.type_vocab_size,
        config.num_labels,
    )


def measure_shape(config, embedding_bits: int = 8, widths=WIDTHS) -> ModelShape:
    """The Flash items of `config`'s export with its encoder ops at each of `widths` (random-weight twins,
    one per width, cached per configuration)."""
    key = _shape_key(config)
    twins = {bits: _twin_items(key, embedding_bits, bits, config) for bits in widths}
    first = twins[widths[0]]
    return ModelShape(
        hidden=config.hidden_size,
        vocab_size=config.vocab_size,
        encoder_ops=first["encoder_ops"],
        op_bytes={bits: twin["op_bytes"] for bits, twin in twins.items()},
        layer_savings=first["layer_savings"],
        head_bytes=first["op_bytes"].get(ENCODER.last.kind, 0),
        embedding_fixed_bytes=first["embedding_fixed_bytes"],
        container_bytes=max(twin["container_bytes"] for twin in twins.values()),
    )


# The embedding op's inputs that `stored_embedding_bytes` counts as the word tables.
WORD_TABLE_INPUTS = ("clusters", "word_rows", "word_projections", "word_requant")
# (hidden, layers) of the small twins whose .tflite structure `estimate_shape` fits its container model to:
# the structure grows per op and per channel of each op's per-channel quantized output.
CONTAINER_PROBES = ((32, 1), (32, 2), (64, 1), (64, 2))


def estimate_shape(config, embedding_bits: int = 8, widths=WIDTHS) -> ModelShape:
    """`measure_shape`'s items without a twin of `config`: every op's constants from its contract's
    signatures (ops/constant_sizes.py, the writer's bytes exactly), the structure from a linear model in
    (layers, hidden, layers x hidden) fitted once to CONTAINER_PROBES' twins (within CONTAINER_SLACK).
    What a search over shapes prices candidates with, in well under a millisecond each."""
    d, layers = config.hidden_size, config.num_hidden_layers
    sizes = {"d": d, "ffn": config.intermediate_size, "s": FLASH_PROBE_SEQ, "c": 1}
    sizes |= {"T": config.type_vocab_size, "labels": config.num_labels or 0}
    steps = ENCODER.steps(layers)
    layer_ops = [(op, name) for op, name, _ in steps if op.per_layer]

    def at(op, bits):
        return {layer: bits for layer in op.linear_layers}

    def saving(op, layer):
        weights = f"{layer}_weights"
        return tensor_bytes(op, weights, sizes, {layer: 8}) - tensor_bytes(op, weights, sizes, {layer: 4})

    intercept, per_layer, per_channel, per_layer_channel = _container_model(
        config.type_vocab_size, config.num_labels or 0, embedding_bits
    )
    container = intercept + per_layer * layers + per_channel * d + per_layer_channel * layers * d
    return ModelShape(
        hidden=d,
        vocab_size=config.vocab_size,
        encoder_ops=tuple(name for _, name in layer_ops),
        op_bytes={bits: {name: constant_bytes(op, sizes, at(op, bits)) for op, name in layer_ops} for bits in widths},
        layer_savings={name: tuple(saving(op, layer) for layer in op.linear_layers) for op, name in layer_ops},
        head_bytes=constant_bytes(ENCODER.last, sizes) if config.num_labels else 0,
        embedding_fixed_bytes=constant_bytes(ENCODER.first, sizes, exclude=WORD_TABLE_INPUTS),
        container_bytes=round(container),
    )


@functools.lru_cache(maxsize=8)
def _container_model(type_vocab_size: int, labels: int, embedding_bits: int) -> tuple[float, ...]:
    """(intercept, per layer, per channel, per layer and channel) bytes of the .tflite's structure, solved
    from the twins of CONTAINER_PROBES."""
    rows, measured = [], []
    for hidden, layers in CONTAINER_PROBES:
        probe = container_probe(hidden, layers, type_vocab_size, labels)
        rows.append((1.0, layers, hidden, layers * hidden))
        measured.append(measure_shape(probe, embedding_bits, (8,)).container_bytes)
    return tuple(float(v) for v in np.linalg.solve(np.array(rows), np.array(measured, np.float64)))


def container_probe(hidden: int, layers: int, type_vocab_size: int, labels: int) -> BertConfig:
    """One of CONTAINER_PROBES' twins' configurations."""
    return BertConfig(
        vocab_size=TWIN_VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=1,
        intermediate_size=2 * hidden,
        type_vocab_size=type_vocab_size,
        num_labels=labels or None,
    )


@functools.lru_cache(maxsize=32)
def _twin_items(key: tuple, embedding_bits: int, weight_bits: int, config) -> dict:
    """What one twin's .tflite holds: each op's constants, the embedding op's besides its word tables,
    and the structure around them; the package's probe when it ships one (export/flash_probes.py), else
    measured."""
    return shipped_twin(key, embedding_bits, weight_bits) or measured_twin_items(config, embedding_bits, weight_bits)


def measured_twin_items(config, embedding_bits: int, weight_bits: int) -> dict:
    """`_twin_items` read off a freshly exported twin."""
    twin = _twin_export(config, embedding_bits, weight_bits)
    nodes = twin.quantized.nodes()
    op_bytes = {n.name: n.op.constant_bytes(n.params) for n in nodes}
    embedding = twin.quantized.embedding
    ends, ranks = (embedding.clusters[:, k].tolist() for k in (0, 1))
    sizes = [end - start for start, end in zip([0, *ends[:-1]], ends)]
    tables = stored_embedding_bytes(sizes, ranks[1:], embedding.hidden, embedding.word_bits)
    embedding_node = next(n.name for n in nodes if n.params is embedding)
    layers = {n.name: [getattr(n.params, layer) for layer in n.op.linear_layers] for n in nodes}
    return {
        "encoder_ops": tuple(n.name for n in nodes if n.op.per_layer),  # the ops each encoder layer repeats
        "layer_savings": {
            name: tuple(
                stored_size(lin.out_features, lin.in_features, 8) - stored_size(lin.out_features, lin.in_features, 4)
                for lin in linears
            )
            for name, linears in layers.items()
            if linears
        },
        "op_bytes": op_bytes,
        "embedding_fixed_bytes": op_bytes[embedding_node] - tables,
        "container_bytes": len(twin.tflite) - sum(op_bytes.values()),
    }


def _twin_export(config, embedding_bits: int, weight_bits: int):
    """The export of a random-weight model of `config` at FLASH_PROBE_SEQ tokens."""
    from tflm_mcubert.model.bert import build_model

    # A small dense vocabulary: the word tables are not part of what is measured, and compressing
    # 30,522 rows would cost most of the time.
    twin = dataclasses.replace(config, vocab_size=TWIN_VOCAB, pad_token_id=0)
    samples, _ = Calibration.load("random", tokenizer=None, vocab_size=TWIN_VOCAB, count=2).samples(FLASH_PROBE_SEQ)
    return export_mcubert(
        build_model(twin, seed=0),
        None,
        seq_len=FLASH_PROBE_SEQ,
        arena_budget=UNBOUNDED,
        samples=samples,
        sentences=None,
        embedding="dense",
        embedding_bits=embedding_bits,
        widths=Widths.uniform(weight_bits),
        quiet=True,
    )


@dataclasses.dataclass(frozen=True)
class FlashTarget:
    """The Flash a model may take: a board's less the code reserve, or a number of bytes."""

    budget_bytes: int
    source: str  # "nucleo-f767zi less 160.0 KB for code" or "--target-flash-bytes"

    @classmethod
    def of_board(cls, board: Board, flash_reserve: int | None = None) -> "FlashTarget":
        reserve = DEFAULT_FLASH_RESERVE if flash_reserve is None else flash_reserve
        return cls(board.flash_budget(reserve), f"{board.name}'s Flash less {human_bytes(reserve)} for code")


@dataclasses.dataclass(frozen=True)
class WholeModelBudget:
    """How a Flash budget splits: everything but the word tables, and what is left for them."""

    target: FlashTarget
    shape: ModelShape
    seq_len: int
    op_bits: dict  # encoder op name -> weight bits: one per op (int) or one per linear layer (tuple)
    embedding_bits: int
    vocab_bytes: int
    num_clusters: int = DEFAULT_CLUSTERS

    @property
    def items(self) -> dict[str, int]:
        return {
            "encoder_bytes": self.shape.encoder_bytes(self.op_bits),
            "head_bytes": self.shape.head_bytes,
            "embedding_fixed_bytes": self.shape.embedding_fixed_at(self.seq_len),
            "container_bytes": self.shape.container_bytes + CONTAINER_SLACK,
            "vocab_bytes": self.vocab_bytes,
        }

    @property
    def embedding_bytes(self) -> int:
        """Bytes left for the word tables (the unit of `stored_embedding_bytes`); negative: none left."""
        return self.target.budget_bytes - sum(self.items.values())

    def embedding_params(self) -> int:
        """The parameter budget those bytes buy at `embedding_bits` (`compress.budget.params_for_bytes`)."""
        return params_for_bytes(
            self.embedding_bytes, self.shape.vocab_size, self.shape.hidden, self.num_clusters, self.embedding_bits
        )

    def check(self) -> None:
        """Refuses (one line) a budget that leaves the word tables less than the smallest embedding."""
        try:
            params_for_bytes(
                self.embedding_bytes, self.shape.vocab_size, self.shape.hidden, self.num_clusters, self.embedding_bits
            )
        except UserError:
            levers = [
                *(["--weight-bits 4 halves the encoder"] if 8 in _all_widths(self.op_bits) else []),
                *(["--prune-vocab CORPUS shrinks the tokenizer blob and the table"] if self.vocab_bytes else []),
                *(["--embedding-bits 4 halves the word tables"] if self.embedding_bits == 8 else []),
            ]
            raise UserError(
                f"{self.target.source} ({human_bytes(self.target.budget_bytes)}) leaves "
                f"{max(self.embedding_bytes, 0):,} B for the word tables, less than the smallest embedding of "
                f"{self.shape.vocab_size:,} tokens: the rest of the model takes "
                f"{human_bytes(sum(self.items.values()))} ({self.describe_items()})"
                + (f"; {', '.join(levers)}" if levers else "")
            ) from None

    def describe_items(self) -> str:
        return ", ".join(f"{k.removesuffix('_bytes')} {v:,} B" for k, v in self.items.items())

    def to_json(self) -> dict:
        bits = sorted(_all_widths(self.op_bits))
        uniform = len(bits) == 1
        return {
            "budget_bytes": self.target.budget_bytes,
            "source": self.target.source,
            "seq_len": self.seq_len,
            "weight_bits": bits[0]
            if uniform
            else {k: v if isinstance(v, int) else list(v) for k, v in self.op_bits.items()},
            "embedding_bits": self.embedding_bits,
            **self.items,
            "embedding_bytes": self.embedding_bytes,
            "note": "embedding_bytes: what the budget leaves for the word tables (stored_embedding_bytes); "
            f"container_bytes includes {CONTAINER_SLACK} B for the .tflite structure's alignment and option "
            "widths, which vary with the weights",
        }


def whole_model_budget(
    config,
    target: FlashTarget,
    *,
    seq_len: int,
    widths: Widths = Widths(),
    embedding_bits: int = 8,
    vocab_bytes: int = 0,
    num_clusters: int = DEFAULT_CLUSTERS,
) -> WholeModelBudget:
    """The split of `target` for `config` exported at `seq_len` with the encoder's matrices at `widths`, word
    tables at `embedding_bits` and a tokenizer blob of `vocab_bytes`."""
    layer_ops = [(op, name) for op, name, _ in ENCODER.steps(config.num_hidden_layers) if op.per_layer]
    op_bits = {name: widths.of_op(name, op.linear_layers) for op, name in layer_ops}
    # an op of mixed widths is measured from the int8 twin less its int4 layers' savings
    measured = tuple(sorted({v if isinstance(v, int) else 8 for v in op_bits.values()}, reverse=True))
    shape = measure_shape(config, embedding_bits, measured)
    return WholeModelBudget(target, shape, seq_len, op_bits, embedding_bits, vocab_bytes, num_clusters)


def tokenizer_blob_bytes(tokenizer, num_clusters: int = 1) -> int:
    """An estimate, before the embedding is clustered, of `tokenizer`'s on-device blob as the export packs it:
    each cluster's pieces are lists of their own (export/id_order.py), so with clusters the lists follow an
    assignment not yet known; counted at adaptive embedding's cut-offs, the larger of the vocabulary's order
    and a seeded random order (front coding shares the fewest prefixes when the clusters mix the pieces).
    0 without a tokenizer or one the device cannot reproduce."""
    from tflm_mcubert.compress.baselines import adaptive_cutoffs  # loads Keras

    if tokenizer is None:
        return 0
    vocab_size = len(tokenizer.get_vocab())
    if num_clusters <= 1:
        return exported_blob_bytes(tokenizer, np.arange(vocab_size), [0, vocab_size])
    cutoffs = adaptive_cutoffs(vocab_size, num_clusters)
    boundaries = sorted({0, *(min(max(c, 0), vocab_size) for c in cutoffs), vocab_size})
    orders = (np.arange(vocab_size), np.random.default_rng(0).permutation(vocab_size))
    return max(exported_blob_bytes(tokenizer, order, boundaries) for order in orders)


def exported_blob_bytes(tokenizer, permutation, boundaries) -> int:
    """The blob the export writes for `tokenizer` when the embedding's clusters are `boundaries` in the
    permuted ids (`permutation`: tokenizer id -> model id): `id_order.reorder_for_blob`'s order, packed."""
    try:
        order = blob_order(reference.spec_from_hf(tokenizer, permutation), list(boundaries))
        return len(vocab_blob.pack(reference.spec_from_hf(tokenizer, order[np.asarray(permutation)])))
    except UserError:
        return 0


@dataclasses.dataclass(frozen=True)
class SearchFlashBudget:
    """`search --board` / `--target-flash-bytes`: the export to come (sequence, encoder width, blob or not);
    compress/search.py asks it for the word tables' share and, once the clusters are known, for the blob."""

    target: FlashTarget
    seq_len: int
    weight_bits: int = 8
    vocab: bool = True

    def split(self, config, tokenizer, storage_bits: int, num_clusters: int) -> WholeModelBudget:
        whole = whole_model_budget(
            config,
            self.target,
            seq_len=self.seq_len,
            widths=Widths.uniform(self.weight_bits),
            embedding_bits=storage_bits,
            vocab_bytes=tokenizer_blob_bytes(tokenizer, num_clusters) if self.vocab else 0,
            num_clusters=num_clusters,
        )
        whole.check()
        return whole

    def with_blob_of(self, whole: WholeModelBudget, tokenizer, embedding) -> WholeModelBudget:
        """`whole` with the blob the export will pack for the searched clusters instead of the estimate."""
        if not self.vocab or tokenizer is None:
            return whole
        permutation = embedding.permutation
        if permutation is None:
            permutation = np.arange(len(tokenizer.get_vocab()))
        return dataclasses.replace(whole, vocab_bytes=exported_blob_bytes(tokenizer, permutation, embedding.boundaries))


def _all_widths(op_bits: dict) -> set[int]:
    """Every width the encoder's linear layers use."""
    return {b for v in op_bits.values() for b in ((v,) if isinstance(v, int) else v)}

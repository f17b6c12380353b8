"""Fitting an MCUBERT export to its board's Flash before it is made (export/flash_budget.py's one budget):

- the default embedding compression (an uncompressed checkpoint or the random preset) keeps the paper's
  adaptive shape when it fits, and is scaled down to what the rest of the model leaves when it does not;
- `--weight-bits auto` makes the fewest linear layers (matrices: an attention op's Q, K, V, O, an MLP op's
  FC1, FC2) int4 that let the model fit, chosen by their measured sensitivity; each op records its layers'
  widths in its options (ops/SPEC.md 3.1.2).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tflm_mcubert.boards import human_bytes
from tflm_mcubert.compress.adaptive_shape import ADAPTIVE_CUTOFFS, adaptive_for_budget, fixed_ranks
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.flash_budget import FlashTarget, WholeModelBudget, exported_blob_bytes, tokenizer_blob_bytes
from tflm_mcubert.export.flash_budget import whole_model_budget
from tflm_mcubert.export.mcubert_export import token_frequency
from tflm_mcubert.model.embedding_bytes import stored_embedding_bytes
from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate
from tflm_mcubert.ops.widths import AUTO, Widths
from tflm_mcubert.ops import registry
from tflm_mcubert.quantize.float_model import FloatBert
from tflm_mcubert.console import log

SENSITIVITY_SAMPLES = 8  # calibration samples the int8-vs-int4 error is measured on
BLOB_TOLERANCE = 64  # bytes: how close the blob count settles to the blob the sized shape implies


@dataclasses.dataclass
class BoardFit:
    """What the export stores to fit: the matrices' widths, the word tables' byte budget (None: as given)."""

    widths: Widths
    embedding_budget: int | None
    budget: WholeModelBudget | None
    auto_report: dict | None = None  # report.json's "weight_widths" for --weight-bits auto

    def report(self) -> dict:
        out = {} if self.budget is None else {"flash_budget": self.budget.to_json()}
        return {**out, **({"weight_widths": self.auto_report} if self.auto_report else {})}


def default_shape_bytes(config, bits: int) -> int | None:
    """The stored bytes of the default compression's paper shape (None: the export keeps the table dense)."""
    if config.vocab_size <= ADAPTIVE_CUTOFFS[-1]:
        return None
    bounds = [0, *ADAPTIVE_CUTOFFS, config.vocab_size]
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    return stored_embedding_bytes(sizes, fixed_ranks(config.hidden_size, len(sizes), 4), config.hidden_size, bits)


def smallest_embedding_fits(config, budget_bytes: int, bits: int) -> bool:
    """Whether adaptive embedding's shape, scaled all the way down, fits `budget_bytes` at `bits`."""
    try:
        adaptive_for_budget(config.vocab_size, config.hidden_size, max(budget_bytes, 0), bits=bits)
    except UserError:
        return False
    return True


def embedding_need(model, bits: int, compress_default: bool) -> int:
    """Word-table bytes the export would store as things stand: a compressed checkpoint's, the paper's
    default shape's, or the dense table's."""
    config = model.config
    lookup = model.embeddings.word_lookup
    if lookup is not None:
        return lookup.stored_bytes(bits)
    default = default_shape_bytes(config, bits) if compress_default else None
    return default if default is not None else stored_embedding_bytes([config.vocab_size], [], config.hidden_size, bits)


def fit_to_board(request, model, tokenizer, inputs, sentences=None) -> BoardFit:
    """The widths and embedding budget `request` exports with; `inputs` (calibration ModelInputs) are what
    --weight-bits auto measures the ops' sensitivity on, `sentences` what the default compression counts
    token frequencies in (its clusters decide the tokenizer blob's lists)."""
    compress_default = request.embedding == "auto" and model.embeddings.word_lookup is None
    resizable = compress_default and default_shape_bytes(model.config, request.embedding_bits) is not None
    given = None if request.weight_bits == AUTO else Widths.uniform(request.weight_bits, "--weight-bits")
    if given is not None and not resizable:
        return BoardFit(given, None, None)
    target = FlashTarget.of_board(request.board, request.flash_reserve)
    vocab_bytes = _blob_as_exported(request, model, tokenizer, sentences, resizable)

    def budget(widths: Widths) -> WholeModelBudget:
        return whole_model_budget(
            model.config,
            target,
            seq_len=request.seq_len,
            widths=widths,
            embedding_bits=request.embedding_bits,
            vocab_bytes=vocab_bytes,
        )

    need = embedding_need(model, request.embedding_bits, compress_default)
    if given is not None:
        whole = budget(given)
        if need <= whole.embedding_bytes:
            return BoardFit(given, None, None)  # the paper's shape fits: exported as ever
        # Scaled down when some embedding fits; else the export goes on and its fit check says what misses.
        sizable = smallest_embedding_fits(model.config, whole.embedding_bytes, request.embedding_bits)
        if sizable and vocab_bytes:
            whole = with_sized_blob(whole, tokenizer, sentences)
        return BoardFit(given, whole.embedding_bytes if sizable else None, whole)
    fit = _auto_widths(model, inputs, budget, need, resizable, request.embedding_bits)
    if fit.embedding_budget is not None and vocab_bytes:
        fit.budget = with_sized_blob(fit.budget, tokenizer, sentences)
        fit.embedding_budget = fit.budget.embedding_bytes
    return fit


def _blob_as_exported(request, model, tokenizer, sentences, resizable: bool) -> int:
    """The tokenizer blob of the export as it stands: for the default compression the paper shape's (its
    clusters split the piece lists), else the checkpoint's own clusters' or one list."""
    from tflm_mcubert.compress.baselines import ADAPTIVE_CUTOFFS  # loads Keras

    if not request.vocab or tokenizer is None:
        return 0
    if resizable:
        return default_compression_blob(tokenizer, sentences, list(ADAPTIVE_CUTOFFS))
    lookup = model.embeddings.word_lookup
    if lookup is None or len(tokenizer.get_vocab()) != model.config.vocab_size:
        return tokenizer_blob_bytes(tokenizer)
    return exported_blob_bytes(tokenizer, np.arange(model.config.vocab_size), lookup.boundaries)


def with_sized_blob(whole: WholeModelBudget, tokenizer, sentences, rounds: int = 6) -> WholeModelBudget:
    """`whole` counting the tokenizer blob the export will write for the default compression scaled to the
    bytes left: each cluster's pieces are lists of their own, so the blob follows the cut-offs, which follow
    the bytes the blob leaves. Finds (to BLOB_TOLERANCE) the least blob count whose shape's blob fits it."""
    vocab_size, dim = whole.shape.vocab_size, whole.shape.hidden

    def holds(counted: int) -> tuple[bool, int]:
        budget = dataclasses.replace(whole, vocab_bytes=counted)
        try:
            cutoffs, _ = adaptive_for_budget(vocab_size, dim, budget.embedding_bytes, bits=budget.embedding_bits)
        except UserError:
            return False, counted
        blob = default_compression_blob(tokenizer, sentences, cutoffs)
        return blob <= counted, blob

    high = whole.vocab_bytes
    for _ in range(rounds):  # a count that holds: raised to the blob its shape implies while it does not
        ok, blob = holds(high)
        if ok:
            break
        high = blob
    else:
        raise UserError(f"the tokenizer blob and the embedding do not settle within {whole.target.source}")
    low = blob - 1  # a smaller count buys a larger shape, whose blob is at least this one's
    while high - low > BLOB_TOLERANCE:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle)[0] else (middle, high)
    whole = dataclasses.replace(whole, vocab_bytes=high)
    whole.check()
    return whole


def default_compression_blob(tokenizer, sentences, cutoffs) -> int:
    """The blob the export writes for the default compression at `cutoffs`: its clusters are the tokens in
    order of their frequency in `sentences` (mcubert_export.default_compression), each a list of its own."""
    from tflm_mcubert.compress.baselines import frequency_ranking  # loads Keras
    from tflm_mcubert.model.clustered_embedding import permutation_from_ranking

    vocab_size = len(tokenizer.get_vocab())
    frequency, _ = token_frequency(tokenizer, sentences, vocab_size)
    permutation = permutation_from_ranking(frequency_ranking(frequency))
    return exported_blob_bytes(tokenizer, permutation, [0, *cutoffs, vocab_size])


def _auto_widths(model, inputs, budget, need: int, resizable: bool, embedding_bits: int) -> BoardFit:
    """--weight-bits auto: all int8 when that fits, else the fewest int4 matrices that do (least sensitive
    first), else every matrix int4 and (the default compression only) the embedding scaled down."""
    all8 = budget(Widths.uniform(8))
    ops = all8.shape.encoder_ops
    matrices = [f"{op}.{layer}" for op in ops for layer in _layers_of(op)]
    if need <= all8.embedding_bytes:
        return BoardFit(Widths.uniform(8), None, all8, _widths_report(matrices, [], None, all8))
    samples = min(len(inputs), SENSITIVITY_SAMPLES)
    log(f"--weight-bits auto: measuring each matrix's int4 sensitivity on {samples} samples ...")
    sensitivity = matrix_sensitivity(model, inputs[:SENSITIVITY_SAMPLES], embedding_bits)
    saved = {f"{op}.{layer}": s for op in ops for layer, s in zip(_layers_of(op), all8.shape.layer_savings[op])}
    chosen = fewest_int4_matrices(matrices, sensitivity, saved, need - all8.embedding_bytes)
    if chosen is None:
        whole = budget(Widths.uniform(4))
        if not resizable:
            raise UserError(
                f"the model does not fit even with every attention and MLP matrix at int4: its embedding stores "
                f"{human_bytes(need)} and {whole.target.source} leaves {human_bytes(max(whole.embedding_bytes, 0))} "
                f"for it ({whole.describe_items()}); compress the embedding further (search --board) or choose a "
                f"board with more Flash"
            )
        whole.check()
        return BoardFit(
            Widths.uniform(4), whole.embedding_bytes, whole, _widths_report(matrices, matrices, sensitivity, whole)
        )
    widths = Widths.uniform(4) if len(chosen) == len(matrices) else Widths.per_matrix(dict.fromkeys(chosen, 4))
    whole = budget(widths)
    return BoardFit(widths, None, whole, _widths_report(matrices, chosen, sensitivity, whole))


def _layers_of(op_name: str) -> tuple[str, ...]:
    """The linear layers of encoder op `op_name` ("layer0.attention"), in the op's order."""
    return registry.op(op_name.rsplit(".", 1)[1]).linear_layers


def fewest_int4_matrices(matrices, sensitivity: dict, saved: dict, missing: int):
    """The fewest matrices whose int4 saving covers `missing` bytes; among as few, the least summed
    sensitivity (None: not even all of them). Matrices of one shape save the same bytes, so a choice is a
    count per shape, filled with that shape's least sensitive matrices: exact, and small to search (a
    BERT layer has two shapes)."""
    groups: dict[int, list[str]] = {}
    for name in sorted(matrices, key=lambda n: (sensitivity[n], n)):
        groups.setdefault(saved[name], []).append(name)
    sizes = sorted(groups)
    for count in range(1, len(matrices) + 1):
        best = None
        for split in _splits(count, [len(groups[size]) for size in sizes]):
            if sum(k * size for k, size in zip(split, sizes)) < missing:
                continue
            picked = [name for k, size in zip(split, sizes) for name in groups[size][:k]]
            key = (sum(sensitivity[n] for n in picked), sorted(picked))
            best = min(best, key) if best else key
        if best:
            return sorted(best[1], key=lambda n: (sensitivity[n], n))
    return None


def _splits(count: int, limits: list[int]):
    """Every way to take `count` items from groups of the given sizes (a count per group)."""
    if not limits:
        if count == 0:
            yield ()
        return
    for k in range(min(count, limits[0]) + 1):
        for rest in _splits(count - k, limits[1:]):
            yield (k, *rest)


def matrix_sensitivity(model, inputs, embedding_bits: int) -> dict[str, float]:
    """Per attention/MLP linear layer ("layer0.attention.key"): the mean absolute difference of the model's
    output (dequantized logits, or the last hidden state without a head) when that layer alone stores int4
    weights, against all int8. With the calibration's float propagation a layer's quantization does not
    depend on the others', so one layer's int4 parameters can replace its int8 ones."""
    float_model = FloatBert.from_keras(model)
    seq_len = len(inputs[0].input_ids)
    quantized = {
        bits: calibrate(
            float_model,
            inputs,
            seq_len=seq_len,
            settings=CalibrationSettings(embedding_bits=embedding_bits, widths=Widths.uniform(bits)),
        )[0]
        for bits in (8, 4)
    }
    reference = _outputs(quantized[8], inputs)
    int4_nodes = {n.name: n for n in quantized[4].nodes()}
    nodes = quantized[8].nodes()
    sensitivity = {}
    for i, node in enumerate(nodes):
        for j, layer in enumerate(node.op.linear_layers):
            widths = tuple(4 if k == j else 8 for k in range(len(node.op.linear_layers)))
            one = {layer: getattr(int4_nodes[node.name].params, layer)}
            params = dataclasses.replace(node.params, weight_bits=widths, **one).validate()
            mixed = [*nodes[:i], dataclasses.replace(node, params=params), *nodes[i + 1 :]]
            outputs = _outputs(type(quantized[8]).from_nodes(mixed), inputs)
            difference = np.mean([np.abs(a - b).mean() for a, b in zip(outputs, reference)])
            sensitivity[f"{node.name}.{layer}"] = round(float(difference), 6)
    return sensitivity


def _outputs(quantized, inputs) -> list[np.ndarray]:
    key = "logits" if quantized.head is not None else "last_hidden_state"
    return [
        quantized.dequantized(quantized.run(x.input_ids, x.token_type_ids, x.mask(0)))[key].astype(np.float64)
        for x in inputs
    ]


def widths_report(matrices, int4, sensitivity, **entries) -> dict:
    """report.json's "weight_widths" of --weight-bits auto: the int4 and int8 matrices, each one's
    sensitivity, then `entries` (the model kind's notes and figures) in order."""
    return {
        "mode": AUTO,
        "int4_matrices": list(int4),
        "int8_matrices": [name for name in matrices if name not in int4],
        "sensitivity": sensitivity,
        **entries,
    }


def _widths_report(matrices, int4, sensitivity, whole: WholeModelBudget) -> dict:
    return widths_report(
        matrices,
        int4,
        sensitivity,
        granularity="per matrix: each attention projection (query, key, value, output) and MLP layer (fc1, "
        "fc2) has its own width, recorded in its op's options (ops/SPEC.md 3.1.2)",
        sensitivity_note="mean |output difference| (dequantized logits, or last hidden state) with that matrix "
        "alone at int4 against all int8, on calibration samples; int4 matrices are the fewest that fit, the "
        "least sensitive among as few",
        embedding_bytes_left=whole.embedding_bytes,
    )

"""report.json's storage blocks: where an MCUBERT export's Flash goes, by what the ops store (the
embedding's word tables, the encoder's linear weights), at the width used and at the other one; and the
tokenizer blob's bytes that vocabulary pruning saved, as written."""

from __future__ import annotations

import json
from pathlib import Path

from tflm_mcubert.files import METRICS_FILE
from tflm_mcubert.ops.embedding import embedding_storage_bytes
from tflm_mcubert.ops.linear import Linear, stored_size


def embedding_storage_report(params, op_bytes: int) -> dict:
    """report.json's "embedding": how the word tables are stored and what they take in Flash, at this
    storage width and at the other (both from ops.embedding.embedding_storage_bytes)."""
    geometry = [(view.end - view.start, view.rank) for view in params.cluster_views]
    by_bits = {bits: embedding_storage_bytes(geometry, params.hidden, bits) for bits in (8, 4)}
    return {
        "storage_bits": params.word_bits,
        "embedding_bytes": by_bits[params.word_bits],
        "embedding_bytes_int8": by_bits[8],
        "embedding_bytes_int4": by_bits[4],
        "op_bytes": op_bytes,
        "note": "embedding_bytes: the word tables as stored (word_rows + word_projections; ops.embedding."
        "embedding_storage_bytes); op_bytes: every constant of the embedding op (also positions, token "
        "types, requantization and LayerNorm tables)",
    }


def encoder_storage_report(quantized, constants: dict) -> dict:
    """report.json's "encoder": the storage width of the attention and MLP linear weights and what the
    encoder's constants take in Flash; the weight bytes also at the other width (linear.stored_size)."""
    layers = [lin for node in quantized.nodes() for lin in _linear_layers(node.params)]
    by_bits = {bits: sum(stored_size(lin.out_features, lin.in_features, bits) for lin in layers) for bits in (8, 4)}
    bits = sorted({lin.weight_bits for lin in layers}) or [8]
    encoder_ops = [node.name for node in quantized.nodes() if any(True for _ in _linear_layers(node.params))]
    return {
        "weight_bits": bits[0] if len(bits) == 1 else bits,
        "linear_weight_bytes": sum(lin.packed_weights.nbytes for lin in layers),
        "linear_weight_bytes_int8": by_bits[8],
        "linear_weight_bytes_int4": by_bits[4],
        "channel_bytes": sum(lin.channels.nbytes for lin in layers),
        "op_bytes": sum(constants.get(name, 0) for name in encoder_ops),
        "note": "linear_weight_bytes: the attention and MLP weight tensors as stored (pair4 int8 or w4row "
        "int4, ops/SPEC.md 3.1, 3.1.1); channel_bytes: their (bias, multiplier, shift) rows; op_bytes: every "
        "constant of those ops (also LayerNorm, residual and lookup tables)",
    }


def _linear_layers(params):
    """The Linear layers of an attention or MLP op's parameters (none for other ops)."""
    return [v for v in vars(params).values() if isinstance(v, Linear)] if hasattr(params, "weight_bits") else []


def with_written_blob(source: dict, written_bytes: int) -> dict:
    """The export's `source` with its pruning report's blob figures made this export's: after = the blob it
    wrote (0 with --no-vocab), saved = before - after."""
    report = source.get("vocab_pruning")
    if not report or report.get("vocab_bytes_before") is None:
        return source
    report = {**report, "vocab_bytes_after": written_bytes}
    report["vocab_bytes_saved"] = report["vocab_bytes_before"] - written_bytes
    return {**source, "vocab_pruning": report}


# What a search's metrics.json says about the word table it wrote, carried into the export's report.
SEARCH_FACTS = (
    "mode",
    "embedding_params",
    "embedding_bytes",
    "embedding_storage_bits",
    "target_embedding_params",
    "target_embedding_bytes",
    "flash_budget",
)


def checkpoint_compression(lookup, dense_params: int, checkpoint: str | None) -> dict | None:
    """report.json's "compression" for a checkpoint whose word table is already compressed (`lookup`, its
    clustered lookup; None: a dense table, nothing to say): the parameters it stores and, when the
    checkpoint is a search's output, what the search recorded in its metrics.json (mode, targets, the
    board's Flash budget it was searched for)."""
    if lookup is None:
        return None
    entry = {"method": "checkpoint", "params": int(lookup.stored_params()), "dense_params": int(dense_params)}
    metrics_path = Path(checkpoint) / METRICS_FILE if checkpoint else None
    try:
        metrics = (
            json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path and metrics_path.is_file() else {}
        )
    except (OSError, UnicodeDecodeError, ValueError):
        metrics = {}  # a damaged metrics.json costs the report its search facts, not the export
    if isinstance(metrics, dict) and metrics.get("command") == "search":
        entry["method"] = "searched"
        entry["search"] = {key: metrics[key] for key in SEARCH_FACTS if key in metrics}
    return entry

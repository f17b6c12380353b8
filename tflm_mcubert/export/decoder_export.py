"""`export` of a causal LM (GPT-2 / GPT-Neo): one token per invoke over int8 KV caches in the planned arena.

    load        the checkpoint (model/decoder_import.py), or a decoder preset with seeded random weights
    prune       with --prune-vocab, the ids and merges a corpus needs only (compress/bpe_pruning.py)
    compress    the tied word table: kept dense when the whole model fits the board's Flash, else adaptive
                embedding (frequency clusters of the calibration text, SVD ranks) sized to the Flash the
                rest of the model leaves (--embedding dense keeps it dense whatever it costs)
    quantize    PTQ of every op from the calibration texts (quantize/quantized_decoder.py)
    plan        the arena: caches, the step's values, one scratch (schedule/planner.py)
    write       model.tflite (tflite/mcubert_writer.model_to_tflite), read back (read_decoder) and a greedy
                continuation compared token for token with the reference; model_data.cc/.h, the TFLM
                firmware files (firmware/decoder_firmware.py), report.json

Ids in the .tflite are the compressed table's (most frequent first); `model_ids.npy` maps the checkpoint's
tokenizer ids to them (model id = model_ids[tokenizer id]; -1: an id --prune-vocab dropped,
compress/bpe_pruning.py). A checkpoint with a GPT-2 tokenizer also gets the
on-device byte-level BPE (model_vocab.bin/.cc/.h: tokenizer/bpe_blob.py) in the model's id order; its bytes
count against the board's Flash with the model's.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import numpy as np

from tflm_mcubert import __version__
from tflm_mcubert.boards import Board, check_fit
from tflm_mcubert.compress.bpe_pruning import PrunedTokenizer, prune_decoder
from tflm_mcubert.data.calibration import builtin_sentences, read_sentences
from tflm_mcubert.errors import BelowSmallestError, DoesNotFitError, UserError
from tflm_mcubert.export import bundles
from tflm_mcubert.export.export_folder import MODEL_IDS, files_under, finish_report
from tflm_mcubert.export.mcubert_export import graph_shape
from tflm_mcubert.export.decoder_fit import auto_widths
from tflm_mcubert.export.request import MAX_CANDIDATES, ExportRequest
from tflm_mcubert.export.tflm_arena import CORTEX_M, ArenaEstimate, StructSizes, estimate_arena
from tflm_mcubert.firmware.c_array import write_c_array
from tflm_mcubert.firmware.decoder_firmware import write_decoder_firmware
from tflm_mcubert.firmware.vocab_files import VOCAB_NAME
from tflm_mcubert.model.decoder_config import SEARCHED_EMBEDDING_FILE, SEARCHED_KEY, DecoderConfig, decoder_family

from tflm_mcubert.quantize.decoder_qat import decoder_qat_settings, decoder_ranges, distill_decoder, table_of_clusters
from tflm_mcubert.quantize.float_model import embedding_clusters
from tflm_mcubert.ops import lm_head
from tflm_mcubert.ops.embedding import embedding_storage_bytes
from tflm_mcubert.ops.sample import SampleParams
from tflm_mcubert.ops.topology import DECODER
from tflm_mcubert.ops.widths import AUTO, Widths
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder
from tflm_mcubert.schedule.planner import plan_model, plan_of
from tflm_mcubert.tflite.mcubert_reader import read_decoder
from tflm_mcubert.tflite.mcubert_writer import model_to_tflite, unique_constant_bytes
from tflm_mcubert.tokenizer import bpe_blob
from tflm_mcubert.console import log

# Random-weight decoders for sizing a board without a checkpoint (GPT-2's vocabulary and layout).
_GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 256}
DECODER_PRESETS = {
    "gpt2-d128x2": {**_GPT2, "n_embd": 128, "n_layer": 2, "n_head": 2},
    "gpt2-d64x8": {**_GPT2, "n_embd": 64, "n_layer": 8, "n_head": 16},  # TinyStories-1M's shape
}
STRUCTURE_ALLOWANCE = 16 << 10  # Flash for the .tflite's structure and options around the word tables
MAX_SIZING_PASSES = 3
CHECK_TOKENS = 8  # the read-back model's greedy continuation compared with the reference's
CONFIG_FILE = "config.json"  # a Hugging Face checkpoint's (model/hf_import.py, which loads Keras)


def is_decoder_source(request: ExportRequest) -> bool:
    """Whether the request's checkpoint (or, without one, its preset) is a decoder."""
    return is_decoder_checkpoint(request.checkpoint) if request.checkpoint else request.preset in DECODER_PRESETS


def is_decoder_checkpoint(checkpoint: str | None) -> bool:
    """A local checkpoint folder whose config.json names a GPT-2 or GPT-Neo model (by model_type, else by
    its architectures)."""
    config = Path(checkpoint) / CONFIG_FILE if checkpoint else None
    if config is None or not config.is_file():
        return False
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False  # the loader names what is wrong with it
    return isinstance(raw, dict) and decoder_family(raw) is not None


def load_decoder_model(request: ExportRequest):
    """(model, tokenizer or None, source entry for the report)."""
    if request.checkpoint:
        from tflm_mcubert.model.decoder_import import load_decoder

        model, folder = load_decoder(request.checkpoint)
        tokenizer = bpe_blob.checkpoint_tokenizer(folder, model.config.vocab_size)
        return model, tokenizer, {"checkpoint": str(folder), "family": model.config.family}
    if request.preset not in DECODER_PRESETS:
        raise UserError(f"unknown decoder preset {request.preset!r} (choose from: {', '.join(DECODER_PRESETS)})")
    log(f"no --checkpoint: the {request.preset} decoder with seeded random weights (seed {request.seed})")
    from tflm_mcubert.model.decoder import build_decoder  # Keras

    model = build_decoder(DecoderConfig.from_hf_dict(DECODER_PRESETS[request.preset]), seed=request.seed)
    return model, None, {"preset": request.preset, "random_weights": True, "seed": request.seed}


def calibration_sequences(request: ExportRequest, tokenizer, vocab_size: int, context: int) -> tuple[list, str]:
    """Token id sequences (the checkpoint's ids) to calibrate on, and where they came from."""
    rng = np.random.default_rng(request.seed)
    if tokenizer is None:
        if request.calibration:
            raise UserError("--calibration needs a checkpoint with a tokenizer (vocab.json + merges.txt)")
        length = min(context, 64)
        return [rng.integers(0, vocab_size, length) for _ in range(request.calibration_count)], "random ids"
    texts = read_sentences(request.calibration) if request.calibration else builtin_sentences()
    sequences = [np.asarray(tokenizer.encode(t)[:context], np.int64) for t in texts]
    sequences = [s for s in sequences if s.size][: request.calibration_count]
    if not sequences:
        raise UserError("the calibration text gives no tokens")
    return sequences, request.calibration or "built-in sentences"


def _compress(model, sequences, flash_left: int, bits: int, embedding: str, searched=None):
    """(clusters in model id order, model id of each tokenizer id or None, report entry) of the word table
    stored at `bits`. `searched`: the checkpoint's searched table (searched_table), stored as it is unless
    --embedding dense."""
    table = np.asarray(model.token_embeddings.numpy(), np.float64)
    vocab, dim = table.shape
    if embedding == "dense" or (searched is None and embedding_storage_bytes([(vocab, dim)], dim, bits) <= flash_left):
        return ((table, None),), None, {"method": "dense", "params": int(table.size)}
    if searched is not None:
        clusters, permutation, entry = searched
        return clusters, permutation, {**entry, "dense_params": int(table.size)}
    cutoffs, ranks = _largest_adaptive(vocab, dim, flash_left, bits)
    clusters, permutation, params = adaptive_clusters(table, sequences, cutoffs, ranks)
    entry = {
        "method": "adaptive",
        "cutoffs": [int(c) for c in cutoffs],
        "ranks": [int(r) for r in ranks],
        "params": params,
        "dense_params": int(table.size),
        "budget_bytes": int(flash_left),
    }
    return clusters, permutation, entry


def searched_table(checkpoint: str | None):
    """(clusters in model id order, model id of each tokenizer id, report entry) of the table a decoder's
    `search` wrote into `checkpoint` (SEARCHED_EMBEDDING_FILE), or None when it has none."""
    path = Path(checkpoint) / SEARCHED_EMBEDDING_FILE if checkpoint else None
    if path is None or not path.is_file():
        return None
    with np.load(path) as stored:
        arrays = dict(stored)
    boundaries, ranks = [int(b) for b in arrays["boundaries"]], [int(r) for r in arrays["ranks"]]
    # the op's cluster rules (a rank-0 cluster stored as one zero column, ...), as BERT's export applies them
    clusters = embedding_clusters(types.SimpleNamespace(to_arrays=lambda: arrays))
    permutation = arrays.get("permutation", np.arange(boundaries[-1]))
    params = sum(u.size + (vt.size if vt is not None else 0) for u, vt in clusters)
    entry = {"method": "searched", "cutoffs": boundaries[1:-1], "ranks": ranks, "params": int(params)}
    how = json.loads((Path(checkpoint) / CONFIG_FILE).read_text()).get(SEARCHED_KEY, {})
    if isinstance(how, dict) and how.get("mode"):
        entry["search_mode"] = how["mode"]  # "adaptive": the baseline, fine-tuned as the search is
    return clusters, permutation, entry


def adaptive_clusters(table: np.ndarray, sequences, cutoffs, ranks):
    """(clusters in model id order, model id of each tokenizer id, stored parameters) of adaptive embedding
    of `table` with the frequency order of `sequences`."""
    from tflm_mcubert.compress.baselines import adaptive_embedding  # Keras

    frequency = np.bincount(np.concatenate(sequences), minlength=table.shape[0]).astype(np.float64)
    compressed = adaptive_embedding(table, frequency, cutoffs=cutoffs, ranks=ranks)
    arrays = compressed.to_arrays()
    clusters = [(arrays["table_0"], None)]
    clusters += [(arrays[f"u_{i}"], arrays[f"vt_{i}"]) for i in range(1, compressed.num_clusters)]
    return tuple(clusters), arrays["permutation"], int(compressed.stored_params())


def _largest_adaptive(vocab: int, dim: int, budget: int, bits: int) -> tuple[list[int], list[int]]:
    """Adaptive embedding's shape (4, 3 or 2 frequency clusters) storing the most bytes within `budget`: with
    a small vocabulary four clusters stop growing (their cut-offs reach the vocabulary) long before a
    board's Flash is used, where fewer clusters keep growing their ranks. BelowSmallestError (with the
    smallest shape's size) when none fits."""
    from tflm_mcubert.compress.baselines import adaptive_for_budget  # Keras
    from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes

    best, best_bytes, smallest = None, -1, None
    for clusters in (4, 3, 2):
        try:
            cutoffs, ranks = adaptive_for_budget(vocab, dim, budget, num_clusters=clusters, bits=bits)
        except BelowSmallestError as miss:
            smallest = miss.smallest if smallest is None else min(smallest, miss.smallest)
            continue
        bounds = [0, *cutoffs, vocab]
        size = stored_embedding_bytes([b - a for a, b in zip(bounds[:-1], bounds[1:])], ranks, dim, bits)
        if size > best_bytes:
            best, best_bytes = (cutoffs, ranks), size
    if best is None:
        raise BelowSmallestError(f"no adaptive embedding of the {vocab} x {dim} word table fits", smallest)
    return best


def _table_misfit(
    board: Board, flash_budget: int, tokenizer_bytes: int, flash_left: int, table: tuple[int, int], smallest: int
) -> DoesNotFitError:
    """The decoder misses the board's Flash before any word table fits: by how much, and where it goes."""
    rest = flash_budget - tokenizer_bytes - flash_left
    blob = f", its tokenizer blob {tokenizer_bytes:,} B" if tokenizer_bytes else ""
    return DoesNotFitError(
        f"{board.name}: the decoder does not fit its {flash_budget:,} B Flash budget: the model without its word "
        f"table takes {rest:,} B{blob}, leaving {flash_left:,} B for the {table[0]:,} x {table[1]} word table, "
        f"whose smallest compressed form takes {smallest:,} B: {smallest - flash_left:,} B over (a board with more "
        f"Flash, a smaller --flash-reserve or a smaller model)"
    )


def _table_room(request: ExportRequest, model, sequences, tokenizer_bytes: int, widths: Widths):
    """(the model's Flash budget, the Flash the rest of the model at `widths` leaves its word table, the
    model quantized at `widths` on two sequences)."""
    flash_budget = check_fit(request.board, arena_bytes=0, flash_bytes=0, **request.reserves()).flash_budget
    flash_budget -= tokenizer_bytes
    config = model.config
    quantized = calibrate_decoder(model, sequences[:2], top_k=request.candidates(), widths=widths)
    rest = _dense_bytes(quantized) - config.vocab_size * config.hidden_size
    return flash_budget, flash_budget - rest - STRUCTURE_ALLOWANCE, quantized


def choose_widths(request: ExportRequest, model, sequences, tokenizer_bytes: int = 0) -> tuple[Widths, dict | None]:
    """The matrices' widths of the export and, for --weight-bits auto, report.json's "weight_widths":
    the fewest int4 matrices that keep the word table as it is within the Flash (export/decoder_fit.py)."""
    if request.weight_bits != AUTO:
        return Widths.uniform(request.weight_bits, "--weight-bits"), None
    _, flash_left, int8 = _table_room(request, model, sequences, tokenizer_bytes, Widths.uniform(8))
    searched = searched_table(request.checkpoint)
    return auto_widths(
        model, sequences, request.candidates(), int8, _table_bytes(model, searched, request) - flash_left
    )


def _table_bytes(model, searched, request: ExportRequest) -> int:
    """The word table's rows and projections as the export stores them at request.embedding_bits (int8: one byte a
    parameter)."""
    config = model.config
    if request.embedding_bits == 8:
        return searched[2]["params"] if searched is not None else config.vocab_size * config.hidden_size
    geometry = (
        [(u.shape[0], u.shape[1]) for u, _ in searched[0]] if searched else [(config.vocab_size, config.hidden_size)]
    )
    return embedding_storage_bytes(geometry, config.hidden_size, request.embedding_bits)


def quantize_and_write(request: ExportRequest, model, sequences, tokenizer_bytes: int = 0, widths=None):
    """(decoder, plan, .tflite, model ids, compression entry): the word table sized so that the written
    model and `tokenizer_bytes` of tokenizer blob fit the board's Flash budget (the estimate of what the rest
    of the model leaves is corrected by what a written model misses by, at most MAX_SIZING_PASSES times).
    `widths`: the matrices' (default: choose_widths')."""
    budgets = check_fit(request.board, arena_bytes=0, flash_bytes=0, **request.reserves())
    sram_budget = budgets.arena_budget
    config = model.config
    bits = widths or choose_widths(request, model, sequences, tokenizer_bytes)[0]
    flash_budget, flash_left, _ = _table_room(request, model, sequences, tokenizer_bytes, bits)
    searched = searched_table(request.checkpoint)
    for _ in range(MAX_SIZING_PASSES):
        try:
            clusters, permutation, entry = _compress(
                model, sequences, flash_left, request.embedding_bits, request.embedding, searched
            )
        except BelowSmallestError as miss:
            table = (config.vocab_size, config.hidden_size)
            raise _table_misfit(request.board, budgets.flash_budget, tokenizer_bytes, flash_left, table, miss.smallest)
        decoder = calibrate_decoder(
            model,
            sequences,
            clusters=clusters,
            top_k=request.candidates(),
            widths=bits,
            embedding_bits=request.embedding_bits,
        )
        decoder = decoder.sampling(sample_params(request, decoder))
        plan = plan_of(decoder, sram_budget)
        if plan.planned_bytes > sram_budget:
            raise DoesNotFitError(
                f"{request.board.name}: the decoder's arena needs {plan.planned_bytes} bytes at a "
                f"{decoder.context}-token context (budget {sram_budget}): shorten the context or choose a larger board"
            )
        tflite = model_to_tflite(decoder, plan)
        over = len(tflite) - flash_budget
        if over <= 0 or entry["method"] != "adaptive":
            break
        flash_left -= over + 1024
    if entry["method"] == "adaptive":
        log(f"word table compressed (adaptive, {entry['params']:,} of {entry['dense_params']:,} parameters)")
    return decoder, plan, tflite, permutation, entry


def sample_params(request: ExportRequest, decoder) -> SampleParams | None:
    """MCUBERT_SAMPLE's parameters for --sample, drawing from the LM head of `decoder` (None: greedy)."""
    settings = request.sampling()
    if settings is None:
        return None
    try:
        return SampleParams.of(
            decoder.head.top_k, decoder.logit_scale, settings["temperature"], settings["top_k"], settings["top_p"],
            settings["seed"],
        )  # fmt: skip
    except ValueError as exc:
        raise UserError(f"--sample: {exc}") from None


def quantization_aware(request: ExportRequest, model, sequences, written, widths=None) -> tuple[object, list[float]]:
    """(student, KD loss per step) of request.qat_steps QAT steps (quantize/decoder_qat.py) for `written`,
    quantize_and_write's result on `model`: its ranges, and its word table when compressed (frozen);
    `widths`: its matrices' (default all int8)."""
    decoder, _, _, permutation, compression = written
    table = None
    if compression["method"] == "searched":
        table = table_of_clusters(searched_table(request.checkpoint)[0], permutation)
    elif compression["method"] == "adaptive":
        dense = np.asarray(model.token_embeddings.numpy(), np.float64)
        clusters, _, _ = adaptive_clusters(dense, sequences, compression["cutoffs"], compression["ranks"])
        table = table_of_clusters(clusters, permutation)
    settings = decoder_qat_settings(request.qat_steps, request.seed)
    ranges = decoder_ranges(model, sequences, decoder)
    student, losses = distill_decoder(model, sequences, ranges, settings, table=table, widths=widths)
    log(f"QAT, {settings.steps} steps: KD loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    return student, losses


def quantize_with_qat(request: ExportRequest, model, sequences, tokenizer_bytes: int = 0, widths=None):
    """(quantize_and_write's result, the report's QAT entry or None): with request.qat_steps, that of the
    QAT student (calibrated again; its compressed table compresses back to the same one)."""
    widths = widths or choose_widths(request, model, sequences, tokenizer_bytes)[0]
    written = quantize_and_write(request, model, sequences, tokenizer_bytes, widths)
    if not request.qat_steps:
        return written, None
    student, losses = quantization_aware(request, model, sequences, written, widths)
    entry = {"steps": request.qat_steps, "loss_first": losses[0], "loss_last": losses[-1]}
    return quantize_and_write(request, student, sequences, tokenizer_bytes, widths), entry


def tokenizer_blob(tokenizer, permutation=None) -> bytes:
    """The on-device byte-level BPE blob of a checkpoint's tokenizer (or of its pruned vocabulary), ids
    mapped through `permutation`."""
    if isinstance(tokenizer, PrunedTokenizer):
        spec = tokenizer.spec if permutation is None else bpe_blob.permuted(tokenizer.spec, permutation)
        return bpe_blob.pack(spec)
    return bpe_blob.pack(bpe_blob.spec_from_tokenizer(tokenizer, permutation=permutation))


def _pruned(request: ExportRequest, model, tokenizer, source: dict):
    """(model, tokenizer, source, each checkpoint id's model id before compression or None) with
    --prune-vocab applied."""
    if not request.prune_vocab:
        return model, tokenizer, source, None
    if searched_table(request.checkpoint) is not None:
        raise UserError(
            "--prune-vocab: this checkpoint's word table was compressed by search; prune before compressing"
        )
    log(f"pruning the vocabulary to the ids {request.prune_vocab} needs ...")
    pruned = prune_decoder(model, tokenizer, request.prune_vocab, request.prune_top_n)
    report = {**pruned.report, "vocab_bytes_before": len(tokenizer_blob(tokenizer))}
    log(f"kept {report['tokens_kept']:,} of {report['tokens_before']:,} ids, {report['merges_kept']:,} merges")
    return pruned.model, pruned.tokenizer, {**source, "vocab_pruning": report}, pruned.new_of_old


def model_ids(new_of_old, permutation):
    """Each checkpoint id's model id (-1: pruned away): pruning's renumbering, then the compression's order;
    None when the model keeps the checkpoint's ids."""
    if new_of_old is None:
        return permutation
    if permutation is None:
        return new_of_old
    return np.where(new_of_old >= 0, np.asarray(permutation)[np.maximum(new_of_old, 0)], -1).astype(np.int32)


def _dense_bytes(decoder) -> int:
    return unique_constant_bytes(decoder.nodes())


def decoder_arena(layers: int, planned_bytes: int, sizes: StructSizes = CORTEX_M) -> ArenaEstimate:
    """TFLM's arena for a decoder: its plan (the KV caches included) and TFLM's own bookkeeping."""
    return estimate_arena(graph_shape(DECODER, layers, True, 0), planned_bytes, sizes)


def decoder_planned_bytes(dims, context: int, top_k: int = 1) -> int:
    """The planned arena of a decoder of these dimensions at `context` positions, before it has parameters."""
    # No decoder op has a tile to choose: the planner needs no budget.
    return plan_model(dims, context, 0, topology=DECODER, output_bytes=lm_head.output_bytes(top_k)).planned_bytes


def longest_context_on(board: Board, dims, max_positions: int, top_k: int = 1) -> int:
    """The most positions (up to `max_positions`; 0: not one) whose arena — a decoder of `dims` planned as
    export plans it, its KV caches included, plus TFLM's bookkeeping — fits `board`'s arena budget."""
    budget = board.arena_budget()
    lo, hi = 0, max_positions
    while lo < hi:  # the arena grows with the context
        mid = (lo + hi + 1) // 2
        if decoder_arena(dims.layers, decoder_planned_bytes(dims, mid, top_k)).arena_bytes <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_prompt(context: int) -> list[int]:
    """The self-check's prompt: model ids 1, 2, 3, shortened for a context of fewer positions."""
    return [1, 2, 3][: max(1, min(3, context - 1))]


def _check_round_trip(read, decoder, vocab_size: int) -> list[int]:
    """The written model, read back, continues a prompt exactly as the reference does (the last new id
    comes from the step at the last position, as the firmware's)."""
    prompt = [i % vocab_size for i in check_prompt(decoder.context)]
    tokens = min(CHECK_TOKENS, decoder.context + 1 - len(prompt))
    expected = decoder.greedy(prompt, tokens)
    if read.quantized.greedy(prompt, tokens) != expected:
        raise AssertionError("the written decoder does not continue the prompt as the reference does")
    return expected


def export_decoder(request: ExportRequest, out_dir: Path) -> dict:
    """Write the decoder export into `out_dir` (the staging folder; see the module docstring); returns
    report.json's content. DoesNotFitError (files written) when the model misses the board."""
    started = time.time()
    model, tokenizer, source = load_decoder_model(request)
    model, tokenizer, source, new_of_old = _pruned(request, model, tokenizer, source)
    config = model.config
    context = request.seq_len if request.seq_len is not None else config.max_positions
    if not 1 <= context <= config.max_positions:
        raise UserError(f"--seq-len {context}: the decoder's context is 1..{config.max_positions} positions")
    if not 1 <= request.candidates() <= min(MAX_CANDIDATES, config.vocab_size):
        raise UserError(f"--top-k {request.candidates()}: 1..{min(MAX_CANDIDATES, config.vocab_size)}")
    if context < config.max_positions:
        model = _truncated(model, context)
    sequences, calibration_source = calibration_sequences(request, tokenizer, config.vocab_size, context)
    log(f"calibration: {len(sequences)} sequences of {calibration_source}")
    # --no-vocab: the device reads and writes ids (the tokenizer runs elsewhere); no blob, no Flash for it
    device_tokenizer = tokenizer if request.vocab else None
    tokenizer_bytes = len(tokenizer_blob(device_tokenizer)) if device_tokenizer is not None else 0
    widths, widths_report = choose_widths(request, model, sequences, tokenizer_bytes)
    written, qat = quantize_with_qat(request, model, sequences, tokenizer_bytes, widths)
    decoder, plan, tflite, permutation, compression = written
    read = read_decoder(tflite)
    continuation = _check_round_trip(read, decoder, config.vocab_size)
    arena = decoder_arena(len(decoder.layers), read.planned_bytes)
    (out_dir / "model.tflite").write_bytes(tflite)
    write_c_array(tflite, out_dir, name="model_data")
    ids = model_ids(new_of_old, permutation)
    if ids is not None:
        np.save(out_dir / MODEL_IDS, np.asarray(ids, np.int32))
    if device_tokenizer is not None:  # the on-device tokenizer, in the model's id order
        blob = tokenizer_blob(device_tokenizer, permutation)
        (out_dir / f"{VOCAB_NAME}.bin").write_bytes(blob)
        write_c_array(blob, out_dir, name=VOCAB_NAME, what="the byte-level BPE tokenizer (tokenizer/bpe_blob.py)")
    flash_bytes = len(tflite) + tokenizer_bytes
    fit = check_fit(request.board, arena_bytes=arena.arena_bytes, flash_bytes=flash_bytes, **request.reserves())
    report = {
        "tool": f"tflm-mcubert {__version__}",
        "schedule": "mcubert",
        "model_kind": "decoder",
        "board": request.board.to_json(),
        "context": context,
        "model": {**source, "layers": config.num_layers, "hidden": config.hidden_size, "heads": config.num_heads,
                  "vocab_size": config.vocab_size, "top_k": request.candidates(), "weight_bits": request.weight_bits,
                  "sampling": request.sampling()},
        "calibration": {"source": calibration_source, "sequences": len(sequences)},
        "compression": compression,
        **({"weight_widths": widths_report} if widths_report else {}),
        **({"qat": qat} if qat else {}),
        "model_ids": MODEL_IDS if ids is not None else None,
        "arena_bytes": arena.arena_bytes,
        "arena": arena.to_json(),
        "kv_cache_bytes": sum(b.nbytes for b in plan.buffers if b.name.startswith("cache")),
        "flash_bytes": flash_bytes,
        "model_bytes": len(tflite),
        "tokenizer": {"kind": "byte-level BPE", "blob": f"{VOCAB_NAME}.bin", "bytes": tokenizer_bytes}
        if device_tokenizer is not None
        else None,
        "fits": fit.to_json(),
        "plan": [{"name": b.name, "offset": b.offset, "bytes": b.nbytes} for b in plan.buffers],
        "check": {"prompt_model_ids": check_prompt(context), "greedy_model_ids": continuation},
    }  # fmt: skip
    write_decoder_firmware(out_dir, report, tflite, decoder, request.board)
    report["files"] = sorted(files_under(out_dir))
    finish_report(
        out_dir, report, started, request, f"decoder, context {context}, {request.board.name}", bundles.DECODER
    )
    if not fit.ok:
        raise DoesNotFitError(_misfit(fit, request.board))
    return report


def _truncated(model, context: int):
    """The model with its position table cut to `context` positions (the cache holds that many)."""
    from tflm_mcubert.model.decoder import copy_decoder  # Keras

    return copy_decoder(model, max_positions=context)


def _misfit(fit, board: Board) -> str:
    parts = []
    if not fit.sram_ok:
        parts.append(f"arena {fit.arena_bytes:,} B > {fit.arena_budget:,} B (shorten --seq-len)")
    if not fit.flash_ok:
        parts.append(f"model {fit.flash_bytes:,} B > {fit.flash_budget:,} B Flash")
    return f"{board.name}: the decoder does not fit: " + "; ".join(parts)

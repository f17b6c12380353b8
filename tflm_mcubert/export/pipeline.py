"""`export`: checkpoint (or preset) → .tflite + firmware files + report.json, with the board fit check.

Two schedules share the front door (model loading, calibration data, files, the fit check):

  mcubert  (default) the four MCUBERT custom ops with an offline arena plan (export/mcubert_export.py)
  stock    int8 TFLite builtins from tf.lite.TFLiteConverter, as stock TFLM users deploy BERT
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tflm_mcubert import __version__
from tflm_mcubert.boards import BOARDS, DEFAULT_SRAM_RESERVE, Board, FitReport, check_fit, human_bytes
from tflm_mcubert.data.calibration import Calibration
from tflm_mcubert.errors import DoesNotFitError
from tflm_mcubert.firmware.c_array import write_c_array
from tflm_mcubert.export import bundles
from tflm_mcubert.export.export_folder import REPORT, finish_report, write_folder
from tflm_mcubert.firmware.firmware_files import write_firmware_files
from tflm_mcubert.export.board_fit import fit_to_board
from tflm_mcubert.export.mcubert_export import export_mcubert, fit_on_every_board
from tflm_mcubert.export.decoder_export import export_decoder, is_decoder_source
from tflm_mcubert.export.request import DEFAULT_SEQ_LEN, ExportRequest, check_request
from tflm_mcubert.export.storage_report import checkpoint_compression, embedding_storage_report
from tflm_mcubert.export.storage_report import encoder_storage_report, with_written_blob
from tflm_mcubert.firmware.vocab_files import append_text_guide, write_vocab_files
from tflm_mcubert.files import output_directory
from tflm_mcubert.model.config import check_seq_len, preset
from tflm_mcubert.model.labels import labels_entry
from tflm_mcubert.ops.topology import ENCODER
from tflm_mcubert.quantize.calibrate import model_inputs
from tflm_mcubert.quantize.qat import QatSettings
from tflm_mcubert.runtime.tflm_runner import min_arena_bytes
from tflm_mcubert.schedule.latency import predict_latency
from tflm_mcubert.schedule.memory import Dims
from tflm_mcubert.tflite.graph import parse
from tflm_mcubert.tflite.mcubert_writer import constant_bytes_by_op
from tflm_mcubert.console import log


def load_model(checkpoint: str | None = None, *, preset_name: str = "bert-tiny", num_labels: int = 2, seed: int = 0):
    """(model, tokenizer or None, where it came from): the checkpoint, or without one the preset with
    seeded random weights. Used by export and evaluate; heavy imports stay inside."""
    from tflm_mcubert.model.bert import build_model

    if checkpoint:
        from tflm_mcubert.model.hf_import import load_checkpoint

        loaded = load_checkpoint(checkpoint)
        source = {"checkpoint": loaded.source, "architecture": loaded.architecture}
        source.update(labels_entry(loaded.config.num_labels, loaded.label_names))
        if loaded.task is not None:
            source["task"] = loaded.task  # the default calibration text (data/calibration.py)
        return loaded.model, loaded.tokenizer, source
    config = preset(preset_name, num_labels=num_labels)
    log(
        f"no --checkpoint: using the {preset_name} preset with seeded random weights (seed {seed}); "
        f"accuracy is meaningless, memory and size figures are real"
    )
    model = build_model(config, seed=seed)
    return model, None, {"preset": preset_name, "random_weights": True, "seed": seed, **labels_entry(num_labels, None)}


def _stock_artifacts(model, seq_len: int, precision: str, calibration):
    from tflm_mcubert.export.stock import export_stock

    tflite = export_stock(model, seq_len=seq_len, precision=precision, calibration=calibration)
    return tflite, min_arena_bytes(tflite)


def _largest_fitting_seq_len(model, request: ExportRequest, calibration_for, budget: int) -> int | None:
    """Halve the sequence length until the measured stock arena fits (each try is a real conversion)."""
    seq_len = request.seq_len // 2
    while seq_len >= 8:
        log(f"  trying --seq-len {seq_len} ...")
        _, arena = _stock_artifacts(model, seq_len, request.precision, calibration_for(seq_len))
        if arena <= budget:
            return seq_len
        seq_len //= 2
    return None


def _misfit_message(fit: FitReport, config, request: ExportRequest, fitting_seq_len: int | None) -> str:
    parts = []
    if not fit.flash_ok:
        embedding_bytes = config.vocab_size * config.hidden_size  # int8 word-embedding table
        parts.append(
            f"Flash: the model needs {human_bytes(fit.flash_bytes)} but {request.board.name} has "
            f"{human_bytes(fit.flash_budget)} for it (misses by {human_bytes(fit.flash_bytes - fit.flash_budget)}); "
            f"the word-embedding table alone is {human_bytes(embedding_bytes)}: the uncompressed model fits no "
            f"board's Flash, which is the problem MCUBERT's embedding compression solves"
        )
    if not fit.sram_ok:
        hint = (
            f"--seq-len {fitting_seq_len} fits"
            if fitting_seq_len
            else "no sequence length of 8 or more fits this schedule"
        )
        parts.append(
            f"SRAM: the arena needs {human_bytes(fit.arena_bytes)} but the largest region ({fit.region}) leaves "
            f"{human_bytes(fit.arena_budget)} (misses by {human_bytes(fit.arena_bytes - fit.arena_budget)}); "
            f"{hint}"
        )
    return f"the model does not fit {request.board.name}: " + "; ".join(parts)


def run_export(request: ExportRequest) -> dict:
    """Writes model.tflite, model_data.cc/.h, the firmware files (firmware/firmware_files.py) and report.json
    into `request.out_dir`; returns the report. Every file is written into a staging folder first and the
    set moved into place, replacing the earlier export's files there (export/export_folder.py).

    Raises DoesNotFitError (after writing everything) when the model misses the board's memory.
    """
    bundles.check_names(request.bundles)
    decoder = is_decoder_source(request)  # the model's kind, known from its config alone
    if request.seq_len is None and not decoder:  # a decoder's default: every position it has
        request = dataclasses.replace(request, seq_len=DEFAULT_SEQ_LEN)
    check_request(request, decoder)
    out_dir = output_directory(request.out_dir)
    kind, export_into = (bundles.DECODER, export_decoder) if decoder else (bundles.ENCODER, _export_into)
    expected = bundles.known_files(request.bundles, kind)  # refused before the work
    return write_folder(out_dir, lambda staging: export_into(request, staging), request.force, expected)


def _export_into(request: ExportRequest, out_dir: Path) -> dict:
    """run_export's work, every file written into `out_dir` (the staging folder)."""
    started = time.time()
    model, tokenizer, source = load_model(
        request.checkpoint, preset_name=request.preset, num_labels=request.num_labels, seed=request.seed
    )
    if request.prune_vocab:
        model, tokenizer, source = _prune_vocabulary(request, model, tokenizer, source, out_dir)
    config = model.config
    check_seq_len(request.seq_len, config)

    calibration = Calibration.load(
        request.calibration,
        tokenizer=tokenizer,
        vocab_size=config.vocab_size,
        count=request.calibration_count,
        seed=request.seed,
        task=source.get("task"),
    )
    if request.schedule == "stock":
        return _run_stock(request, model, tokenizer, source, calibration, out_dir, started)
    return _run_mcubert(request, model, tokenizer, source, calibration, out_dir, started)


def _prune_vocabulary(request: ExportRequest, model, tokenizer, source: dict, out_dir: Path):
    """The model and tokenizer with the vocabulary pruned to the corpus; the pruning's figures join the
    report's model block, and the pruned tokenizer is saved as out/tokenizer (the export's permuted one
    replaces it when the embedding is compressed)."""
    from tflm_mcubert.compress.vocab_pruning import prune_to_corpus

    log(f"pruning the vocabulary to the pieces of {request.prune_vocab} ...")
    pruned = prune_to_corpus(model, tokenizer, request.prune_vocab, out_dir / "tokenizer", request.prune_top_n)
    pruned.tokenizer.save_pretrained(str(out_dir / "tokenizer"))
    report = pruned.report
    log(f"kept {report['tokens_kept']:,} of {report['tokens_before']:,} tokens")
    return pruned.model, pruned.tokenizer, {**source, "vocab_pruning": report}


def _write_model(tflite: bytes, out_dir: Path) -> None:
    (out_dir / "model.tflite").write_bytes(tflite)
    write_c_array(tflite, out_dir, name="model_data")


def _write_firmware(
    out_dir: Path,
    request: ExportRequest,
    tflite: bytes,
    arena_bytes: int,
    sample: dict,
    sample_source: str,
    sample_output=None,
    graph=None,
    labels=None,
) -> list[str]:
    return write_firmware_files(
        out_dir,
        tflite=tflite,
        schedule=request.schedule,
        board=request.board,
        arena_bytes=arena_bytes,
        sample=sample,
        sample_source=sample_source,
        sample_output=sample_output,
        graph=graph,
        label_names=labels,
    )


def _sample_source(calibration, calibration_source: str) -> str:
    """Where the firmware's test sequence (the first calibration sample) came from, in one line."""
    sentences = calibration.sentences
    if sentences:
        text = sentences[0] if len(sentences[0]) <= 80 else sentences[0][:77] + "..."
        return f"the first calibration sentence, {text!r}"
    return f"the first of the calibration inputs ({calibration_source})"


def _latency_estimates(config, seq_len: int, tiles: dict, target: Board) -> dict:
    """Predicted encoder latency per board at its clock: an ESTIMATE from instruction counts measured under
    emulation and an instruction-class cycle model (schedule/kernel_cost.py), not a board measurement."""
    boards = dict(BOARDS)
    boards.setdefault(target.name, target)
    # The cycle formulas are fitted on the Cortex-M7 pipeline; other cores get no estimate.
    boards = {name: board for name, board in boards.items() if board.core == "cortex-m7"}
    return {
        "note": (
            "estimate, not a measurement: encoder layers only (embedding and classifier head excluded), "
            "cycles from emulated instruction counts and a Cortex-M7 instruction-class cost model, "
            "zero-wait-state memory assumed (a lower bound where weights stream from Flash)"
        ),
        "boards": {
            name: predict_latency(config, seq_len, board, tiles=tiles).to_json() for name, board in boards.items()
        },
    }


def _stored_embedding_params(model, compression: dict | None) -> int:
    """Word-embedding weights the device stores: the export's compression, a compressed checkpoint's
    own clustered lookup, or the dense table."""
    if compression:
        return compression["params"]
    lookup = model.embeddings.word_lookup
    return lookup.stored_params() if lookup is not None else model.config.vocab_size * model.config.hidden_size


def _stored_embedding_bytes(embedding_op) -> int:
    """Flash bytes of the word-embedding tables this export stores (`stored_embedding_bytes` at the op's
    storage width), from the geometry of the embedding op as written."""
    from tflm_mcubert.model.clustered_embedding import stored_embedding_bytes  # loads Keras

    ends, ranks = (embedding_op.clusters[:, k].tolist() for k in (0, 1))
    sizes = [end - start for start, end in zip([0, *ends[:-1]], ends)]
    return stored_embedding_bytes(sizes, ranks[1:], embedding_op.hidden, embedding_op.word_bits)


FLASH_NOTE = (
    "model.tflite (weights, graph and metadata) plus the tokenizer blob (model_vocab.cc) when there is one: "
    "what the firmware keeps in Flash besides its code"
)


def _report_head(request: ExportRequest) -> dict:
    """The keys every report starts with, whatever the schedule."""
    return {
        "tool": f"tflm-mcubert {__version__}",
        "schedule": request.schedule,
        "board": request.board.to_json(),
        "seq_len": request.seq_len,
        "precision": request.precision,
    }


def _finish(report: dict, out_dir: Path, started: float, request: ExportRequest) -> None:
    summary = f"{request.schedule} schedule, seq {request.seq_len}, {request.board.name}"
    finish_report(out_dir, report, started, request, summary, bundles.ENCODER)


def _run_stock(request, model, tokenizer, source, calibration, out_dir: Path, started: float) -> dict:
    config = model.config
    samples, calibration_source = calibration.samples(request.seq_len)
    log(
        f"converting ({request.schedule} schedule, {request.precision}, seq {request.seq_len}, "
        f"calibration: {calibration_source}) ..."
    )
    tflite, arena_bytes = _stock_artifacts(model, request.seq_len, request.precision, samples)
    _write_model(tflite, out_dir)
    graph = parse(tflite)  # once, for the firmware files and the report's op rows
    firmware = _write_firmware(
        out_dir,
        request,
        tflite,
        arena_bytes,
        samples[0],
        _sample_source(calibration, calibration_source),
        graph=graph,
        labels=source.get("labels"),
    )

    vocab = write_vocab_files(out_dir, tokenizer if request.vocab else None, None, request.seq_len, request.board.core)
    append_text_guide(out_dir, vocab, custom=False, seq_len=request.seq_len)
    flash_bytes = len(tflite) + vocab.blob_bytes
    fit = check_fit(request.board, arena_bytes=arena_bytes, flash_bytes=flash_bytes, **request.reserves())
    report = {
        **_report_head(request),
        "arena_bytes": arena_bytes,
        "arena_note": (
            "smallest tensor arena the tflite-micro Python interpreter accepts for this model "
            "(it fails at one byte less), measured on this 64-bit host: TFLM's own bookkeeping uses "
            "8-byte pointers here, so a 32-bit MCU needs slightly less"
        ),
        "flash_bytes": flash_bytes,
        "flash_note": FLASH_NOTE,
        "tflite_bytes": len(tflite),
        "vocab_bytes": vocab.blob_bytes,
        "tokenizer": vocab.report,
        "params": {"embedding": config.embedding_param_count(), "total": config.param_count()},
        "fits": fit.to_json(),
        "ops": graph.op_rows(),
        "model": {**with_written_blob(source, vocab.blob_bytes), "config": config.to_hf_dict()},
        "calibration": calibration_source,
        "files": [
            "model.tflite",
            "model_data.cc",
            "model_data.h",
            *firmware,
            *vocab.files,
            *(["tokenizer/"] if (out_dir / "tokenizer").is_dir() else []),
            REPORT,
        ],
        "seconds": None,
    }
    fitting_seq_len = None
    if not fit.ok and not fit.sram_ok:
        log("the arena does not fit; measuring shorter sequence lengths ...")
        fitting_seq_len = _largest_fitting_seq_len(
            model, request, lambda s: calibration.samples(s)[0], fit.arena_budget
        )
        report["fits"]["sram"]["largest_fitting_seq_len"] = fitting_seq_len
    _finish(report, out_dir, started, request)
    log(
        f"wrote {request.out_dir}/model.tflite ({human_bytes(len(tflite))}), model_data.cc/.h, firmware files "
        f"(FIRMWARE.md), report.json; arena {arena_bytes:,} B"
    )
    if not fit.ok:
        raise DoesNotFitError(
            _misfit_message(fit, config, request, fitting_seq_len)
            + f" (files written to {request.out_dir} for inspection)"
        )
    return report


def _run_mcubert(request, model, tokenizer, source, calibration, out_dir: Path, started: float) -> dict:
    samples, calibration_source = calibration.samples(request.seq_len)
    log(f"calibration: {calibration_source}")
    reserves = request.reserves()
    board_fit, result = _export_for_board(request, model, tokenizer, samples, calibration, reserves)
    sample_source = _sample_source(calibration, calibration_source)
    files, vocab = _write_mcubert_files(request, tokenizer, source, samples, sample_source, result, out_dir)
    flash_bytes = len(result.tflite) + vocab.blob_bytes
    fit = check_fit(request.board, arena_bytes=result.arena.arena_bytes, flash_bytes=flash_bytes, **reserves)
    report = {
        **_report_head(request),
        **_mcubert_report(request, model, result, board_fit, vocab, fit, reserves),
        "model": {**with_written_blob(source, vocab.blob_bytes), "config": model.config.to_hf_dict()},
        "calibration": calibration_source,
        "calibration_fidelity": result.fidelity,
        "files": files,
        "seconds": None,
    }
    if not result.choice.fits:
        report["fits"]["sram"]["largest_fitting_seq_len"] = result.choice.largest_fitting_seq_len
    _finish(report, out_dir, started, request)
    arena, plan = result.arena, result.plan
    log(
        f"wrote {request.out_dir}/model.tflite ({human_bytes(len(result.tflite))}), model_data.cc/.h, firmware "
        f"files (FIRMWARE.md), report.json; arena {arena.arena_bytes:,} B "
        f"(plan {plan.planned_bytes:,} B + TFLM {arena.overhead_bytes:,} B), "
        f"tiles {plan.tiles}"
    )
    if not fit.ok:
        raise DoesNotFitError(
            _mcubert_misfit(fit, request, result, vocab.blob_bytes)
            + f" (files written to {request.out_dir} for inspection)"
        )
    return report


def _export_for_board(request: ExportRequest, model, tokenizer, samples, calibration, reserves: dict):
    """The board's widths and embedding budget (fit_to_board), then the custom-op export at them."""
    budget = request.board.arena_budget(reserves.get("sram_reserve", DEFAULT_SRAM_RESERVE))
    inputs = model_inputs(samples, request.seq_len, None)
    board_fit = fit_to_board(request, model, tokenizer, inputs, calibration.sentences)
    result = export_mcubert(
        model,
        tokenizer,
        seq_len=request.seq_len,
        arena_budget=budget,
        samples=samples,
        sentences=calibration.sentences,
        embedding=request.embedding,
        qat=QatSettings(steps=request.qat_steps, seed=request.seed, embedding_bits=request.embedding_bits),
        embedding_bits=request.embedding_bits,
        widths=board_fit.widths,
        embedding_budget=board_fit.embedding_budget,
    )
    return board_fit, result


def _write_mcubert_files(request, tokenizer, source, samples, sample_source: str, result, out_dir: Path):
    """model.tflite and its C array, the firmware files, the (permuted) tokenizer and its on-device blob;
    returns report.json's file list and the vocab files' record."""
    _write_model(result.tflite, out_dir)
    firmware = _write_firmware(
        out_dir,
        request,
        result.tflite,
        result.arena.arena_bytes,
        _model_sample(samples[0], request.seq_len, result.permutation),
        sample_source,
        result.sample_output,  # the export ran the reference on samples[0] already
        labels=source.get("labels"),
    )
    files = ["model.tflite", "model_data.cc", "model_data.h", *firmware, REPORT]
    if result.permutation is not None and tokenizer is not None:
        from tflm_mcubert.model.clustered_embedding import write_permuted_tokenizer

        write_permuted_tokenizer(tokenizer, result.permutation, out_dir / "tokenizer")
    if (out_dir / "tokenizer").is_dir():
        files.append("tokenizer/")
    vocab = write_vocab_files(
        out_dir, tokenizer if request.vocab else None, result.permutation, request.seq_len, request.board.core
    )
    append_text_guide(out_dir, vocab, custom=True, seq_len=request.seq_len)
    return [*files, *vocab.files], vocab


MCUBERT_ARENA_NOTE = (
    "what a 32-bit firmware must give TFLM: the offline plan (planned_bytes: every tensor "
    "and scratch at its offset, as the reference ran it) plus TFLM's own arena use for "
    "this graph (arena.tail: allocator objects, eval tensors, nodes, I/O tensors, the "
    "kernels' OpData; modelled from the TFLM source in export/tflm_arena.py)"
)


def _mcubert_report(request: ExportRequest, model, result, board_fit, vocab, fit: FitReport, reserves) -> dict:
    """report.json's memory, storage, fit, latency and op fields of a custom-op export, in their order."""
    config, plan, arena = model.config, result.plan, result.arena
    constants = {row.name: row.constant_bytes for row in constant_bytes_by_op(result.quantized)}
    embedding_bytes = constants.get(ENCODER.first.node_name(0), 0)
    flash_bytes = len(result.tflite) + vocab.blob_bytes
    compression = result.compression or checkpoint_compression(
        model.embeddings.word_lookup, config.vocab_size * config.hidden_size, request.checkpoint
    )
    return {
        "arena_bytes": arena.arena_bytes,
        "arena_note": MCUBERT_ARENA_NOTE,
        "planned_bytes": plan.planned_bytes,
        "arena": arena.to_json(),
        "tiles": plan.tiles,
        "flash_bytes": flash_bytes,
        "flash_note": FLASH_NOTE,
        "tflite_bytes": len(result.tflite),
        "vocab_bytes": vocab.blob_bytes,
        "tokenizer": vocab.report,
        "params": {
            "embedding": config.embedding_param_count(),
            "total": config.param_count(),
            "stored_embedding": _stored_embedding_params(model, result.compression),
            "stored_embedding_bytes": _stored_embedding_bytes(result.quantized.embedding),
        },
        "compression": _with_real_embedding_bytes(compression, embedding_bytes),
        "embedding": embedding_storage_report(result.quantized.embedding, embedding_bytes),
        # int4 encoder weights only: an int8 export's report.json stays byte-identical (its "ops" bytes say it)
        **({"encoder": encoder_storage_report(result.quantized, constants)} if request.weight_bits != 8 else {}),
        **board_fit.report(),  # where the Flash went, when the board's budget shaped the export
        "fits": fit.to_json(),
        "latency_estimate": _latency_estimates(
            dataclasses.replace(Dims.of(config), weight_bits=board_fit.widths.traffic_bits()),
            request.seq_len,
            plan.tiles,
            request.board,
        ),
        # Every known board at once: whether this export fits it, and the longest sequence that would.
        "boards": fit_on_every_board(config, request.seq_len, flash_bytes, config.num_labels, reserves),
        "ops": [_op_row(op, constants) for op in plan.ops],
    }


def _op_row(op, constants: dict) -> dict:
    """One planned op in report.json: its constants' bytes, tile and memory."""
    return {
        "name": op.name,
        "op": op.kind,
        "bytes": constants.get(op.name, 0),
        "tile": op.tile,
        "scratch_bytes": op.scratch_bytes,
        "live_bytes": op.live_bytes,
    }


def _with_real_embedding_bytes(compression: dict | None, embedding_bytes: int) -> dict | None:
    """The compression block with int8_bytes as this .tflite stores the embedding op (its constants at this
    seq-len: tables, projections, requantization), not the layer's own seq-len-free estimate."""
    return None if compression is None else {**compression, "int8_bytes": embedding_bytes}


def _model_sample(sample: dict, seq_len: int, permutation) -> dict:
    """A calibration sample as the MCUBERT model takes it: ids in the (possibly permuted) model vocabulary,
    the key mask as int8."""
    (x,) = model_inputs([sample], seq_len, permutation)
    return {"input_ids": x.input_ids, "attention_mask": x.valid.astype("int8"), "token_type_ids": x.token_type_ids}


def vocab_hint(vocab_bytes: int) -> str:
    return (
        f"without the on-device tokenizer's {human_bytes(vocab_bytes)} blob it fits: prune the vocabulary "
        "(--prune-vocab CORPUS) or, when the firmware gets token ids from elsewhere, export with --no-vocab"
    )


def _mcubert_misfit(fit: FitReport, request: ExportRequest, result, vocab_bytes: int = 0) -> str:
    parts = []
    if not fit.flash_ok:
        embedding = constant_bytes_by_op(result.quantized)[0].constant_bytes  # the first node's
        rest = fit.flash_bytes - embedding - vocab_bytes
        if 0 < vocab_bytes and fit.flash_bytes - vocab_bytes <= fit.flash_budget:
            hint = vocab_hint(vocab_bytes)
        elif rest > fit.flash_budget:
            hint = (
                f"the encoder and head alone take {human_bytes(rest)} (the embedding "
                f"{human_bytes(embedding)}): a smaller model or a board with more Flash is needed"
            )
        elif request.embedding == "dense":
            hint = "drop --embedding dense to compress the embedding"
        else:
            hint = (
                f"the embedding takes {human_bytes(embedding)}: compress it further "
                f"(python -m tflm_mcubert search --board {request.board.name}) "
                f"or choose a board with more Flash"
            )
        parts.append(
            f"Flash: the model needs {human_bytes(fit.flash_bytes)} but {request.board.name} has "
            f"{human_bytes(fit.flash_budget)} for it (misses by "
            f"{human_bytes(fit.flash_bytes - fit.flash_budget)}); {hint}"
        )
    if not fit.sram_ok:
        longest = result.choice.largest_fitting_seq_len
        hint = f"--seq-len {longest} fits" if longest else "no sequence length fits this board's SRAM"
        parts.append(
            f"SRAM: the arena needs {human_bytes(fit.arena_bytes)} even with the smallest tiles but the "
            f"largest region ({fit.region}) leaves {human_bytes(fit.arena_budget)} (misses by "
            f"{human_bytes(fit.arena_bytes - fit.arena_budget)}); {hint}"
        )
    return f"the model does not fit {request.board.name}: " + "; ".join(parts)

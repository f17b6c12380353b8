"""`evaluate` of a causal LM: perplexity of the float model, of the int8 model with its word table dense, and
of the int8 model `export` writes for the board (its table compressed to the Flash), on held-out text.

Perplexity is exp(mean next-token negative log-likelihood) over every position of the held-out blocks
(train/language_model.blocks_of: texts ended with <|endoftext|>, concatenated, cut at the context). The
int8 models score every id of the vocabulary through the LM head's clustered table
(QuantizedDecoder.logits: the integer scores times their scale), one token a step over the int8 KV caches,
exactly as the firmware runs; the compressed model reads the blocks in its own id order.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from tflm_mcubert.errors import UserError
from tflm_mcubert.export.request import ExportRequest, check_request
from tflm_mcubert.export.decoder_export import (
    calibration_sequences,
    load_decoder_model,
    quantization_aware,
    quantize_with_qat,
    tokenizer_blob,
)
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.quantized_decoder import calibrate_decoder


def int8_perplexity(decoder, blocks: np.ndarray) -> float:
    """exp of the int8 model's mean next-token NLL over `blocks` (ids in the decoder's id order)."""
    total, count = 0.0, 0
    for block in blocks:
        caches = decoder.new_caches()
        for position in range(len(block) - 1):
            logits = decoder.logits(int(block[position]), position, caches)
            peak = logits.max()
            log_sum = peak + np.log(np.exp(logits - peak).sum())
            total += log_sum - logits[int(block[position + 1])]
            count += 1
    return float(np.exp(total / count))


def exported_perplexity(request: ExportRequest, model, tokenizer, sequences, blocks: np.ndarray) -> dict:
    """The int8 model `export` writes for request.board (its word table sized to the Flash the model and the
    tokenizer blob leave): its perplexity on `blocks` (the checkpoint's ids), Flash bytes and compression."""
    blob_bytes = len(tokenizer_blob(tokenizer)) if tokenizer is not None else 0
    (decoder, _, tflite, permutation, compression), qat = quantize_with_qat(request, model, sequences, blob_bytes)
    ids = blocks if permutation is None else np.asarray(permutation)[blocks]
    return {
        "perplexity": int8_perplexity(decoder, ids),
        "board": request.board.name,
        "flash_bytes": len(tflite) + blob_bytes,
        "compression": compression,
        **({"qat": qat} if qat else {}),
    }


def dense_perplexities(request: ExportRequest, model, sequences, blocks: np.ndarray) -> dict:
    """int8 with the word table dense: PTQ (weights at request.weight_bits, the table at request.embedding_bits),
    and after request.qat_steps of QAT when asked."""
    widths, bits = Widths.uniform(request.weight_bits), request.embedding_bits
    dense = calibrate_decoder(model, sequences, top_k=request.top_k, widths=widths, embedding_bits=bits)
    result = {"int8_dense_perplexity": int8_perplexity(dense, blocks)}
    if request.qat_steps:
        written = (dense, None, None, None, {"method": "dense"})
        student, losses = quantization_aware(request, model, sequences, written, widths)
        student_int8 = calibrate_decoder(student, sequences, top_k=request.top_k, widths=widths, embedding_bits=bits)
        result["int8_dense_qat_perplexity"] = int8_perplexity(student_int8, blocks)
        result["qat_dense"] = {"steps": request.qat_steps, "loss_first": losses[0], "loss_last": losses[-1]}
    return result


def evaluate_decoder(
    request: ExportRequest, texts: list[str], limit: int | None = None, log=print, weight_bits=(8,), embedding_bits=(8,)
) -> dict:
    """Float, then for each of `weight_bits` and `embedding_bits` int8 dense and int8 as exported for
    `request.board`: perplexity on `texts` (at most `limit` blocks for the quantized models, which run one token a
    step in numpy; the float model reads them all). As the encoder's, entries with int4 word tables are named
    "int4" for "int8", and int4 weights' get a "+w4" suffix."""
    from tflm_mcubert.train.language_model import blocks_of, perplexity  # Keras

    widths = [
        dataclasses.replace(request, weight_bits=weights, embedding_bits=table)
        for table in dict.fromkeys(embedding_bits)
        for weights in dict.fromkeys(weight_bits)
    ]
    for width in widths:  # the export's rules: what export refuses for a decoder, evaluate does not measure
        check_request(width, decoder=True)
    model, tokenizer, source = load_decoder_model(request)
    if tokenizer is None:
        raise UserError("evaluate needs the checkpoint's tokenizer (vocab.json + merges.txt) to read the text")
    context = model.config.max_positions
    blocks = blocks_of(tokenizer, texts, context)
    started = time.time()
    result = {
        "source": source,
        "context": context,
        "blocks": len(blocks),
        "float_perplexity": perplexity(model, blocks),
    }
    log(f"float: perplexity {result['float_perplexity']:.2f} over {len(blocks)} blocks of {context} tokens")
    sample = blocks[:limit] if limit else blocks
    sequences, calibration = calibration_sequences(request, tokenizer, model.config.vocab_size, context)
    result["int8_blocks"] = len(sample)
    result["float_perplexity_int8_blocks"] = perplexity(model, sample)
    for width in widths:
        name = ("int8" if width.embedding_bits == 8 else "int4") + ("" if width.weight_bits == 8 else "+w4")
        suffix = name[4:] if width.embedding_bits == 8 else "+" + name
        for key, value in _quantized_perplexities(width, model, tokenizer, sequences, sample, log).items():
            result[key.replace("int8", name, 1) if key.startswith("int8") else key + suffix] = value
    result["calibration"] = calibration
    result["seconds"] = round(time.time() - started, 1)
    return result


def _quantized_perplexities(request: ExportRequest, model, tokenizer, sequences, sample, log) -> dict:
    """The int8 models at request.weight_bits: dense (PTQ, and QAT when asked), and as exported."""
    weights = f"{request.weight_bits}-bit weights" + (", int4 word table" if request.embedding_bits == 4 else "")
    result = dense_perplexities(request, model, sequences, sample)
    log(f"int8, {weights}, dense word table: perplexity {result['int8_dense_perplexity']:.2f} ({len(sample)} blocks)")
    if request.qat_steps:
        log(f"int8 after QAT, dense word table: perplexity {result['int8_dense_qat_perplexity']:.2f}")
        plain = exported_perplexity(dataclasses.replace(request, qat_steps=0), model, tokenizer, sequences, sample)
        result["int8_exported_ptq_perplexity"] = plain["perplexity"]
        log(f"int8 as exported without QAT: perplexity {plain['perplexity']:.2f}")
    exported = exported_perplexity(request, model, tokenizer, sequences, sample)
    result["int8_exported_perplexity"] = exported.pop("perplexity")
    result["exported"] = {**exported, "weight_bits": request.weight_bits}
    log(
        f"int8, {weights}, as exported for {request.board.name} ({exported['compression']['method']} table, "
        f"{exported['flash_bytes']:,} B{', after QAT' if request.qat_steps else ''}): "
        f"perplexity {result['int8_exported_perplexity']:.2f}"
    )
    return result

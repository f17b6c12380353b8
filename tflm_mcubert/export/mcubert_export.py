"""`export --schedule mcubert`: compressed embedding, arena plan, int8 calibration, .tflite, report.

model      the checkpoint; an uncompressed embedding is compressed with the adaptive-embedding
           baseline (paper's cut-offs 1000/4000/10000, ranks d/4^i, SVD) unless told not to
plan       tiles for the board's budget less TFLM's own arena overhead (export/tflm_arena.py);
           offsets for every tensor and scratch (schedule/planner.py)
quantize   PTQ calibration (quantize/calibrate.py), optionally a short QAT fine-tune first
write      .tflite (tflite/mcubert_writer.py), read back and verified (tflite/mcubert_reader.py),
           run once in one planned arena (runtime/reference.py) and compared byte for byte
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from tflm_mcubert.boards import BOARDS, DEFAULT_FLASH_RESERVE, DEFAULT_SRAM_RESERVE
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.id_order import reorder_for_blob
from tflm_mcubert.export.tflm_arena import (
    CORTEX_M,
    ArenaEstimate,
    GraphShape,
    IoTensor,
    StructSizes,
    estimate_arena,
    kernel_op_data_bytes,
)
from tflm_mcubert.model.pooling import mean_pool
from tflm_mcubert.ops import contract
from tflm_mcubert.ops.kernel_abi import PARAMS_STRUCTS
from tflm_mcubert.ops.op_def import CHAINED_VALUE, OpDef
from tflm_mcubert.ops.topology import ENCODER, Topology
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate, model_inputs
from tflm_mcubert.quantize.float_model import FloatBert
from tflm_mcubert.quantize.qat import distill
from tflm_mcubert.quantize.quantized_model import QuantizedBert
from tflm_mcubert.runtime.reference import run_reference
from tflm_mcubert.schedule.planner import SMALLEST_TILES, BudgetExceededError, Plan, plan_model
from tflm_mcubert.tflite.mcubert_reader import read_model
from tflm_mcubert.tflite.mcubert_writer import model_to_tflite
from tflm_mcubert.console import log


EMBEDDING_MODES = ("auto", "dense")
UNBOUNDED = 1 << 40


# ---------------------------------------------------------------------------------------------
# Graph shape (what TFLM's overhead depends on), from the contracts alone
# ---------------------------------------------------------------------------------------------


def op_data_bytes(op: OpDef) -> int:
    """The binding's OpData for `op`: its C params struct (mirrored in ops/kernel_abi.py)."""
    struct = PARAMS_STRUCTS[op.code]
    return kernel_op_data_bytes(ctypes.sizeof(struct), ctypes.alignment(struct))


def graph_shape(topology: Topology, layers: int, ends: int, hidden: int) -> GraphShape:
    """What TFLM's bookkeeping depends on, for a model of this topology as the writer writes it: the graph
    inputs, the state tensors (offline-planned variables take no persistent memory), and per op its
    constants, its output and its scratch."""
    steps = topology.steps(layers, ends)
    ops = [op for op, _, _ in steps]
    constants = sum(len(op.weight_fields) for op in ops)
    outputs = sum(len(op.contract.outputs) + 1 for op in ops)  # hidden/logits/top + scratch per op
    inputs = len(topology.inputs) + sum(topology.is_state(value) for _, _, values in steps for value in values)
    # the output's scale / zero-point arrays: one per channel of d for the hidden state, else one
    channels = hidden if ops[-1].output == CHAINED_VALUE else 1
    return GraphShape(
        tensors=inputs + outputs + constants,
        ops=len(ops),
        inputs=tuple(IoTensor(False) for _ in topology.inputs),
        outputs=(IoTensor(True, channels=channels),),
        planned_buffers=inputs + outputs,
        kernel_data=tuple(op_data_bytes(op) for op in ops),
    )


def arena_of(model, sizes: StructSizes = CORTEX_M) -> ArenaEstimate:
    """TFLM's arena for an exported model read back by tflite/mcubert_reader.py (encoder or decoder), with
    `sizes`' struct sizes (CORTEX_M for the board; HOST_64 for the tflite-micro wheel)."""
    q = model.quantized
    layers, ends = q.topology.shape_of([node.definition for node in model.nodes])
    return estimate_arena(graph_shape(q.topology, layers, ends, q.hidden), model.planned_bytes, sizes)


def arena_overhead(layers: int, classifier: bool, hidden: int) -> int:
    """TFLM's bytes on top of a (large) plan: what the tile budget must leave free."""
    return estimate_arena(graph_shape(ENCODER, layers, classifier, hidden), UNBOUNDED).overhead_bytes


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PlanChoice:
    plan: Plan
    fits: bool  # the tiles fit the budget
    largest_fitting_seq_len: int | None
    overhead: int


def choose_plan(config, seq_len: int, arena_budget: int, labels: int | None) -> PlanChoice:
    overhead = arena_overhead(config.num_hidden_layers, bool(labels), config.hidden_size)
    try:
        # The planner's default cost model is the kernels' fitted instruction counts: among tiles as
        # fast to within its resolution, the smallest.
        plan = plan_model(config, seq_len, arena_budget - overhead, output_bytes=labels or 0)
        return PlanChoice(plan, plan.planned_bytes + overhead <= arena_budget, None, overhead)
    except BudgetExceededError:
        pass
    # Does not fit: plan the smallest arena (tile 1) so the files can still be written, and find the
    # longest sequence that would fit (planning is cheap: no conversion needed).
    plan = plan_model(config, seq_len, UNBOUNDED, tiles=SMALLEST_TILES, output_bytes=labels or 0)
    return PlanChoice(plan, False, largest_fitting_seq_len(config, seq_len, arena_budget, labels), overhead)


def _fits(config, seq_len: int, arena_budget: int, labels: int | None, overhead: int) -> bool:
    try:
        plan = plan_model(config, seq_len, arena_budget - overhead, tiles=SMALLEST_TILES, output_bytes=labels or 0)
    except UserError:
        return False
    return plan.planned_bytes + overhead <= arena_budget


def largest_fitting_seq_len(config, seq_len: int, arena_budget: int, labels: int | None) -> int | None:
    """The largest s < seq_len whose smallest plan fits (memory grows with s: bisect)."""
    overhead = arena_overhead(config.num_hidden_layers, bool(labels), config.hidden_size)
    lo, hi = 0, seq_len - 1  # lo fits (0 = none yet), hi is the largest candidate
    if hi < 1 or not _fits(config, 1, arena_budget, labels, overhead):
        return None
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _fits(config, mid, arena_budget, labels, overhead):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit_on_every_board(config, seq_len: int, flash_bytes: int, labels: int | None, reserves: dict) -> dict:
    """For each known board: does this export fit it (arena as planned for that board's budget, and
    Flash, each on its own), and the longest sequence whose arena and Flash fit it. Flash grows with the
    sequence only by the position table (one row of `hidden` bytes per position), so `flash_fits` is for
    this export's sequence length and the longest sequence follows from its spare Flash."""
    sram_reserve = reserves.get("sram_reserve", DEFAULT_SRAM_RESERVE)
    flash_reserve = reserves.get("flash_reserve", DEFAULT_FLASH_RESERVE)
    fits = {}
    for name, board in BOARDS.items():
        budget = board.arena_budget(sram_reserve)
        by_arena = largest_fitting_seq_len(config, contract.MAX_SEQ_LEN + 1, budget, labels)
        by_arena = min(by_arena, config.max_position_embeddings) if by_arena else None
        spare_flash = board.flash_budget(flash_reserve) - (flash_bytes - (seq_len - 1) * config.hidden_size)
        by_flash = 1 + spare_flash // config.hidden_size if spare_flash >= 0 else 0
        longest = min(by_arena, by_flash) if by_arena else None
        longest = longest or None
        fits[name] = {
            "arena_fits": bool(by_arena and by_arena >= seq_len),  # whatever Flash says
            "flash_fits": flash_bytes <= board.flash_budget(flash_reserve),
            "longest_seq_len": longest,
        }
    return fits


# ---------------------------------------------------------------------------------------------
# Embedding compression (default)
# ---------------------------------------------------------------------------------------------


def token_frequency(tokenizer, sentences: list[str] | None, vocab_size: int) -> tuple[np.ndarray, str]:
    """Counts of each token id in the (calibration) text, or vocabulary order when there is none."""
    if tokenizer is None or not sentences:
        return -np.arange(vocab_size, dtype=np.float64), "vocabulary order (no text to count tokens in)"
    counts = np.zeros(vocab_size, np.float64)
    for ids in tokenizer(sentences)["input_ids"]:
        ids = np.asarray(ids)
        ids = ids[(ids >= 0) & (ids < vocab_size)]
        counts += np.bincount(ids, minlength=vocab_size)
    # Ties (every unseen token) keep vocabulary order (frequency_ranking is stable).
    return counts, f"token counts of {len(sentences)} calibration texts"


def default_compression(model, tokenizer, sentences: list[str] | None, budget_bytes: int | None = None, bits: int = 8):
    """(model with the adaptive-embedding baseline, description), or (model, None) if compressed.
    `budget_bytes`: the word tables' share of the board's Flash (export/flash_budget.py); when the paper's
    shape stores more at `bits`, Baevski & Auli's shape is scaled down to it (`adaptive_for_budget`)."""
    from tflm_mcubert.compress.baselines import ADAPTIVE_CUTOFFS, adaptive_embedding  # loads Keras

    if model.embeddings.word_lookup is not None:
        return model, None
    config = model.config
    if config.vocab_size <= ADAPTIVE_CUTOFFS[-1]:
        return model, None
    frequency, source = token_frequency(tokenizer, sentences, config.vocab_size)
    table = model.embeddings.word_embeddings.numpy()
    layer = adaptive_embedding(table, frequency)
    sized = budget_bytes is not None and layer.stored_bytes(bits) > budget_bytes
    if sized:
        cutoffs, ranks = _board_sized_shape(config, budget_bytes, bits)
        layer = adaptive_embedding(table, frequency, cutoffs=cutoffs, ranks=ranks)
    description = {k: v for k, v in layer.describe().items() if k != "clusters"}
    description.update(
        default=True,
        frequencies=source,
        note="the checkpoint's embedding was uncompressed: compressed with the adaptive-"
        "embedding baseline (paper Table 1: cut-offs 1000/4000/10000, ranks d/4^i, "
        "low rank by SVD); input ids are in the permuted vocabulary (see tokenizer/)",
    )
    if sized:
        description["sized_to_flash"] = {"budget_bytes": budget_bytes, "storage_bits": bits}
        description["note"] += (
            f"; the paper's shape did not fit the board's Flash, so the shape was scaled down to the "
            f"{budget_bytes:,} B the rest of the model leaves (cut-offs {cutoffs}, ranks {ranks})"
        )
    return model.with_word_lookup(layer), description


def _board_sized_shape(config, budget_bytes: int, bits: int):
    """Adaptive embedding's cut-offs and ranks scaled to `budget_bytes` stored at `bits`, or a clear refusal."""
    from tflm_mcubert.compress.baselines import adaptive_for_budget

    try:
        return adaptive_for_budget(config.vocab_size, config.hidden_size, budget_bytes, bits=bits)
    except UserError as exc:
        raise UserError(f"the rest of the model leaves {budget_bytes:,} B of Flash for the embedding: {exc}") from None


# ---------------------------------------------------------------------------------------------
# The whole export
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class McubertExport:
    tflite: bytes
    quantized: QuantizedBert
    plan: Plan
    choice: PlanChoice
    arena: ArenaEstimate
    compression: dict | None
    permutation: np.ndarray | None  # tokenizer id -> model id, when this export compressed or reordered
    fidelity: dict
    # The reference's output for samples[0] (the firmware's test sequence), from the .tflite as written:
    # the firmware files take it instead of parsing and running the model again.
    sample_output: np.ndarray | None = None


def export_mcubert(
    model,
    tokenizer,
    *,
    seq_len: int,
    arena_budget: int,
    samples: list[dict],
    sentences: list[str] | None,
    embedding: str = "auto",
    settings=None,
    qat=None,
    embedding_bits: int = 8,
    widths: Widths = Widths(),
    embedding_budget: int | None = None,
    quiet: bool = False,
) -> McubertExport:
    """Everything `export --schedule mcubert` computes; the caller writes files and checks the fit.

    `qat`: a quantize.qat.QatSettings with steps > 0 runs the KD fine-tune before the final PTQ.
    `embedding_bits`: 4 stores the word tables as packed int4 (SPEC 4.1.1; overrides `settings`').
    `widths`: each attention and MLP matrix's width, int8 or int4 w4row (SPEC 3.1.1; likewise).
    `embedding_budget`: bytes for the word tables; the default compression shrinks to them when it must.
    """
    say = (lambda message: None) if quiet else log
    # Long: the export's steps in order (compress, calibrate, plan, write, read back), each feeding the next.
    if embedding not in EMBEDDING_MODES:
        raise UserError(f"--embedding {embedding!r} (choose from {', '.join(EMBEDDING_MODES)})")
    compression = None
    if embedding == "auto":
        model, compression = default_compression(model, tokenizer, sentences, embedding_budget, embedding_bits)
        if compression:
            say(
                f"compressed the embedding: {compression['params']:,} parameters instead of "
                f"{compression['dense_params']:,} (adaptive embedding, {compression['frequencies']})"
            )
    # Samples come from the checkpoint's tokenizer: a compressed checkpoint ships the permuted one,
    # while an embedding compressed here still needs its ids mapped; then each cluster's rows take the
    # tokenizer blob's order, so the blob stores no ids (export/id_order.py).
    remap = model.embeddings.word_lookup.permutation if compression else None
    model, remap = reorder_for_blob(model, tokenizer, remap)
    config = model.config
    labels = config.num_labels
    choice = choose_plan(config, seq_len, arena_budget, labels)
    float_model = FloatBert.from_keras(model)
    inputs = model_inputs(samples, seq_len, remap)
    say(f"calibrating on {len(inputs)} samples; tiles {choice.plan.tiles} ...")
    settings = dataclasses.replace(settings or CalibrationSettings(), embedding_bits=embedding_bits, widths=widths)
    quantized, ranges = calibrate(float_model, inputs, seq_len=seq_len, settings=settings)
    teacher = float_model
    qat_report = None
    if qat is not None and qat.steps > 0:
        say(f"quantization-aware fine-tune: {qat.steps} steps of distillation from the float model ...")
        model_samples = [
            {
                "input_ids": x.input_ids[None],
                "attention_mask": x.valid[None].astype(np.int32),
                "token_type_ids": x.token_type_ids[None],
            }
            for x in inputs
        ]
        qat = dataclasses.replace(qat, widths=widths)  # weights fake-quantized as stored
        student, losses = distill(model, model_samples, ranges, qat, quantized)
        float_model = FloatBert.from_keras(student)
        quantized, _ = calibrate(float_model, inputs, seq_len=seq_len, settings=settings)
        qat_report = {
            "steps": qat.steps,
            "learning_rate": qat.learning_rate,
            "batch_size": qat.batch_size,
            "weight_bits": widths.to_json(quantized.nodes()),
            "first_loss": round(losses[0], 6),
            "last_loss": round(losses[-1], 6),
        }
    fidelity = calibration_fidelity(teacher, quantized, inputs[:8])
    if qat_report:
        fidelity["qat"] = qat_report
    quantized = quantized.with_tiles(choice.plan.tiles)

    tflite = model_to_tflite(quantized, choice.plan)
    parsed = read_model(tflite)  # the reader's checks, on what we just wrote
    probe = inputs[0]
    in_arena = run_reference(
        parsed, {"input_ids": probe.input_ids, "attention_mask": probe.mask(0), "token_type_ids": probe.token_type_ids}
    )
    separate = quantized.run(probe.input_ids, probe.token_type_ids, probe.mask(0))
    key = "logits" if labels else "last_hidden_state"
    if (
        not np.array_equal(in_arena.outputs[key].reshape(-1), separate[key].reshape(-1))
        or in_arena.touched_bytes != choice.plan.planned_bytes
    ):
        raise AssertionError("the exported model does not reproduce the in-memory model in its arena")
    arena = estimate_arena(
        graph_shape(ENCODER, config.num_hidden_layers, bool(labels), config.hidden_size), choice.plan.planned_bytes
    )
    return McubertExport(
        tflite, quantized, choice.plan, choice, arena, compression, remap, fidelity, in_arena.outputs[key]
    )


def calibration_fidelity(float_model, quantized, inputs) -> dict:
    """Float vs int8 on (some of) the calibration samples: a sanity figure, not an evaluation."""
    cosines, agree = [], []
    for x in inputs:
        want = float_model.forward(x.input_ids, x.token_type_ids, x.valid)
        got = quantized.dequantized(quantized.run(x.input_ids, x.token_type_ids, x.mask(0)))
        a = mean_pool(want["last_hidden_state"][None], x.valid[None])[0]
        b = mean_pool(got["last_hidden_state"][None], x.valid[None])[0]
        cosines.append(float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
        if "logits" in want:
            agree.append(int(np.argmax(want["logits"]) == np.argmax(got["logits"])))
    out = {
        "samples": len(inputs),
        "mean_pooled_cosine_min": round(min(cosines), 5),
        "mean_pooled_cosine_mean": round(float(np.mean(cosines)), 5),
    }
    if agree:
        out["logits_argmax_agreement"] = round(float(np.mean(agree)), 4)
    return out

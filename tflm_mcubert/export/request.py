"""What an export is asked for: one request for every model kind (an encoder or a decoder), and the rules
that refuse a request before its model loads, each naming why (for the kind it does not fit, the reason)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from tflm_mcubert.boards import Board
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.config import check_seq_len
from tflm_mcubert.ops.widths import AUTO

DEFAULT_SEED = 0
DEFAULT_SEQ_LEN = 128  # an encoder's tokens per inference when none is asked for
SCHEDULES = ("mcubert", "stock")
PRECISIONS = ("int8", "int16x8", "float32")
# --sample's settings and their defaults: a decoder draws its next token among the top_k best at temperature
# T, within the smallest set holding a share top_p of their probability, with a seeded generator.
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 40, "top_p": 1.0, "seed": 0}
MAX_CANDIDATES = 64  # the LM head's best ids per step, at most


@dataclasses.dataclass
class ExportRequest:
    out_dir: Path
    board: Board
    checkpoint: str | None = None
    preset: str = "bert-tiny"  # without a checkpoint: bert-tiny, bert-mini or a decoder preset
    num_labels: int | None = 2
    # tokens per inference (default DEFAULT_SEQ_LEN); a decoder: the positions its KV caches hold (default: all)
    seq_len: int | None = None
    schedule: str = "mcubert"
    precision: str = "int8"
    embedding: str = "auto"  # mcubert: "auto" compresses an uncompressed embedding, "dense" keeps it
    qat_steps: int = 0  # mcubert: steps of the optional KD quantization-aware fine-tune
    embedding_bits: int = 8  # mcubert: word tables as int8 (8) or packed int4 (4, SPEC 4.1.1)
    weight_bits: int | str = 8  # mcubert: attention/MLP weights int8 (8), int4 w4row (4, SPEC 3.1.1) or "auto"
    calibration: str | None = None
    calibration_count: int = 32
    seed: int = DEFAULT_SEED
    sram_reserve: int | None = None
    flash_reserve: int | None = None
    bundles: tuple[str, ...] = ()
    prune_vocab: str | None = None  # a corpus (task name or text file): keep only the pieces it uses
    prune_top_n: int | None = None  # with prune_vocab: only its N most frequent pieces
    vocab: bool = True  # write the on-device tokenizer's blob (model_vocab.*) when the checkpoint has a tokenizer
    force: bool = False  # overwrite files in out_dir that no earlier export's report.json lists as its own
    top_k: int = 1  # a decoder: the best ids each step returns
    sample: str | None = None  # a decoder: draw the next token ("temperature=T,top_k=K,top_p=P,seed=S"); None: greedy

    def sampling(self) -> dict | None:
        """--sample's settings, checked (None: greedy decoding)."""
        return parse_sampling(self.sample) if self.sample is not None else None

    def candidates(self) -> int:
        """The LM head's ids per step: --top-k, or as many as sampling draws from."""
        sampling = self.sampling()
        return max(self.top_k, sampling["top_k"]) if sampling else self.top_k

    def reserves(self) -> dict:
        """The SRAM and Flash reserves given, as check_fit takes them (the board's defaults otherwise)."""
        given = {"sram_reserve": self.sram_reserve, "flash_reserve": self.flash_reserve}
        return {k: v for k, v in given.items() if v is not None}


# What a decoder export does not do, field by field: (the values it takes; its command-line option; why).
# Every other field works for both kinds.
DECODER_REFUSES = {
    "schedule": (
        ("mcubert",),
        "--schedule",
        "the stock TFLite graph is an encoder's; a decoder step is MCUBERT ops only",
    ),
    "precision": (
        ("int8",),
        "--precision",
        "a decoder is MCUBERT int8 ops only (the other precisions are stock graphs)",
    ),
    "num_labels": ((2,), "--num-labels", "a decoder predicts the next token: it has no classifier head"),
}


def parse_sampling(text: str) -> dict:
    """{temperature, top_k, top_p, seed} of "key=value,..." (the keys not given: SAMPLING_DEFAULTS)."""
    settings = dict(SAMPLING_DEFAULTS)
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        kind = type(SAMPLING_DEFAULTS.get(key.strip(), ""))
        try:
            if key.strip() not in settings:
                raise ValueError
            settings[key.strip()] = kind(value.strip())
        except ValueError:
            keys = ", ".join(f"{k}={v}" for k, v in SAMPLING_DEFAULTS.items())
            raise UserError(f"--sample: {item!r} is not one of key=value with {keys}") from None
    problems = [
        (not (math.isfinite(settings["temperature"]) and settings["temperature"] > 0), "temperature must be > 0"),
        (not 1 <= settings["top_k"] <= MAX_CANDIDATES, f"top_k must be 1..{MAX_CANDIDATES}"),
        (not 0 < settings["top_p"] <= 1, "top_p must be in (0, 1]"),
        (not 0 <= settings["seed"] < 1 << 32, "seed must be 0..4294967295"),
    ]
    wrong = [why for bad, why in problems if bad]
    if wrong:
        raise UserError(f"--sample {text!r}: {'; '.join(wrong)}")
    return settings


def refused_for_decoder(request: ExportRequest) -> list[str]:
    """One line per field a decoder export was given but does not do, with the reason."""
    return [
        f"{option}: not available for a decoder export: {why}"
        for field, (allowed, option, why) in DECODER_REFUSES.items()
        if getattr(request, field) not in allowed
    ]


def check_request(request: ExportRequest, decoder: bool = False) -> None:
    """Everything about a request for an encoder (or a `decoder`) that can be checked before the model
    loads (which may reach the hub): a UserError naming the first problem."""
    refused = refused_for_decoder(request) if decoder else []
    if refused:
        raise UserError("; ".join(refused))
    if "arduino" in request.bundles and request.schedule != "mcubert":
        raise UserError("--bundle arduino packs the MCUBERT ops' sketch: it needs --schedule mcubert")
    if request.sample is not None and not decoder:
        raise UserError("--sample draws a decoder's next token: an encoder (a classifier) has none to draw")
    if request.schedule not in SCHEDULES:
        raise UserError(f"--schedule {request.schedule!r} is not available (choose from: {', '.join(SCHEDULES)})")
    if request.precision not in PRECISIONS:
        raise UserError(f"--precision {request.precision!r} is not supported (choose from: {', '.join(PRECISIONS)})")
    if request.qat_steps < 0:
        raise UserError(f"--qat-steps must be 0 or more, got {request.qat_steps}")
    if request.prune_top_n is not None and (request.prune_top_n < 1 or not request.prune_vocab):
        raise UserError("--prune-top-n needs --prune-vocab CORPUS and a count of 1 or more")
    if request.prune_vocab and not request.checkpoint:
        raise UserError("--prune-vocab needs a --checkpoint with a tokenizer (the preset model has none)")
    if request.qat_steps and request.schedule != "mcubert":
        raise UserError("--qat-steps applies to --schedule mcubert")
    if request.embedding_bits not in (4, 8):
        raise UserError(f"--embedding-bits must be 4 or 8, got {request.embedding_bits}")
    if request.embedding_bits != 8 and request.schedule != "mcubert":
        raise UserError("--embedding-bits 4 stores the MCUBERT embedding op's tables: it needs --schedule mcubert")
    if request.weight_bits not in (4, 8, AUTO):
        raise UserError(f"--weight-bits must be 8, 4 or auto, got {request.weight_bits}")
    if request.weight_bits != 8 and request.schedule != "mcubert":
        raise UserError("--weight-bits 4 stores the MCUBERT attention and MLP weights: it needs --schedule mcubert")
    if request.schedule == "mcubert" and request.precision != "int8":
        raise UserError(
            f"--schedule mcubert is int8 (its ops' numerics contract); --precision "
            f"{request.precision} needs --schedule stock"
        )
    if not 0 <= request.seed < 2**32:
        raise UserError(f"--seed must be from 0 to {2**32 - 1}, got {request.seed}")
    if request.calibration_count < 1:
        raise UserError(f"--calibration-samples must be at least 1, got {request.calibration_count}")
    if not decoder:  # a decoder's context is checked against its position table once it loads
        check_seq_len(request.seq_len)

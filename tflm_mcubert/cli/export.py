"""`export`: checkpoint → .tflite + C array + report.json for a board."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tflm_mcubert.boards import BOARDS, custom_board, get_board, parse_size
from tflm_mcubert.cli import seed_argument
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.decoder_export import DECODER_PRESETS
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.export.request import PRECISIONS, SCHEDULES


def add_board_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("target")
    group.add_argument("--board", default=None, help=f"one of {', '.join(BOARDS)} (default nucleo-f746zg)")
    group.add_argument("--sram", help="any other MCU: its largest contiguous SRAM region, e.g. 512KB")
    group.add_argument("--flash", help="any other MCU: its Flash, e.g. 2MB")
    group.add_argument("--reserve", help="SRAM kept for stack and runtime (default 16KB)")
    group.add_argument("--flash-reserve", help="Flash kept for code (default 160KB)")


def board_from_args(args):
    if args.sram or args.flash:
        if args.board:
            raise UserError("give either --board or --sram/--flash, not both")
        if not (args.sram and args.flash):
            raise UserError("--sram and --flash go together (sizes like 512KB, 2MB or bytes)")
        return custom_board(args.sram, args.flash)
    return get_board(args.board or "nucleo-f746zg")


def add_parser(subparsers) -> list[str]:
    # Long: one add_argument per export option, in --help order.
    export = subparsers.add_parser("export", help="checkpoint → .tflite + C array + report.json")
    export.add_argument(
        "--checkpoint",
        help="Hugging Face BERT checkpoint: a directory or a hub id, or a GPT-2 / GPT-Neo causal LM directory "
        "(a decoder: one token per invoke over int8 KV caches) (default: the --preset with seeded random weights)",
    )
    export.add_argument(
        "--preset",
        default="bert-tiny",
        help="bert-tiny, bert-mini or any encoder shape L<layers>-H<hidden>-A<heads>-F<ffn>, or a decoder: "
        f"{' or '.join(DECODER_PRESETS)} (without --checkpoint)",
    )
    export.add_argument(
        "--num-labels", type=int, default=2, help="classifier outputs of the random preset model (default 2)"
    )
    export.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="tokens per inference (default 128); a decoder: the positions its KV cache holds (default: all of the "
        "model's)",
    )
    export.add_argument("--top-k", type=int, default=1, help="a decoder: the best ids each step returns (default 1)")
    export.add_argument(
        "--sample",
        nargs="?",
        const="",
        default=None,
        metavar="SETTINGS",
        help="a decoder: draw each next token on the device instead of taking the best one, with "
        "'temperature=1.0,top_k=40,top_p=1.0,seed=0' (these defaults for any key left out); the same seed and "
        "prompt give the same text",
    )
    export.add_argument(
        "--schedule",
        default="mcubert",
        choices=SCHEDULES,
        help="mcubert (default): the MCUBERT custom ops with a planned arena; "
        "stock: int8 TFLite builtins as today's TFLM users deploy them",
    )
    export.add_argument(
        "--embedding",
        default="auto",
        choices=("auto", "dense"),
        help="mcubert: 'auto' (default) compresses an uncompressed word embedding with the "
        "adaptive-embedding baseline so that it fits Flash; 'dense' keeps it as is",
    )
    export.add_argument(
        "--qat-steps",
        type=int,
        default=0,
        help="mcubert: steps of a quantization-aware fine-tune by distillation from the "
        "float model on the calibration samples, before calibration (default 0: PTQ only); a decoder: KD of "
        "the next-token distributions, its word table as the export stores it",
    )
    export.add_argument(
        "--embedding-bits",
        type=int,
        choices=(8, 4),
        help="mcubert: store the embedding's word tables as int8 (8) or packed int4 (4: about half "
        "the Flash; cluster rows with per-row scales, low-rank rows with per-column scales, ops/SPEC.md 4.1.1); "
        "default: the width a `search --embedding-bits` checkpoint was fine-tuned for, else 8",
    )
    export.add_argument(
        "--weight-bits",
        type=weight_bits_argument,
        default=8,
        metavar="8|4|auto",
        help="mcubert: store every attention and MLP linear layer (Q, K, V, O, FC1, FC2) as int8 (8, default) "
        "or packed int4 (4: half their Flash; per output channel, MSE-chosen clipping; ops/SPEC.md 3.1.1); "
        "auto: the fewest matrices int4 that let the model (a decoder: its word table as it is) fit the board, "
        "least sensitive first",
    )
    export.add_argument(
        "--precision",
        default="int8",
        choices=PRECISIONS,
        help="int8 (default), int16x8 (int16 activations, int8 weights) or float32",
    )
    export.add_argument(
        "--calibration",
        help="text file (one sentence a line, or a CSV/TSV with a text column) or 'random' (default: the "
        "training text of the task the checkpoint records, else built-in sentences if it has a tokenizer, "
        "else random ids)",
    )
    export.add_argument("--calibration-samples", type=int, default=32)
    export.add_argument(
        "--prune-vocab",
        metavar="CORPUS",
        help="keep only the special tokens, the single characters (a decoder: the 256 bytes) and the word pieces "
        "CORPUS uses (a decoder: and the merges that build them) (a task's training split, e.g. rotten_tomatoes or "
        "a task directory, or a text file): a smaller word table and tokenizer blob",
    )
    export.add_argument(
        "--prune-top-n", type=int, default=None, help="with --prune-vocab: keep only its N most frequent pieces"
    )
    export.add_argument(
        "--no-vocab",
        action="store_true",
        help="do not write the on-device tokenizer (model_vocab.*): the firmware gets token ids from elsewhere",
    )
    export.add_argument("--seed", type=seed_argument, default=0)
    export.add_argument(
        "--out",
        required=True,
        help="output directory: the export replaces the files an earlier export there wrote (its report.json "
        "lists them) and keeps every other file",
    )
    export.add_argument(
        "--force",
        action="store_true",
        help="overwrite files in --out that no earlier export's report.json lists (refused otherwise)",
    )
    export.add_argument(
        "--bundle",
        action="append",
        default=[],
        metavar="arduino|cmake",
        help="also write a self-contained project (repeatable): arduino (OUT/<model>_mcubert.zip, an Arduino "
        "library with an example sketch) or cmake (OUT/cmake/, the mcubert_model library target)",
    )
    add_board_args(export)
    return ["export"]


def weight_bits_argument(text: str) -> int | str:
    if text in ("8", "4"):
        return int(text)
    if text == "auto":
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a weight width (8, 4 or auto)")


def trained_storage_bits(checkpoint) -> int | None:
    """The word-table width a compressed checkpoint's fine-tune trained for (`search --embedding-bits`), if any."""
    from tflm_mcubert.model.hf_import import COMPRESSION_KEY  # hf_import loads Keras

    config = Path(checkpoint) / "config.json" if checkpoint else None
    if config is None or not config.is_file():
        return None
    try:
        search = json.loads(config.read_text()).get(COMPRESSION_KEY, {}).get("search", {})
    except (ValueError, AttributeError):
        return None  # the checkpoint loader names what is wrong with it
    return search.get("embedding_bits") if isinstance(search, dict) else None


def _embedding_bits(args) -> int:
    if args.embedding_bits is not None:
        return args.embedding_bits
    trained = trained_storage_bits(args.checkpoint) if args.schedule == "mcubert" else None
    if trained in (4, 8):
        print(f"word tables stored in int{trained}, the width the checkpoint's search fine-tuned them for")
        return trained
    return 8


def run(args) -> int:
    request = ExportRequest(
        out_dir=Path(args.out),
        board=board_from_args(args),
        checkpoint=args.checkpoint,
        preset=args.preset,
        num_labels=args.num_labels,
        seq_len=args.seq_len,
        schedule=args.schedule,
        precision=args.precision,
        embedding=args.embedding,
        qat_steps=args.qat_steps,
        embedding_bits=_embedding_bits(args),
        weight_bits=args.weight_bits,
        calibration=args.calibration,
        calibration_count=args.calibration_samples,
        seed=args.seed,
        sram_reserve=parse_size(args.reserve, what="--reserve") if args.reserve else None,
        flash_reserve=parse_size(args.flash_reserve, what="--flash-reserve") if args.flash_reserve else None,
        bundles=tuple(args.bundle),
        prune_vocab=args.prune_vocab,
        prune_top_n=args.prune_top_n,
        vocab=not args.no_vocab,
        force=args.force,
        top_k=args.top_k,
        sample=args.sample,
    )
    report = run_export(request)
    (_print_decoder if "kv_cache_bytes" in report else _print_encoder)(args, request, report)
    return 0


def _print_encoder(args, request: ExportRequest, report: dict) -> None:
    fits = report["fits"]
    if report.get("compression"):
        where = (
            f"tokenize with {args.out}/tokenizer"
            if "tokenizer/" in report["files"]
            else "map ids through the permutation"
        )
        print(
            f"embedding compressed by default: {report['compression']['params']:,} parameters "
            f"(dense: {report['compression']['dense_params']:,}); input ids are in the permuted "
            f"vocabulary ({where})"
        )
    _print_board_fit(report)
    print(
        f"{request.board.name}: arena {report['arena_bytes']:,} B of {fits['sram']['budget_bytes']:,} B, "
        f"Flash {report['flash_bytes']:,} B of {fits['flash']['budget_bytes']:,} B{_flash_parts(report)}: fits"
    )


def _print_decoder(args, request: ExportRequest, report: dict) -> None:
    compression = report["compression"]
    if compression["method"] != "dense":
        print(
            f"word table compressed ({compression['method']}): {compression['params']:,} of "
            f"{compression['dense_params']:,} parameters; model ids: {args.out}/{report['model_ids']}"
        )
    fits = report["fits"]
    print(
        f"{request.board.name}: decoder, {report['context']}-token context: arena {report['arena_bytes']:,} B "
        f"(KV caches {report['kv_cache_bytes']:,} B) of {fits['sram']['budget_bytes']:,} B, model "
        f"{report['flash_bytes']:,} B of {fits['flash']['budget_bytes']:,} B Flash: fits"
    )


def _flash_parts(report: dict) -> str:
    """What the Flash figure adds up (FIRMWARE.md gives the model's bytes alone)."""
    blob = report.get("vocab_bytes") or 0
    if not blob or "tflite_bytes" not in report:
        return ""
    return f" (model.tflite {report['tflite_bytes']:,} B + tokenizer blob {blob:,} B)"


def _print_board_fit(report: dict) -> None:
    """What the board's Flash budget decided: the matrices --weight-bits auto made int4, the embedding's share."""
    widths = report.get("weight_widths")
    if widths:
        chosen = ", ".join(widths["int4_matrices"]) or "none"
        print(f"--weight-bits auto: int4 matrices: {chosen} (the fewest that fit, least sensitive first)")
    sized = (report.get("compression") or {}).get("sized_to_flash")
    if sized:
        print(
            f"embedding sized to the board: the rest of the model leaves {sized['budget_bytes']:,} B for the "
            f"word tables (int{sized['storage_bits']}); {report['compression']['params']:,} parameters"
        )

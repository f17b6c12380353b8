"""`search`: compress the word embedding of a fine-tuned classifier (MCUBERT's two-stage NAS, its ablations
and baselines) and KD fine-tune it, on `finetune`/`distill`'s data, training and run options (cli/train.py).

    search --checkpoint student/ --task T --out compressed/   compressed embedding (MCUBERT NAS), KD

Prints its validation and test accuracy and the embedding's size at the end, one `name value` pair a line.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from tflm_mcubert.boards import BOARDS, get_board, parse_size
from tflm_mcubert.cli import COLUMN_FLAGS, given_flags, run_inside
from tflm_mcubert.compress.choices import (
    BUDGET_CONTROLS,
    CANDIDATES,
    DEFAULT_CANDIDATES,
    FINAL_TRAININGS,
    MODES,
    STAGE1_STARTS,
)
from tflm_mcubert.compress.width_search import AUTO, WidthCandidate, search_widths, width_candidates
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.decoder_export import is_decoder_checkpoint
from tflm_mcubert.export.flash_budget import DEFAULT_CLUSTERS, FlashTarget, SearchFlashBudget
from tflm_mcubert.model.config import check_seq_len
from tflm_mcubert.cli.train import add_training_arguments, print_metrics, pruning_from_args, training_options
from tflm_mcubert.files import output_directory

ENCODER_ARCH_LR = 1e-3  # --arch-lr's defaults
DECODER_ARCH_LR = 1e-2  # measured: at 1e-3 a decoder's Stage 1 moved no token (docs/benchmarks/decoder.md)


def parse_count(text: str) -> int:
    """A parameter (or byte) count: 307000, 307_000, 307k or 0.307M."""
    match = re.fullmatch(r"\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmM]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count (e.g. 307000, 307k, 0.307M)")
    value = (
        float(match.group(1).replace("_", "").replace(",", "")) * {"": 1, "k": 1e3, "m": 1e6}[match.group(2).lower()]
    )
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a parameter count must be positive")
    return int(round(value))


def flash_budget_from_args(args):
    """search's whole-model budget (export/flash_budget.SearchFlashBudget), or None without --board /
    --target-flash-bytes; bad combinations are refused here, before any training."""
    if args.flash_reserve and args.board is None:
        raise UserError("--flash-reserve goes with --board (--target-flash-bytes is the model's budget already)")
    if args.board is None and args.target_flash_bytes is None:
        return None
    if args.board is not None:
        reserve = parse_size(args.flash_reserve, what="--flash-reserve") if args.flash_reserve else None
        target = FlashTarget.of_board(get_board(args.board), reserve)
    else:
        target = FlashTarget(args.target_flash_bytes, "--target-flash-bytes")
    check_seq_len(args.export_seq_len, flag="--export-seq-len")
    weight_bits = 8 if args.weight_bits == AUTO else args.weight_bits  # auto: each candidate replaces it
    return SearchFlashBudget(target, args.export_seq_len, weight_bits, vocab=not args.no_vocab)


def width_argument(text: str) -> int | str:
    """--weight-bits / --embedding-bits: 8, 4 or auto (a width search over both)."""
    if text in ("8", "4", AUTO):
        return AUTO if text == AUTO else int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: choose 8, 4 or auto")


def print_flash_split(split: dict, target_bytes: int | None = None) -> None:
    """How the whole-model budget was spent, one `name value` line each (metrics.json's flash_budget), and
    the word tables' share the search aimed at (metrics.json's target_embedding_bytes) where it differs."""
    print(f"flash_budget {split['budget_bytes']} ({split['source']})")
    for key in ("encoder_bytes", "head_bytes", "embedding_fixed_bytes", "container_bytes", "vocab_bytes"):
        print(f"flash_{key} {split[key]}")
    print(
        f"flash_embedding_bytes {split['embedding_bytes']} (the word tables' share, the searched vocabulary's "
        "tokenizer blob counted)"
    )
    if target_bytes is not None and target_bytes != split["embedding_bytes"]:
        print(f"target_embedding_bytes {target_bytes} (the share the search aimed at, before its blob was sized)")


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _add_exact_search_arguments(parser) -> None:
    """The exact two-stage search's own options: rare tokens, Stage 1's start and how the budget is held."""
    parser.add_argument(
        "--min-count",
        type=int,
        default=3,
        help="exact search: tokens seen fewer times in training follow their frequency cluster (default 3)",
    )
    parser.add_argument(
        "--stage1-start",
        default="paper",
        choices=STAGE1_STARTS,
        help="exact search with a budget: Stage 1 starts from the paper's adaptive shape (ranks d/4^i; "
        "default), then demoted and cut to the budget, or from adaptive embedding scaled to the budget",
    )
    parser.add_argument(
        "--budget-control",
        default="multiplicative",
        choices=BUDGET_CONTROLS,
        help="exact search with a budget: multiplicative (default): a size penalty whose λ follows the hard "
        "size; projected: no size penalty, every step's hard choice is the best one within the budget (moves "
        "are trades; α starts closer to its alternatives; use with --stage1-start budget)",
    )
    parser.add_argument(
        "--alpha-margin",
        type=float,
        help="exact search: how far above the others a token's start-cluster logit starts, i.e. how much task "
        "evidence a move needs (default 0.25; 0.01 with --budget-control projected)",
    )


def add_parser(subparsers) -> list[str]:
    search = subparsers.add_parser("search", help="fine-tuned classifier + task → compressed embedding checkpoint")
    search.add_argument(
        "--checkpoint",
        required=True,
        help="fine-tuned classifier to compress, or a GPT-2 decoder: its tied table searched with the LM loss on "
        "--task's text (--mode two-stage or adaptive, --target-embedding-params; export then stores that table)",
    )
    search.add_argument("--teacher", help="KD teacher (default: --checkpoint itself, uncompressed)")
    search.add_argument(
        "--mode",
        default="two-stage",
        choices=MODES,
        help="two-stage (MCUBERT), its ablations one-stage / ratio-then-clustering / clustering-only, "
        "or the baselines adaptive / svd / fwsvd",
    )
    search.add_argument(
        "--relaxation",
        default="exact",
        choices=("exact", "soft"),
        help="exact (default): train only deployable architectures (hard choices, straight-through "
        "gradients); soft: the paper's relaxation, argmax/threshold at the end (two-stage, clustering-only)",
    )
    _add_exact_search_arguments(search)
    search.add_argument(
        "--lr-schedule",
        default="warmup-linear",
        choices=("warmup-linear", "constant", "whole-run"),
        help="the weights' learning rate: constant in the search stages, then the fine-tune's 6%% warm-up and "
        "linear decay (default); constant (the paper's); whole-run: one 6%% warm-up and linear decay over the "
        "search stages and the fine-tune together",
    )
    _add_final_training_arguments(search)
    search.add_argument(
        "--no-equal-steps",
        dest="equal_steps",
        action="store_false",
        help="baselines fine-tune only --finetune-epochs (default: also the two search stages' epochs)",
    )
    search.add_argument(
        "--clusters", type=int, default=DEFAULT_CLUSTERS, help=f"number of clusters c (default {DEFAULT_CLUSTERS})"
    )
    search.add_argument("--div", type=float, default=4.0, help="Stage 1's fixed ranks d/div^i (default 4)")
    _add_budget_arguments(search)
    search.add_argument("--finetune-epochs", type=float, default=1.0, help="KD fine-tune of the compressed model")
    search.add_argument(
        "--arch-lr",
        type=float,
        help=f"learning rate of α and β (default {ENCODER_ARCH_LR:g}; a decoder's {DECODER_ARCH_LR:g}: at "
        f"{ENCODER_ARCH_LR:g} its Stage 1 moved no token of the tied table in 180 steps)",
    )
    search.add_argument("--beta-threshold", type=float, default=0.5, help="β*: singular values with β > β* are kept")
    search.add_argument(
        "--hidden-kd",
        type=float,
        default=0.0,
        help="weight of last-hidden-state KD (teacher of the same width; default 0)",
    )
    search.add_argument(
        "--cutoffs",
        type=int_list,
        help="adaptive: cluster cut-offs (default 1000,4000,10000 for a 30522-token vocabulary, scaled otherwise; "
        "or scaled to --target-embedding-params)",
    )
    search.add_argument("--ranks", type=int_list, help="adaptive: ranks of clusters 1.. (default d/div^i)")
    add_training_arguments(search, "search")
    # every option's default, for refusing the encoder-only ones a decoder's search was given
    _DEFAULTS.update(vars(search.parse_args(["--checkpoint", "-", "--task", "-", "--out", "-"])))
    return ["search"]


def _add_final_training_arguments(parser) -> None:
    """What is trained after the search stages, and among which architectures the written one is chosen."""
    parser.add_argument(
        "--final-training",
        default="select",
        choices=FINAL_TRAININGS,
        help="select (default): each --candidates architecture is initialised from the student by SVD and "
        "fine-tuned exactly as --mode adaptive is (same steps and schedule), the best on dev is written; "
        "retrain: the searched architecture alone, trained that way; continue: the searched weights "
        "fine-tuned for --finetune-epochs (the paper's flow)",
    )
    parser.add_argument(
        "--candidates",
        type=name_list,
        default=DEFAULT_CANDIDATES,
        help=f"--final-training select chooses among these ({', '.join(CANDIDATES)}; default "
        f"{','.join(DEFAULT_CANDIDATES)}; projected runs a second search under --budget-control projected)",
    )


def name_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _add_budget_arguments(search) -> None:
    """The size the search aims at: a penalty λ, or a budget in parameters or in bytes."""
    budget = search.add_mutually_exclusive_group()
    budget.add_argument(
        "--lambda",
        dest="lambda_",
        type=float,
        help="size penalty λ: loss worth removing the whole table (the size is counted as a "
        "fraction of the dense v·d table, so λ does not depend on the model)",
    )
    budget.add_argument(
        "--target-embedding-params",
        type=parse_count,
        help="embedding budget, e.g. 307k: λ is adjusted during the search and the result projected onto the "
        "budget; --mode adaptive: Baevski & Auli's cut-offs and ranks scaled by one factor, the largest that fits",
    )
    budget.add_argument(
        "--target-embedding-bytes",
        type=parse_count,
        help="embedding budget in Flash bytes as the export stores the word embedding (rows at --embedding-bits, "
        "int8 by default; Vᵀ, per-channel requantization, cluster table), e.g. 160k: Stage 1 runs at a parameter "
        "budget, Stage 2 and the final fit count the bytes; --mode adaptive: scaled as for --target-embedding-params",
    )
    budget.add_argument(
        "--board",
        help="the whole model's budget: the word tables get what this board's Flash (less --flash-reserve) "
        "leaves after the encoder at --weight-bits, the head, the .tflite's structure and the tokenizer blob, "
        "as `export --board` will count them (one of: " + ", ".join(BOARDS) + ")",
    )
    budget.add_argument(
        "--target-flash-bytes",
        type=parse_count,
        help="the whole model's Flash budget in bytes (as --board, for any other MCU: its Flash less code), e.g. 1.8M",
    )
    whole = search.add_argument_group("whole-model budget (--board, --target-flash-bytes): the export to come")
    whole.add_argument("--flash-reserve", help="with --board: Flash kept for code (default 160KB, as export's)")
    whole.add_argument("--export-seq-len", type=int, default=128, help="export --seq-len (default 128)")
    whole.add_argument(
        "--weight-bits",
        type=width_argument,
        default=8,
        help="export --weight-bits of the encoder (default 8); auto: a search at each width, the one whose integer "
        "model is best on validation kept (compress/width_search.py)",
    )
    whole.add_argument("--no-vocab", action="store_true", help="export --no-vocab: no tokenizer blob in Flash")
    search.add_argument(
        "--embedding-bits",
        type=width_argument,
        help="storage of the word tables (export --embedding-bits): byte budgets count it, and the fine-tune "
        "trains and reports the tables as stored (straight-through fake quantization); default: float tables, "
        "byte budgets at int8; auto (with --board or --target-flash-bytes): a search at 8 and at 4, as "
        "--weight-bits auto",
    )
    search.add_argument(
        "--qat-weight-bits",
        type=int,
        help="quantization-aware final fine-tune: the encoder's weights fake-quantized in the forward as export "
        "--weight-bits stores them (4: int4 with the MSE clip, 8: int8; straight-through), and the accuracies "
        "reported so; default: float weights",
    )


_DEFAULTS: dict = {}
# What a decoder's search reads (compress/decoder_search.py); every other option must keep its default.
_DECODER_OPTIONS = {
    "checkpoint", "mode", "min_count", "stage1_start", "clusters", "div", "target_embedding_params",
    "finetune_epochs", "arch_lr", "task", "epochs", "batch_size", "lr", "seed", "kd_weight", "temperature", "out",
    "quiet",
}  # fmt: skip


def _or(value, default):
    return default if value is None else value


def run_decoder(args, defaults: dict) -> int:
    """`search` of a GPT-2 / GPT-Neo checkpoint: its tied table searched with the LM loss."""
    from tflm_mcubert.compress.decoder_search import LmSearchOptions, run_lm_search

    given = [f"--{k.replace('_', '-')}" for k, v in sorted(vars(args).items()) if k in defaults and k not in
             _DECODER_OPTIONS and v != defaults[k]]  # fmt: skip
    if given:
        raise UserError(f"{', '.join(given)}: not available for a decoder's search (an encoder option)")
    if args.target_embedding_params is None:
        raise UserError("a decoder's search needs --target-embedding-params (the tied table's budget)")
    if args.epochs <= 0 or args.finetune_epochs <= 0:
        raise UserError("--epochs and --finetune-epochs must be positive")
    opts = LmSearchOptions(
        target_params=args.target_embedding_params, mode=args.mode, num_clusters=args.clusters, div=args.div,
        batch_size=args.batch_size, lr=args.lr, arch_lr=_or(args.arch_lr, DECODER_ARCH_LR), min_count=args.min_count,
        stage1_start=args.stage1_start, kd_weight=args.kd_weight, temperature=args.temperature, seed=args.seed,
    )  # fmt: skip
    out = output_directory(args.out)
    metrics = run_lm_search(args.checkpoint, args.task, out, opts, args.epochs, args.finetune_epochs)
    shown = ("dense_dev_perplexity", "dev_perplexity_before_finetune", "dev_perplexity", "params", "dense_params")
    for name in shown:
        print(f"{name} {metrics[name]}")
    return 0


def _width_candidates(args, flash_budget) -> list[WidthCandidate]:
    """The widths to search (one unless --weight-bits / --embedding-bits auto); a width search is refused
    where it cannot run."""
    candidates = width_candidates(args.weight_bits, args.embedding_bits)
    if len(candidates) > 1 and args.strategy == "multiworker":
        raise UserError(
            "--weight-bits auto / --embedding-bits auto run on one machine: search each width with "
            "--strategy multiworker and --weight-bits 8 / 4, then compare them with evaluate"
        )
    if len(candidates) > 1 and flash_budget is None:
        raise UserError(
            "--weight-bits auto and --embedding-bits auto need --board or --target-flash-bytes: the budget the "
            "widths share"
        )
    return candidates


def run(args) -> int:
    if is_decoder_checkpoint(args.checkpoint):
        return run_decoder(args, _DEFAULTS)
    from tflm_mcubert.compress.nas import SearchOptions
    from tflm_mcubert.compress.search import search as search_workflow

    data, train = training_options(args, "search")
    pruning = pruning_from_args(args)
    flash_budget = flash_budget_from_args(args)
    candidates = _width_candidates(args, flash_budget)
    out = output_directory(args.out)
    search = SearchOptions(
        mode=args.mode,
        num_clusters=args.clusters,
        div=args.div,
        lambda_=args.lambda_,
        target_params=args.target_embedding_params,
        target_bytes=args.target_embedding_bytes,
        embedding_bits=candidates[0].embedding_bits,
        qat_weight_bits=args.qat_weight_bits,
        epochs=args.epochs,
        finetune_epochs=args.finetune_epochs,
        lr=args.lr,
        arch_lr=_or(args.arch_lr, ENCODER_ARCH_LR),
        beta_threshold=args.beta_threshold,
        cutoffs=args.cutoffs,
        ranks=args.ranks,
        relaxation=args.relaxation,
        min_count=args.min_count,
        stage1_start=args.stage1_start,
        lr_schedule=args.lr_schedule,
        equal_steps=args.equal_steps,
        budget_control=args.budget_control,
        alpha_margin=args.alpha_margin,
        final_training=args.final_training,
        candidates=args.candidates,
    )

    def search_at(candidate: WidthCandidate, folder):
        return search_workflow(
            args.checkpoint,
            output_directory(folder),
            data,
            train,
            dataclasses.replace(search, embedding_bits=candidate.embedding_bits),
            teacher_source=args.teacher,
            pruning=pruning,
            flash_budget=None
            if flash_budget is None
            else dataclasses.replace(flash_budget, weight_bits=candidate.weight_bits),
        )

    if len(candidates) == 1:
        metrics = search_at(candidates[0], out)
    else:
        metrics = search_widths(
            candidates, out, search_at, lambda c, folder, path: _evaluate_candidate(args, c, folder, path)
        )
        print_width_choice(metrics["width_search"])
    if "flash_budget" in metrics:
        print_flash_split(metrics["flash_budget"], metrics.get("target_embedding_bytes"))
    shown = (
        "validation_accuracy",
        "test_accuracy",
        "uncompressed_validation_accuracy",
        "uncompressed_test_accuracy",
        "embedding_params",
        "embedding_bytes",
        "embedding_fraction",
    )
    print_choice(metrics["final_training"])
    return print_metrics(metrics, shown, out)


def _evaluate_candidate(args, candidate: WidthCandidate, folder, evaluation) -> None:
    """The candidate's integer model on validation and test, as `evaluate` measures it (the firmware's numerics)."""
    argv = ["evaluate", "--checkpoint", str(folder), "--task", args.task, "--seq-len", str(args.max_seq_len)]
    argv += ["--split", "validation", "test", "--weight-bits", str(candidate.weight_bits), "--json", str(evaluation)]
    argv += ["--embedding-bits", str(candidate.embedding_bits)] if candidate.embedding_bits else []
    argv += given_flags(args, COLUMN_FLAGS)  # a local file's columns, as search read it
    if run_inside(argv, "tflm_mcubert.cli.evaluate") != 0:
        raise UserError(f"the width search stopped at `{' '.join(argv)}`")


def print_width_choice(report: dict) -> None:
    """Which widths the width search kept, and every candidate's integer-model accuracy."""
    rows = ", ".join(
        f"{c['name']} {100 * c['validation_accuracy']:.2f} / {100 * c['test_accuracy']:.2f}"
        for c in report["candidates"]
    )
    print(
        f"widths chosen: {report['chosen']} ({report['dev_margin']:+.2f} dev points; integer model dev / test: {rows})"
    )


def print_choice(report: dict) -> None:
    """Which candidate `--final-training select` wrote, and by how much it led the others on dev."""
    if report.get("mode") != "select":
        return
    chosen = report["chosen"]
    scores = ", ".join(
        f"{c['name']} {100 * c['validation_accuracy']:.2f}"
        for c in report["candidates"]
        if c["validation_accuracy"] is not None
    )
    margin = report["dev_margin"]
    lead = "no other architecture" if margin is None else f"{margin:+.2f} dev points over the next best"
    print(f"chosen {chosen} ({lead}; dev accuracy: {scores})")

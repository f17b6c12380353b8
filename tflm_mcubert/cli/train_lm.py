"""`train-lm`: text → a GPT-2-style causal LM and its byte-level BPE tokenizer (train/language_model.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tflm_mcubert.cli import seed_argument
from tflm_mcubert.data.tasks import load_task
from tflm_mcubert.errors import UserError
from tflm_mcubert.files import output_directory

DEFAULTS = {"vocab_size": 4096, "context": 128, "hidden": 128, "layers": 2, "heads": 2, "epochs": 20}


def add_parser(subparsers) -> list[str]:
    parser = subparsers.add_parser(
        "train-lm", help="text → a GPT-2-style causal LM with its own byte-level BPE (a decoder to export)"
    )
    parser.add_argument(
        "--task",
        default="rotten_tomatoes",
        help="the text: a task whose train split trains and validation split measures (default "
        "rotten_tomatoes, which ships offline), or a text file (one text a line; 10%% held out, seeded)",
    )
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default, help=f"default {default}")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument(
        "--teacher",
        help="a bigger decoder's checkpoint (e.g. an earlier train-lm --out): the student learns from its "
        "distribution too (KD) and takes its tokenizer",
    )
    parser.add_argument("--kd-weight", type=float, default=0.5, help="weight of the distillation term (default 0.5)")
    parser.add_argument("--kd-temperature", type=float, default=2.0, help="default 2")
    parser.add_argument("--seed", type=seed_argument, default=0)
    parser.add_argument("--out", required=True, help="the checkpoint folder (a GPT2LMHeadModel); a run there resumes")
    return ["train-lm"]


def texts_of(task: str, seed: int) -> tuple[list[str], list[str], str]:
    """(training texts, held-out texts, what they are)."""
    path = Path(task)
    if path.is_file() and path.suffix.lower() in ("", ".txt"):
        try:
            lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError as exc:
            raise UserError(f"{path}: not UTF-8 text ({exc})") from None
        if len(lines) < 20:
            raise UserError(f"{path}: {len(lines)} non-empty lines; train-lm needs at least 20")
        order = np.random.default_rng(seed).permutation(len(lines))
        held = max(1, len(lines) // 10)
        return [lines[i] for i in order[held:]], [lines[i] for i in order[:held]], f"{path} (90/10, seed {seed})"
    dataset = load_task(task, seed=seed)
    if "validation" not in dataset:
        raise UserError(f"task {task!r} has no validation split to measure perplexity on")
    return list(dataset["train"]["text"]), list(dataset["validation"]["text"]), f"the {task} train/validation splits"


def run(args) -> int:
    from tflm_mcubert.train import language_model as lm

    settings = lm.LmSettings(
        vocab_size=args.vocab_size,
        context=args.context,
        hidden=args.hidden,
        layers=args.layers,
        heads=args.heads,
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        teacher=str(Path(args.teacher).resolve()) if args.teacher else None,
        kd_weight=args.kd_weight,
        kd_temperature=args.kd_temperature,
    )
    _check(settings)
    out = output_directory(Path(args.out))
    train_texts, dev_texts, source = texts_of(args.task, args.seed)
    started = time.time()
    teacher = None
    if settings.teacher:
        teacher, tokenizer = _teacher(settings, out)
    elif (out / "tokenizer.json").is_file():
        from transformers import GPT2TokenizerFast

        tokenizer = GPT2TokenizerFast.from_pretrained(str(out))
        lm.log(f"the tokenizer in {out} (a resumed run)")
    else:
        lm.log(f"training a {settings.vocab_size}-token byte-level BPE on {source} ...")
        tokenizer = lm.train_tokenizer(train_texts, settings.vocab_size, out)
    train_blocks = lm.blocks_of(tokenizer, train_texts, settings.context)
    dev_blocks = lm.blocks_of(tokenizer, dev_texts, settings.context)
    lm.log(f"{len(train_blocks)} training and {len(dev_blocks)} held-out blocks of {settings.context} tokens")
    model, best = lm.train_lm(settings, train_blocks, dev_blocks, out, teacher=teacher)
    metrics = {
        "epoch_kept": best["epoch"],
        "source": source,
        "train_blocks": len(train_blocks),
        "dev_blocks": len(dev_blocks),
        "dev_perplexity": lm.perplexity(model, dev_blocks),
        "seconds": round(time.time() - started, 1),
    }
    lm.save_checkpoint(model, settings, tokenizer, out, metrics)
    print(json.dumps(metrics, indent=2))
    print(f"wrote {out} (a GPT2LMHeadModel: `python -m tflm_mcubert export --checkpoint {out}`)")
    return 0


def _teacher(settings, out: Path):
    """(the teacher DecoderModel, its tokenizer, saved into `out` for the student)."""
    from transformers import GPT2TokenizerFast

    from tflm_mcubert.model.decoder_import import load_decoder  # Keras

    teacher, folder = load_decoder(settings.teacher)
    if teacher.config.vocab_size != settings.vocab_size:
        raise UserError(
            f"--teacher {settings.teacher}: {teacher.config.vocab_size} ids; give the student --vocab-size "
            f"{teacher.config.vocab_size} (it takes the teacher's tokenizer)"
        )
    if teacher.config.max_positions < settings.context:
        raise UserError(f"--teacher holds {teacher.config.max_positions} positions, fewer than --context")
    try:
        tokenizer = GPT2TokenizerFast.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise UserError(f"--teacher {folder}: its tokenizer does not load ({exc})") from None
    tokenizer.save_pretrained(str(out))
    return teacher, tokenizer


def _check(settings) -> None:
    for name in ("vocab_size", "context", "hidden", "layers", "heads", "epochs", "batch_size"):
        if getattr(settings, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1")
    if settings.vocab_size < 257:
        raise UserError("--vocab-size must be at least 257 (the 256 byte symbols and <|endoftext|>)")
    if settings.hidden % settings.heads:
        raise UserError(f"--hidden {settings.hidden} is not a multiple of --heads {settings.heads}")
    if not settings.learning_rate > 0:
        raise UserError("--learning-rate must be positive")
    if not 0 <= settings.kd_weight <= 1 or not settings.kd_temperature > 0:
        raise UserError("--kd-weight must be in [0, 1] and --kd-temperature positive")

"""`finetune`, `distill` (and `search`, cli/search.py, which shares their options): the compression half of
the pipeline, from a BERT checkpoint to the compressed checkpoint that `export` takes.

    finetune --checkpoint BERT --task T --out teacher/          a fine-tuned classifier (the teacher)
    distill  --teacher teacher/ --task T --out student/         a bert-tiny/-mini student: the teacher's layers,
             [--recipe layers|logits]                             then its logits (--recipe logits: logits only)
             [--augment N] [--unlabeled FILE|DIR]                 (more examples, labelled by the teacher)
             [--preset auto --board B]                            the board picks the student's shape
    search   --checkpoint student/ --task T --out compressed/   compressed embedding (MCUBERT NAS), KD

distill and search take --prune-vocab CORPUS [--prune-top-n N]: they train with the vocabulary pruned to
the corpus's pieces and write the pruned tokenizer (compress/vocab_pruning.py).

Each prints its validation and test accuracy at the end, one `name value` pair a line.
"""

from __future__ import annotations

import argparse
import dataclasses

from tflm_mcubert.boards import BOARDS, get_board
from tflm_mcubert.cli import seed_argument
from tflm_mcubert.cli.board_rank import TABLE_WIDTHS, board_accuracy
from tflm_mcubert.console import log
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.flash_budget import DEFAULT_CLUSTERS, tokenizer_blob_bytes
from tflm_mcubert.export.shape_figure import FIGURE_FILE as SHAPE_FIGURE
from tflm_mcubert.export.shape_figure import draw_shape_search
from tflm_mcubert.export.shape_search import AUTO, BOARD, DEFAULT_COUNT, plan_search, ranked_accuracy, run_shape_search
from tflm_mcubert.export.shape_space import candidates as shape_candidates
from tflm_mcubert.export.shape_space import shape_space
from tflm_mcubert.files import output_directory
from tflm_mcubert.model.config import BertConfig, check_seq_len
from tflm_mcubert.model.config import preset as preset_config
from tflm_mcubert.train.augment import Augmentation
from tflm_mcubert.train.layer_kd import DEFAULT_RECIPE, INITS, RECIPES, LayerKD, projection_misfit, relation_misfit

DEFAULT_EPOCHS = {"finetune": 2.0, "distill": 6.0, "search": 1.0}
DEFAULT_LR = {"finetune": 5e-5, "distill": 2e-4, "search": 5e-5}
DEFAULT_KD = {"distill": 1.0, "search": 0.9}


def add_training_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The data, training and run options `finetune`, `distill` and `search` share."""
    data = parser.add_argument_group("data")
    data.add_argument(
        "--task",
        required=True,
        help="rotten_tomatoes, party_speeches, debate_speakers (offline), sst2, mrpc, qqp, mnli, or a local "
        ".csv/.tsv/.jsonl file or directory of them",
    )
    data.add_argument("--text-column", default="text", help="local files: the text column (default text)")
    data.add_argument("--text-pair-column", help="local files: the second text of sentence-pair tasks")
    data.add_argument("--label-column", default="label", help="local files: the label column (default label)")
    data.add_argument("--max-seq-len", type=int, default=128, help="truncate to this many tokens (default 128)")
    data.add_argument("--max-train-examples", type=int, help="use only this many training examples (quick runs)")
    data.add_argument("--max-eval-examples", type=int, help="use only this many validation and test examples")
    train = parser.add_argument_group("training")
    train.add_argument(
        "--epochs",
        type=float,
        default=DEFAULT_EPOCHS[command],
        help=f"default {DEFAULT_EPOCHS[command]:g}" + (" per search stage" if command == "search" else ""),
    )
    train.add_argument("--batch-size", type=int, default=32, help="default 32")
    train.add_argument(
        "--lr",
        type=float,
        default=DEFAULT_LR[command],
        help=f"AdamW learning rate, no weight decay (default {DEFAULT_LR[command]:g})",
    )
    train.add_argument("--seed", type=seed_argument, default=0)
    if command in DEFAULT_KD:
        train.add_argument(
            "--kd-weight",
            type=float,
            default=DEFAULT_KD[command],
            help=f"weight of the logits KD loss; labels get 1 - it (default {DEFAULT_KD[command]:g})",
        )
        train.add_argument("--temperature", type=float, default=2.0, help="KD temperature (default 2)")
    if command in ("distill", "search"):
        data.add_argument(
            "--prune-vocab",
            metavar="CORPUS",
            help="train with the vocabulary pruned to the pieces CORPUS uses (a task's training split, e.g. "
            "rotten_tomatoes or a task directory, or a text file): special tokens and single characters are "
            "kept; a word whose piece was dropped re-tokenizes into shorter kept pieces, and dropped pieces "
            "need no embedding row; OUT's tokenizer is the pruned one",
        )
        data.add_argument("--prune-top-n", type=int, help="with --prune-vocab: keep only its N most frequent pieces")
    run = parser.add_argument_group("run")
    run.add_argument(
        "--out", required=True, help="output checkpoint directory (its run/ subdirectory holds the training state)"
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out (its settings and data must be unchanged)",
    )
    run.add_argument("--checkpoint-every", type=int, default=200, help="steps between checkpoints (default 200)")
    run.add_argument(
        "--strategy",
        default="default",
        choices=("default", "mirrored", "multiworker"),
        help="tf.distribute strategy (multiworker reads TF_CONFIG; docs/several-machines.md)",
    )
    run.add_argument(
        "--cluster-timeout",
        type=float,
        default=600.0,
        help="multiworker: seconds to wait for the cluster to form and for any worker in a step (default 600)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bars")


def add_parser(subparsers) -> list[str]:
    finetune = subparsers.add_parser("finetune", help="checkpoint + task → fine-tuned classifier (the teacher)")
    finetune.add_argument("--checkpoint", required=True, help="Hugging Face BERT checkpoint (directory or hub id)")
    add_training_arguments(finetune, "finetune")

    distill = subparsers.add_parser("distill", help="teacher + task → bert-tiny/bert-mini student (task KD)")
    distill.add_argument("--teacher", required=True, help="fine-tuned classifier checkpoint (from finetune)")
    distill.add_argument(
        "--preset",
        default="bert-tiny",
        help="student shape: bert-tiny (default), bert-mini, any L<layers>-H<hidden>-A<heads>-F<ffn> "
        "(`boards --shapes BOARD` lists those a board holds), or auto: the board picks it (--board)",
    )
    _add_auto_arguments(distill)
    distill.add_argument(
        "--qat-weight-bits",
        type=int,
        help="quantization-aware distillation: the encoder's weights fake-quantized in the forward as export "
        "--weight-bits stores them (4 or 8; straight-through), and the accuracies reported so; default: float",
    )
    add_training_arguments(distill, "distill")
    more = distill.add_argument_group("teacher-labelled data (train/augment.py)")
    more.add_argument(
        "--augment",
        type=int,
        metavar="N",
        help="add N edited copies of each training sentence (words replaced by the teacher's embedding "
        "neighbours, masked, dropped or swapped; sentences mixed), labelled by the teacher; an epoch is then "
        "(N + 1)x the steps (default: the recipe's)",
    )
    more.add_argument(
        "--unlabeled",
        metavar="FILE|DIR",
        help="in-domain text without labels (a UTF-8 .txt file, one text a line, or a directory of them), "
        "labelled by the teacher and added to the training split",
    )
    _add_layer_arguments(distill)

    return ["finetune", "distill"]


def _add_layer_arguments(distill) -> None:
    layers = distill.add_argument_group("the teacher's layers (train/intermediate.py)")
    recipes = "; ".join(
        f"{name}: "
        + ", ".join(f"--{k.replace('_', '-')} {v:g}" if k != "init" else f"--init {v}" for k, v in r.items())
        for name, r in RECIPES.items()
    )
    layers.add_argument(
        "--recipe",
        choices=tuple(RECIPES),
        help=f"the values of --augment, --init, --intermediate-kd and --intermediate-epochs where they are not "
        f"given ({recipes}); "
        f"default {DEFAULT_RECIPE}, except logits with --prune-vocab or a student (with --preset auto: any shape "
        "of the space) that cannot be cut from the teacher's layers (said when it happens)",
    )
    layers.add_argument(
        "--init",
        choices=INITS,
        help="projected: the student's encoder starts as the teacher's evenly spaced layers projected to its "
        "width (the embeddings' SVD basis; whole teacher heads, the heaviest FFN units); random: fresh layers "
        "when the widths differ",
    )
    layers.add_argument(
        "--intermediate-kd",
        type=float,
        metavar="WEIGHT",
        help="weight of the intermediate terms: each mapped layer's hidden states through a learned map to "
        "the teacher's width (MSE) and its Q/K/V self-attention relations (KL); the teacher runs every "
        "step (0: off)",
    )
    layers.add_argument(
        "--intermediate-epochs",
        type=float,
        help="with --intermediate-kd: first train that many epochs on the intermediate terms alone, then "
        "--epochs on the logits without them (0: the terms join every logits step)",
    )
    layers.add_argument(
        "--relation-heads",
        type=int,
        default=8,
        help="relation heads Q/K/V are split into for --intermediate-kd; must divide both widths (default 8)",
    )


def apply_recipe(args) -> str:
    """Fill --augment, --init, --intermediate-kd and --intermediate-epochs not given from --recipe, else
    from the default recipe; its name."""
    name = args.recipe or default_recipe(args)
    for key, value in RECIPES[name].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return name


def default_recipe(args) -> str:
    """DEFAULT_RECIPE, or logits where the layer terms cannot run: --prune-vocab, or a student (with
    --preset auto: any shape of the space) that cannot be cut from this teacher's layers (said in one line)."""
    if args.prune_vocab:
        return "logits"
    if DEFAULT_RECIPE == "layers":
        from tflm_mcubert.model.hf_import import resolve_checkpoint_dir

        teacher = BertConfig.from_json_file(resolve_checkpoint_dir(args.teacher) / "config.json")
        students = [s.config(0, 0) for s in shape_candidates()] if args.preset == AUTO else [preset_config(args.preset)]
        why = next(filter(None, (layers_misfit(args, teacher, student) for student in students)), None)
        if why:
            log(f"distill recipe: logits, as the layers recipe cannot run here: {why}")
            return "logits"
    return DEFAULT_RECIPE


def layers_misfit(args, teacher: BertConfig, student: BertConfig) -> str | None:
    """Why the layers recipe (or the layer options given) cannot distil `student` from `teacher`, or None."""
    projected = args.init in (None, "projected")  # what the recipe sets, unless --init says otherwise
    return (projected and projection_misfit(teacher, student)) or (
        args.intermediate_kd != 0 and relation_misfit(teacher.hidden_size, student.hidden_size, args.relation_heads)
    )


def layer_options(args) -> LayerKD:
    recipe = apply_recipe(args)
    layer_kd = LayerKD(args.intermediate_kd, args.intermediate_epochs, args.relation_heads, args.init).validate()
    log(f"distill recipe: {recipe} (--augment {args.augment}, --init {args.init}, --intermediate-kd "
        f"{args.intermediate_kd:g}, --intermediate-epochs {args.intermediate_epochs:g})")  # fmt: skip
    return layer_kd


def _add_auto_arguments(distill) -> None:
    auto = distill.add_argument_group(
        "--preset auto: the shapes that fit --board (as `boards --shapes` prices them) are cut to a few along "
        "their latency/size front; each is distilled with the same options (same steps) in OUT/shapes/<shape>/, "
        "taken the board path (--rank-by board) and the best on validation is written to OUT"
    )
    auto.add_argument("--board", help="the board the student must fit (one of: " + ", ".join(BOARDS) + ")")
    auto.add_argument("--max-latency-ms", type=float, help="admit only shapes whose encoder is estimated under it")
    auto.add_argument(
        "--shape-candidates",
        type=int,
        metavar="N",
        help=f"train at most N shapes, from the fastest to the largest that fit (default {DEFAULT_COUNT}), "
        "and BERT-tiny when the board admits it",
    )
    auto.add_argument(
        "--export-seq-len", type=int, help="the sequence the shapes are priced at (default: --max-seq-len)"
    )
    auto.add_argument(
        "--rank-by",
        choices=RANKINGS,
        help="board (default): rank the candidates on their integer model's dev accuracy after a short board "
        "search (`search --board --mode adaptive`, OUT/shapes/<shape>/board/), what the board will run; student: "
        "on the distilled float student's, no search",
    )
    auto.add_argument(
        "--embedding-bits",
        choices=TABLE_WIDTHS,
        help="--rank-by board: the word tables' width on each candidate's board path (search --embedding-bits): "
        "8, 4 (twice the numbers in the same bytes, where the encoder leaves the tables little Flash) or auto "
        "(both searched, the better integer model on dev kept); default: search's own, int8",
    )


AUTO_ONLY = ("board", "max_latency_ms", "shape_candidates", "export_seq_len", "rank_by", "embedding_bits")
RANKINGS = ("board", "student")


def check_auto_arguments(args) -> None:
    """--preset auto's options go with it, and it needs a board; refused before any work."""
    if args.preset != AUTO:
        given = [f"--{name.replace('_', '-')}" for name in AUTO_ONLY if getattr(args, name) is not None]
        if given:
            raise UserError(f"{', '.join(given)}: only with --preset auto (the board picks the student)")
        return
    if args.board is None:
        raise UserError("--preset auto needs --board: the board whose Flash, SRAM and clock pick the student")
    get_board(args.board)  # an unknown board fails here, not after the teacher is loaded
    if args.qat_weight_bits is not None:
        raise UserError(
            "--preset auto trains each shape quantization-aware at its own weight width; drop --qat-weight-bits"
        )
    if args.shape_candidates is not None and args.shape_candidates < 1:
        raise UserError(f"--shape-candidates must be at least 1, got {args.shape_candidates}")
    if args.max_latency_ms is not None and args.max_latency_ms <= 0:
        raise UserError(f"--max-latency-ms must be positive, got {args.max_latency_ms:g}")
    if args.embedding_bits is not None and args.rank_by == "student":
        raise UserError("--embedding-bits sets the board path's word tables; --rank-by student takes none")
    check_seq_len(args.export_seq_len or args.max_seq_len, flag="--export-seq-len")


def teacher_vocabulary(source: str, seq_len: int) -> tuple[int, int, int]:
    """(vocabulary size, labels, tokenizer blob bytes) of the teacher: what the students inherit, read
    without building the model; its position table (the students' too) must hold `seq_len`. The blob is
    counted as `search --board` will count it, split into the default clusters' piece lists."""
    from tflm_mcubert.model.hf_import import load_tokenizer, resolve_checkpoint_dir

    ckpt = resolve_checkpoint_dir(source)
    config = BertConfig.from_json_file(ckpt / "config.json")
    if not config.num_labels:
        raise UserError(f"--teacher {source}: has no classifier; fine-tune it first (the finetune command)")
    check_seq_len(seq_len, config, flag="--export-seq-len")
    return config.vocab_size, config.num_labels, tokenizer_blob_bytes(load_tokenizer(ckpt, config), DEFAULT_CLUSTERS)


def run_auto_distill(args, data, train, pruning, augmentation, layer_kd: LayerKD, out) -> dict:
    """`distill --preset auto`: price the shapes on the board, train the survivors, keep the best on dev."""
    from tflm_mcubert.train import workflows

    board = get_board(args.board)
    seq_len = args.export_seq_len or args.max_seq_len
    vocab_size, labels, vocab_bytes = teacher_vocabulary(args.teacher, seq_len)
    log(f"pricing the student shapes on {board.name} at {seq_len} tokens ...")
    # The teacher's whole vocabulary and tokenizer blob: with --prune-vocab the student's are smaller, so a
    # shape priced to fit here fits all the more.
    priced = shape_space(board, seq_len, vocab_size=vocab_size, labels=labels, vocab_bytes=vocab_bytes)
    run_only = ("checkpoint_every", "strategy", "cluster_timeout", "resume", "progress")
    training = {
        "teacher": workflows.checkpoint_fingerprint(args.teacher),
        "data": dataclasses.asdict(data),
        "train": {k: v for k, v in dataclasses.asdict(train).items() if k not in run_only},
        "prune": None if pruning is None else dataclasses.asdict(pruning),
        "augment": dataclasses.asdict(augmentation),
    }
    if layer_kd.settings():  # absent at the defaults, so searches from before the layer options resume
        training["layers"] = layer_kd.settings()
    count = DEFAULT_COUNT if args.shape_candidates is None else args.shape_candidates
    plan = plan_search(priced, board.name, seq_len, count=count, max_latency_ms=args.max_latency_ms, training=training)
    names = ", ".join(p.shape.name for p in plan.candidates)
    log(f"{plan.fitting} of {plan.priced} shapes fit; training {len(plan.candidates)}: {names}")
    check_layer_options(args, [p.shape for p in plan.candidates])

    def train_at(shape, folder):
        return workflows.distill(
            args.teacher,
            output_directory(folder),
            data,
            train,
            preset=shape.preset,
            pruning=pruning,
            qat_weight_bits=shape.weight_bits,  # scored with the weights as the export will store them
            augmentation=augmentation,
            layer_kd=layer_kd,  # every candidate the same recipe: the accuracies compare shapes, not recipes
        )

    def board_path_at(shape, folder):
        return board_accuracy(args, shape.weight_bits, folder, seq_len)

    ranked = (args.rank_by or RANKINGS[0]) == "board"
    metrics = run_shape_search(plan, out, train_at, resume=train.resume, rank_at=board_path_at if ranked else None)
    log(f"wrote {draw_shape_search(metrics['shape_search'], out / SHAPE_FIGURE)} (dev accuracy against cost)")
    print_shape_choice(metrics["shape_search"])
    return metrics


def check_layer_options(args, shapes) -> None:
    """The layer options given (--recipe layers, --init projected, --intermediate-kd) can distil every
    candidate from the teacher, refused before any training otherwise."""
    from tflm_mcubert.model.hf_import import resolve_checkpoint_dir

    teacher = BertConfig.from_json_file(resolve_checkpoint_dir(args.teacher) / "config.json")
    for shape in shapes:
        why = layers_misfit(args, teacher, shape.config(0, 0))
        if why:
            raise UserError(f"--preset auto: candidate {shape.name}: {why}")


def print_shape_choice(report: dict) -> None:
    """Which shape `--preset auto` chose, by how much it led on dev, and every candidate's dev accuracy."""
    margin = report["dev_margin"]
    lead = "the only candidate" if margin is None else f"{margin:+.2f} dev points over the next best"
    scores = ", ".join(
        f"{c['shape']} {100 * ranked_accuracy(c):.2f} ({c['latency_ms']:.1f} ms est.{_tables(c)})"
        for c in report["candidates"]
    )
    which = "on the board path" if BOARD in report["candidates"][0] else "of the student"
    print(f"chosen {report['chosen']} ({lead}; dev accuracy {which}: {scores})")


def _tables(candidate: dict) -> str:
    """ ", int4 word tables" where the candidate's board path stored its tables at 4 bits (int8: unsaid)."""
    return ", int4 word tables" if candidate.get(BOARD, {}).get("embedding_bits") == 4 else ""


def training_options(args, command: str):
    from tflm_mcubert.train.workflows import DataOptions, TrainOptions

    data = DataOptions(
        task=args.task,
        text_column=args.text_column,
        text_pair_column=args.text_pair_column,
        label_column=args.label_column,
        max_seq_len=args.max_seq_len,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
    )
    train = TrainOptions(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        kd_weight=getattr(args, "kd_weight", 0.0),
        temperature=getattr(args, "temperature", 2.0),
        hidden_kd=getattr(args, "hidden_kd", 0.0),
        checkpoint_every=args.checkpoint_every,
        strategy=args.strategy,
        cluster_timeout=args.cluster_timeout,
        resume=args.resume,
        progress=not args.quiet,
    )
    if train.epochs <= 0 or train.lr <= 0:
        raise UserError(f"{command}: --epochs and --lr must be positive")
    return data, train


def pruning_from_args(args):
    from tflm_mcubert.compress.vocab_pruning import Pruning

    corpus, top_n = getattr(args, "prune_vocab", None), getattr(args, "prune_top_n", None)
    if top_n is not None and not corpus:
        raise UserError("--prune-top-n needs --prune-vocab CORPUS")
    if corpus is None:
        return None
    pruning = Pruning(corpus, top_n)
    pruning.validate()
    return pruning


def run(args) -> int:
    from tflm_mcubert.train import workflows

    if args.command == "distill":
        check_auto_arguments(args)
        layer_kd = layer_options(args)
    data, train = training_options(args, args.command)
    pruning = pruning_from_args(args)
    out = output_directory(args.out)
    if args.command == "finetune":
        metrics = workflows.finetune(args.checkpoint, out, data, train)
        shown = ("validation_accuracy", "test_accuracy")
    elif args.preset == AUTO:
        augmentation = Augmentation(args.augment, args.unlabeled)
        metrics = run_auto_distill(args, data, train, pruning, augmentation, layer_kd, out)
        shown = ("preset", "validation_accuracy", "test_accuracy", "teacher_validation_accuracy")
    else:
        augmentation = Augmentation(args.augment, args.unlabeled)
        metrics = workflows.distill(
            args.teacher,
            out,
            data,
            train,
            preset=args.preset,
            pruning=pruning,
            qat_weight_bits=args.qat_weight_bits,
            augmentation=augmentation,
            layer_kd=layer_kd,
        )
        shown = ("validation_accuracy", "test_accuracy", "teacher_validation_accuracy", "teacher_test_accuracy")
    return print_metrics(metrics, shown, out)


def print_metrics(metrics: dict, shown: tuple[str, ...], out) -> int:
    """The figures a training command prints at its end, one `name value` pair a line, then `out OUT`."""
    if "vocab_pruning" in metrics:
        shown += ("tokens_kept",)
        metrics = {**metrics, "tokens_kept": metrics["vocab_pruning"]["tokens_kept"]}
    for key in shown:
        value = metrics[key]
        print(f"{key} {value:.6f}" if isinstance(value, float) else f"{key} {value}")
    print(f"out {out}")
    return 0

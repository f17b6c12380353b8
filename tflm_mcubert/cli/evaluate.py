"""`evaluate`: how good are the deployable models? Float vs MCUBERT int8 (numpy reference) vs stock TFLM.

Two measures, on the same inputs for every model:

  --task NAME   accuracy on the task's test split (a classifier checkpoint: argmax of the logits; `--split
                validation test` measures each split listed, the models loaded and calibrated once)
  (default)     fidelity: cosine of the mean-pooled last hidden state against the float model, per
                text (20 held-out built-in sentences, or --text FILE), as min and mean; for a classifier,
                also the agreement of argmax(logits) with the float model

Every text of the split (or file) is measured unless --samples says fewer; the output says how many of
how many. The int8 model is calibrated exactly as `export --schedule mcubert` does (same calibration data
and settings; tiles do not change its bytes), and by default stores what export would store (the word
tables at the width a searched checkpoint was fine-tuned for). `--embedding-bits 8 4` evaluates both
storages of the embedding's word tables side by side: "int8", and "int4" (int4 word tables, SPEC 4.1.1;
everything else int8), as `export --embedding-bits 4` writes them; `--weight-bits 4` likewise the int4
encoder weights of `export --weight-bits 4` (SPEC 3.1.1), reported with a "+w4" suffix. `--stock` also
converts the stock int8 .tflite and runs it in the tflite-micro interpreter. `--dump DIR` writes, per
evaluated text, an npz with every layer's float output and int8 output (raw and dequantized) for debugging.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from tflm_mcubert.cli import seed_argument
from tflm_mcubert.cli.export import trained_storage_bits
from tflm_mcubert.data.calibration import (
    Calibration,
    evaluation_sentences,
    random_samples,
    read_sentences,
    tokenize,
)
from tflm_mcubert.data.tasks import TEXT, TEXT_PAIR, label_names, load_task
from tflm_mcubert.boards import get_board, parse_size
from tflm_mcubert.errors import UserError
from tflm_mcubert.export.decoder_evaluation import evaluate_decoder
from tflm_mcubert.export.decoder_export import is_decoder_checkpoint
from tflm_mcubert.export.request import ExportRequest
from tflm_mcubert.export.mcubert_export import default_compression
from tflm_mcubert.export.pipeline import load_model
from tflm_mcubert.files import output_directory, output_file
from tflm_mcubert.model.config import check_seq_len
from tflm_mcubert.model.labels import are_default
from tflm_mcubert.model.pooling import mean_pool
from tflm_mcubert.ops.widths import Widths
from tflm_mcubert.quantize.calibrate import CalibrationSettings, calibrate, model_inputs
from tflm_mcubert.quantize.float_model import FloatBert, attention_forward, mlp_forward
from tflm_mcubert.quantize.qat import QatSettings, distill
from tflm_mcubert.runtime.tflm_runner import TflmRunner


def add_parser(subparsers) -> list[str]:
    ev = subparsers.add_parser("evaluate", help="accuracy / fidelity of float, int8 reference and stock models")
    ev.add_argument(
        "--checkpoint",
        help="Hugging Face BERT checkpoint (default: --preset, random weights), or a GPT-2 / GPT-Neo decoder: its "
        "perplexity on --task's --split or --text, float, int8 and int8 as exported for --board",
    )
    ev.add_argument("--board", default="nucleo-f746zg", help="a decoder: the board its export is sized for")
    ev.add_argument("--flash", help="a decoder: size its export for this much Flash (e.g. 700KB) on --board's SRAM")
    ev.add_argument("--preset", default="bert-tiny")
    ev.add_argument("--num-labels", type=int, default=2, help="classifier outputs of the random preset model")
    ev.add_argument("--task", help="accuracy on this task's test split (e.g. rotten_tomatoes, sst2, a file)")
    ev.add_argument(
        "--split",
        nargs="+",
        choices=("validation", "test"),
        help="with --task: the split(s) measured (default: validation and test; a decoder's, and with --dump: "
        "test); the JSON's top level holds the last one, `by_split` every one",
    )
    ev.add_argument("--text-column", default="text", help="--task a local file: its text column (default text)")
    ev.add_argument("--text-pair-column", help="--task a local file: the second text of sentence-pair tasks")
    ev.add_argument("--label-column", default="label", help="--task a local file: its label column (default label)")
    ev.add_argument("--text", help="fidelity on these texts (one a line; default: built-in sentences)")
    ev.add_argument("--samples", type=int, help="texts evaluated (default: all of the split or file)")
    ev.add_argument("--seq-len", type=int, default=128)
    ev.add_argument(
        "--embedding",
        default="dense",
        choices=("dense", "auto"),
        help="dense (default): evaluate the checkpoint as is; auto: compress an uncompressed "
        "embedding first, as export does (the float reference is then the compressed model)",
    )
    ev.add_argument(
        "--embedding-bits",
        type=int,
        nargs="+",
        choices=(8, 4),
        help="storage of the embedding's word tables to evaluate: 8 (int8), 4 (packed int4, as "
        "export --embedding-bits 4), or both (8 4); the models are reported as int8 and int4 "
        "(default: what export stores, the width a searched checkpoint was fine-tuned for, else 8)",
    )
    ev.add_argument(
        "--weight-bits",
        type=int,
        nargs="+",
        default=[8],
        choices=(8, 4),
        help="storage of every attention and MLP linear layer (an encoder's or a decoder's): 8 (int8, default), "
        "4 (packed int4, as export --weight-bits 4), or both (8 4); int4 weights are reported with a +w4 suffix",
    )
    ev.add_argument(
        "--qat-steps",
        type=int,
        default=0,
        help="as for export: steps of a quantization-aware fine-tune (distillation from the float model on the "
        "calibration samples) before each quantized model's calibration; with int4 word tables for int4; a "
        "decoder: its int8 perplexities after QAT beside those of PTQ",
    )
    ev.add_argument("--calibration", help="as for export (text file or 'random')")
    ev.add_argument("--calibration-samples", type=int, default=32)
    ev.add_argument("--stock", action="store_true", help="also evaluate the stock int8 .tflite in TFLM")
    ev.add_argument("--dump", help="directory for per-text, per-layer tensors (npz)")
    ev.add_argument("--json", help="also write the results as JSON here")
    ev.add_argument("--seed", type=seed_argument, default=0)
    return ["evaluate"]


def _texts(args, tokenizer, model_labels: list[str] | None = None, split: str = "test"):
    """(texts or pairs, labels or None, source description, the names to report labels by); the task's
    label ids are renumbered to the model's when both name the same labels in another order."""
    if args.task:
        columns = {"text_column": args.text_column, "label_column": args.label_column}
        task = load_task(args.task, seed=args.seed, text_pair_column=args.text_pair_column, **columns)
        test = task[split]
        rows = test.select(range(_count(args.samples, len(test))))
        pairs = rows[TEXT_PAIR] if TEXT_PAIR in rows.column_names else None
        texts = list(zip(rows[TEXT], pairs)) if pairs else list(rows[TEXT])
        task_names = label_names(task)
        if model_labels is not None and len(task_names) != len(model_labels):
            raise UserError(
                f"--task {args.task} has {len(task_names)} labels, the checkpoint's classifier {len(model_labels)}"
            )
        labels = _model_ids(np.asarray(rows["label"]), task_names, model_labels)
        shown = model_labels if model_labels and not are_default(model_labels) else task_names
        return texts, labels, f"the {args.task} {split} split ({len(texts)} of its {len(test)} rows)", shown
    texts = read_sentences(args.text, flag="--text") if args.text else evaluation_sentences()
    used = texts[: _count(args.samples, len(texts))]
    return used, None, f"{args.text or 'held-out built-in sentences'} ({len(used)} of {len(texts)} texts)", None


def _count(samples: int | None, available: int) -> int:
    return available if samples is None else min(samples, available)


def _model_ids(labels: np.ndarray, task_names: list[str], model_names: list[str] | None) -> np.ndarray:
    """The task's label ids as the model's ids: the same when either side has no names (or they agree),
    renumbered when the names are the same set in another order; refused when the names differ."""
    if not model_names or are_default(model_names) or are_default(task_names) or task_names == model_names:
        return labels
    if sorted(task_names) != sorted(model_names):
        raise UserError(
            f"--task labels {task_names} are not the checkpoint's id2label {model_names}: "
            f"the model was not trained on this task's labels"
        )
    return np.asarray([model_names.index(task_names[i]) for i in labels], dtype=labels.dtype)


def _tokenize(tokenizer, texts, seq_len: int, vocab_size: int, seed: int) -> list[dict]:
    if tokenizer is None:
        return random_samples(vocab_size, seq_len, len(texts), seed=seed + 1)
    return tokenize(tokenizer, texts, seq_len)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


@dataclasses.dataclass
class _Models:
    """What evaluate compares: the float model, its int8 MCUBERT model and, with --stock, stock TFLM."""

    config: object
    source: dict
    tokenizer: object
    float_model: object
    quantized: dict  # "int8" / "int4" (int4 word tables) -> QuantizedBert
    remap: np.ndarray | None  # ids the tokenizer emits -> the compressed model's ids (None: the same)
    calibration_source: str
    stock_runner: object | None


def _run_decoder(args) -> int:
    """Perplexity of a causal LM (export/decoder_evaluation.py); --samples: held-out blocks the int8 models read."""
    if args.stock:
        raise UserError("--stock: a decoder has no stock TFLite graph to compare (its step is MCUBERT ops only)")
    if args.text:
        texts, where = read_sentences(args.text, flag="--text"), args.text
    elif args.task:
        split = (args.split or ["test"])[-1]
        dataset = load_task(args.task, seed=args.seed)
        if split not in dataset:
            raise UserError(f"task {args.task!r} has no {split} split")
        texts, where = list(dataset[split]["text"]), f"the {args.task} {split} split"
    else:
        raise UserError("a decoder's evaluate needs --task (its --split) or --text: the held-out text")
    board = get_board(args.board)
    if args.flash:
        board = dataclasses.replace(
            board, name=f"{board.name} with {args.flash} Flash", flash_bytes=parse_size(args.flash)
        )
    request = ExportRequest(
        out_dir=Path("."),
        board=board,
        checkpoint=args.checkpoint,
        calibration=args.calibration,
        calibration_count=args.calibration_samples,
        seed=args.seed,
        qat_steps=args.qat_steps,
    )
    result = evaluate_decoder(
        request, texts, limit=args.samples, weight_bits=args.weight_bits, embedding_bits=args.embedding_bits or [8]
    )
    result = {"texts": where, **result}
    print(json.dumps(result, indent=2))
    if args.json:
        output_file(args.json, "--json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


def run(args) -> int:
    if args.samples is not None and args.samples < 1:
        raise UserError(f"--samples must be at least 1, got {args.samples}")
    if is_decoder_checkpoint(args.checkpoint):
        return _run_decoder(args)
    if args.qat_steps < 0:
        raise UserError(f"--qat-steps must be 0 or more, got {args.qat_steps}")
    if args.split and not args.task:
        raise UserError("--split goes with --task")
    if args.dump and args.split and len(set(args.split)) > 1:
        raise UserError("--dump traces one --split at a time")
    splits = args.split or (["test"] if args.dump else ["validation", "test"])
    check_seq_len(args.seq_len)
    json_path = output_file(args.json, "--json") if args.json else None
    dump = output_directory(args.dump, "--dump") if args.dump else None
    if args.text:
        read_sentences(args.text, flag="--text")  # a bad --text fails before the models load
    models = _load_models(args)
    common = {
        "model": {**models.source, "config": models.config.to_hf_dict()},
        "calibration": models.calibration_source,
        "seq_len": args.seq_len,
    }
    by_split = {}
    for split in dict.fromkeys(splits) if args.task else ["test"]:
        texts, labels, text_source, names = _texts(args, models.tokenizer, models.source.get("labels"), split)
        samples = _tokenize(models.tokenizer, texts, args.seq_len, models.config.vocab_size, args.seed)
        scores, predictions = _score(models, samples, args.seq_len, dump)
        results = {**common, "texts": text_source}
        print(f"measured on {text_source}; seq_len {args.seq_len}")
        _summarize(results, scores, predictions, labels)
        if labels is not None:
            _per_label_report(results, predictions, labels, names)
        by_split[split] = {k: v for k, v in results.items() if k not in common}
    if args.task:
        results["by_split"] = by_split
    if dump:
        print(f"  per-layer tensors in {dump}/sample_*.npz")
    if json_path:
        json_path.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _load_models(args) -> _Models:
    model, tokenizer, source = load_model(
        args.checkpoint, preset_name=args.preset, num_labels=args.num_labels, seed=args.seed
    )
    config = model.config
    check_seq_len(args.seq_len, config)
    if args.task and not config.num_labels:
        raise UserError("--task needs a classifier (BertForSequenceClassification) checkpoint")
    source_text = Calibration.load(
        args.calibration,
        tokenizer=tokenizer,
        vocab_size=config.vocab_size,
        count=args.calibration_samples,
        seed=args.seed,
        task=source.get("task"),
    )
    dense_model, compressed_here = model, None
    if args.embedding == "auto":
        model, compressed_here = default_compression(model, tokenizer, source_text.sentences)
    calibration, calibration_source = source_text.samples(args.seq_len)
    print(f"calibration: {calibration_source}", file=sys.stderr, flush=True)
    float_model = FloatBert.from_keras(model)
    # The tokenizer emits the model's ids unless the embedding was compressed just now.
    remap = float_model.permutation if compressed_here else None
    inputs = model_inputs(calibration, args.seq_len, remap)
    quantized = {}
    for bits in dict.fromkeys(_embedding_bits(args)):  # in the order given, once each
        for weight_bits in dict.fromkeys(args.weight_bits):
            settings = CalibrationSettings(embedding_bits=bits, widths=Widths.uniform(weight_bits, "--weight-bits"))
            name = _quantized_name(bits, weight_bits)
            quantized[name], ranges = calibrate(float_model, inputs, seq_len=args.seq_len, settings=settings)
            if args.qat_steps:
                quantized[name] = _fine_tuned(model, inputs, (quantized[name], ranges), settings, args)
    stock_runner = None
    if args.stock:
        from tflm_mcubert.export.stock import export_stock

        stock = export_stock(dense_model, seq_len=args.seq_len, precision="int8", calibration=calibration)
        stock_runner = TflmRunner(stock)
    return _Models(config, source, tokenizer, float_model, quantized, remap, calibration_source, stock_runner)


def _embedding_bits(args) -> list[int]:
    """--embedding-bits, or export's default: the width the checkpoint's search fine-tuned for, else 8."""
    if args.embedding_bits:
        return args.embedding_bits
    trained = trained_storage_bits(args.checkpoint)
    if trained == 4:
        print("word tables stored in int4, as export stores them for this checkpoint (its search fine-tuned for it)")
    return [trained if trained in (4, 8) else 8]


def _quantized_name(embedding_bits: int, weight_bits: int = 8) -> str:
    return ("int8" if embedding_bits == 8 else "int4") + ("" if weight_bits == 8 else "+w4")


def _fine_tuned(model, inputs, calibrated, settings, args):
    """The quantized model after export's KD quantization-aware fine-tune (quantize/qat.py), calibrated again.
    `calibrated`: (QuantizedBert, RangeSet) of the first calibration."""
    first, ranges = calibrated
    samples = [
        {
            "input_ids": x.input_ids[None],
            "attention_mask": x.valid[None].astype(np.int32),
            "token_type_ids": x.token_type_ids[None],
        }
        for x in inputs
    ]
    qat = QatSettings(
        steps=args.qat_steps, seed=args.seed, embedding_bits=settings.embedding_bits, widths=settings.widths
    )
    student, losses = distill(model, samples, ranges, qat, first)
    print(
        f"  QAT ({settings.embedding_bits}-bit word tables, {settings.widths.default}-bit weights): "
        f"loss {losses[0]:.5f} -> {losses[-1]:.5f}"
    )
    return calibrate(FloatBert.from_keras(student), inputs, seq_len=args.seq_len, settings=settings)[0]


def _score(models: _Models, samples: list, seq_len: int, dump: Path | None) -> tuple[dict, dict]:
    """Per model: mean-pooled cosine against float ("int8", "int4", "stock") and argmax predictions."""
    scores: dict[str, list] = {name: [] for name in (*models.quantized, "stock")}
    predictions: dict[str, list] = {name: [] for name in ("float", *models.quantized, "stock")}
    first = next(iter(models.quantized))  # the one --dump traces
    pairs = zip(model_inputs(samples, seq_len, models.remap), samples)
    for n, (x, sample) in enumerate(_progress(pairs, len(samples), f"{len(samples)} sentences through every model")):
        float_layers: dict[str, np.ndarray] = {}
        int8_layers: dict[str, np.ndarray] = {}
        want = (
            _traced_float(models.float_model, x, float_layers, models.quantized[first].op_names())
            if dump
            else models.float_model.forward(x.input_ids, x.token_type_ids, x.valid)
        )
        pooled = mean_pool(want["last_hidden_state"][None], x.valid[None])[0]
        if "logits" in want:
            predictions["float"].append(int(np.argmax(want["logits"])))
        for name, quantized in models.quantized.items():
            got_q = quantized.run(
                x.input_ids,
                x.token_type_ids,
                x.mask(0),
                trace=(lambda key, v: int8_layers.__setitem__(key, v)) if dump and name == first else None,
            )
            got = quantized.dequantized(got_q)
            scores[name].append(_cosine(pooled, mean_pool(got["last_hidden_state"][None], x.valid[None])[0]))
            if "logits" in want:
                predictions[name].append(int(np.argmax(got["logits"])))
        if models.stock_runner is not None:
            out = models.stock_runner.run(sample)
            if "logits" in out:
                predictions["stock"].append(int(np.argmax(out["logits"])))
            if "last_hidden_state" in out:
                stock_pooled = mean_pool(np.asarray(out["last_hidden_state"]), sample["attention_mask"])[0]
                scores["stock"].append(_cosine(pooled, stock_pooled))
        if dump:
            _dump_sample(dump / f"sample_{n:04d}.npz", first, models.quantized[first], x, float_layers, int8_layers)
    return scores, predictions


def _progress(items, total: int, what: str):
    """A progress bar on stderr (redrawn every 30 s in a log file, as the trainer's)."""
    from tqdm.auto import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(items, total=total, desc=what, unit="sentence", file=sys.stderr, dynamic_ncols=interactive,
                mininterval=0.5 if interactive else 30.0)  # fmt: skip


def _dump_sample(path: Path, model_name: str, quantized, x, float_layers: dict, quantized_layers: dict) -> None:
    """The float and quantized layers of one text; the quantized ones under the model's name ("int8",
    "int4", "int8+w4", ...): every layer's output is int8 whatever the storage of its weights."""
    arrays = {f"float/{k}": v for k, v in float_layers.items()}
    arrays.update({f"{model_name}/{k}": v for k, v in quantized_layers.items()})
    quants = {node.name: node.output_quant for node in quantized.nodes()}
    for name, v in quantized_layers.items():
        arrays[f"{model_name}_dequantized/{name}"] = quants[name].dequantize(v)
    np.savez_compressed(path, input_ids=x.input_ids, valid=x.valid, **arrays)


def _summarize(results: dict, scores: dict, predictions: dict, labels) -> None:
    """Accuracy (with labels), cosine and argmax agreement with float, into `results` and printed."""
    if labels is not None:
        for name in predictions:
            if predictions[name]:
                accuracy = float(np.mean(np.asarray(predictions[name]) == labels[: len(predictions[name])]))
                results[f"{name}_accuracy"] = round(accuracy, 4)
                print(f"  {name:6s} accuracy {accuracy:.4f}")
        # Per example, for paired tests between models (McNemar, bootstrap) on the same texts.
        results["labels"] = [int(v) for v in labels[: len(predictions["float"])]]
        results["predictions"] = {name: values for name, values in predictions.items() if values}
    for name in scores:
        if scores[name]:
            low, mean = min(scores[name]), float(np.mean(scores[name]))
            results[f"{name}_cosine"] = {"min": round(low, 5), "mean": round(mean, 5)}
            print(f"  {name:6s} mean-pooled cosine vs float: min {low:.4f} mean {mean:.4f}")
        if predictions[name] and predictions["float"]:
            agree = float(np.mean(np.asarray(predictions[name]) == np.asarray(predictions["float"])))
            results[f"{name}_argmax_agreement"] = round(agree, 4)
            print(f"  {name:6s} argmax agreement with float {agree:.4f}")


def _per_label_report(results: dict, predictions: dict, labels: np.ndarray, names: list[str]) -> None:
    """Per label and model: precision, recall (the label's accuracy) and support, and the confusion matrix
    (rows: true label, columns: predicted), into `results["per_label"]` and printed."""
    results["label_names"] = names
    results["per_label"] = {}
    for model, predicted in predictions.items():
        if not predicted:
            continue
        table = per_label_figures(np.asarray(predicted), labels[: len(predicted)], len(names))
        results["per_label"][model] = {"labels": dict(zip(names, table["labels"])), "confusion": table["confusion"]}
        print(f"  {model}: per label (precision / recall / support) and confusion matrix (rows: true label)")
        width = max(len(repr(n)) for n in names)
        print(" " * (width + 36) + " ".join(f"{i:>6d}" for i in range(len(names))))
        for i, (name, figures, row) in enumerate(zip(names, table["labels"], table["confusion"])):
            cells = " ".join(f"{v:>6d}" for v in row)
            p, r = (f"{figures[k]:.4f}" if figures[k] is not None else "   n/a" for k in ("precision", "recall"))
            print(f"    {name!r:<{width}} ({i}) {p} / {r} / {figures['support']:>6d}   {cells}")


def per_label_figures(predicted: np.ndarray, labels: np.ndarray, count: int) -> dict:
    """{"labels": per label {precision, recall, support} (None where undefined), "confusion": [true][predicted]}."""
    confusion = np.zeros((count, count), np.int64)
    np.add.at(confusion, (labels.astype(np.int64), predicted.astype(np.int64)), 1)
    figures = []
    for i in range(count):
        predicted_i, support = int(confusion[:, i].sum()), int(confusion[i].sum())
        figures.append(
            {
                "precision": round(confusion[i, i] / predicted_i, 4) if predicted_i else None,
                "recall": round(confusion[i, i] / support, 4) if support else None,
                "support": support,
            }
        )
    return {"labels": figures, "confusion": confusion.tolist()}


def _traced_float(float_model, x, layers: dict, names: list[str]) -> dict:
    """The float forward, keeping every op's output under the int8 trace's `names` (the nodes')."""
    ignore = lambda name, values: None  # noqa: E731
    h = float_model.embedding.forward(x.input_ids, x.token_type_ids)
    outputs = [h]
    for fa, fm in float_model.layers:
        h = attention_forward(fa, h, x.valid, "", ignore)
        outputs.append(h)
        h = mlp_forward(fm, h, x.valid, "", ignore)
        outputs.append(h)
    out = {"last_hidden_state": h}
    if float_model.head is not None:
        out["logits"] = float_model.head.forward(h[:1])[0]
        outputs.append(out["logits"])
    layers.update(zip(names, outputs, strict=True))
    return out

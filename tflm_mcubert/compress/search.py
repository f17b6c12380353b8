"""The `search` workflow as a function (the CLI in `cli/search.py` only parses into it): the embedding
search of a fine-tuned classifier, then its KD fine-tune, on the steps shared with `finetune` and
`distill` (train/workflows.py). With a `Pruning` (--prune-vocab CORPUS) the classifier's vocabulary is
pruned to the corpus first; its teacher keeps the full vocabulary.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from tflm_mcubert.compress.budget import fit_to_bytes
from tflm_mcubert.compress.nas import SearchJob, SearchOptions, run_search
from tflm_mcubert.compress.vocab_pruning import Pruning
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.clustered_embedding import write_permuted_tokenizer
from tflm_mcubert.model.hf_import import save_checkpoint
from tflm_mcubert.train.distill import Objective
from tflm_mcubert.train.trainer import accuracy
from tflm_mcubert.train.workflows import (
    DataOptions,
    TaskData,
    TrainOptions,
    check_labels,
    checkpoint_fingerprint,
    evaluate,
    load_classifier,
    load_task_data,
    open_run,
    prune_for_training,
    settings_of,
    start,
    teacher_logits,
    write_metrics,
)


def search(
    checkpoint: str,
    out: Path,
    data_opts: DataOptions,
    opts: TrainOptions,
    search_opts: SearchOptions,
    *,
    teacher_source: str | None = None,
    pruning: Pruning | None = None,
    on_step_end=None,
    flash_budget=None,
) -> dict:
    """Compress the word embedding of a fine-tuned classifier (`search_opts.mode`), KD fine-tune it, and
    write the compressed checkpoint (permuted vocabulary) to `out`. With `pruning`, the classifier's
    vocabulary is first pruned to its corpus: the search sees only the kept tokens (a pruned token needs
    no row in any cluster, and the embedding budget counts kept rows only).
    `flash_budget`: the whole-model Flash budget (`search --board`, export/flash_budget.SearchFlashBudget):
    its share for the word tables becomes the byte budget, and once the clusters are known the tokenizer
    blob they imply replaces its estimate (the embedding loses components if that leaves it over)."""
    strategy, began = start(opts)
    teacher_source = teacher_source or checkpoint
    with strategy.scope():
        model, tokenizer, data, teacher_data, pruned, search_opts, whole = _search_model_and_data(
            checkpoint, data_opts, opts, search_opts, pruning, flash_budget
        )
        config = model.config
        teacher, objective = _search_teacher(teacher_source, model, data, opts)
        teacher_fp = checkpoint_fingerprint(teacher_source)
        settings = settings_of(
            "search",
            data_opts,
            opts,
            data,
            checkpoint=checkpoint_fingerprint(checkpoint),
            teacher=teacher_fp,
            search=_settings_of(search_opts),
            **({} if pruning is None else {"prune": dataclasses.asdict(pruning)}),
        )
        run, trainer = open_run(out, settings, opts, strategy, on_step_end)
        logits = teacher_logits(run, teacher, teacher_fp, teacher_data, opts.batch_size, opts.progress)
        uncompressed = evaluate(model, data, opts.batch_size)
        job = SearchJob(
            trainer,
            strategy,
            model,
            data.splits["train"],
            objective,
            logits["train"] if objective.uses_teacher_logits else None,
            opts.batch_size,
            validation=data.splits["validation"],
        )
        outcome = run_search(job, search_opts)
    if whole is not None:
        outcome, whole = _fit_searched_blob(outcome, whole, flash_budget, tokenizer, search_opts.storage_bits)
    permutation = outcome.embedding.permutation
    remap = (lambda split: split) if permutation is None else (lambda split: split.remapped(permutation))
    predictions = {}
    scores = evaluate(outcome.model, data, opts.batch_size, remap, predictions)
    metrics = _search_metrics(
        checkpoint, teacher_source, search_opts, config, outcome, scores, uncompressed, predictions, data
    )
    metrics.update(
        {f"teacher_{s}_accuracy": accuracy(logits[s], teacher_data.splits[s]) for s in ("validation", "test")},
        **({} if pruned is None else {"vocab_pruning": pruned}),
        **({} if whole is None else {"flash_budget": whole.to_json()}),
        seconds=round(time.monotonic() - began, 1),
    )
    if run.writer:
        _save_compressed(outcome, tokenizer, config.vocab_size, search_opts, metrics, out, data_opts.record())
    write_metrics(out, metrics, run.writer)
    return metrics


def _search_metrics(checkpoint, teacher_source, search_opts, config, outcome, scores, uncompressed, predictions, data):
    """metrics.json of a search: accuracies, the embedding's size in parameters and bytes, the search's
    per-stage details and the per-example predictions."""
    description = outcome.embedding.describe(search_opts.storage_bits)
    dense = config.vocab_size * config.hidden_size
    return {
        "command": "search",
        "checkpoint": checkpoint,
        "label_names": data.label_names,
        "teacher": teacher_source,
        "mode": search_opts.mode,
        **scores,
        "embedding_params": description["params"],
        "dense_embedding_params": dense,
        "embedding_fraction": description["params"] / dense,
        "embedding_bytes": description["bytes"],  # as the export stores it, rows at embedding_storage_bits
        "embedding_storage_bits": description["storage_bits"],
        # the accuracies' word tables: "float", or fake-quantized as stored at these bits (`--embedding-bits`)
        "accuracy_tables": search_opts.embedding_bits or "float",
        # the accuracies' encoder weights: "float", or fake-quantized as stored at these bits (`--qat-weight-bits`)
        "accuracy_weights": search_opts.qat_weight_bits or "float",
        "int8_embedding_bytes": outcome.embedding.stored_bytes(8),
        "target_embedding_params": search_opts.target_params,
        "target_embedding_bytes": search_opts.target_bytes,
        **{f"uncompressed_{k}": v for k, v in uncompressed.items()},
        "model_params": outcome.model.count_params(),
        "details": outcome.details,
        # search-then-train (`final_training.py`): the candidates, their dev scores and the one written
        "final_training": outcome.details.get("final_training", {"mode": "continue"}),
        "search_cost": outcome.details.get("search_cost"),  # the search stages' steps and seconds, apart
        "stages": [r.to_dict() for r in outcome.records],
        "predictions": predictions,
        "labels": {s: data.splits[s].labels.astype(int).tolist() for s in ("validation", "test")},
    }


def _search_model_and_data(checkpoint: str, data_opts, opts, search_opts, pruning, flash_budget=None):
    """(model, tokenizer, data, teacher's data, pruning report, search options, whole-model budget): the
    classifier to compress, pruned when asked, its task data, the unpruned checkpoint's tokenization of the
    same examples (the teacher's), and the options with a Flash budget's share for the word tables."""
    model, full_tokenizer, names = load_classifier(checkpoint)
    full_vocab_size = model.config.vocab_size
    if pruning is not None and opts.hidden_kd:
        raise UserError("--prune-vocab with --hidden-kd: the teacher's hidden states follow its own tokenization")
    model, tokenizer, pruned = prune_for_training(model, full_tokenizer, pruning, "--checkpoint")
    config = model.config
    search_opts, whole = _with_flash_budget(search_opts, flash_budget, config, tokenizer)
    search_opts.validate(config.vocab_size, config.hidden_size)
    if tokenizer is not None and len(tokenizer) != config.vocab_size:
        raise UserError(
            f"--checkpoint {checkpoint}: its tokenizer has {len(tokenizer)} tokens and config.json "
            f"vocab_size {config.vocab_size}: the permuted vocabulary needs one token per id"
        )
    data = load_task_data(data_opts, tokenizer, config.vocab_size)
    check_labels(model, data, "--checkpoint", names, strict=True)
    teacher_data = data if pruned is None else load_task_data(data_opts, full_tokenizer, full_vocab_size)
    teacher_data.label_names = data.label_names
    return model, tokenizer, data, teacher_data, pruned, search_opts, whole


def _with_flash_budget(search_opts: SearchOptions, flash_budget, config, tokenizer):
    """(search options, the whole-model budget or None): with a Flash budget, the byte budget of the word
    tables is what the rest of the model leaves of it, at the tables' storage width."""
    if flash_budget is None:
        return search_opts, None
    whole = flash_budget.split(config, tokenizer, search_opts.storage_bits, search_opts.num_clusters)
    return dataclasses.replace(search_opts, target_bytes=whole.embedding_bytes), whole


def _fit_searched_blob(outcome, whole, flash_budget, tokenizer, bits: int):
    """(outcome, budget) with the tokenizer blob the export will pack for the searched clusters (each
    cluster's pieces are lists of their own) in the budget; an embedding over the corrected share drops its
    least-energy components (`fit_to_bytes`) before it is evaluated and saved."""
    whole = flash_budget.with_blob_of(whole, tokenizer, outcome.embedding)
    if outcome.embedding.stored_bytes(bits) <= whole.embedding_bytes:
        return outcome, whole
    embedding = fit_to_bytes(outcome.embedding, whole.embedding_bytes, bits)
    embedding.storage_bits = outcome.embedding.storage_bits  # the fine-tune's stored-table view
    model = outcome.model.with_word_lookup(embedding)
    return dataclasses.replace(outcome, embedding=embedding, model=model), whole


def _search_teacher(teacher_source: str, model, data: TaskData, opts: TrainOptions):
    """(teacher, KD objective). The teacher is the uncompressed model itself by default (the paper's
    "trained full model"): a separate frozen copy, as the searched model's weights move."""
    teacher, _, teacher_names = load_classifier(teacher_source, what="--teacher")
    check_labels(teacher, data, "--teacher", teacher_names, strict=True)
    if opts.hidden_kd and teacher.config.hidden_size != model.config.hidden_size:
        raise UserError(
            f"--hidden-kd needs a teacher as wide as the model ({model.config.hidden_size}); "
            f"--teacher has {teacher.config.hidden_size}"
        )
    objective = Objective(
        kd_weight=opts.kd_weight,
        temperature=opts.temperature,
        hidden_weight=opts.hidden_kd,
        hidden_teacher=teacher if opts.hidden_kd else None,
    )
    return teacher, objective


def _save_compressed(
    outcome, tokenizer, vocab_size: int, search_opts: SearchOptions, metrics: dict, out: Path, task: dict
):
    """The compressed checkpoint: model, permuted tokenizer and the compression block."""
    permutation = outcome.embedding.permutation
    permuted = write_permuted_tokenizer(
        tokenizer, permutation if permutation is not None else np.arange(vocab_size), out
    )
    info = {
        "mode": search_opts.mode,
        "search": dataclasses.asdict(search_opts),
        "details": outcome.details,
        "metrics": {
            k: metrics[k]
            for k in (
                "validation_accuracy",
                "test_accuracy",
                "embedding_params",
                "embedding_bytes",
                "embedding_fraction",
            )
        },
    }
    save_checkpoint(outcome.model, out, permuted, compression_info=info, label_names=metrics["label_names"], task=task)


def _settings_of(search_opts) -> dict:
    """The search options a resumed run must repeat; --qat-weight-bits only when given (earlier runs have none)."""
    settings = dataclasses.asdict(search_opts)
    if settings["qat_weight_bits"] is None:
        del settings["qat_weight_bits"]
    return settings

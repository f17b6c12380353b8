"""A board path's run record, read from the files its steps leave in OUT/<config>-seed<k>/: the search's
metrics.json, evaluate.json (and evaluate-qat.json), their seconds and the export's report.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from board_accuracy_configs import CONFIGS, QAT, quantized_name, variant


def record_from_files(name: str, seed: int, folder: Path) -> dict:
    """A finished run's record, from its search's metrics.json, evaluate.json, their seconds and the export's
    report.json (when it was exported)."""
    model, evaluation, report = folder / "model" / "metrics.json", folder / "evaluate.json", folder / "export"
    qat = folder / "evaluate-qat.json"
    record = make_record(name, seed, json.loads(model.read_text()), json.loads(evaluation.read_text()))
    if qat.is_file():
        add_qat_predictions(record, json.loads(qat.read_text()))
    steps = (("search", model), ("evaluate", evaluation)) + ((("evaluate_qat", qat),) if qat.is_file() else ())
    seconds = {step: path.with_name(path.name + ".seconds") for step, path in steps}
    record["seconds"] = {k: float(v.read_text()) if v.is_file() else 0.0 for k, v in seconds.items()}
    report = report / "report.json"
    record["export"] = flash_of(json.loads(report.read_text())) if report.is_file() else None
    return record


def flash_of(report: dict) -> dict:
    flash = report["fits"]["flash"]
    return {
        "fits": bool(report["fits"]["ok"]),
        "flash_fits": bool(flash["ok"]),
        "model_bytes": flash["model_bytes"],  # .tflite + tokenizer blob
        "budget_bytes": flash["budget_bytes"],
        "tflite_bytes": report["tflite_bytes"],
        "vocab_bytes": report["vocab_bytes"],
        "arena_bytes": report["arena_bytes"],
        "embedding_bytes": report["embedding"]["embedding_bytes"],
        "encoder_bytes": (report.get("encoder") or {}).get("op_bytes"),  # an int8 export has no encoder block
    }


def make_record(name: str, seed: int, metrics: dict, evaluation: dict) -> dict:
    """The run's record: the integer model's (and float's) per-example predictions on dev and test."""
    config = CONFIGS[name]
    splits = evaluation["by_split"]
    labels = {split: splits[split]["labels"] for split in ("validation", "test")}
    models = {"float": "float", **{variant(name, b): quantized_name(config, b) for b in config.evaluate_bits}}
    predictions = {
        key: {split: splits[split]["predictions"][evaluated] for split in ("validation", "test")}
        for key, evaluated in models.items()
    }
    if all(metrics.get("labels", {}).get(split) == labels[split] for split in labels):
        # the model as trained: float encoder, word tables as stored (search's own dev/test predictions)
        predictions["trained"] = {split: metrics["predictions"][split] for split in labels}
    details = metrics.get("details", {})
    return {
        "config": name,
        "seed": seed,
        "setup": dataclasses.asdict(config),
        "labels": labels,
        "predictions": predictions,  # "float", "trained" and one "<config>@w<bits>" per evaluated width
        "accuracy": {
            key: {split: accuracy(p[split], labels[split]) for split in ("validation", "test")}
            for key, p in predictions.items()
        },
        "search_accuracy": {"validation": metrics["validation_accuracy"], "test": metrics["test_accuracy"]},
        "student_accuracy": {s: metrics.get(f"uncompressed_{s}_accuracy") for s in ("validation", "test")},
        "steps": sum(stage["steps"] for stage in metrics["stages"]),
        "embedding_params": metrics.get("embedding_params"),
        "embedding_bytes": metrics.get("embedding_bytes"),
        "adaptive": {"cutoffs": details.get("cutoffs"), "ranks": details.get("ranks")},
        "flash_budget": metrics.get("flash_budget"),
        "vocab_pruning": {k: v for k, v in (metrics.get("vocab_pruning") or {}).items() if "tokens" in k},
    }


def add_qat_predictions(record: dict, evaluation: dict) -> None:
    """The QAT evaluation's integer models as variants `<config>@w<bits>+qat` of `record`."""
    config = CONFIGS[record["config"]]
    splits = evaluation["by_split"]
    if any(splits[split]["labels"] != record["labels"][split] for split in ("validation", "test")):
        raise ValueError(f"{record['config']} seed {record['seed']}: the QAT evaluation's rows are not the PTQ one's")
    for bits in config.evaluate_bits:
        key = variant(record["config"], bits) + QAT
        record["predictions"][key] = {
            split: splits[split]["predictions"][quantized_name(config, bits)] for split in ("validation", "test")
        }
        record["accuracy"][key] = {
            split: accuracy(record["predictions"][key][split], record["labels"][split])
            for split in ("validation", "test")
        }


def accuracy(predictions, labels) -> float:
    return float(np.mean(np.asarray(predictions) == np.asarray(labels)))


def finished_records(out: Path, rebuild: bool = False) -> list[dict]:
    """Every finished run's record; with `rebuild`, made again from its files (and run.json rewritten)."""
    records = []
    for path in sorted(out.glob("*-seed*/run.json")):
        record = json.loads(path.read_text())
        if rebuild and "failed" not in record:
            record = record_from_files(record["config"], record["seed"], path.parent)
            path.write_text(json.dumps(record) + "\n")
        records.append(record)
    return records

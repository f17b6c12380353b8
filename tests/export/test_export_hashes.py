"""Exports stay byte-identical across refactorings: SHA-256 of every file `export` writes, recorded.

The recorded digests (export_hashes.json) were made by the CLI, one set per environment. Float
calibration runs through numpy/TensorFlow, whose results may differ in the last bit between CPU
kernels and library versions (the BERT-tiny presets' .tflite differ between the Intel and AMD machines
this project runs on; the compressed checkpoints' do not), so the comparison runs where a recording
environment matches and says why it skipped otherwise. Recording adds or replaces this environment's
set; a change that is meant to change the bytes re-records every environment's:

    RECORD_EXPORT_HASHES=1 python -m pytest tests/export/test_export_hashes.py

A file whose bytes derive from a CPU-dependent .tflite (model_settings.h carries its CRC-32) cannot be
re-recorded for another environment's set from this machine: such a file is listed, with the reason,
under that set's "unrecorded" entry and left out of its comparison (the test says so in its skip
message) until it is recorded there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_helpers import run_cli

RECORD = Path(__file__).with_name("export_hashes.json")
RECORDING = os.environ.get("RECORD_EXPORT_HASHES") == "1"
# Fields of report.json that measure this run rather than describe the export.
RUN_FIELDS = ("seconds",)


def environment() -> dict:
    import tensorflow as tf

    cpu = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        cpu = next(
            (
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    return {
        "python": ".".join(platform.python_version_tuple()[:2]),
        "machine": platform.machine(),
        "cpu": cpu,
        "simd": widest_vector_extension(),
        "numpy": np.__version__,
        "tensorflow": tf.__version__,
    }


def widest_vector_extension() -> str:
    """The widest x86 vector extension the CPU has: TensorFlow's kernels dispatch on it, so one CPU name
    (two generations of "AMD EPYC") can give float calibration two results."""
    cpuinfo = Path("/proc/cpuinfo")
    flags = set()
    if cpuinfo.exists():
        line = next((x for x in cpuinfo.read_text().splitlines() if x.startswith("flags")), "")
        flags = set(line.split(":", 1)[-1].split())
    return next((name for name in ("avx512f", "avx2", "sse4_2") if name in flags), "")


def matching_record(records: list[dict], here: dict) -> dict | None:
    """The record made in this environment: every field it names equal here (older records name no
    "simd"), the one naming the most fields first."""
    matches = [r for r in records if r["environment"].items() <= here.items()]
    return max(matches, key=lambda r: len(r["environment"]), default=None)


def compressed_checkpoint(parent: Path) -> Path:
    """A 3-cluster permuted embedding checkpoint, saved as `search` saves it (deterministic)."""
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.model.clustered_embedding import ClusteredLowRankEmbedding, write_permuted_tokenizer
    from tflm_mcubert.model.hf_import import load_checkpoint, save_checkpoint

    original = load_checkpoint(
        build_hf_checkpoint(parent, classifier=True, vocab_size=30, num_labels=2, max_position_embeddings=64)
    )
    table = original.model.embeddings.word_embeddings.numpy()
    assignment = np.random.default_rng(0).integers(0, 3, size=table.shape[0])
    layer = ClusteredLowRankEmbedding.from_assignment(table, assignment, ranks=[6, 3], origin="nas-two-stage")
    pad = int(layer.permutation[original.config.pad_token_id])
    model = original.model.with_word_lookup(layer, config=dataclasses.replace(original.config, pad_token_id=pad))
    out = parent / "compressed"
    tokenizer = write_permuted_tokenizer(original.tokenizer, layer.permutation, out)
    save_checkpoint(model, out, tokenizer, compression_info={"mode": "two-stage", "metrics": {}})
    return out


CASES = {
    "bert-tiny@128": lambda tmp: [],
    "bert-tiny@512": lambda tmp: ["--seq-len", "512", "--board", "nucleo-f767zi"],
    "compressed@64": lambda tmp: ["--checkpoint", compressed_checkpoint(tmp), "--seq-len", "64"],
    "compressed-stock@64": lambda tmp: [
        "--checkpoint",
        compressed_checkpoint(tmp),
        "--seq-len",
        "64",
        "--schedule",
        "stock",
    ],
}


def digests(out: Path, tmp: Path) -> dict[str, str]:
    """File -> SHA-256, with this run's temporary directory (the checkpoint's path) replaced by `<tmp>`."""
    result = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes().replace(str(tmp).encode(), b"<tmp>")
        if path.name == "report.json":
            report = json.loads(data)
            for field in RUN_FIELDS:
                report.pop(field, None)
            data = json.dumps(report, sort_keys=True).encode()
        result[str(path.relative_to(out))] = hashlib.sha256(data).hexdigest()
    return result


def recorded() -> list[dict]:
    """[{"environment": ..., "exports": {case: {file: sha256}}, "unrecorded": {case: {file: why}}}, ...];
    the first is where the committed fuzz corpus (tests/fuzz/corpus) was written."""
    return json.loads(RECORD.read_text()) if RECORD.exists() else []


@pytest.mark.parametrize("case", sorted(CASES))
def test_export_bytes_match_the_recorded_digests(case, tmp_path, capsys):
    records = recorded()
    here = environment()
    record = matching_record(records, here)
    if record is None and not RECORDING:
        pytest.skip(
            f"digests were recorded in {[r['environment'] for r in records]}, this is {here}: "
            "float calibration may differ in the last bit; record this one with RECORD_EXPORT_HASHES=1"
        )
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "export", "--out", out, *CASES[case](tmp_path))
    assert code == 0, err
    found = digests(out, tmp_path)
    if RECORDING:
        if record is None or record["environment"] != here:
            record = {"environment": here, "exports": {}}
            records.append(record)
        record["exports"][case] = found
        record.get("unrecorded", {}).pop(case, None)
        if not record.get("unrecorded", True):
            del record["unrecorded"]
        RECORD.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
        return
    expected = record["exports"][case]
    unrecorded = record.get("unrecorded", {}).get(case, {})
    compared = (expected.keys() | found.keys()) - unrecorded.keys()
    changed = sorted(name for name in compared if expected.get(name) != found.get(name))
    assert not changed, f"{case}: these files are no longer byte-identical: {changed}"
    if unrecorded:
        pytest.skip(
            f"{case}: {len(compared)} files are byte-identical; not compared, because unrecorded in this "
            "environment: " + "; ".join(f"{name}: {why}" for name, why in sorted(unrecorded.items()))
        )

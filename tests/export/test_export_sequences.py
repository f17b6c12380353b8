"""Sequences of real exports into one folder (issue 28's target): whatever models and options follow each
other, with and without the vocabulary and bundles, and whatever files the user adds between them, the
folder holds exactly the files the last report.json lists plus the user's files, untouched.

The sequences are drawn from a seeded generator (the same steps every run, several seeds), each step an
export through the CLI of one of two small checkpoints (different vocabularies and shapes)."""

from __future__ import annotations

import json
import random

import pytest

from tests.cli.cli_helpers import run_cli
from tests.export.test_export_hashes import compressed_checkpoint
from tflm_mcubert.export.export_folder import files_under

OPTIONS = (
    [],
    ["--no-vocab"],
    ["--bundle", "cmake"],
    ["--bundle", "cmake", "--no-vocab"],
    ["--schedule", "stock"],
)
# Where a user may keep files: never inside an export's own territory (tokenizer/ and the export's names
# are refused by name instead: the last step of every sequence checks that).
USER_FILES = ("notes.txt", "cmake/toolchain.cmake", "cmake/board/flash.ld", "deep/er/file.bin")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, make_hf_checkpoint_module):
    root = tmp_path_factory.mktemp("sequence-models")
    plain = make_hf_checkpoint_module(root, classifier=True, vocab_size=40, num_labels=3)
    return [compressed_checkpoint(root), plain]


@pytest.fixture(scope="module")
def make_hf_checkpoint_module():
    from tests.conftest import build_hf_checkpoint

    return build_hf_checkpoint


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_sequence_of_exports_leaves_exactly_the_last_reports_files_and_the_users(
    seed, tmp_path, capsys, checkpoints
):
    rng = random.Random(seed)
    out = tmp_path / "out"
    user: dict[str, bytes] = {}
    for step in range(4):
        checkpoint = rng.choice(checkpoints)
        options = rng.choice(OPTIONS)
        code, _, err = run_cli(capsys, "export", "--checkpoint", checkpoint, "--seq-len", 32, "--out", out, *options)
        assert code == 0, (step, options, err[-600:])
        report = json.loads((out / "report.json").read_text())
        listed = set(report["all_files"])
        present = set(files_under(out))
        assert present - listed == set(user), (step, options, sorted(present - listed - set(user)))
        assert listed <= present, sorted(listed - present)
        for name, data in user.items():
            assert (out / name).read_bytes() == data, name
        name = rng.choice(USER_FILES)  # the user adds a file the next export must keep
        if name not in listed:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            user[name] = f"{seed}-{step}".encode()
            (out / name).write_bytes(user[name])
    # A stray file in the export's tokenizer/ (another tokenizer's leftovers?) is refused by name, and the
    # folder is left exactly as it was; with --force the export goes ahead and keeps it.
    stray = out / "tokenizer" / "stray.txt"
    stray.parent.mkdir(exist_ok=True)
    stray.write_text("not this export's")
    before = {name: (out / name).read_bytes() for name in files_under(out)}
    argv = ["export", "--checkpoint", checkpoints[0], "--seq-len", 32, "--out", out]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and "tokenizer/stray.txt" in err.strip().splitlines()[-1]
    assert {name: (out / name).read_bytes() for name in files_under(out)} == before
    code, _, err = run_cli(capsys, *argv, "--force")
    assert code == 0, err[-600:]
    assert stray.read_text() == "not this export's" and all((out / n).read_bytes() == d for n, d in user.items())

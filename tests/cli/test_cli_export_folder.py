"""`export` owns its folder (issue 28, findings 2 and 3): a re-export into a folder leaves exactly the files
the new report.json lists (`all_files`), removes what the earlier export wrote and this one does not, never
deletes a file no export wrote, and refuses (exit 2, one line naming them) to overwrite files no earlier
report lists as its own unless --force. The bare-metal build takes the export's sources from report.json."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.cli.cli_helpers import assert_one_clean_error, run_cli

REPO = Path(__file__).resolve().parents[2]
SEQ = ["--seq-len", "32"]
USER_FILES = {"notes.txt": "my notes\n", "cmake/toolchain.cmake": "set(CMAKE_SYSTEM_NAME Generic)\n"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Two tiny checkpoints with BERT tokenizers (different labels and weights) and a pruning corpus."""
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint

    parent = tmp_path_factory.mktemp("ckpts")
    corpus = parent / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nvery good movie\n")
    return {
        "a": build_hf_checkpoint(parent, classifier=True, num_labels=2, seed=0),
        "b": build_hf_checkpoint(parent, classifier=True, num_labels=3, seed=1),
        "corpus": corpus,
    }


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def export(capsys, out: Path, *argv):
    return run_cli(capsys, "export", "--out", out, *SEQ, *argv)


def assert_exactly_the_reported_files(out: Path, user: dict[str, str]) -> dict:
    report = json.loads((out / "report.json").read_text())
    assert files_under(out) - set(user) == set(report["all_files"])
    top = {name.split("/")[0] + ("/" if "/" in name else "") for name in report["all_files"]}
    assert top == set(report["files"])
    for name, text in user.items():
        assert (out / name).read_text() == text, name
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.export-")]
    return report


def test_a_no_vocab_reexport_removes_the_previous_exports_vocabulary(capsys, tmp_path, checkpoints):
    out = tmp_path / "out"
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"], "--prune-vocab", checkpoints["corpus"])
    assert code == 0, err
    assert (out / "model_vocab.cc").is_file() and (out / "tokenizer").is_dir()
    # The preset's embedding is compressed by default: the CLI says where the permuted ids come from.
    code, stdout, err = export(capsys, out, "--preset", "bert-tiny", "--no-vocab")
    assert code == 0, err
    assert not list(out.glob("model_vocab.*")) and not (out / "tokenizer").exists()
    report = assert_exactly_the_reported_files(out, {})
    assert report["vocab_bytes"] == 0 and "tokenizer/" not in report["files"]
    assert "map ids through the permutation" in stdout and "tokenize with" not in stdout


def test_files_no_export_lists_are_refused_then_overwritten_with_force(capsys, tmp_path, checkpoints):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"someone else's model")
    (out / "notes.txt").write_text("mine\n")
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"])
    assert code == 2
    assert_one_clean_error(err, "model.tflite", "--force")
    assert (out / "model.tflite").read_bytes() == b"someone else's model"
    assert files_under(out) == {"model.tflite", "notes.txt"}
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"], "--force")
    assert code == 0, err
    assert_exactly_the_reported_files(out, {"notes.txt": "mine\n"})


def test_a_cmake_bundle_keeps_the_users_files_in_cmake(capsys, tmp_path, checkpoints):
    out = tmp_path / "out"
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"], "--bundle", "cmake")
    assert code == 0, err
    (out / "cmake" / "toolchain.cmake").write_text(USER_FILES["cmake/toolchain.cmake"])
    (out / "cmake" / "boards").mkdir()
    (out / "cmake" / "boards" / "my_board.cmake").write_text("# board\n")
    user = {"cmake/toolchain.cmake": USER_FILES["cmake/toolchain.cmake"], "cmake/boards/my_board.cmake": "# board\n"}
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["b"], "--bundle", "cmake")
    assert code == 0, err
    assert_exactly_the_reported_files(out, user)
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["b"])  # no bundle: its files go, the user's stay
    assert code == 0, err
    assert_exactly_the_reported_files(out, user)
    assert files_under(out / "cmake") == {"toolchain.cmake", "boards/my_board.cmake"}


def test_a_cmake_bundle_refuses_to_overwrite_a_users_cmake_file(capsys, tmp_path, checkpoints):
    out = tmp_path / "out"
    (out / "cmake").mkdir(parents=True)
    (out / "cmake" / "CMakeLists.txt").write_text("# the user's project\n")
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"], "--bundle", "cmake")
    assert code == 2
    assert_one_clean_error(err, "cmake/CMakeLists.txt", "--force")
    assert "calibrating" not in err  # refused before the work
    assert files_under(out) == {"cmake/CMakeLists.txt"}


def cmake_sources(export_dir: Path, tmp_path: Path) -> list[str]:
    """The sources examples/baremetal links for mcubert_app, as its CMake module reads them."""
    script = tmp_path / "sources.cmake"
    module = REPO / "examples" / "baremetal" / "cmake" / "export_sources.cmake"
    script.write_text(
        f'include("{module}")\nmcubert_export_sources("{export_dir}" sources text)\n'
        'message(STATUS "text=${text}")\nforeach(s IN LISTS sources)\n  message(STATUS "source=${s}")\nendforeach()\n'
    )
    done = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, check=True)
    return [line.split("-- ", 1)[1] for line in done.stdout.splitlines() if line.startswith("-- ")]


def test_the_baremetal_build_links_the_sources_the_report_lists(capsys, tmp_path, checkpoints):
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake (Debian: cmake)")
    out = tmp_path / "out"
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"])
    assert code == 0, err
    assert cmake_sources(out, tmp_path) == [
        "text=1",
        *(f"source={out}/{name}" for name in ("model_data.cc", "model_test_input.cc", "model_vocab.cc")),
    ]
    code, _, err = export(capsys, out, "--checkpoint", checkpoints["a"], "--no-vocab")
    assert code == 0, err
    (out / "model_vocab.cc").write_text("// not this export's\n")  # a stray copy is never linked
    assert cmake_sources(out, tmp_path) == [
        "text=0",
        f"source={out}/model_data.cc",
        f"source={out}/model_test_input.cc",
    ]


# One export of the sequence: (flags, needs checkpoints).
STEPS = {
    "a": ["--checkpoint", "a"],
    "a-no-vocab": ["--checkpoint", "a", "--no-vocab"],
    "a-pruned": ["--checkpoint", "a", "--prune-vocab", "corpus"],
    "b-cmake": ["--checkpoint", "b", "--bundle", "cmake"],
    "b-arduino-no-vocab": ["--checkpoint", "b", "--bundle", "arduino", "--no-vocab"],
    "a-cmake-arduino": ["--checkpoint", "a", "--bundle", "cmake", "--bundle", "arduino"],
    "b-stock": ["--checkpoint", "b", "--schedule", "stock"],
    "preset-no-vocab": ["--preset", "bert-tiny", "--no-vocab"],
}


def resolve(step: list[str], checkpoints: dict) -> list[str]:
    return [str(checkpoints[a]) if a in checkpoints else a for a in step]


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=2, max_size=4),
    user_after=st.integers(min_value=0, max_value=3),
)
@example(steps=["a-pruned", "preset-no-vocab", "a"], user_after=1)
@example(steps=["a-cmake-arduino", "b-arduino-no-vocab", "b-stock"], user_after=0)
def test_any_sequence_of_exports_leaves_exactly_the_reported_files(
    capsys, tmp_path_factory, checkpoints, steps, user_after
):
    out = tmp_path_factory.mktemp("seq") / "out"
    user: dict[str, str] = {}
    for i, step in enumerate(steps):
        if i == min(user_after, len(steps) - 1):
            for name, text in USER_FILES.items():
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                (out / name).write_text(text)
            user = dict(USER_FILES)
        code, _, err = export(capsys, out, *resolve(STEPS[step], checkpoints))
        assert code in (0, 3), (steps, step, err)
        assert_exactly_the_reported_files(out, user)

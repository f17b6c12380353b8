"""export/export_folder.py without a model: which files an earlier export owns (also from a report made
before `all_files`), what is refused, what is moved and removed, and the validated report.json reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tflm_mcubert.errors import DoesNotFitError, UserError
from tflm_mcubert.export.export_folder import files_under, owned_files, read_report, write_folder


def put(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def writer(files: dict[str, str], *, report_files=None, fail=None):
    """work(staging) that writes `files` and a report.json listing them."""

    def work(staging: Path):
        put(staging, files)
        listed = sorted([*files, "report.json"])
        report = {"files": report_files or listed, "all_files": listed}
        (staging / "report.json").write_text(json.dumps(report))
        if fail:
            raise fail
        return report

    return work


def test_a_reexport_replaces_the_earlier_exports_files_and_keeps_the_users(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write_folder(out, writer({"model.tflite": "1", "model_vocab.bin": "v", "cmake/CMakeLists.txt": "c"}))
    put(out, {"notes.txt": "mine", "cmake/toolchain.cmake": "t"})
    write_folder(out, writer({"model.tflite": "2"}))
    assert files_under(out) == ["cmake/toolchain.cmake", "model.tflite", "notes.txt", "report.json"]
    assert (out / "model.tflite").read_text() == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left next to it


def test_a_folder_the_earlier_export_emptied_is_removed_and_one_with_user_files_kept(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write_folder(out, writer({"tokenizer/vocab.txt": "v", "cmake/model/model_data.h": "h"}))
    put(out, {"cmake/toolchain.cmake": "t"})
    write_folder(out, writer({"model.tflite": "m"}))
    assert not (out / "tokenizer").exists() and not (out / "cmake" / "model").exists()
    assert files_under(out / "cmake") == ["toolchain.cmake"]


def test_unowned_files_are_refused_before_the_work_unless_forced(tmp_path):
    out = tmp_path / "out"
    put(out, {"model_vocab.cc": "stale", "tokenizer/vocab.txt": "stale", "notes.txt": "mine"})

    def never(staging):
        raise AssertionError("the work ran")

    with pytest.raises(UserError, match=r"model_vocab.cc, tokenizer/vocab.txt; .*--force"):
        write_folder(out, never)
    write_folder(out, writer({"model.tflite": "m"}), force=True)  # kept: not written by this export
    assert files_under(out) == ["model.tflite", "model_vocab.cc", "notes.txt", "report.json", "tokenizer/vocab.txt"]


def test_a_file_the_export_would_overwrite_is_refused_after_the_work(tmp_path):
    out = tmp_path / "out"
    put(out, {"cmake/CMakeLists.txt": "the user's"})
    with pytest.raises(UserError, match="cmake/CMakeLists.txt"):
        write_folder(out, writer({"cmake/CMakeLists.txt": "bundle"}))
    assert files_under(out) == ["cmake/CMakeLists.txt"] and (out / "cmake/CMakeLists.txt").read_text() == "the user's"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_model_that_does_not_fit_is_still_moved_into_place(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(DoesNotFitError):
        write_folder(out, writer({"model.tflite": "m"}, fail=DoesNotFitError("too big")))
    assert files_under(out) == ["model.tflite", "report.json"]


def test_a_report_without_all_files_owns_its_names_its_tokenizer_and_the_bundles_parts(tmp_path):
    out = tmp_path / "out"
    put(out, {"model.tflite": "m", "tokenizer/vocab.txt": "v", "cmake/main.cpp": "c", "cmake/my.cmake": "u"})
    (out / "report.json").write_text(json.dumps({"files": ["model.tflite", "tokenizer/", "cmake/", "report.json"]}))
    assert owned_files(out) == {"model.tflite", "report.json", "tokenizer/vocab.txt", "cmake/main.cpp"}


def test_a_report_never_owns_a_file_outside_the_folder(tmp_path):
    out = tmp_path / "out"
    put(tmp_path, {"precious.txt": "p", "elsewhere/linked.txt": "l"})
    put(out, {"model.tflite": "m"})
    (out / "link").symlink_to(tmp_path / "elsewhere")
    listed = ["model.tflite", "../precious.txt", str(tmp_path / "precious.txt"), "link/linked.txt", "report.json"]
    (out / "report.json").write_text(json.dumps({"files": ["model.tflite", "report.json"], "all_files": listed}))
    assert owned_files(out) == {"model.tflite", "report.json"}
    write_folder(out, writer({"model.tflite": "2"}))
    assert (tmp_path / "precious.txt").read_text() == "p" and (tmp_path / "elsewhere/linked.txt").is_file()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"files": ["a"', "not a readable report.json"),
        ("[1]", "JSON list"),
        ('{"files": "model.tflite"}', "'files' is not a list"),
        ('{"seq_len": "16"}', "'seq_len' is not a JSON integer"),
        ('{"model": []}', "'model' is not a JSON object"),
        (b"\xff\xfe", "not a readable report.json"),
    ],
)
def test_the_report_reader_names_what_is_wrong(tmp_path, text, fragment):
    path = tmp_path / "report.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError, match=fragment):
        read_report(path)
    assert owned_files(tmp_path) == set()  # an unreadable report owns nothing


def test_out_as_the_current_directory_stages_next_to_it(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(out)
    write_folder(Path("."), writer({"model.tflite": "m"}))
    assert files_under(out) == ["model.tflite", "report.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]

"""Bad input to the decoder's commands ends in one clear line and the documented exit code, never a
traceback: GPT-2 and GPT-Neo checkpoint folders with every file malformed in turn (export and
`tokenize --gpt2`), a tokenizer whose ids are not the model's, a board whose Flash the decoder misses
(exit 3, by how much), the shortest contexts, and `tokenize --export` on a decoder export's BPE blob."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_helpers import assert_one_clean_error, run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["the quick brown fox jumps over the lazy dog", "a film that is funny and sad", "hello world"] * 20
FAST = ("--seq-len", "4", "--calibration-samples", "2")  # the cheapest export that still runs every phase


def _byte_level_bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(TEXTS, trainer)
    return tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """gpt2 (tokenizer.json), gpt2-files (vocab.json + merges.txt) and neo (GPT-Neo, tokenizer.json)."""
    root = tmp_path_factory.mktemp("decoders")
    tokenizer = _byte_level_bpe()
    fast = transformers.GPT2TokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>")
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Config(vocab_size=vocab, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(gpt2).save_pretrained(root / "gpt2")
    neo = transformers.GPTNeoConfig(
        vocab_size=vocab, max_position_embeddings=16, hidden_size=32, num_layers=2, num_heads=2,
        attention_types=[[["global", "local"], 1]], window_size=4,
    )  # fmt: skip
    transformers.GPTNeoForCausalLM(neo).save_pretrained(root / "neo")
    for name in ("gpt2", "neo"):
        fast.save_pretrained(root / name)
    shutil.copytree(root / "gpt2", root / "gpt2-files")
    (root / "gpt2-files" / "tokenizer.json").unlink()
    tokenizer.model.save(str(root / "gpt2-files"))  # vocab.json + merges.txt
    return {name: root / name for name in ("gpt2", "gpt2-files", "neo")}


def _json_edit(edit):
    def damage(path: Path) -> None:
        raw = json.loads(path.read_text())
        edit(raw)
        path.write_text(json.dumps(raw))

    return damage


def _set(key, value):
    return _json_edit(lambda raw: raw.__setitem__(key, value))


def _drop(key):
    return _json_edit(lambda raw: raw.pop(key, None))


def _halve(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _add_token_5000(raw: dict) -> None:
    raw["added_tokens"].append({**raw["added_tokens"][0], "id": 5000, "content": "<x>"})


# Damages any file can take.
GENERIC = {
    "missing": lambda path: path.unlink(),
    "empty": lambda path: path.write_bytes(b""),
    "truncated": _halve,
    "not-utf8": lambda path: path.write_bytes(b"\xff\xfe\x00garbage\x80"),
    "json-list": lambda path: path.write_text("[]"),
    "json-numbers": lambda path: path.write_text("[1, 2]"),
    "json-string": lambda path: path.write_text('"text"'),
}
# Damages of one file, with what the error must name.
SPECIFIC = {
    "config.json": {
        "model-type-llama": (_set("model_type", "llama"), "GPT-2 / GPT-Neo decoders"),
        "no-vocab-size": (_drop("vocab_size"), "vocab_size"),
        "fewer-rows": (_set("vocab_size", 250), "has shape"),
        "architecture-only": (
            _json_edit(lambda raw: raw.update(model_type=None, architectures=["LlamaModel"])),
            "GPT-2 / GPT-Neo decoders",
        ),
    },
    "gpt2 config.json": {
        "heads-not-dividing": (_set("n_head", 3), "not a multiple"),
        "negative-layers": (_set("n_layer", -1), "num_layers"),
        "string-positions": (_set("n_positions", "many"), "config"),
        "huge-width": (_set("n_embd", 2**40), "refusing before allocating memory"),
        "more-rows-than-the-file": (_set("vocab_size", 400), "wte.weight has shape"),
    },
    "neo config.json": {
        "heads-not-dividing": (_set("num_heads", 3), "not a multiple"),
        "negative-layers": (_set("num_layers", -1), "config"),
        "string-positions": (_set("max_position_embeddings", "many"), "config"),
        "unknown-attention": (_set("attention_layers", ["sparse", "global"]), "config"),
    },
    "vocab.json": {
        "id-beyond-table": (_json_edit(lambda raw: raw.__setitem__("zzzz", 999_999)), "999,999"),
        "negative-id": (_json_edit(lambda raw: raw.__setitem__("zzzz", -1)), "vocab.json"),
        "string-id": (_json_edit(lambda raw: raw.__setitem__("zzzz", "7")), "vocab.json"),
        "shared-id": (_json_edit(lambda raw: raw.__setitem__("zzzz", 5)), "share an id"),
    },
    "merges.txt": {
        "three-tokens": (lambda path: path.write_text(path.read_text() + "a b c\n"), "merges.txt line"),
        "unknown-token": (lambda path: path.write_text(path.read_text() + "qqq www\n"), "not in vocab.json"),
    },
    "tokenizer.json": {
        "wordpiece": (_json_edit(lambda raw: raw["model"].__setitem__("type", "WordPiece")), "tokenizer.json"),
        "no-model": (_drop("model"), "tokenizer.json"),
        "normalizer": (_set("normalizer", {"type": "Lowercase"}), "normalizer"),
        "added-id-beyond-table": (_json_edit(_add_token_5000), "outside the model's word table"),
    },
}


# Files the export reads only through transformers' tokenizer, which does without them.
NOT_NEEDED = ("generation_config.json", "tokenizer_config.json")
# Damages that leave a checkpoint export reads as it is: no tokenizer (calibrated on random ids), or a
# valid tokenizer with fewer merges.
STILL_A_CHECKPOINT = {("tokenizer.json", "missing"), ("merges.txt", "empty"), ("merges.txt", "truncated")}


def _cases():
    files = {
        "gpt2": ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"),
        "gpt2-files": ("vocab.json", "merges.txt"),
        "neo": ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"),
    }  # fmt: skip
    for folder, names in files.items():
        family = "neo" if folder == "neo" else "gpt2"
        for name in names:
            for damage in GENERIC:
                yield pytest.param(folder, name, damage, id=f"{folder}-{name}-{damage}")
            for damage in [*SPECIFIC.get(name, {}), *SPECIFIC.get(f"{family} {name}", {})]:
                yield pytest.param(folder, name, damage, id=f"{folder}-{name}-{damage}")


def _damaged(folders, tmp_path, folder: str, name: str, damage: str) -> tuple[Path, str | None]:
    """A copy of `folder` with `name` damaged, and what the error must name (None: the file's name or the
    folder's, or nothing when the export does not read that file)."""
    copy = tmp_path / folder
    shutil.copytree(folders[folder], copy)
    if damage in GENERIC:
        GENERIC[damage](copy / name)
        return copy, None
    family = "neo" if folder == "neo" else "gpt2"
    edit, named = {**SPECIFIC.get(name, {}), **SPECIFIC.get(f"{family} {name}", {})}[damage]
    edit(copy / name)
    return copy, named


@pytest.mark.parametrize("folder,name,damage", list(_cases()))
def test_a_damaged_checkpoint_file_is_one_clear_error(folders, tmp_path, capsys, folder, name, damage):
    checkpoint, named = _damaged(folders, tmp_path, folder, name, damage)
    code, _, err = run_cli(capsys, "export", "--checkpoint", checkpoint, *FAST, "--out", tmp_path / "out")
    assert "Traceback" not in err
    if code == 0:
        assert named is None and (name, damage) in STILL_A_CHECKPOINT or name in NOT_NEEDED, err
        return
    assert code == 2, err
    assert_one_clean_error(err, *([named] if named else []))
    last = err.strip().splitlines()[-1]
    assert named or name in last or str(checkpoint) in last, last


@pytest.mark.parametrize("folder,name,damage", [c for c in _cases() if "token" in c.values[1] or "merges" in c.values[1]
                                                 or "vocab" in c.values[1]])  # fmt: skip
def test_tokenize_gpt2_on_a_damaged_tokenizer_is_one_clear_error(folders, tmp_path, capsys, folder, name, damage):
    checkpoint, _ = _damaged(folders, tmp_path, folder, name, damage)
    code, _, err = run_cli(capsys, "tokenize", "--gpt2", checkpoint, "hello world")
    assert "Traceback" not in err
    assert code in (0, 2), err
    if code == 2:
        assert_one_clean_error(err)


def test_a_decoder_that_misses_the_flash_exits_3_saying_by_how_much(folders, tmp_path, capsys):
    code, _, err = run_cli(
        capsys, "export", "--checkpoint", folders["gpt2"], "--sram", "320KB", "--flash", "170KB", "--out", tmp_path
    )
    assert code == 3, err
    assert_one_clean_error(err, "does not fit its 10,240 B Flash budget", "B over", "tokenizer blob")
    assert "-" not in err.split("over")[0].split("takes")[-1]  # the figure that misses is not negative


def test_a_config_without_model_type_is_read_by_its_architecture(folders, tmp_path, capsys):
    checkpoint = tmp_path / "no-type"
    shutil.copytree(folders["neo"], checkpoint)
    _drop("model_type")(checkpoint / "config.json")
    code, out, err = run_cli(capsys, "export", "--checkpoint", checkpoint, *FAST, "--out", tmp_path / "out")
    assert code == 0, err
    assert "decoder, 4-token context" in out


@pytest.mark.parametrize("context", [1, 2, 3, 16])
def test_every_context_the_range_check_allows_exports(folders, tmp_path, capsys, context):
    code, out, err = run_cli(
        capsys, "export", "--checkpoint", folders["gpt2"], "--seq-len", context, "--out", tmp_path / "o"
    )
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert 1 <= len(report["check"]["prompt_model_ids"]) <= max(1, context - 1)
    assert report["check"]["greedy_model_ids"]  # the firmware's self-check has a continuation to compare
    settings = (tmp_path / "o" / "model_settings.h").read_text()
    assert "MCUBERT_MODEL_CHECK_CONTINUATION {}" not in settings


@pytest.mark.parametrize("context", ["0", "17", "-3"])
def test_contexts_outside_the_range_are_refused_stating_it(folders, tmp_path, capsys, context):
    code, _, err = run_cli(
        capsys, "export", "--checkpoint", folders["gpt2"], "--seq-len", context, "--out", tmp_path / "o"
    )
    assert code == 2
    assert_one_clean_error(err, f"--seq-len {context}", "1..16")


@pytest.fixture(scope="module")
def compressed_export(folders, tmp_path_factory) -> Path:
    """A decoder export whose word table is compressed (its model ids are not the tokenizer's)."""
    from tflm_mcubert.cli import main

    out = tmp_path_factory.mktemp("compressed") / "export"
    flash = 160 * 1024 + 50 * 1024  # the dense table (300 x 32) plus the layers just miss
    code = main(["export", "--checkpoint", str(folders["gpt2"]), "--sram", "64KB", "--flash", str(flash),
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    assert (out / "model_ids.npy").is_file()
    return out


def test_tokenize_runs_a_decoder_exports_own_bpe_blob(folders, compressed_export, capsys):
    texts = ["hello world", "the lazy fox, funny and sad!", "wörld ☃"]
    code, out, err = run_cli(capsys, "tokenize", "--export", compressed_export, *texts)
    assert code == 0, err
    assert out.count("identical") == 2 * len(texts) and "DIFFERENT" not in out
    ids = np.load(compressed_export / "model_ids.npy")
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(folders["gpt2"] / "tokenizer.json"))
    expected = [int(ids[i]) for i in hf.encode("hello world").ids]  # in the model's numbering
    assert f"device ({len(expected)} ids): {expected}" in out
    code, out, _ = run_cli(capsys, "tokenize", "--export", compressed_export, "--gpt2", folders["gpt2"], "hello")
    assert code == 0 and "identical" in out


def test_tokenize_names_a_damaged_decoder_blob(compressed_export, tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(compressed_export, export)
    blob = bytearray((export / "model_vocab.bin").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (export / "model_vocab.bin").write_bytes(bytes(blob))
    code, _, err = run_cli(capsys, "tokenize", "--export", export, "hello")
    assert code == 2
    assert_one_clean_error(err, "BPE tokenizer blob", "corrupted")
    code, _, err = run_cli(capsys, "tokenize", "--export", export, "--seq-len", "8", "hello")
    assert code == 2


def test_classify_refuses_a_decoder_export_and_a_missing_one(compressed_export, tmp_path, capsys):
    code, _, err = run_cli(capsys, "classify", "--export", compressed_export, "hello")
    assert code == 2
    assert_one_clean_error(err, "is a decoder export")
    code, _, err = run_cli(capsys, "classify", "--export", tmp_path / "nothing", "hello")
    assert code == 2
    assert_one_clean_error(err, "model_vocab.bin not found")


# An option the decoder export does not do, a value for it, and a word of the reason it gives.
REFUSED = {
    ("--schedule", "stock"): "stock TFLite",
    ("--precision", "float32"): "int8 ops only",
    ("--num-labels", "3"): "no classifier head",
}


@pytest.mark.parametrize("option", list(REFUSED), ids=lambda o: o[0])
def test_an_option_a_decoder_export_does_not_do_is_refused_with_its_reason(capsys, tmp_path, option):
    code, _, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", *option, *FAST, "--out", tmp_path / "o")
    assert code == 2
    assert_one_clean_error(err, f"{option[0]}: not available for a decoder export", REFUSED[option])
    assert not (tmp_path / "o").exists()


def test_every_refused_option_is_named_at_once(capsys, tmp_path):
    given = [part for option in REFUSED for part in option]
    code, _, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", *given, *FAST, "--out", tmp_path / "o")
    assert code == 2
    assert_one_clean_error(err, *(option[0] for option in REFUSED), *REFUSED.values())


# The request rules both kinds share: a bad value is refused before the decoder loads, as for an encoder.
SHARED_RULES = {
    ("--qat-steps", "-1"): "--qat-steps must be 0 or more",
    ("--prune-top-n", "5"): "--prune-top-n needs --prune-vocab",
}


@pytest.mark.parametrize("option", list(SHARED_RULES), ids=lambda o: o[0])
def test_the_rules_an_encoder_export_checks_first_hold_for_a_decoder(capsys, tmp_path, option):
    code, _, err = run_cli(capsys, "export", "--preset", "gpt2-d128x2", *option, *FAST, "--out", tmp_path / "o")
    assert code == 2
    assert_one_clean_error(err, SHARED_RULES[option])
    assert not (tmp_path / "o").exists()

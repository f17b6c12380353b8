"""What used to end in a traceback, as one named error: where output goes, sequences too short to
hold [CLS] and [SEP], weights that are not finite, and operating-system failures."""

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tflm_mcubert import cli
from tflm_mcubert.errors import UserError
from tflm_mcubert.model.bert import build_model
from tflm_mcubert.model.config import BertConfig
from tflm_mcubert.quantize.float_model import FloatBert

from .cli_helpers import assert_one_clean_error, run_cli


@pytest.mark.parametrize("schedule", ["mcubert", "stock"])
@pytest.mark.parametrize("seq_len", ["1", "-3"])
def test_a_sequence_too_short_for_cls_and_sep_is_refused_with_the_smallest_that_works(
    capsys, tmp_path, schedule, seq_len
):
    code, _, err = run_cli(capsys, "export", "--seq-len", seq_len, "--schedule", schedule, "--out", tmp_path / "o")
    assert code == 2
    assert_one_clean_error(err, "--seq-len must be at least 2", "[CLS] and [SEP]", f"got {seq_len}")
    assert not (tmp_path / "o").exists(), "refused before any work"


def test_evaluate_refuses_a_too_short_sequence_too(capsys):
    code, _, err = run_cli(capsys, "evaluate", "--seq-len", "1")
    assert code == 2
    assert_one_clean_error(err, "--seq-len must be at least 2")


def test_out_naming_an_existing_file_is_refused(capsys, tmp_path):
    existing = tmp_path / "report.txt"
    existing.write_text("keep me")
    code, _, err = run_cli(capsys, "export", "--out", existing)
    assert code == 2
    assert_one_clean_error(err, f"--out {existing}: is a file")
    assert existing.read_text() == "keep me"


@pytest.mark.parametrize("where", ["below-a-file", "read-only-fs"])
def test_out_that_cannot_be_written_is_refused(capsys, tmp_path, where):
    if where == "below-a-file":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "export"
    else:
        out = "/sys/tflm-mcubert-test-export"  # sysfs: no new directories, even for root
    code, _, err = run_cli(capsys, "export", "--out", out)
    assert code == 2
    assert_one_clean_error(err, f"--out {out}: cannot be written")


def test_every_command_that_writes_checks_its_output_first(capsys, tmp_path):
    code, _, err = run_cli(capsys, "plan", "--out", tmp_path)
    assert code == 2
    assert_one_clean_error(err, f"--out {tmp_path}: is a directory; name a file")
    (tmp_path / "f").write_text("")
    code, _, err = run_cli(capsys, "finetune", "--checkpoint", tmp_path, "--task", "sst2", "--out", tmp_path / "f")
    assert code == 2
    assert_one_clean_error(err, "is a file")
    code, _, err = run_cli(capsys, "evaluate", "--json", tmp_path)
    assert code == 2
    assert_one_clean_error(err, f"--json {tmp_path}: is a directory")


def test_a_checkpoint_with_nan_weights_names_the_tensor_and_the_count(capsys, tmp_path, make_hf_checkpoint):
    checkpoint = make_hf_checkpoint(tmp_path, classifier=True, num_labels=2)
    weights = load_file(checkpoint / "model.safetensors")
    name = next(n for n in weights if n.endswith("layer.1.output.dense.weight"))
    weights[name].flat[[3, 7, 11]] = [np.nan, np.inf, np.nan]
    save_file(weights, checkpoint / "model.safetensors", metadata={"format": "pt"})
    code, _, err = run_cli(capsys, "export", "--checkpoint", checkpoint, "--seq-len", "16", "--out", tmp_path / "o")
    assert code == 2
    assert_one_clean_error(err, name, "3 non-finite values (NaN or inf)")


def test_a_keras_model_with_nan_weights_is_refused_before_quantization():
    model = build_model(
        BertConfig(
            vocab_size=40,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=16,
        ),
        seed=0,
    )
    weight = model.encoder_layers[0].attention.query.kernel
    values = weight.numpy()
    values[0, 0] = np.inf
    weight.assign(values)
    with pytest.raises(UserError, match="query.*1 non-finite value "):
        FloatBert.from_keras(model)


def test_an_operating_system_failure_is_one_line_too(capsys, monkeypatch):
    def fail(args):
        raise OSError(28, "No space left on device", "/full/disk/model.tflite")

    parser, runners = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda *modules: (parser, {**runners, "export": fail}))
    code, _, err = run_cli(capsys, "export", "--out", "x")
    assert code == 1
    assert_one_clean_error(err, "/full/disk/model.tflite: No space left on device")

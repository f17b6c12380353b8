"""Running the CLI in-process and checking its one-line errors: shared by the CLI tests."""

from tflm_mcubert.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_clean_error(err, *fragments):
    """No traceback, and the last line is `error: ...` naming every fragment."""
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ")
    for fragment in fragments:
        assert fragment in last, (fragment, last)


def run_text_check_under_qemu(export_dir, sentences: list[str], names: list[str], seq_len: int, tmp_path) -> set[int]:
    """Builds the bare-metal text check (examples/baremetal) for the export, runs `sentences` through it under
    QEMU, and asserts each line prints the reference's label, by name, and its int8 logits; the labels seen.
    Skips without the Arm toolchain, CMake, Ninja or QEMU."""
    import numpy as np

    from tests import qemu
    from tests.firmware.baremetal_helpers import firmware_sizes, need
    from tflm_mcubert.firmware.app_data import app_data_from_export, write_app_data
    from tflm_mcubert.runtime.reference import run_reference
    from tflm_mcubert.tflite.mcubert_reader import read_model
    from tflm_mcubert.tokenizer import reference, vocab_blob

    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    write_app_data(app_data_from_export(export_dir), tmp_path / "text-data")
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "text-build",
        target="mcubert_text_check",
        cmake_args=(f"-DMCUBERT_TEXT_DATA_DIR={tmp_path / 'text-data'}",),
    )
    (tmp_path / "sentences.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    status, console = qemu.run_qemu(elf, command_line=f"sentences={tmp_path / 'sentences.txt'}", timeout=120)
    assert status == 0, console
    spec = vocab_blob.unpack((export_dir / "model_vocab.bin").read_bytes())
    model = read_model((export_dir / "model.tflite").read_bytes())
    seen = set()
    for number, text in enumerate(sentences, 1):
        encoded = reference.encode(spec, text.encode(), seq_len)
        inputs = {"input_ids": encoded.ids, "attention_mask": encoded.mask, "token_type_ids": encoded.token_types}
        logits = run_reference(model, inputs).outputs["logits"].reshape(-1)
        label = int(np.argmax(logits))
        want = f"sentence {number}: label {names[label]} ({label}), logits [{', '.join(str(int(v)) for v in logits)}]"
        assert want in console, (want, console)
        seen.add(label)
    return seen

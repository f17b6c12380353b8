"""examples/baremetal's mcubert_text_check: text in, label out, on QEMU's Cortex-M7, without TFLM.

A tiny sequence classifier with a tokenizer is exported (mcubert schedule, seq_len 16), its ops and
tokenizer blob written as C (firmware/app_data.py), and the firmware built for qemu-mps2-an500.
It reads a file of sentences (accents, CJK, emoji, an empty line, invalid UTF-8, control characters and
NUL, lines far over seq_len and over the firmware's line buffer, no newline after the last)
through semihosting; for every line the label, the int8 logits and the token count it prints must equal
the numpy reference run (runtime/reference.py) on the ids the Python tokenizer reference gives for the
same bytes (cut at the line buffer's size, as the firmware cuts them). Built for the emulator-only board (emulator-m7,
under unicorn, whose cycle counter reads executed instructions), it prints nonzero tokenize and model
counts where QEMU prints 0.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import qemu
from tests.firmware.baremetal_helpers import BAREMETAL, firmware_sizes, need

from tflm_mcubert.boards import get_board
from tflm_mcubert.firmware.app_data import AppDataError, app_data_from_export, text_line_bytes, write_app_data

SEQ_LEN = 16
LINE_BYTES = text_line_bytes(SEQ_LEN)  # text_data.h TEXT_LINE_BYTES


# One line each; no "\n" inside. The 3-byte character that straddles LINE_BYTES is cut by the firmware's
# line buffer, which leaves an invalid sequence for the tokenizer to drop.
SENTENCES = [
    "The cat sat on the mat.".encode(),
    "This film is very good!".encode(),
    "not bad, and happy".encode(),
    "A dog was sad.".encode(),
    "Crème brûlée à la mode, naïve café résumé".encode(),
    "東京タワーと中文字符、한국어 텍스트".encode(),
    "emoji 😀👍🏽 and flags 🇫🇷 test".encode(),
    b"",
    b"invalid \xff\xfe bytes \xc3 and \xe6\x9d a lone continuation \x80 here",
    b"\xed\xa0\x80 surrogate and overlong \xc0\xaf",
    b"control \x01\x07\x7f\tchars and a \x00 NUL",
    "word ".encode() * 40,  # 200 bytes, far more tokens than seq_len
    ("x" * (LINE_BYTES - 2) + "東 tail").encode(),  # LINE_BYTES - 2 + 3 + 5 bytes: cut inside 東
    ("long " * (LINE_BYTES // 4)).encode(),  # 1.25 x LINE_BYTES
    "   \t  ".encode(),
    "[CLS] in text [SEP] and [MASK]".encode(),
    "ＦＵＬＬ　ｗｉｄｔｈ and ﬁ ligatures".encode(),
    "digits 1234567890 ١٢٣ and math ∑∫√ ≠".encode(),
    b"carriage return at the end\r",
    "the good, the bad and the ugly".encode(),
]

RESULT = re.compile(
    r"^sentence (\d+): label LABEL_\d+ \((\d+)\), logits \[([-\d, ]*)\], tokens (\d+) of (\d+), "
    r"tokenize (\d+) cycles(?: \([\d.]+ ms\))?, model (\d+) cycles",
    re.MULTILINE,
)
TRUNCATED = re.compile(r"^sentence (\d+): the line has (\d+) bytes; only its first (\d+) are read$", re.MULTILINE)


@pytest.fixture(scope="module")
def export_dir(text_export_dir):
    return text_export_dir


def _text_check(export_dir, tmp_path_factory, board: str):
    need("arm-none-eabi-gcc", "cmake", "ninja", "qemu-system-arm")
    data = tmp_path_factory.mktemp("text-data")
    write_app_data(app_data_from_export(export_dir), data)
    return firmware_sizes.build(
        board,
        tmp_path_factory.mktemp("text-build"),
        target="mcubert_text_check",
        cmake_args=(f"-DMCUBERT_TEXT_DATA_DIR={data}",),
    )


@pytest.fixture(scope="module")
def firmware(export_dir, tmp_path_factory):
    return _text_check(export_dir, tmp_path_factory, "qemu-mps2-an500")


def expected_results(export_dir: Path) -> list[tuple[int, list[int], int]]:
    """(label, int8 logits, valid tokens) of the reference for each sentence, cut as the firmware cuts it."""
    from tflm_mcubert.runtime.reference import run_reference
    from tflm_mcubert.tflite.mcubert_reader import read_model
    from tflm_mcubert.tokenizer import reference, vocab_blob

    spec = vocab_blob.unpack((export_dir / "model_vocab.bin").read_bytes())
    model = read_model((export_dir / "model.tflite").read_bytes())
    results = []
    for text in SENTENCES:
        encoded = reference.encode(spec, text[:LINE_BYTES], SEQ_LEN)
        inputs = {"input_ids": encoded.ids, "attention_mask": encoded.mask, "token_type_ids": encoded.token_types}
        logits = run_reference(model, inputs).outputs["logits"].reshape(-1)
        results.append((int(np.argmax(logits)), [int(v) for v in logits], encoded.valid))
    return results


def test_sentences_in_labels_out_match_the_reference_under_qemu(export_dir, firmware, tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_bytes(b"\n".join(SENTENCES))  # the last line ends at the end of the file, not at a "\n"
    status, console = qemu.run_qemu(firmware, command_line=f"sentences={sentences}", timeout=120)
    assert status == 0, console
    matches = list(RESULT.finditer(console))
    assert [int(m[1]) for m in matches] == list(range(1, len(SENTENCES) + 1)), console
    assert {int(m[5]) for m in matches} == {SEQ_LEN}
    printed = [(int(m[2]), [int(v) for v in m[3].split(", ")], int(m[4])) for m in matches]
    expected = expected_results(export_dir)
    for i, (got, want) in enumerate(zip(printed, expected, strict=True)):
        assert got == want, (i + 1, SENTENCES[i], console)
    truncated = {int(m[1]): (int(m[2]), int(m[3])) for m in TRUNCATED.finditer(console)}
    long_lines = {i + 1: (len(s), LINE_BYTES) for i, s in enumerate(SENTENCES) if len(s) > LINE_BYTES}
    assert truncated == long_lines and len(long_lines) == 2, console
    assert f"done: {len(SENTENCES)} sentences" in console
    print(f"\n{console}")


def test_the_cortex_m55_on_its_mve_path_prints_the_reference_results(export_dir, tmp_path_factory, tmp_path):
    """The whole model through the C kernels on QEMU's Cortex-M55 (mps3-an547), the linear layers on Helium."""
    elf = _text_check(export_dir, tmp_path_factory, "qemu-mps3-an547")
    sentences = [s for s in SENTENCES if len(s) <= LINE_BYTES]
    (tmp_path / "sentences.txt").write_bytes(b"\n".join(sentences))
    status, console = qemu.run_qemu(
        elf, machine="mps3-an547", command_line=f"sentences={tmp_path / 'sentences.txt'}", timeout=120
    )
    assert status == 0 and "MVE path" in console, console
    printed = [(int(m[2]), [int(v) for v in m[3].split(", ")], int(m[4])) for m in RESULT.finditer(console)]
    expected = [r for s, r in zip(SENTENCES, expected_results(export_dir)) if len(s) <= LINE_BYTES]
    assert printed == expected, console


def test_classify_prints_what_the_firmware_prints(export_dir, firmware, tmp_path, capsys):
    """`classify` on the host gives each sentence the label and int8 logits the device prints."""
    from tflm_mcubert.cli import main

    sentences = [SENTENCES[i] for i in (0, 1, 4, 5, 6, 8, 9, 15, 16, 17)]  # invalid UTF-8 too; no NUL (argv)
    (tmp_path / "sentences.txt").write_bytes(b"\n".join(sentences) + b"\n")
    status, console = qemu.run_qemu(firmware, command_line=f"sentences={tmp_path / 'sentences.txt'}", timeout=120)
    assert status == 0, console
    device = [f"label {m[0].split('label ')[1].split(', tokens')[0]}" for m in RESULT.finditer(console)]
    assert main(["classify", "--export", str(export_dir), *(os.fsdecode(s) for s in sentences)]) == 0
    host = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("label ")]
    assert host == device and len(host) == len(sentences), (host, console)


def test_without_input_it_says_so(firmware, tmp_path):
    for command_line in (None, f"sentences={tmp_path / 'missing.txt'}"):
        status, console = qemu.run_qemu(firmware, command_line=command_line, timeout=60)
        assert status == 4 and "FAIL: no input" in console, console


def test_an_export_without_a_tokenizer_blob_is_refused(export_dir, tmp_path):
    copy = tmp_path / "export"
    shutil.copytree(export_dir, copy)
    (copy / "model_vocab.bin").unlink()
    with pytest.raises(AppDataError, match="model_vocab.bin: missing"):
        app_data_from_export(copy)


def test_cycle_counts_on_the_emulator_only_board(export_dir, tmp_path):
    """QEMU has no cycle counter (the counts read 0); unicorn's emulator-m7 counts executed instructions,
    so there the same firmware prints nonzero counts, and the same results as the reference."""
    need("arm-none-eabi-gcc", "cmake", "ninja")
    pytest.importorskip("unicorn")
    from tflm_mcubert.measure.firmware_emulator import run_firmware

    data = tmp_path / "text-data"
    write_app_data(app_data_from_export(export_dir), data)
    elf = firmware_sizes.build(
        "emulator-m7", tmp_path / "build", target="mcubert_text_check", cmake_args=(f"-DMCUBERT_TEXT_DATA_DIR={data}",)
    )
    sentences = tmp_path / "sentences.txt"
    sentences.write_bytes(b"\n".join(SENTENCES[:4]))
    regions = [(0x0000_0000, 16 << 20), (0x2000_0000, 16 << 20)]  # emulator-m7.ld
    run = run_firmware(elf, "cortex-m7", regions, command_line=f"sentences={sentences}")
    assert run.status == 0, run.console
    matches = list(RESULT.finditer(run.console))
    printed = [(int(m[2]), [int(v) for v in m[3].split(", ")], int(m[4])) for m in matches]
    assert printed == expected_results(export_dir)[:4], run.console
    assert all(int(m[6]) > 0 and int(m[7]) > int(m[6]) for m in matches), run.console
    print(f"\n{run.console}")


# The NUCLEO boards' ST-LINK virtual COM port (USART3) and the register blocks its set-up writes.
UART_BOARDS = {
    "nucleo-f746zg": ((0x4002_3800, 0x400), (0x4002_0C00, 0x400)),  # RCC, GPIOD (RM0385)
    "nucleo-h7a3zi-q": ((0x5802_4400, 0x400), (0x5802_0C00, 0x400)),  # RCC, GPIOD (RM0455)
}
USART3 = 0x4000_4800


@pytest.mark.parametrize("board", sorted(UART_BOARDS))
def test_sentences_typed_into_the_nucleo_virtual_com_port(export_dir, tmp_path, board):
    """-DMCUBERT_CONSOLE=uart: the board's own image, run from its reset vector under unicorn with USART3
    modelled, reads lines as a terminal sends them ("\\r\\n", a bare "\\r", ^D to end) and answers on the
    same port with the reference's labels and logits."""
    need("arm-none-eabi-gcc", "cmake", "ninja")
    pytest.importorskip("unicorn")
    from tflm_mcubert.measure.firmware_emulator import Stm32Usart, run_firmware

    data = tmp_path / "text-data"
    write_app_data(app_data_from_export(export_dir), data)
    elf = firmware_sizes.build(
        board,
        tmp_path / "build",
        target="mcubert_text_check",
        cmake_args=(f"-DMCUBERT_TEXT_DATA_DIR={data}", "-DMCUBERT_CONSOLE=uart"),
    )
    spec = get_board(board)
    regions = [(0x0800_0000, spec.flash_bytes)] + [(r.address, r.size) for r in spec.sram_regions]
    typed = SENTENCES[0] + b"\r\n" + SENTENCES[1] + b"\r" + SENTENCES[2] + b"\n" + SENTENCES[4] + b"\x04"
    uart = Stm32Usart(USART3, typed, UART_BOARDS[board])
    run = run_firmware(elf, "cortex-m7", regions, uart=uart)
    console = run.console.replace("\r\n", "\n")
    assert run.status == 0 and "\r" not in console, run.console
    matches = list(RESULT.finditer(console))
    printed = [(int(m[2]), [int(v) for v in m[3].split(", ")], int(m[4])) for m in matches]
    expected = expected_results(export_dir)
    assert printed == [expected[i] for i in (0, 1, 2, 4)], console
    assert "done: 4 sentences" in console


def test_the_uart_console_is_for_nucleo_boards_only(tmp_path):
    need("cmake")
    result = subprocess.run(
        [
            "cmake",
            "-S",
            str(BAREMETAL),
            "-B",
            str(tmp_path),
            f"-DCMAKE_TOOLCHAIN_FILE={BAREMETAL / 'cmake' / 'arm-none-eabi.cmake'}",
            "-DMCUBERT_BOARD=nano33ble",
            "-DMCUBERT_CONSOLE=uart",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "MCUBERT_CONSOLE=uart is for the NUCLEO boards" in result.stderr

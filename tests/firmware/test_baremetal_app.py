"""examples/baremetal's mcubert_app (the whole model through TFLM) and custom_ops/CMakeLists.txt's targets.

* mcubert_app: CMake stops with a message naming what is missing (TFLM_DIR, TFLM_LIB); with TFLM_DIR set
  in the environment, its main.cc compiles against that TFLM (-fsyntax-only).
* mcubert_app under QEMU, with a user's TFLM library for cortex-m7 hard-float (TFLM_DIR, TFLM_LIB_CORTEX_M7,
  TFLM_THIRD_PARTY_INCLUDES or FLATBUFFERS_INCLUDE + GEMMLOWP_DIR): a fresh BERT-tiny export's logits equal
  the reference byte for byte, TFLM's arena_used_bytes() on the 32-bit core is within the exported arena,
  and the least arena that works (found with `-append arena=<bytes>`) is printed (pytest -s). With a library
  for the Cortex-M55 (TFLM_LIB_CORTEX_M55), the app profiled on emulator-m55 counts its ops in instructions.
  Sentences given as text are tokenized on the device and give the reference's logits.
* The `mcubert` library target builds on its own for the host, and `mcubert_tflm` for the Cortex-M7
  against TFLM's headers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import qemu
from tests.firmware.baremetal_helpers import BAREMETAL, REPO, configure_error, firmware_sizes, need, run_qemu
from tests.firmware.baremetal_helpers import stack_use
from tflm_mcubert.boards import get_board
from tflm_mcubert.export.pipeline import ExportRequest, run_export
from tflm_mcubert.runtime.tflm_binding import TflmSources


def tflm_third_party_includes() -> str:
    """';'-separated flatbuffers and gemmlowp include dirs: TFLM_THIRD_PARTY_INCLUDES, else what the
    real-TFLM check resolves (FLATBUFFERS_INCLUDE / GEMMLOWP_DIR, default: TFLM's downloads folder)."""
    if os.environ.get("TFLM_THIRD_PARTY_INCLUDES"):
        return os.environ["TFLM_THIRD_PARTY_INCLUDES"]
    sources = TflmSources.from_environment()
    return f"{sources.flatbuffers_include};{sources.gemmlowp_dir}"


def tflm_cmake_args() -> tuple[str, ...]:
    """mcubert_app's TFLM arguments from the environment; skips naming the variables that are missing."""
    missing = [name for name in ("TFLM_DIR", "TFLM_LIB_CORTEX_M7") if not os.environ.get(name)]
    if missing:
        pytest.skip(
            f"set {', '.join(missing)} to run mcubert_app under QEMU: a tflite-micro checkout and its "
            f"libtensorflow-microlite.a built for cortex-m7 hard-float (flatbuffers and gemmlowp headers: "
            f"TFLM_THIRD_PARTY_INCLUDES, or FLATBUFFERS_INCLUDE and GEMMLOWP_DIR; examples/baremetal/README.md)"
        )
    return (
        f"-DTFLM_DIR={os.environ['TFLM_DIR']}",
        f"-DTFLM_LIB={os.environ['TFLM_LIB_CORTEX_M7']}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
    )


def test_app_without_tflm_stops_with_a_clear_error(tmp_path, export_dir):
    need("arm-none-eabi-gcc", "cmake", "ninja")
    message = configure_error(tmp_path, f"-DTFLM_DIR={tmp_path / 'no-tflm'}", f"-DMCUBERT_EXPORT_DIR={export_dir}")
    assert "mcubert_app needs -DTFLM_DIR=<tflite-micro checkout>" in message
    fake_tflm = tmp_path / "tflm" / "tensorflow" / "lite" / "micro"
    fake_tflm.mkdir(parents=True)
    (fake_tflm / "micro_interpreter.h").write_text("")
    message = configure_error(tmp_path, f"-DTFLM_DIR={tmp_path / 'tflm'}", f"-DMCUBERT_EXPORT_DIR={export_dir}")
    assert "mcubert_app needs -DTFLM_LIB=<libtensorflow-microlite.a>" in message
    message = configure_error(tmp_path, "-DMCUBERT_BOARD=nucleo-f303re")
    assert "MCUBERT_BOARD=nucleo-f303re is not one of" in message


@pytest.mark.parametrize("text", [0, 1], ids=["test-sequence", "text-in"])
def test_app_main_compiles_against_tflm(export_dir, text, tmp_path):
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip(
            "set TFLM_DIR (and TFLM_THIRD_PARTY_INCLUDES, ';'-separated, or FLATBUFFERS_INCLUDE and "
            "GEMMLOWP_DIR; default: the Makefile's downloads/) to syntax-check mcubert_app"
        )
    need("arm-none-eabi-g++")
    if text:  # the export's tokenizer blob, as export writes it for a checkpoint with a tokenizer
        from tflm_mcubert.firmware.c_array import write_c_array

        write_c_array(b"\0" * 64, tmp_path, name="model_vocab")
    includes = [
        export_dir,
        tmp_path,
        REPO / "custom_ops" / "tflm",
        REPO / "custom_ops" / "include",
        BAREMETAL / "src",
        tflm,
        *tflm_third_party_includes().split(";"),
    ]
    result = subprocess.run(
        [
            "arm-none-eabi-g++",
            "-mcpu=cortex-m7",
            "-mthumb",
            "-mfloat-abi=hard",
            "-mfpu=fpv5-d16",
            "-std=gnu++17",
            "-fno-exceptions",
            "-fno-rtti",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-fsyntax-only",
            "-DTF_LITE_STATIC_MEMORY",
            f"-DMCUBERT_APP_TEXT={text}",
            *[f"-I{path}" for path in includes],
            str(BAREMETAL / "src" / "mcubert_app_main.cc"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def exported_arena_bytes(export_dir: Path) -> int:
    settings = (export_dir / "model_settings.h").read_text()
    return int(re.search(r"^#define MCUBERT_MODEL_ARENA_BYTES (\d+)", settings, re.MULTILINE)[1])


def app_runs(elf: Path, arena_bytes: int) -> bool:
    status, console = run_qemu(elf, f"arena={arena_bytes}")
    return status == 0 and "output matches the reference: yes" in console


def least_working_arena(elf: Path, failing: int, working: int) -> int:
    """Bisects the arena TFLM is given (`arena=<bytes>`) between one that fails and one that works."""
    assert app_runs(elf, working) and not app_runs(elf, failing)
    while working - failing > 1:
        middle = (failing + working) // 2
        if app_runs(elf, middle):
            working = middle
        else:
            failing = middle
    return working


def test_app_matches_the_reference_under_qemu(export_dir, tmp_path):
    cmake_args = tflm_cmake_args()
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={export_dir}", *cmake_args),
    )
    status, console = run_qemu(elf)
    assert status == 0, console
    assert "output matches the reference: yes" in console
    # The firmware compares with its own copy of the expected output; check the printed values here too.
    expected = json.loads((export_dir / "model_test_input.json").read_text())["expected_output"]
    printed = [int(q) for q in re.findall(r"^  \[\d+\] (-?\d+) = ", console, re.MULTILINE)]
    assert printed == expected, console

    exported = exported_arena_bytes(export_dir)
    used, given = map(int, re.search(r"arena used: (\d+) of (\d+) B", console).groups())
    assert given == exported
    assert used <= exported, f"TFLM used {used} B of the arena, the export states {exported} B"
    least = least_working_arena(elf, failing=used // 2, working=exported)
    # The 16 KB the boards reserve for stack and runtime (boards.py) must hold TFLM's deepest path.
    stack, reserved = stack_use(console)
    assert 0 < stack < reserved, console
    print(
        f"\nmcubert_app under QEMU (Cortex-M7): arena exported {exported} B, TFLM arena_used_bytes() {used} B, "
        f"least that works {least} B; stack high-water {stack} of {reserved} B"
    )


def test_app_profiles_its_ops_in_instructions_on_emulator_m55(export_dir, tmp_path):
    """mcubert_app with MicroProfiler on emulator-m55 (QEMU -icount shift=0; TFLM_LIB_CORTEX_M55: TFLM built
    TARGET_ARCH=cortex-m55): the output matches, and TFLM's ticks (tflm_ticks_icount.cc) are the board's
    instruction counts, the four ops adding up to Invoke (bench/whole_model.py --core cortex-m55 relies on it)."""
    missing = [name for name in ("TFLM_DIR", "TFLM_LIB_CORTEX_M55") if not os.environ.get(name)]
    if missing:
        pytest.skip(f"set {', '.join(missing)}: a tflite-micro checkout and its microlite built for cortex-m55")
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    cmake_args = (
        f"-DTFLM_DIR={os.environ['TFLM_DIR']}",
        f"-DTFLM_LIB={os.environ['TFLM_LIB_CORTEX_M55']}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
        "-DMCUBERT_APP_PROFILE=ON",
    )
    elf = firmware_sizes.build(
        "emulator-m55",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={export_dir}", *cmake_args),
    )
    status, console = qemu.run_qemu(elf, machine="mps3-an547", icount=True)
    assert status == 0 and "output matches the reference: yes" in console, console
    invoke = int(re.search(r"invoke: (\d+) cycles", console)[1])
    ops = {tag: int(n) for tag, n in re.findall(r"^(MCUBERT_[A-Z_]+), (\d+)\r?$", console, re.MULTILINE)}
    assert set(ops) == {"MCUBERT_EMBEDDING", "MCUBERT_ATTENTION", "MCUBERT_MLP", "MCUBERT_CLASSIFIER_HEAD"}, console
    assert min(ops.values()) > 0 and 0.99 * invoke < sum(ops.values()) <= invoke, console


TEXTS = ["The cat sat on the mat.", "This film is very good!", "not bad, and happy", "Ünïcödé — 東京 [MASK]"]


def test_text_in_matches_the_reference_under_qemu(tmp_path):
    """Sentences go in as text (`text=` on the command line), are tokenized on the device, and the printed
    logits equal the reference run on the ids the Python reference tokenizer gives."""
    cmake_args = tflm_cmake_args()
    need("arm-none-eabi-g++", "cmake", "ninja", "qemu-system-arm")
    pytest.importorskip("torch")
    from tests.conftest import build_hf_checkpoint
    from tflm_mcubert.runtime.reference import run_reference
    from tflm_mcubert.tflite.mcubert_reader import read_model
    from tflm_mcubert.tokenizer import reference, vocab_blob

    checkpoint = build_hf_checkpoint(tmp_path, classifier=True, num_labels=2)
    out = tmp_path / "export"
    run_export(ExportRequest(out_dir=out, board=get_board("nucleo-f767zi"), seq_len=16, checkpoint=str(checkpoint)))
    elf = firmware_sizes.build(
        "qemu-mps2-an500",
        tmp_path / "build",
        target="mcubert_app",
        cmake_args=(f"-DMCUBERT_EXPORT_DIR={out}", *cmake_args),
    )
    spec = vocab_blob.unpack((out / "model_vocab.bin").read_bytes())
    model = read_model((out / "model.tflite").read_bytes())
    for text in TEXTS:
        status, console = run_qemu(elf, f"text={text}")
        assert status == 0, console
        encoded = reference.encode(spec, text, 16)
        inputs = {"input_ids": encoded.ids, "attention_mask": encoded.mask, "token_type_ids": encoded.token_types}
        expected = run_reference(model, inputs).outputs["logits"].reshape(-1)
        printed = [int(q) for q in re.findall(r"^  \[\d+\] (-?\d+) = ", console, re.MULTILINE)]
        assert printed == list(expected), (text, console)
        assert f"tokens: {encoded.valid} of 16" in console
        label = int(np.argmax(expected))
        assert f"label LABEL_{label} ({label})" in console  # a checkpoint without names: HF's default


# ---- custom_ops/CMakeLists.txt ------------------------------------------------------------------


def test_the_kernels_cmake_description_builds_on_its_own_for_the_host(tmp_path):
    """The `mcubert` target any CMake project takes with add_subdirectory(custom_ops), here with host gcc."""
    need("cmake", "ninja", "gcc")
    build = tmp_path / "build"
    for command in (
        ["cmake", "-S", str(REPO / "custom_ops"), "-B", str(build), "-G", "Ninja"],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    program = tmp_path / "uses_mcubert.c"
    program.write_text(
        '#include "mcubert/mcubert_ops.h"\n'
        "int main(void) { return mcubert_status_name(MCUBERT_ERROR_MODEL)[0] == 'm' ? 0 : 1; }\n"
    )
    linked = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-I",
            str(REPO / "custom_ops" / "include"),
            str(program),
            str(build / "libmcubert.a"),
            "-o",
            str(tmp_path / "uses_mcubert"),
        ],
        capture_output=True,
        text=True,
    )
    assert linked.returncode == 0, linked.stderr
    assert subprocess.run([str(tmp_path / "uses_mcubert")]).returncode == 0


def test_the_binding_target_builds_for_cortex_m7_against_tflm(tmp_path):
    """mcubert_tflm (custom_ops/CMakeLists.txt) through the bare-metal project, TFLM headers only."""
    need("arm-none-eabi-g++", "cmake", "ninja")
    tflm = os.environ.get("TFLM_DIR")
    if not tflm:
        pytest.skip("set TFLM_DIR (a tflite-micro checkout; FLATBUFFERS_INCLUDE and GEMMLOWP_DIR) to build the binding")
    build = tmp_path / "build"
    configure = [
        "cmake",
        "-S",
        str(BAREMETAL),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_TOOLCHAIN_FILE={BAREMETAL / 'cmake' / 'arm-none-eabi.cmake'}",
        f"-DTFLM_DIR={tflm}",
        f"-DTFLM_THIRD_PARTY_INCLUDES={tflm_third_party_includes()}",
        "-DMCUBERT_BUILD_APP=OFF",
    ]
    for command in (configure, ["cmake", "--build", str(build), "--target", "mcubert_tflm"]):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (build / "mcubert" / "libmcubert_tflm.a").is_file()

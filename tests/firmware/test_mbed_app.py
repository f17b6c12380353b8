"""The Mbed OS application (mbed_app/): configuration, the names it takes from an export, its sync step,
and (with TFLM_DIR) that main.cpp compiles for Cortex-M7 against TFLM. Mbed itself cannot run here.

* mbed_app.json is valid JSON for the three NUCLEO boards, with the serial, printf and bare-metal
  settings main.cpp relies on, and each board's arena region equal to the largest contiguous SRAM
  region tflm_mcubert/boards.py sizes the export for (the H7's RAM pinned to its AXI SRAM).
* Every MCUBERT_*/g_model_* name main.cpp uses is defined by the files a real export writes (exported
  here, not copied), and main.cpp uses the ones the brief of the application needs.
* The .lib files pin mbed-os-6.17.0 and the TFLM revision custom_ops/tflm/ is written against.
* sync_sources.py copies custom_ops/ and an export into place and --check catches stale copies.
* With TFLM_DIR (a tflite-micro checkout; flatbuffers from FLATBUFFERS_INCLUDE or
  TFLM_DIR/tensorflow/lite/micro/tools/make/downloads/flatbuffers/include, gemmlowp from GEMMLOWP_DIR or
  .../downloads/gemmlowp): arm-none-eabi-g++ -fsyntax-only -std=c++17 of main.cpp with -Wall -Wextra
  -Werror, against the synced tree and a stub mbed.h holding only the Mbed/CMSIS names main.cpp uses.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tflm_mcubert.boards import BOARDS
from tflm_mcubert.runtime.tflm_binding import TFLM_COMMIT

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "mbed_app"
SYNC = APP / "sync_sources.py"
MBED_TARGETS = {
    "NUCLEO_F746ZG": "nucleo-f746zg",
    "NUCLEO_F767ZI": "nucleo-f767zi",
    "NUCLEO_H7A3ZI_Q": "nucleo-h7a3zi-q",
}
MBED_OS_6_17_0 = "17dc3dc2e6e2817a8bd3df62f38583319f0e4fed"  # the commit the mbed-os-6.17.0 tag names
GENERATED_HEADERS = ("model_data.h", "model_settings.h", "model_test_input.h")
KERNEL_API = REPO / "custom_ops" / "include" / "mcubert" / "mcubert_ops.h"


@pytest.fixture(scope="module")
def mbed_app_json() -> dict:
    return json.loads((APP / "mbed_app.json").read_text())


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory) -> Path:
    """A real export (random BERT-tiny preset, 32 tokens: seconds) whose firmware files main.cpp must fit."""
    out = tmp_path_factory.mktemp("mbed-export") / "export"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tflm_mcubert",
            "export",
            "--seq-len",
            "32",
            "--board",
            "nucleo-f767zi",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def sync(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SYNC), *map(str, args)], capture_output=True, text=True, timeout=60)


def defined_names(headers: list[Path]) -> set[str]:
    names = set()
    for header in headers:
        text = header.read_text()
        names.update(re.findall(r"#define\s+(\w+)", text))
        names.update(re.findall(r"\b(g_model_\w+)\s*(?:\[|;)", text))  # extern declarations
        names.update(re.findall(r"}\s*(\w+)\s*;", text))  # typedef'd structs
        names.update(re.findall(r"^\s+(MCUBERT_\w+)\s*=", text, re.M))  # enum constants (the kernel API)
    return names


# ---- configuration ---------------------------------------------------------------------------


def test_mbed_app_json_configures_the_three_boards(mbed_app_json):
    overrides = mbed_app_json["target_overrides"]
    assert set(overrides) == {"*", *MBED_TARGETS}
    common = overrides["*"]
    assert common["platform.stdio-baud-rate"] == 115200
    assert common["target.printf_lib"] == "minimal-printf"
    assert common["platform.minimal-printf-enable-floating-point"] is True  # main.cpp prints %f
    assert int(common["target.boot-stack-size"], 16) >= 0x1000
    assert mbed_app_json["requires"] == ["bare-metal"]
    assert "TF_LITE_STATIC_MEMORY" in mbed_app_json["macros"]  # TFLM's tensor layout must match the library's
    for key in ("timed-runs", "arena-region-name", "arena-region-start", "arena-region-size"):
        assert "help" in mbed_app_json["config"][key], key


@pytest.mark.parametrize("target, board", MBED_TARGETS.items())
def test_the_arena_region_is_the_one_the_export_sizes_for(mbed_app_json, target, board):
    settings = mbed_app_json["target_overrides"][target]
    region = BOARDS[board].largest_contiguous_sram
    assert int(settings["app.arena-region-start"], 16) == region.address
    assert int(settings["app.arena-region-size"], 16) == region.size
    assert settings["app.arena-region-name"] == f'"{region.name}"'
    if "target.mbed_ram_start" in settings:  # Mbed's RAM region (.bss, hence the arena) moved there
        assert int(settings["target.mbed_ram_start"], 16) == region.address
        assert int(settings["target.mbed_ram_size"], 16) == region.size


def test_the_h7_puts_ram_in_the_axi_sram(mbed_app_json):
    h7 = mbed_app_json["target_overrides"]["NUCLEO_H7A3ZI_Q"]
    axi = next(r for r in BOARDS["nucleo-h7a3zi-q"].sram_regions if r.name == "AXI-SRAM")
    assert (int(h7["target.mbed_ram_start"], 16), int(h7["target.mbed_ram_size"], 16)) == (axi.address, axi.size)


def test_lib_files_pin_mbed_os_6_17_0_and_the_tflm_revision_of_the_binding():
    assert (APP / "mbed-os.lib").read_text().strip() == f"https://github.com/ARMmbed/mbed-os/#{MBED_OS_6_17_0}"
    tflm_url, revision = (APP / "tflite-micro.lib").read_text().strip().split("#")
    assert tflm_url == "https://github.com/tensorflow/tflite-micro/"
    # The full hash of the commit the binding names (short) in its header and tflm_binding.py pins.
    assert len(revision) == 40 and revision.startswith(TFLM_COMMIT)
    assert re.search(rf"\b{TFLM_COMMIT}\b", (REPO / "custom_ops" / "tflm" / "mcubert_tflm.h").read_text())
    assert "tflite-micro/*" in (APP / ".mbedignore").read_text().splitlines()  # the raw checkout is not built
    assert json.loads((APP / "profiles" / "cxx17.json").read_text())["GCC_ARM"]["cxx"] == ["-std=gnu++17"]


# ---- main.cpp against a real export -----------------------------------------------------------


def test_main_uses_only_names_a_real_export_defines(export_dir, text_export_dir):
    source = (APP / "main.cpp").read_text()
    used = set(re.findall(r"\b(MCUBERT_\w+|g_model_\w+|mcubert_test_tensor)\b", source)) - {"MCUBERT_APP_TEXT"}
    defined = defined_names(
        [export_dir / name for name in GENERATED_HEADERS] + [text_export_dir / "model_vocab.h", KERNEL_API]
    )
    assert used - defined == set(), (
        f"main.cpp uses names neither the export nor the kernel API defines: {sorted(used - defined)}"
    )
    # The ones the application exists for: sized arena, exact op registration, self-check, report.
    assert {
        "MCUBERT_MODEL_ARENA_BYTES",
        "MCUBERT_MODEL_ARENA_ALIGNMENT",
        "MCUBERT_MODEL_OP_RESOLVER_SIZE",
        "MCUBERT_MODEL_REGISTER_OPS",
        "MCUBERT_MODEL_INPUT_COUNT",
        "MCUBERT_MODEL_OUTPUT_INDEX",
        "MCUBERT_TEST_OUTPUT_TOLERANCE",
        "g_model_data",
        "g_model_test_inputs",
        "g_model_test_expected_output",
    } <= used
    for include in GENERATED_HEADERS:
        assert f'#include "{include}"' in source
    for call in (
        "AllocateTensors()",
        "Invoke()",
        "arena_used_bytes()",
        "DWT->CYCCNT",
        "SystemCoreClock",
        "CoreDebug_DEMCR_TRCENA_Msk",
    ):
        assert call in source, call


# ---- sync_sources.py -------------------------------------------------------------------------


def test_sync_copies_kernels_and_export_and_check_catches_stale_copies(tmp_path, export_dir):
    app = tmp_path / "app"
    assert sync("--app", app, "--export", export_dir, "--check").returncode == 1  # nothing copied yet
    done = sync("--app", app, "--export", export_dir)
    assert done.returncode == 0, done.stderr
    for source, target in (
        ("custom_ops/include/mcubert/mcubert_ops.h", "mcubert/include/mcubert/mcubert_ops.h"),
        ("custom_ops/src/mcubert_gemm_dsp_s8.S", "mcubert/src/mcubert_gemm_dsp_s8.S"),
        ("custom_ops/tflm/mcubert_tflm.h", "mcubert/tflm/mcubert_tflm.h"),
    ):
        assert (app / target).read_bytes() == (REPO / source).read_bytes()
    assert not list((app / "mcubert" / "tflm").glob("*.py"))  # host-only parts stay behind
    assert sorted(p.name for p in (app / "model").iterdir()) == sorted(
        ["model_data.cc", "model_data.h", "model_settings.h", "model_test_input.cc", "model_test_input.h"]
    )
    assert sync("--app", app, "--export", export_dir, "--check").returncode == 0

    (app / "mcubert" / "src" / "mcubert_mlp_s8.c").write_text("/* local edit */\n")
    (app / "model" / "model_settings.h").unlink()
    (app / "mcubert" / "src" / "stale_kernel.c").write_text("int stale;\n")
    check = sync("--app", app, "--export", export_dir, "--check")
    assert check.returncode == 1
    assert "different: mcubert/src/mcubert_mlp_s8.c" in check.stdout
    assert "missing:   model/model_settings.h" in check.stdout
    assert "extra:     mcubert/src/stale_kernel.c" in check.stdout
    assert sync("--app", app, "--export", export_dir).returncode == 0
    assert sync("--app", app, "--export", export_dir, "--check").returncode == 0
    assert not (app / "mcubert" / "src" / "stale_kernel.c").exists()


def test_sync_takes_the_vocabulary_only_when_the_report_lists_it(tmp_path, export_dir):
    stray = tmp_path / "export-with-a-stray-vocabulary"
    shutil.copytree(export_dir, stray)
    (stray / "model_vocab.cc").write_text("// another export's\n")
    (stray / "model_vocab.h").write_text("// another export's\n")
    assert sync("--app", tmp_path / "app", "--export", stray).returncode == 0
    assert not list((tmp_path / "app" / "model").glob("model_vocab.*"))


def test_sync_refuses_a_directory_that_is_not_an_export(tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model_data.cc").write_text("// old export\n")
    done = sync("--app", tmp_path / "app", "--export", tmp_path / "half")
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {tmp_path / 'half'}: lacks model_data.h, model_settings.h")
    assert not (tmp_path / "app" / "model").exists()


# ---- compile check (TFLM_DIR) ------------------------------------------------------------------

STUB_MBED_H = """\
// Test stub: only the Mbed OS 6 / CMSIS (core_cm7.h) names main.cpp uses, with their real types.
#pragma once
#include <stdint.h>
#include <chrono>
typedef struct { volatile uint32_t DEMCR; } CoreDebug_Type;
typedef struct { volatile uint32_t CTRL; volatile uint32_t CYCCNT; volatile uint32_t LAR; } DWT_Type;
typedef struct { volatile uint32_t CCR; } SCB_Type;
#define CoreDebug ((CoreDebug_Type*)0xE000EDF0UL)
#define DWT ((DWT_Type*)0xE0001000UL)
#define SCB ((SCB_Type*)0xE000ED00UL)
#define CoreDebug_DEMCR_TRCENA_Msk (1UL << 24)
#define DWT_CTRL_CYCCNTENA_Msk (1UL)
#define SCB_CCR_IC_Msk (1UL << 17)
#define SCB_CCR_DC_Msk (1UL << 16)
extern uint32_t SystemCoreClock;
static inline void __WFI(void) {}
#define MBED_STRINGIFY2(x) #x
#define MBED_STRINGIFY(x) MBED_STRINGIFY2(x)
namespace mbed {
class Timer {
 public:
  void start();
  void stop();
  std::chrono::microseconds elapsed_time() const;
};
}  // namespace mbed
"""


def third_party_dir(env: str, tflm: Path, download: str) -> Path:
    return (
        Path(os.environ[env]) if os.environ.get(env) else tflm / "tensorflow/lite/micro/tools/make/downloads" / download
    )


@pytest.fixture(scope="module")
def tflm_include_dirs() -> list[Path]:
    if not os.environ.get("TFLM_DIR"):
        pytest.skip(
            "set TFLM_DIR to a tflite-micro checkout (commit 90b983c; FLATBUFFERS_INCLUDE and GEMMLOWP_DIR "
            "if its Makefile has not downloaded them) to compile main.cpp against TFLM"
        )
    if shutil.which("arm-none-eabi-g++") is None:
        pytest.skip("arm-none-eabi-g++ is not installed")
    tflm = Path(os.environ["TFLM_DIR"])
    dirs = [
        tflm,
        third_party_dir("FLATBUFFERS_INCLUDE", tflm, "flatbuffers/include"),
        third_party_dir("GEMMLOWP_DIR", tflm, "gemmlowp"),
    ]
    for directory, marker in zip(
        dirs, ("tensorflow/lite/micro/micro_interpreter.h", "flatbuffers/flatbuffers.h", "fixedpoint/fixedpoint.h")
    ):
        assert (directory / marker).is_file(), f"{directory / marker} not found"
    return dirs


@pytest.mark.parametrize(
    "target, with_text", [*((t, False) for t in MBED_TARGETS), ("NUCLEO_F767ZI", True)], ids=lambda v: str(v)
)
def test_main_compiles_for_cortex_m7_against_tflm(
    request, tmp_path, export_dir, tflm_include_dirs, mbed_app_json, target, with_text
):
    """With text: an export with the tokenizer's vocabulary, so main.cpp's serial text loop compiles too."""
    if with_text:
        export_dir = request.getfixturevalue("text_export_dir")
    app = tmp_path / "app"
    assert sync("--app", app, "--export", export_dir).returncode == 0
    assert (app / "model" / "model_vocab.h").is_file() == with_text
    (tmp_path / "stub").mkdir()
    (tmp_path / "stub" / "mbed.h").write_text(STUB_MBED_H)
    # What Mbed's config system turns mbed_app.json into for this target.
    settings = {**mbed_app_json["target_overrides"]["*"], **mbed_app_json["target_overrides"][target]}
    defines = [
        f"-DTARGET_NAME={target}",
        "-DTF_LITE_STATIC_MEMORY",
        f"-DMBED_CONF_APP_TIMED_RUNS={mbed_app_json['config']['timed-runs']['value']}",
    ]
    defines += [
        f"-DMBED_CONF_APP_{key.removeprefix('app.').replace('-', '_').upper()}={value}"
        for key, value in settings.items()
        if key.startswith("app.")
    ]
    includes = [
        f"-I{d}" for d in (tmp_path / "stub", app / "model", app / "mcubert" / "tflm", app / "mcubert" / "include")
    ]
    includes += [f"-isystem{d}" for d in tflm_include_dirs]  # TFLM's own warnings are not ours to fix
    command = [
        "arm-none-eabi-g++",
        "-fsyntax-only",
        "-mcpu=cortex-m7",
        "-mthumb",
        "-mfloat-abi=softfp",
        "-mfpu=fpv5-d16",
        "-std=c++17",
        "-fno-rtti",
        "-fno-exceptions",
        "-Wall",
        "-Wextra",
        "-Werror",
        *defines,
        *includes,
        str(APP / "main.cpp"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]

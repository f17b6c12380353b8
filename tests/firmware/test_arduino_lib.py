"""The Arduino library (arduino_lib/): generated from custom_ops/, a valid library.properties, and
sources that build for the boards it names.

* arduino_lib/src/ is not committed: arduino_lib/extras/sync_from_custom_ops.py generates it (here into a
  temporary copy of arduino_lib/, the `arduino_lib_dir` fixture); the examples' generated files it writes
  equal the committed ones; --check catches a modified, a missing and an extra file, kernel or TFLM
  binding; writing restores the copy. The binding (custom_ops/tflm/, not its python/ folder) is copied
  with .cc renamed .cpp and wrapped in a guard.
* library.properties has every field of the Arduino library specification 1.5 with valid values, and
  names the TFLM revisions the binding is written against; every example is examples/<name>/<name>.ino.
* Without an Arduino core: every generated src/ .c/.S file compiles with arm-none-eabi-gcc for
  Cortex-M7, M4F (DSP path, the .S file's micro-kernel; hard-float ABI) and M0+ (plain path, the .S file
  empty), with Arduino-like flags and -Werror; without TFLM on the include path the binding's .cpp files
  compile to empty objects (kernel-only sketches build without Arduino_TensorFlowLite); with TFLM_DIR
  they compile for real for Cortex-M4F and M7; the mcubert_classify sketch
  compiles as C++ against a stub Arduino.h and links with the library; under qemu-system-arm (mps2,
  semihosting) it prints the reference's logits.

The BERT sketch (examples/mcubert_bert_tiny) and its copy script: tests/firmware/test_arduino_bert_sketch.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import qemu

from tests.firmware.arduino_spec import CATEGORIES, SEMVER

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "arduino_lib"
SCRIPT = REPO / "arduino_lib" / "extras" / "sync_from_custom_ops.py"
SKETCH = LIB / "examples" / "mcubert_classify" / "mcubert_classify.ino"
BINDING = REPO / "custom_ops" / "tflm"
ARM_TEST = REPO / "custom_ops" / "test" / "arm"

CPUS = {  # cpu -> float flags (the boards' usual ABI), DSP path expected
    "cortex-m7": (["-mfloat-abi=hard", "-mfpu=fpv5-d16"], True),
    "cortex-m4": (["-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], True),
    "cortex-m0plus": (["-mfloat-abi=soft"], False),
}
QEMU_MACHINES = {cpu: machine for cpu, machine in qemu.MACHINES.items() if cpu in CPUS}  # linked with mps2.ld
# The Arduino builder reads no CMake: this is its recipe, not a fourth one of ours. Roughly what
# the Arduino cores pass (gnu11 / gnu++17, sections for --gc-sections, no
# exceptions or RTTI in C++), plus warnings as errors.
C_FLAGS = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-ffunction-sections", "-fdata-sections"]
CXX_FLAGS = [
    "-std=gnu++17",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-ffunction-sections",
    "-fdata-sections",
    "-fno-exceptions",
    "-fno-rtti",
    "-fno-threadsafe-statics",
]


def sync(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


# ---- generated sources ---------------------------------------------------------------------


def test_src_is_generated_not_committed():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "arduino_lib/src"], capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert tracked.stdout == ""


def test_the_committed_example_files_are_the_generated_ones(arduino_lib_dir):
    for rel in ("examples/mcubert_classify/mcubert_test_vector.h", "examples/mcubert_bert_tiny/mcubert_bert_tiny.ino"):
        assert (LIB / rel).read_bytes() == (arduino_lib_dir / rel).read_bytes(), f"{rel}: run {SCRIPT.name}"


def test_check_reports_modified_missing_and_extra_files(tmp_path, arduino_lib_dir):
    lib = tmp_path / "arduino_lib"
    shutil.copytree(arduino_lib_dir, lib)
    args = ("--source", str(REPO / "custom_ops"), "--lib", str(lib))
    assert sync("--check", *args).returncode == 0

    with (lib / "src" / "mcubert_mlp_s8.c").open("a") as f:
        f.write("/* local edit */\n")
    (lib / "src" / "mcubert" / "mcubert_ops.h").unlink()
    (lib / "src" / "mcubert_gemm_dsp_s8.S").unlink()
    (lib / "src" / "stale_kernel.c").write_text("int stale;\n")
    (lib / "examples" / "mcubert_classify" / "mcubert_test_vector.h").write_text("/* old */\n")
    with (lib / "src" / "mcubert_tflm.h").open("a") as f:
        f.write("// local edit\n")
    (lib / "src" / "mcubert_attention_tflm.cpp").unlink()
    (lib / "src" / "mcubert_tflm_arduino.h").unlink()
    (lib / "src" / "mcubert_mlp_tflm.cc").write_text("// a stray .cc copy\n")
    result = sync("--check", *args)
    assert result.returncode == 1
    out = result.stdout
    assert "different: src/mcubert_mlp_s8.c" in out
    assert "missing:   src/mcubert/mcubert_ops.h" in out
    assert "missing:   src/mcubert_gemm_dsp_s8.S" in out
    assert "extra:     src/stale_kernel.c" in out
    assert "different: examples/mcubert_classify/mcubert_test_vector.h" in out
    assert "different: src/mcubert_tflm.h" in out
    assert "missing:   src/mcubert_attention_tflm.cpp" in out
    assert "missing:   src/mcubert_tflm_arduino.h" in out
    assert "extra:     src/mcubert_mlp_tflm.cc" in out
    assert len([line for line in out.splitlines() if line.startswith("  ")]) == 9

    assert sync(*args).returncode == 0  # writing restores the generated state
    assert sync("--check", *args).returncode == 0
    assert not (lib / "src" / "stale_kernel.c").exists()
    assert not (lib / "src" / "mcubert_mlp_tflm.cc").exists()


def copy_of_custom_ops(tmp_path: Path) -> Path:
    source = tmp_path / "custom_ops"
    for part in ("src", "include", "tflm"):
        shutil.copytree(REPO / "custom_ops" / part, source / part)
    return source


def test_check_follows_a_changed_kernel_source(tmp_path, arduino_lib_dir):
    source = copy_of_custom_ops(tmp_path)
    (source / "src" / "mcubert_new_op.c").write_text("int mcubert_new_op;\n")
    result = sync("--check", "--source", str(source), "--lib", str(arduino_lib_dir))
    assert result.returncode == 1
    assert result.stdout.count("\n  ") == 1 and "missing:   src/mcubert_new_op.c" in result.stdout


def test_check_follows_a_changed_binding_and_ignores_its_python_registerer(tmp_path, arduino_lib_dir):
    source = copy_of_custom_ops(tmp_path)
    assert (source / "tflm" / "python").is_dir()  # the folder the library must not take
    (source / "tflm" / "python" / "another_registerer.cc").write_text("int registerer;\n")
    (source / "tflm" / "mcubert_new_op_tflm.cc").write_text("int mcubert_new_op_tflm;\n")
    with (source / "tflm" / "mcubert_tflm_common.h").open("a") as f:
        f.write("// changed\n")
    result = sync("--check", "--source", str(source), "--lib", str(arduino_lib_dir))
    assert result.returncode == 1
    assert result.stdout.count("\n  ") == 2, result.stdout
    assert "missing:   src/mcubert_new_op_tflm.cpp" in result.stdout
    assert "different: src/mcubert_tflm_common.h" in result.stdout


def split_banner(copy: str) -> tuple[str, str]:
    first, rest = copy.split("*/\n", 1)
    assert (
        first.startswith("/* GENERATED FILE - do not edit.") and "arduino_lib/extras/sync_from_custom_ops.py" in first
    )
    return first, rest


def test_every_kernel_file_is_copied_with_a_banner(arduino_lib_dir):
    sources = [REPO / "custom_ops" / "include" / "mcubert" / "mcubert_ops.h"]
    sources += [p for p in (REPO / "custom_ops" / "src").iterdir() if p.suffix in (".c", ".h", ".S")]
    for source in sources:
        rel = "mcubert/mcubert_ops.h" if source.name == "mcubert_ops.h" else source.name
        _, rest = split_banner((arduino_lib_dir / "src" / rel).read_text())
        assert rest == source.read_text(), rel
    assert (arduino_lib_dir / "src" / "mcubert_gemm_dsp_s8.S").exists()  # capital .S: preprocessed by Arduino
    assert '#include "mcubert/mcubert_ops.h"' in (arduino_lib_dir / "src" / "mcubert.h").read_text()


def test_every_binding_file_is_copied_with_a_banner_and_the_sources_guarded(arduino_lib_dir):
    src = arduino_lib_dir / "src"
    sources = sorted(p for p in BINDING.iterdir() if p.is_file() and p.suffix in (".h", ".cc"))
    assert {p.name for p in sources} >= {"mcubert_tflm.h", "mcubert_tflm_common.h", "mcubert_tflm_common.cc"}
    for source in sources:
        rel = source.name if source.suffix == ".h" else source.stem + ".cpp"
        first, rest = split_banner((src / rel).read_text())
        assert f"custom_ops/tflm/{source.name}" in first
        if source.suffix == ".h":
            assert rest == source.read_text(), rel
            continue
        # Only the guard around the verbatim source: TFLM present -> the binding, absent -> nothing.
        lines = rest.splitlines(keepends=True)
        guard = [i for i, line in enumerate(lines) if line.startswith("#if")]
        assert [lines[i] for i in guard[:2]] == [
            "#if defined(__has_include)\n",
            '#if __has_include("tensorflow/lite/micro/micro_interpreter.h")\n',
        ]
        body = "".join(lines[guard[1] + 2 : -3])
        assert body == source.read_text(), rel
        assert lines[-2:] == ["#endif  // TFLM on the include path\n", "#endif  // defined(__has_include)\n"]
    # Nothing from the Python interpreter's registerer, and no .cc the Arduino builder would skip.
    assert not list(src.rglob("*python*")) and not list(src.rglob("*.cc"))
    umbrella = (src / "mcubert_tflm_arduino.h").read_text()
    assert umbrella.index("#include <TensorFlowLite.h>") < umbrella.index('#include "mcubert_tflm.h"')


# ---- library.properties ----------------------------------------------------------------------

# The specification's required fields plus the two optional ones this library needs.
REQUIRED = (
    "name",
    "version",
    "author",
    "maintainer",
    "sentence",
    "paragraph",
    "category",
    "url",
    "architectures",
    "depends",
    "includes",
)


def read_properties() -> dict[str, str]:
    props = {}
    for line in (LIB / "library.properties").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not key=value: {line!r}"
        assert key not in props, f"duplicate field {key}"
        props[key] = value
    return props


def test_library_properties_fields(arduino_lib_dir):
    props = read_properties()
    for field in REQUIRED:
        assert props.get(field, "").strip(), f"library.properties: {field} missing or empty"
    # name: letters, digits, space, underscore, dot, dash; starts with a letter or digit; <= 63
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.\-]{0,62}", props["name"])
    assert not props["name"].startswith("Arduino")  # reserved for official libraries
    assert SEMVER.match(props["version"]), props["version"]
    assert props["category"] in CATEGORIES
    assert re.match(r"https?://", props["url"])
    arches = [a.strip() for a in props["architectures"].split(",")]
    assert arches and all(re.fullmatch(r"[a-z0-9_]+|\*", a) for a in arches)
    assert {"mbed_nano", "mbed_portenta", "stm32"} <= set(arches)
    assert [d.strip() for d in props["depends"].split(",")] == ["Arduino_TensorFlowLite"]
    includes = [header.strip() for header in props["includes"].split(",")]
    assert includes == ["mcubert.h", "mcubert_tflm_arduino.h"]
    for header in includes:  # at the src/ root: where the Arduino builder looks for a library's headers
        assert (arduino_lib_dir / "src" / header).is_file(), header
    # The revisions: the TFLM commit the binding is written against, and what the last
    # Arduino_TensorFlowLite snapshot carries.
    paragraph = props["paragraph"]
    for fact in (
        "90b983c",
        "TFLMRegistration",
        "Arduino_TensorFlowLite",
        "tflite-micro-arduino-examples",
        "bd7e861",
        "TfLiteRegistration",
    ):
        assert fact in paragraph, fact
    assert "not included" not in paragraph


def test_examples_are_sketch_folders():
    examples = sorted(p for p in (LIB / "examples").iterdir() if p.is_dir())
    assert [p.name for p in examples] == ["mcubert_bert_tiny", "mcubert_classify"]
    for folder in examples:
        assert [p.name for p in folder.glob("*.ino")] == [f"{folder.name}.ino"]  # sketch folder = sketch name
    text = SKETCH.read_text()
    assert "#include <mcubert.h>" in text and "micros()" in text
    assert "TensorFlowLite" not in text and "mcubert_tflm" not in text  # the kernel-only example


# ---- compile and link without an Arduino core ------------------------------------------------


def need(tool: str):
    if shutil.which(tool) is None:
        pytest.skip(
            f"{tool} not found (Debian: apt-get install gcc-arm-none-eabi); "
            "the Arduino library cannot be compile-checked"
        )


STUB_ARDUINO_H = """\
#pragma once
#include <stddef.h>
#include <stdint.h>
unsigned long micros(void);
unsigned long millis(void);
void delay(unsigned long ms);
class StubSerial {
 public:
  void begin(unsigned long) {}
  explicit operator bool() const { return true; }
  void print(const char *text);
  void print(char c);
  void print(int value);
  void print(long value);
  void print(unsigned long value);
  template <typename T> void println(T value) { print(value); print('\\n'); }
  void println() { print('\\n'); }
};
extern StubSerial Serial;
void setup(void);
void loop(void);
"""

# Serial on semihosting; main() runs setup() and one loop(), like the core's main would.
STUB_RUNTIME = """\
#include "Arduino.h"
extern "C" {
#include "semihost.h"
}
StubSerial Serial;
static unsigned long ticks;
unsigned long micros(void) { return ticks += 7; }
unsigned long millis(void) { return ticks / 1000; }
void delay(unsigned long) {}
void StubSerial::print(const char *text) { semihost_write(text); }
void StubSerial::print(char c) { char s[2] = {c, 0}; semihost_write(s); }
void StubSerial::print(int value) { semihost_write_int(value); }
void StubSerial::print(long value) { semihost_write_int((int32_t)value); }
void StubSerial::print(unsigned long value) { semihost_write_int((int32_t)value); }
int main(void) { setup(); loop(); return 0; }
"""


def arm_objects(src: Path, tmp: Path, cpu: str) -> list[Path]:
    """The generated library's C and assembly sources (`src`) compiled for `cpu`."""
    float_flags, _ = CPUS[cpu]
    objects = []
    for source in sorted(src.rglob("*")):
        if source.suffix not in (".c", ".S"):
            continue
        obj = tmp / (source.name + ".o")
        flags = C_FLAGS if source.suffix == ".c" else ["-x", "assembler-with-cpp"]
        subprocess.run(
            [
                "arm-none-eabi-gcc",
                f"-mcpu={cpu}",
                "-mthumb",
                *float_flags,
                *flags,
                "-I",
                str(src),
                "-c",
                str(source),
                "-o",
                str(obj),
            ],
            check=True,
            capture_output=True,
            text=True,
            errors="replace",
        )
        objects.append(obj)
    return objects


def compile_sketch(src: Path, tmp: Path, cpu: str) -> Path:
    """The .ino as Arduino's builder would make it a .cpp: Arduino.h first, then the sketch."""
    float_flags, _ = CPUS[cpu]
    (tmp / "Arduino.h").write_text(STUB_ARDUINO_H)
    cpp = tmp / "mcubert_classify.ino.cpp"
    cpp.write_text(f'#include <Arduino.h>\n#line 1 "{SKETCH}"\n' + SKETCH.read_text())
    obj = tmp / "sketch.o"
    result = subprocess.run(
        [
            "arm-none-eabi-g++",
            f"-mcpu={cpu}",
            "-mthumb",
            *float_flags,
            *CXX_FLAGS,
            "-I",
            str(tmp),
            "-I",
            str(src),
            "-I",
            str(SKETCH.parent),
            "-c",
            str(cpp),
            "-o",
            str(obj),
        ],
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert result.returncode == 0, result.stderr
    return obj


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_sources_compile_for_the_boards(tmp_path, cpu, arduino_lib_dir):
    need("arm-none-eabi-gcc")
    try:
        objects = arm_objects(arduino_lib_dir / "src", tmp_path, cpu)
    except subprocess.CalledProcessError as error:
        pytest.fail(f"{error.cmd}\n{error.stderr}")
    asm = next(o for o in objects if o.name == "mcubert_gemm_dsp_s8.S.o")
    symbols = subprocess.run(["arm-none-eabi-nm", str(asm)], capture_output=True, text=True, check=True).stdout
    has_kernel = "mcubert_dsp_4xn_step8" in symbols
    assert has_kernel == CPUS[cpu][1], symbols  # DSP cores: the micro-kernel; M0+: assembles to nothing


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_binding_compiles_to_nothing_without_tflm(tmp_path, cpu, arduino_lib_dir):
    """What the Arduino builder does for a kernel-only sketch: compiles every library source, with
    no Arduino_TensorFlowLite on the include path."""
    need("arm-none-eabi-g++")
    float_flags, _ = CPUS[cpu]
    src = arduino_lib_dir / "src"
    sources = sorted(src.glob("*.cpp"))
    assert {p.name for p in sources} == {p.stem + ".cpp" for p in BINDING.glob("*.cc")}
    for source in sources:
        obj = tmp_path / (source.name + ".o")
        result = subprocess.run(
            [
                "arm-none-eabi-g++",
                f"-mcpu={cpu}",
                "-mthumb",
                *float_flags,
                *CXX_FLAGS,
                "-I",
                str(src),
                "-c",
                str(source),
                "-o",
                str(obj),
            ],
            capture_output=True,
            text=True,
            errors="replace",
        )
        assert result.returncode == 0, result.stderr
        symbols = subprocess.run(["arm-none-eabi-nm", str(obj)], capture_output=True, text=True, check=True)
        assert symbols.stdout.strip() == "", f"{source.name} defines or needs symbols without TFLM:\n{symbols.stdout}"


@pytest.mark.parametrize("cpu", ["cortex-m4", "cortex-m7"])
def test_binding_compiles_against_tflm(tmp_path, cpu, arduino_lib_dir):
    """With TFLM_DIR: the binding's .cpp files compile for real (TFLM's headers on the include path),
    for Cortex-M4F and M7, and define the ops' registrations."""
    from tests.firmware.test_arduino_bert_sketch import tflm_include_dirs

    tflm_dirs = tflm_include_dirs()
    float_flags, _ = CPUS[cpu]
    src = arduino_lib_dir / "src"
    flags = [f"-mcpu={cpu}", "-mthumb", *float_flags, *CXX_FLAGS, "-DTF_LITE_STATIC_MEMORY", "-Wno-unused-parameter"]
    objects = []
    for source in sorted(src.glob("*.cpp")):
        obj = tmp_path / (source.name + ".o")
        includes = [f"-I{path}" for path in (src, *tflm_dirs)]
        command = ["arm-none-eabi-g++", *flags, *includes, "-c", str(source), "-o", str(obj)]
        result = subprocess.run(command, capture_output=True, text=True, errors="replace")
        assert result.returncode == 0, f"{source.name}:\n{result.stderr[-4000:]}"
        objects.append(str(obj))
    symbols = subprocess.run(["arm-none-eabi-nm", "-C", *objects], capture_output=True, text=True, check=True).stdout
    for op in ("EMBEDDING", "ATTENTION", "MLP", "CLASSIFIER_HEAD"):
        assert f"mcubert::Register_MCUBERT_{op}()" in symbols


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_sketch_compiles_against_stub_arduino(tmp_path, cpu, arduino_lib_dir):
    need("arm-none-eabi-g++")
    compile_sketch(arduino_lib_dir / "src", tmp_path, cpu)


@pytest.mark.parametrize("cpu", sorted(QEMU_MACHINES))
def test_sketch_links_and_prints_the_reference_logits(tmp_path, cpu, arduino_lib_dir):
    need("arm-none-eabi-g++")
    float_flags, _ = CPUS[cpu]
    arch = [f"-mcpu={cpu}", "-mthumb", *float_flags]
    src = arduino_lib_dir / "src"
    objects = arm_objects(src, tmp_path, cpu) + [compile_sketch(src, tmp_path, cpu)]
    (tmp_path / "runtime.cpp").write_text(STUB_RUNTIME)
    startup = tmp_path / "startup.o"  # the kernels' QEMU test startup: vectors, .data/.bss, FPU, semihosting
    result = subprocess.run(
        ["arm-none-eabi-gcc", *arch, "-std=c99", "-O2", "-c", str(ARM_TEST / "startup.c"), "-o", str(startup)],
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert result.returncode == 0, result.stderr
    runtime = tmp_path / "runtime.o"
    result = subprocess.run(
        [
            "arm-none-eabi-g++",
            *arch,
            *CXX_FLAGS,
            "-I",
            str(tmp_path),
            "-I",
            str(ARM_TEST),
            "-c",
            str(tmp_path / "runtime.cpp"),
            "-o",
            str(runtime),
        ],
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert result.returncode == 0, result.stderr
    elf = tmp_path / "mcubert_classify.elf"
    result = subprocess.run(  # no libstdc++ needed: no exceptions, RTTI or static constructors
        [
            "arm-none-eabi-gcc",
            *arch,
            str(runtime),
            str(startup),
            *map(str, objects),
            "-nostartfiles",
            "-T",
            str(ARM_TEST / "mps2.ld"),
            "--specs=nano.specs",
            "--specs=nosys.specs",
            "-Wl,--gc-sections",
            "-o",
            str(elf),
        ],
        capture_output=True,
        text=True,
        errors="replace",
    )
    assert result.returncode == 0, result.stderr
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("linked; qemu-system-arm not found to run it")
    returncode, console = qemu.run_qemu(elf, machine=QEMU_MACHINES[cpu], timeout=60)
    assert returncode == 0, console
    assert "DSP path: yes" in console
    assert "(match)" in console and "MISMATCH" not in console, console
    assert "latency us: " in console

"""The one way this package builds the kernels: custom_ops/CMakeLists.txt configured by itself (its own
flags; custom_ops/cmake/standalone.cmake lists the options and targets), one build folder per variant.
Tests, benchmarks and export's measurements all go through here.

    lib = build(Variant("host"), root, "mcubert_shared")               # root/host/libmcubert.so
    elf = build(Variant("cortex-m7", path="plain"), root, "mcubert_emu").image("mcubert_emu")
    elf = cached(Variant("cortex-m7"), "mcubert_emu").image("mcubert_emu")   # once per source revision
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from tflm_mcubert.kernel_sources import custom_ops_dir

HOST = "host"
CORES = ("cortex-m0plus", "cortex-m3", "cortex-m4", "cortex-m7", "cortex-m33", "cortex-m55")  # M55: QEMU images only
# the DSP path (where the core has it), MCUBERT_FORCE_PLAIN, MCUBERT_DSP_NO_ASM, the DSP path with the
# pair4 gemm on MVE (cores with MVE only)
PATHS = ("dsp", "plain", "noasm", "mve")
MVE_CORES = ("cortex-m55",)
ARM_TOOLCHAIN_HINT = "Debian: gcc-arm-none-eabi libnewlib-arm-none-eabi"


class KernelBuildError(RuntimeError):
    """A tool is missing, or configuring or building failed (the message says which and why)."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration of the kernels' build: the host, or one Cortex-M core with its kernel path
    and float ABI. `werror`: warnings are errors (the tests build so)."""

    cpu: str = HOST
    path: str = "dsp"
    float_abi: str = "hard"
    werror: bool = False

    def __post_init__(self):
        if self.cpu != HOST and self.cpu not in CORES:
            raise ValueError(f"cpu {self.cpu!r}: one of {(HOST,) + CORES}")
        if self.path not in PATHS or self.float_abi not in ("hard", "soft"):
            raise ValueError(f"path {self.path!r} / float_abi {self.float_abi!r}: one of {PATHS} / hard, soft")
        if self.path == "mve" and (self.cpu not in MVE_CORES or self.float_abi != "hard"):
            raise ValueError(f"path 'mve' needs a core with MVE {MVE_CORES} and the hard-float ABI")

    @property
    def name(self) -> str:
        """The build folder's name: host, cortex-m7, cortex-m7-plain, cortex-m4-noasm-soft, ..."""
        parts = (
            [self.cpu] + ([self.path] if self.path != "dsp" else []) + (["soft"] if self.float_abi == "soft" else [])
        )
        return "-".join(parts)

    def cache_entries(self) -> dict[str, str]:
        entries = {"MCUBERT_STANDALONE": "ON", "MCUBERT_WERROR": "ON" if self.werror else "OFF"}
        # The flags are the build's own: nothing from CFLAGS and friends, no build type's -O/-DNDEBUG.
        entries.update({f"CMAKE_{lang}_FLAGS": "" for lang in ("C", "CXX", "ASM")})
        entries["CMAKE_BUILD_TYPE"] = ""
        if self.cpu == HOST:
            entries["CMAKE_C_COMPILER"] = os.environ.get("CC") or "gcc"
            return entries
        toolchain = custom_ops_dir() / "cmake" / "arm-none-eabi.cmake"
        return {
            **entries,
            "CMAKE_TOOLCHAIN_FILE": str(toolchain),
            "MCUBERT_CPU": self.cpu,
            "MCUBERT_KERNEL_PATH": self.path,
            "MCUBERT_FLOAT_ABI": self.float_abi,
        }


@dataclasses.dataclass(frozen=True)
class KernelBuild:
    """A configured and built folder of one variant; every output is at its root."""

    variant: Variant
    folder: Path

    def image(self, target: str) -> Path:
        """An executable target's file: mcubert_emu.elf on Arm, mcubert_runner_plain on the host."""
        return self.folder / (target + ("" if self.variant.cpu == HOST else ".elf"))

    @property
    def library(self) -> Path:
        return self.folder / "libmcubert.a"

    @property
    def shared_library(self) -> Path:
        return self.folder / "libmcubert.so"

    @property
    def object_dir(self) -> Path:
        """The library's objects, with GCC's stack-usage (.su) and call-graph (.ci) files on Arm."""
        return self.folder / "CMakeFiles" / "mcubert.dir" / "src"


def missing_tools(variant: Variant) -> str | None:
    """What this machine lacks to build `variant` (None: nothing), with how to install it."""
    needed = ["cmake"] + (["gcc"] if variant.cpu == HOST else ["arm-none-eabi-gcc"])
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if not missing:
        return None
    hint = "" if variant.cpu == HOST else f" ({ARM_TOOLCHAIN_HINT})"
    return f"{', '.join(missing)} not found{hint}"


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise KernelBuildError(f"{what} failed: {' '.join(cmd)}\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")


def cmake_build(
    folder: Path, entries: Mapping[str, str], targets: tuple[str, ...], *, source: Path | None = None, jobs: int = 2
) -> None:
    """Configure custom_ops/CMakeLists.txt (or `source`) in `folder` with the cache `entries`, then build
    `targets`: every build of the kernels, the Python binding's included (runtime/tflm_binding.py)."""
    if shutil.which("cmake") is None:
        raise KernelBuildError("cmake not found: the kernels build with custom_ops/CMakeLists.txt (Debian: cmake)")
    configure = ["cmake", "-S", str(source or custom_ops_dir()), "-B", str(folder)]
    if not (Path(folder) / "CMakeCache.txt").exists() and shutil.which("ninja"):
        configure += ["-G", "Ninja"]  # a generator is chosen once per build folder
    # The contract header is generated at configure time by this very interpreter (it has numpy).
    configure += [f"-D{key}={value}" for key, value in {"MCUBERT_PYTHON": sys.executable, **entries}.items()]
    _run(configure, f"configuring the kernels in {folder}")
    _run(["cmake", "--build", str(folder), "-j", str(jobs), "--target", *targets], f"building {', '.join(targets)}")


def build(
    variant: Variant,
    root: Path,
    *targets: str,
    defines: Mapping[str, str] | None = None,
    source: Path | None = None,
    jobs: int = 2,
) -> KernelBuild:
    """Configure `variant` in root/<variant.name> (again when `defines` change) and build `targets`
    (default: the library). `defines`: more cache entries, e.g. MCUBERT_GOLDEN and MCUBERT_FIRMWARE;
    `source`: another custom_ops/ folder (default: this package's)."""
    problem = missing_tools(variant)
    if problem:
        raise KernelBuildError(f"cannot build the kernels for {variant.name}: {problem}")
    folder = Path(root) / variant.name
    entries = {**variant.cache_entries(), **(defines or {})}
    cmake_build(folder, entries, targets or ("mcubert",), source=source, jobs=jobs)
    return KernelBuild(variant, folder)


def sources_digest() -> str:
    """Of everything in custom_ops/ a build reads, and of where it is (a CMake build folder belongs to
    one source folder: two checkouts with the same sources get a folder each): a build cache's key."""
    root = custom_ops_dir()
    digest = hashlib.sha256(str(root.resolve()).encode())
    suffixes = (".c", ".h", ".S", ".ld", ".cmake")
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if not path.is_file() or relative.parts[0] == "build" or "CMakeFiles" in relative.parts:
            continue  # a build folder inside custom_ops/ is output, not source
        if path.suffix in suffixes or path.name == "CMakeLists.txt":
            digest.update(relative.as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tflm_mcubert"


def cached(variant: Variant, *targets: str, cache_dir: Path | None = None) -> KernelBuild:
    """build() into a cache folder per source revision (kernels-<digest>), so that repeated calls and
    runs reuse what is built."""
    return build(variant, (cache_dir or cache_root()) / f"kernels-{sources_digest()}", *targets)

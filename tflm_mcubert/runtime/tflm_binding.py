"""MCUBERT models in the real TFLM: the C++ binding (custom_ops/tflm/) built against a user's TFLM
checkout and run in the `tflite-micro` Python interpreter with `custom_op_registerers`.

Two facts shape this module:

* The TFLM checkout and the interpreter must be the same TFLM: the binding compiles TFLM's headers
  (TFLMRegistration, MicroMutableOpResolver's layout, MicroContext's vtable) into itself. Commit
  90b983c matches the wheel `tflite-micro==0.dev20260820164721`, whose only working build is for
  Python 3.13, while this package pins a newer nightly on 3.11 whose C++ interface differs. So the
  run happens in a second, small Python 3.13 environment (the wheel and its import-time
  dependencies, installed --no-deps) through `tflm_child.py` (tflm_process.py: one child for many
  requests; a too-small arena can crash TFLM, and a child keeps that from taking this process down).
* Python loads the wheel's `_runtime.so` privately (RTLD_LOCAL), so a library loaded later cannot
  see TFLM's symbols unless it names `_runtime.so` itself: the binding is linked with DT_NEEDED on
  it and an rpath to its folder; the loader then reuses the copy already loaded (same file), and
  our registrations land in the interpreter's own TFLM.

Compile settings follow the wheel's build (tflm_defines(): TF_LITE_STATIC_MEMORY, and
USE_TFLM_COMPRESSION, which the wheel has on); the flatbuffers headers must be exactly the version
TFLM pins (its generated schema refuses others; Debian's are older).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

import numpy as np

from tflm_mcubert.kernel_sources import custom_ops_dir
from tflm_mcubert.measure import kernel_build
from tflm_mcubert.runtime.arena_search import TflmError, smallest_passing
from tflm_mcubert.runtime.tflm_process import TflmProcess, TflmSetupError
from tflm_mcubert.tflite.graph import parse

TFLM_COMMIT = "90b983c"
WHEEL_VERSION = "0.dev20260820164721"
FLATBUFFERS_VERSION = "25.9.23"
# The interpreter environment: the wheel, then what `import tflite_micro` needs (pinned: this is a
# compatibility check, it must not drift).
INTERPRETER_REQUIREMENTS = (
    f"tflite-micro=={WHEEL_VERSION}",
    "numpy==2.5.5",
    f"flatbuffers=={FLATBUFFERS_VERSION}",
    "absl-py==2.5.1",
    "bitarray==3.12.3",
    "PyYAML==6.0.3",
)
REGISTERER = "mcubert_register_ops"  # custom_ops/tflm/python/mcubert_python_registerer.cc
TFLM_DEFINES = ("TF_LITE_STATIC_MEMORY=1", "USE_TFLM_COMPRESSION=1")

_THIRD_PARTY = Path("tensorflow/lite/micro/tools/make/downloads")  # where TFLM's make puts them


@dataclasses.dataclass(frozen=True)
class TflmSources:
    """A TFLM checkout and the third-party headers it compiles against."""

    tflm_dir: Path
    flatbuffers_include: Path
    gemmlowp_dir: Path

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> "TflmSources | None":
        """From TFLM_DIR (None when unset), FLATBUFFERS_INCLUDE and GEMMLOWP_DIR (defaults: where
        TFLM's Makefile downloads them inside the checkout); checked."""
        environ = os.environ if environ is None else environ
        if not environ.get("TFLM_DIR"):
            return None
        tflm_dir = Path(environ["TFLM_DIR"]).expanduser()
        downloads = tflm_dir / _THIRD_PARTY
        return cls(
            tflm_dir,
            Path(environ.get("FLATBUFFERS_INCLUDE") or downloads / "flatbuffers" / "include").expanduser(),
            Path(environ.get("GEMMLOWP_DIR") or downloads / "gemmlowp").expanduser(),
        ).checked()

    def checked(self) -> "TflmSources":
        for relative in ("tensorflow/lite/micro/micro_interpreter.h", "python/tflite_micro/python_ops_resolver.h"):
            if not (self.tflm_dir / relative).is_file():
                raise TflmSetupError(f"TFLM_DIR={self.tflm_dir} is not a tflite-micro checkout (no {relative})")
        base = self.flatbuffers_include / "flatbuffers" / "base.h"
        if not base.is_file():
            raise TflmSetupError(
                f"no flatbuffers headers at {self.flatbuffers_include} (expected flatbuffers/base.h); "
                f"set FLATBUFFERS_INCLUDE to the include/ folder of flatbuffers v{FLATBUFFERS_VERSION}"
            )
        found = flatbuffers_version(base)
        if found != FLATBUFFERS_VERSION:
            raise TflmSetupError(
                f"flatbuffers headers at {self.flatbuffers_include} are v{found}; TFLM {TFLM_COMMIT} "
                f"pins v{FLATBUFFERS_VERSION} (its generated schema refuses any other): set "
                f"FLATBUFFERS_INCLUDE to flatbuffers v{FLATBUFFERS_VERSION}'s include/"
            )
        if not (self.gemmlowp_dir / "fixedpoint" / "fixedpoint.h").is_file():
            raise TflmSetupError(
                f"no gemmlowp at {self.gemmlowp_dir} (expected fixedpoint/fixedpoint.h); set GEMMLOWP_DIR"
            )
        return self

    @property
    def include_dirs(self) -> tuple[Path, ...]:
        custom_ops = custom_ops_dir()
        return (
            self.tflm_dir,
            self.flatbuffers_include,
            self.gemmlowp_dir,
            custom_ops / "include",
            custom_ops / "src",
            custom_ops / "tflm",
        )


def flatbuffers_version(base_h: Path) -> str:
    """ "MAJOR.MINOR.REVISION" from flatbuffers/base.h."""
    text = base_h.read_text(errors="replace")
    parts = [re.search(rf"#define FLATBUFFERS_VERSION_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR", "REVISION")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"


def find_python313(environ: Mapping[str, str] | None = None) -> Path:
    """TFLM_PYTHON, else the first python3.13 that runs: on PATH (a pyenv shim may not), then pyenv's."""
    environ = os.environ if environ is None else environ
    if environ.get("TFLM_PYTHON"):
        python = Path(environ["TFLM_PYTHON"])
        if not _is_python313(python):
            raise TflmSetupError(f"TFLM_PYTHON={python} is not a working Python 3.13")
        return python
    pyenv_root = Path(environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [shutil.which("python3.13"), *sorted(pyenv_root.glob("versions/3.13*/bin/python3.13"), reverse=True)]
    for candidate in filter(None, candidates):
        if _is_python313(Path(candidate)):
            return Path(candidate)
    raise TflmSetupError(
        f"the tflite-micro wheel that matches TFLM {TFLM_COMMIT} needs Python 3.13: install it "
        f"or set TFLM_PYTHON to a python3.13"
    )


def _is_python313(python: Path) -> bool:
    try:
        proc = subprocess.run(
            [str(python), "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return False
    return proc.stdout.strip() == "True"


@dataclasses.dataclass(frozen=True)
class InterpreterEnvironment:
    """The Python 3.13 virtual environment holding the pinned tflite-micro wheel."""

    python: Path
    runtime_dir: Path  # folder of the wheel's _runtime.so

    @classmethod
    def ensure(cls, env_dir: Path, base_python: Path | None = None, log=print) -> "InterpreterEnvironment":
        """Create `env_dir` if needed (venv + INTERPRETER_REQUIREMENTS --no-deps), then check the wheel."""
        env_dir = Path(env_dir)
        python = env_dir / "bin" / "python"
        if not python.exists():
            base_python = base_python or find_python313()
            log(f"creating the TFLM interpreter environment in {env_dir} ({base_python}) ...")
            _checked_run([str(base_python), "-m", "venv", str(env_dir)], "creating the Python 3.13 environment")
            _checked_run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    *INTERPRETER_REQUIREMENTS,
                ],
                "installing the tflite-micro wheel",
            )
        with TflmProcess(python, WHEEL_VERSION) as tflm:
            response, _ = tflm.request({"mode": "info"})
        return cls(python, Path(str(response["runtime_dir"])))


def _checked_run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TflmSetupError(f"{what} failed ({' '.join(cmd[:4])} ...):\n{(proc.stdout + proc.stderr)[-3000:]}")


def build_binding(sources: TflmSources, runtime_dir: Path, build_dir: Path, jobs: int = 2) -> Path:
    """libmcubert_tflm.so: the kernels (plain C path) + the binding + the Python registerer, against
    `sources`' headers, linked to `runtime_dir`/_runtime.so — the `mcubert_tflm_python` target of
    custom_ops/CMakeLists.txt, the build description every other build of the kernels uses too.
    Rebuilds only what changed."""
    entries = {
        "MCUBERT_STANDALONE": "OFF",  # the binding takes the kernels as any TFLM project does
        "MCUBERT_TFLM_INCLUDE_DIRS": ";".join(str(d) for d in sources.include_dirs),
        "MCUBERT_TFLM_DEFINES": ";".join(TFLM_DEFINES),
        "MCUBERT_TFLM_PYTHON_RUNTIME_DIR": str(runtime_dir),
        "CMAKE_C_FLAGS": "-O2",
        "CMAKE_CXX_FLAGS": "-O2",
    }
    build_dir = Path(build_dir)
    try:
        kernel_build.cmake_build(build_dir, entries, ("mcubert_tflm_python",), jobs=jobs)
    except kernel_build.KernelBuildError as exc:
        raise TflmSetupError(f"building the TFLM binding: {exc}") from exc
    return build_dir / "libmcubert_tflm.so"


@dataclasses.dataclass(frozen=True)
class TflmRun:
    outputs: dict[str, np.ndarray]  # by graph output name, as TFLM returns them (int8 for MCUBERT models)
    arena: dict[str, int]  # the recording allocator's figures: total, head, tail (bytes)


_ALLOCATION = re.compile(r"Arena allocation (total|head|tail) (\d+) bytes")


class TflmBinding:
    """Runs models in the real TFLM interpreter with the MCUBERT ops registered."""

    def __init__(self, environment: InterpreterEnvironment, library: Path):
        self.environment, self.library = environment, Path(library)
        self._tflm: TflmProcess | None = None  # one child for all runs, started on the first

    def close(self) -> None:
        if self._tflm is not None:
            self._tflm.close()
            self._tflm = None

    @classmethod
    def build(cls, sources: TflmSources, env_dir: Path, build_dir: Path, log=print) -> "TflmBinding":
        environment = InterpreterEnvironment.ensure(env_dir, log=log)
        log(f"building the TFLM binding against {sources.tflm_dir} ...")
        return cls(environment, build_binding(sources, environment.runtime_dir, build_dir))

    def run(self, model_bytes: bytes, inputs: Mapping[str, np.ndarray], arena_bytes: int) -> TflmRun:
        """Invoke once. `inputs` by graph input name, each exactly the input's shape and dtype."""
        return self._run(model_bytes, [inputs], arena_bytes, stepped=False)

    def run_steps(self, model_bytes: bytes, steps: list[Mapping[str, np.ndarray]], arena_bytes: int) -> TflmRun:
        """Invoke once per entry of `steps` on one interpreter (variable tensors, e.g. a decoder's KV caches,
        carry from invoke to invoke); each output has a leading step axis."""
        if not steps:
            raise ValueError("run_steps needs at least one step")
        return self._run(model_bytes, steps, arena_bytes, stepped=True)

    def _run(self, model_bytes: bytes, steps: list, arena_bytes: int, *, stepped: bool) -> TflmRun:
        graph = parse(bytes(model_bytes))
        expected = [io.name for io in graph.inputs]
        request = {
            "mode": np.array("run"),
            "library": np.array(str(self.library)),
            "registerer": np.array(REGISTERER),
            "arena_bytes": np.array(int(arena_bytes)),
            "output_count": np.array(len(graph.outputs)),
        }
        for inputs in steps:
            if sorted(inputs) != sorted(expected):
                raise ValueError(f"inputs must be exactly {expected}, got {sorted(inputs)}")
            for io in graph.inputs:
                value = np.asarray(inputs[io.name])
                if value.shape != io.tensor.shape or value.dtype != io.tensor.dtype:
                    raise ValueError(
                        f"input {io.name!r}: {value.dtype}{list(value.shape)} given, the model takes "
                        f"{io.tensor.dtype}{list(io.tensor.shape)}"
                    )
        for io in graph.inputs:
            values = [np.asarray(inputs[io.name]) for inputs in steps]
            request[f"input_{io.position}"] = np.stack(values) if stepped else values[0]
        if stepped:
            request["step_count"] = np.array(len(steps))
        if self._tflm is None:
            self._tflm = TflmProcess(self.environment.python, WHEEL_VERSION)
        response, output = self._tflm.request(request, bytes(model_bytes))
        arena = {kind: int(n) for kind, n in _ALLOCATION.findall(output)}
        return TflmRun({io.name: response[f"output_{io.position}"] for io in graph.outputs}, arena)

    def fits(self, model_bytes: bytes, inputs: Mapping[str, np.ndarray], arena_bytes: int) -> bool:
        try:
            self.run(model_bytes, inputs, arena_bytes)
        except TflmError:
            return False
        return True

    def min_arena_bytes(
        self, model_bytes: bytes, inputs: Mapping[str, np.ndarray], *, lower_failing: int, upper: int
    ) -> int:
        """The least arena in which the model sets up and runs, by bisection between a size that
        fails and one that must work (probes run in the child)."""
        return smallest_passing(lambda n: self.fits(model_bytes, inputs, n), lower_failing=lower_failing, upper=upper)


def default_environment_dir() -> Path:
    """Where the interpreter environment is kept between runs (TFLM_PYTHON_ENV overrides)."""
    if os.environ.get("TFLM_PYTHON_ENV"):
        return Path(os.environ["TFLM_PYTHON_ENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tflm_mcubert" / f"python3.13-tflite-micro-{WHEEL_VERSION}"

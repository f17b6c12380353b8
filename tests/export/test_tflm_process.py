"""The one child protocol to TFLM (runtime/tflm_process.py + tflm_child.py): refusals, crashes, reuse."""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tflm_mcubert.runtime.arena_search import TflmError
from tflm_mcubert.runtime.tflm_process import TflmProcess, TflmSetupError
from tflm_mcubert.tflite.graph import parse


def zero_inputs(model_bytes: bytes) -> dict:
    graph = parse(model_bytes)
    request = {f"input_{io.position}": np.zeros(io.tensor.shape, io.tensor.dtype) for io in graph.inputs}
    return {**request, "output_count": len(graph.outputs)}


def test_a_refusal_is_a_tflm_error_and_the_child_serves_on(micro_int8):
    with TflmProcess() as tflm:
        with pytest.raises(TflmError, match="TFLM"):
            tflm.request({"mode": "allocate", "arena_bytes": 2000}, micro_int8)
        child = tflm._child
        response, output = tflm.request({"mode": "run", "arena_bytes": 1 << 22, **zero_inputs(micro_int8)}, micro_int8)
        assert tflm._child is child  # the same process answered both
    assert response["output_0"].dtype == np.int8 and response["output_0"].shape == (1, 3)
    assert "Arena allocation total" in output  # what native code printed comes back with the request


def test_a_wrong_wheel_is_a_setup_error():
    with TflmProcess(expected_version="0.dev19700101000000") as tflm:
        with pytest.raises(TflmSetupError, match="binding is built for 0.dev19700101000000"):
            tflm.request({"mode": "info"})


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a host C compiler to build a library that crashes")
def test_a_crash_is_a_tflm_error_and_the_next_request_gets_a_new_child(tmp_path, micro_int8):
    source = tmp_path / "crash.c"
    source.write_text("#include <signal.h>\n__attribute__((constructor)) static void crash(void) { raise(SIGSEGV); }\n")
    library = tmp_path / "libcrash.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    with TflmProcess() as tflm:
        request = {"mode": "allocate", "arena_bytes": 1 << 22, "library": str(library), "registerer": "none"}
        with pytest.raises(TflmError, match=r"TFLM crashed \(signal 11\)"):
            tflm.request(request, micro_int8)
        tflm.request({"mode": "allocate", "arena_bytes": 1 << 22}, micro_int8)


def test_a_broken_child_names_its_python(tmp_path):
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'no numpy here' >&2\nexit 1\n")
    broken.chmod(0o755)
    with TflmProcess(broken) as tflm:
        with pytest.raises(TflmSetupError, match=f"{broken}.*exited with status 1:\nno numpy here"):
            tflm.request({"mode": "info"})


def test_info_names_the_wheel_the_child_runs():
    with TflmProcess() as tflm:
        response, _ = tflm.request({"mode": "info"})
    assert str(response["version"].item()) == importlib.metadata.version("tflite-micro")
    assert (Path(str(response["runtime_dir"].item())) / "runtime.py").exists()

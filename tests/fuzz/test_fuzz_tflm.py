"""The TFLM-binding fuzzer (tests/fuzz/tflm/): each MCUBERT op through KernelRunner with hostile tensors
and options, ASan + UBSan, for a CI time box; and its one finding so far, replayed. Needs TFLM_DIR (as
tests/tflm/ do) and clang with libFuzzer; skips, saying which, without them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "tflm"))
sys.path.insert(0, str(HERE))

import run_fuzzers  # noqa: E402

CI_SECONDS = 60


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    if not os.environ.get("TFLM_DIR"):
        pytest.skip("TFLM_DIR is not set: the TFLM-binding fuzzer compiles KernelRunner from a tflite-micro checkout")
    if shutil.which("clang") is None:
        pytest.skip("clang not found: the fuzz harnesses need clang with libFuzzer (Debian: clang)")
    import tflm_fuzzer

    from tflm_mcubert.runtime.tflm_binding import TflmSources

    build = tmp_path_factory.mktemp("tflm-fuzz")
    binary = tflm_fuzzer.build(TflmSources.from_environment().checked(), build)
    seeds = build / "seeds"
    assert tflm_fuzzer.write_seeds(seeds) == 20
    return binary, seeds


def test_the_fuzzer_finds_nothing_within_the_ci_budget(fuzzer, tmp_path):
    from run_fuzzers import run

    binary, seeds = fuzzer
    result = run(binary, "fuzz_tflm_kernel", seconds=CI_SECONDS, runs=None, artifacts=tmp_path, seeds=seeds)
    assert not result.findings, result.log[-3000:]
    assert result.executions > 1000 and result.coverage > 500, result.log[-2000:]


def test_a_weight_computed_at_run_time_is_refused_not_run(fuzzer, tmp_path):
    """The finding: an embedding whose word table was an arena tensor ran with a shift Prepare never saw."""
    import tflm_fuzzer

    sys.path.insert(0, str(HERE.parent / "tflm"))
    import op_nodes

    binary, _ = fuzzer
    (request, _), _ = op_nodes.encoder_node(op_nodes.ENCODER_CASES["embedding"](), scratch_tensor=False)
    constant = list(request["constant"])
    constant[constant.index(1)] = 0
    (tmp_path / "input").write_bytes(tflm_fuzzer.encode({**request, "constant": constant}))
    done = subprocess.run(
        [str(binary), *run_fuzzers.MEMORY_LIMITS, str(tmp_path / "input")],
        capture_output=True,
        text=True,
        env={**os.environ, "MCUBERT_FUZZ_LOG": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "must be a constant of the model" in done.stderr, done.stderr[-3000:]

"""The C entry points that take untrusted bytes under libFuzzer + ASan + UBSan, within a CI budget.

The release run is `python tests/fuzz/run_fuzzers.py --runs 1000000` (docs/reliability.md).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run_fuzzers  # noqa: E402

CI_SECONDS = 10  # per harness: thousands of executions each; the release run is 10^6 (docs/reliability.md)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    if run_fuzzers.compiler() is None:
        pytest.skip("clang is not installed (Debian: clang libclang-rt-14-dev); .ci/run installs it")
    out = tmp_path_factory.mktemp("fuzz")
    probe = subprocess.run(
        ["clang", "-fsanitize=fuzzer", "-x", "c", "-", "-o", str(out / "probe")],
        input="int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }",
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"clang has no libFuzzer runtime (Debian: libclang-rt-14-dev): {probe.stderr.strip()[-200:]}")
    return out


def print_build(harness: str, build_dir: Path) -> Path:
    """The harness with its status print, built once per module."""
    binary = build_dir / f"{harness}-print"
    return binary if binary.exists() else run_fuzzers.build(harness, build_dir, extra=("-DMCUBERT_FUZZ_PRINT_STATUS",))


def test_the_seeds_reach_a_validate_and_a_verification_that_pass(build_dir):
    """Mutations start deep only if the seeds are accepted: every op seed validates, the model verifies."""
    checks = {
        "fuzz_options_validate": "mcubert status 0: ",
        "fuzz_verify_model": "mcubert status 0 verified 1: ",
        "fuzz_verify_model_resealed": "mcubert status 0 verified 1: ",
        "fuzz_tokenize": "mcubert status 0: ",
        "fuzz_bpe": "mcubert status 0: ",
        "fuzz_op_run": "mcubert run status 0: ",
        "fuzz_op_run_dsp": "mcubert run status 0: ",
    }
    for harness, accepted in checks.items():
        binary = print_build(harness, build_dir)
        seeds = sorted((HERE / "corpus" / run_fuzzers.source_of(harness)[0]).iterdir())
        assert seeds, harness
        for seed in seeds:
            done = subprocess.run([str(binary), *run_fuzzers.MEMORY_LIMITS, str(seed)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            assert accepted in done.stderr, (seed.name, done.stderr[-500:])


@pytest.mark.parametrize("harness", ["fuzz_op_run", "fuzz_op_run_dsp"])
def test_the_op_run_harness_reaches_the_input_errors(build_dir, harness, tmp_path):
    """With flags bit 1 (hostile run-time inputs) the embedding's ids and the attention's valid length
    go out of range in some seeds: the kernel must then say MCUBERT_ERROR_INPUT (5), the harness checks
    the output is untouched; the others still run (0)."""
    import make_corpus

    binary = print_build(harness, build_dir)
    statuses = set()
    for name, seed in make_corpus.op_run_seeds().items():
        if not name.startswith(("embedding", "attention")):
            continue
        for variant in range(8):
            path = tmp_path / f"{name}-{variant}.bin"
            path.write_bytes(bytes([seed[0], seed[1] | 2]) + bytes([variant]) + seed[2:])
            done = subprocess.run([str(binary), *run_fuzzers.MEMORY_LIMITS, str(path)], capture_output=True, text=True)
            assert done.returncode == 0, done.stderr[-2000:]
            statuses |= set(re.findall(r"mcubert run status (\d+): ", done.stderr))
    assert statuses == {"0", "5"}, statuses


@pytest.mark.parametrize("seed", ["tiny_decoder", "tiny_export"])
def test_the_resealed_harness_reaches_the_structure_walk(build_dir, seed, tmp_path):
    """Resealed, a truncation passes the size and CRC checks: the seeds' cuts reach the walk of the
    structure, which refuses each (a cut of the trailing padding alone leaves the model all there)."""
    binary = print_build("fuzz_verify_model_resealed", build_dir)
    model = (HERE / "corpus" / "fuzz_verify_model" / f"{seed}.bin").read_bytes()
    paths = []
    for n in range(len(model) - 1500, len(model)):
        paths.append(tmp_path / f"cut{n}")
        paths[-1].write_bytes(model[:n])
    done = subprocess.run([str(binary), *run_fuzzers.MEMORY_LIMITS, *map(str, paths)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    statuses = re.findall(r"mcubert status (\d) verified \d: (.*)", done.stderr)
    assert len(statuses) == len(paths)
    accepted = [n for n, (status, _) in zip(range(len(model) - 1500, len(model)), statuses) if status == "0"]
    assert all(not any(model[n:]) for n in accepted), accepted
    assert sum("malformed flatbuffer" in message for _, message in statuses) > 1000, statuses[-3:]


@pytest.mark.parametrize("harness", run_fuzzers.HARNESSES)
def test_the_fuzzer_finds_nothing_within_the_ci_budget(build_dir, harness, tmp_path):
    result = run_fuzzers.run(
        run_fuzzers.build(harness, build_dir), harness, seconds=CI_SECONDS, runs=None, artifacts=tmp_path / "findings"
    )
    assert not result.findings, f"{harness}: {[p.name for p in result.findings]}\n{result.log[-3000:]}"
    assert result.executions > 1000 and result.coverage > 50, result.log[-1000:]


def test_the_committed_corpus_is_what_make_corpus_writes(tmp_path):
    from tests.export.test_export_hashes import RECORD, environment

    # The corpus was written where the first set of export digests was recorded.
    recorded = json.loads(RECORD.read_text())[0]["environment"]
    if recorded != environment():
        pytest.skip(
            "the seeds come from a float calibration: compared only where the export digests were "
            f"recorded ({recorded})"
        )
    import make_corpus

    for path in make_corpus.write_corpus(tmp_path):
        committed = HERE / "corpus" / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), f"run tests/fuzz/make_corpus.py ({committed})"
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(committed)], cwd=HERE, capture_output=True)
        assert tracked.returncode == 0, f"{committed} is not in git (ignored?): a clean clone would lack it"


def test_the_committed_bpe_seeds_are_what_make_corpus_writes():
    """fuzz_bpe's seeds need no export: compared everywhere (the same `tokenizers` trains the same merges)."""
    import make_corpus

    committed = {p.stem: p.read_bytes() for p in (HERE / "corpus" / "fuzz_bpe").iterdir()}
    assert committed == make_corpus.bpe_seeds(), "run tests/fuzz/make_corpus.py"


def test_the_committed_op_run_seeds_are_what_make_corpus_writes():
    """fuzz_op_run's seeds need no export (no float calibration): compared everywhere."""
    import make_corpus

    seeds = make_corpus.op_run_seeds()
    committed = {p.stem: p.read_bytes() for p in (HERE / "corpus" / "fuzz_op_run").iterdir()}
    assert committed == seeds, "run tests/fuzz/make_corpus.py"


FINDINGS = HERE / "findings"  # <harness>/<what it broke>.bin: inputs a fuzzer once crashed on, kept as regressions


@pytest.mark.parametrize("harness", sorted(p.name for p in FINDINGS.iterdir()))
def test_every_past_finding_runs_clean(build_dir, harness):
    """A crash the fuzzer found stays fixed: each kept input runs without a sanitizer report. The first was
    a damaged tensor-name string whose length the reader had stored before refusing it, so naming the
    corrupted tensor read past the model (vector_at now leaves a refused vector empty)."""
    binary = run_fuzzers.build(harness, build_dir)
    for finding in sorted((FINDINGS / harness).iterdir()):
        done = subprocess.run([str(binary), *run_fuzzers.MEMORY_LIMITS, str(finding)], capture_output=True, text=True)
        assert done.returncode == 0, f"{harness} {finding.name}:\n{done.stderr[-2000:]}"

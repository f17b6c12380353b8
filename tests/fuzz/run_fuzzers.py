"""Builds the libFuzzer harnesses (ASan + UBSan) against custom_ops/src and runs them.

    python tests/fuzz/run_fuzzers.py --runs 1000000           # the release run: 10^6 executions each
    python tests/fuzz/run_fuzzers.py --seconds 20              # a time box per harness (CI uses a few)

Prints, per harness: executions, coverage (libFuzzer's `cov` edges and `ft` features at the end),
corpus size and findings (crash / leak / timeout files, kept in --artifacts). Exits 1 on any finding.
The seed corpus (tests/fuzz/corpus/<harness>/, from make_corpus.py) is read, never written: new
inputs go to a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CUSTOM_OPS = ROOT / "custom_ops"
SOURCES = sorted(p.stem for p in (HERE / "harnesses").glob("fuzz_*.c"))
# Harnesses built a second time with defines: name -> (source, defines). They share the source's corpus.
VARIANTS = {
    "fuzz_op_run_dsp": ("fuzz_op_run", ("-DMCUBERT_EMULATE_DSP",)),
    # the record rewritten to agree with each mutation: the structure walk behind the CRC is fuzzed
    "fuzz_verify_model_resealed": ("fuzz_verify_model", ("-DMCUBERT_FUZZ_RESEAL",)),
}
HARNESSES = sorted([*SOURCES, *VARIANTS])
# The RSS high-water mark libFuzzer checks survives exec: started from a large parent (pytest with
# TensorFlow loaded, past 2 GB late in the suite) any harness would start "out of memory". Single
# allocations are limited instead; leaks are LeakSanitizer's.
MEMORY_LIMITS = ("-rss_limit_mb=0", "-malloc_limit_mb=256")
SANITIZERS = ["-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]
FLAGS = [
    "-std=c99",
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-I",
    str(CUSTOM_OPS / "include"),
    "-I",
    str(CUSTOM_OPS / "src"),
]


@dataclasses.dataclass
class FuzzResult:
    harness: str
    executions: int
    coverage: int
    features: int
    corpus: int
    findings: list[Path]
    log: str


def compiler() -> str | None:
    return shutil.which("clang")


def source_of(harness: str) -> tuple[str, tuple[str, ...]]:
    """The harness's source (and corpus) name and its defines."""
    return VARIANTS.get(harness, (harness, ()))


def build(harness: str, out_dir: Path, *, extra: tuple[str, ...] = ()) -> Path:
    """The harness linked with every kernel source; `extra` adds defines (e.g. the status print)."""
    source, defines = source_of(harness)
    cc = compiler()
    if cc is None:
        raise SystemExit("clang not found: the fuzz harnesses need clang with libFuzzer (Debian: clang)")
    binary = out_dir / (harness + ("-print" if extra else ""))
    sources = sorted(str(p) for p in (CUSTOM_OPS / "src").glob("*.c"))
    subprocess.run(
        [
            cc,
            *FLAGS,
            *SANITIZERS,
            *defines,
            *extra,
            "-o",
            str(binary),
            str(HERE / "harnesses" / f"{source}.c"),
            *sources,
        ],
        check=True,
    )
    return binary


def _last(pattern: str, text: str) -> int:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else 0


def run(
    binary: Path, harness: str, *, seconds: float | None, runs: int | None, artifacts: Path, seeds: Path | None = None
) -> FuzzResult:
    """Runs the harness on its seeds (default: its committed corpus) for `seconds` or `runs` executions."""
    artifacts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        args = [
            str(binary),
            work,
            str(seeds or HERE / "corpus" / source_of(harness)[0]),
            f"-artifact_prefix={artifacts}/{harness}-",
            "-print_final_stats=1",
            "-max_len=65536",
            *MEMORY_LIMITS,
            "-timeout=10",
        ]
        args += [f"-max_total_time={int(seconds)}"] if seconds else []
        args += [f"-runs={runs}"] if runs else []
        done = subprocess.run(args, capture_output=True, text=True)
        corpus = sum(1 for _ in Path(work).iterdir())
    log = done.stderr
    findings = sorted(artifacts.glob(f"{harness}-*"))
    if done.returncode != 0 and not findings:
        raise SystemExit(f"{harness}: libFuzzer failed without a finding (exit {done.returncode}):\n{log[-3000:]}")
    return FuzzResult(
        harness,
        _last(r"stat::number_of_executed_units:\s*(\d+)", log),
        _last(r"cov: (\d+)", log),
        _last(r"ft: (\d+)", log),
        corpus,
        findings,
        log,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="time box per harness")
    parser.add_argument("--runs", type=int, help="executions per harness (the release run: 1000000)")
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--only", choices=HARNESSES, action="append", help="run only these harnesses")
    args = parser.parse_args()
    if not args.seconds and not args.runs:
        parser.error("give --seconds or --runs")
    failed = False
    with tempfile.TemporaryDirectory() as build_dir:
        print(f"{'harness':<24} {'executions':>12} {'coverage':>9} {'features':>9} {'new inputs':>10}  findings")
        for harness in args.only or HARNESSES:
            result = run(
                build(harness, Path(build_dir)), harness, seconds=args.seconds, runs=args.runs, artifacts=args.artifacts
            )
            failed |= bool(result.findings)
            names = ", ".join(str(p) for p in result.findings) or "none"
            print(
                f"{harness:<24} {result.executions:>12,} {result.coverage:>9,} {result.features:>9,} "
                f"{result.corpus:>10,}  {names}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

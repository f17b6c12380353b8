"""The TFLM-binding fuzzer (issue 28, finding 6): fuzz_tflm_kernel.cc built with clang's libFuzzer, ASan
and UBSan against the user's TFLM checkout (TFLM_DIR at 90b983c, with FLATBUFFERS_INCLUDE and GEMMLOWP_DIR
as tests/tflm/ take them), and its seeds: every valid node of tests/tflm/op_nodes.py in the harness's
input format. Nothing here is committed: the seeds are written per run, the TFLM sources compiled from the
checkout.

    python tests/fuzz/tflm/tflm_fuzzer.py --runs 1000000     # the release run
    python tests/fuzz/tflm/tflm_fuzzer.py --seconds 60       # a time box (the test uses one)

Prints executions, coverage and findings (crash files are kept in --artifacts); exits 1 on any finding.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent))

from run_fuzzers import compiler, run  # noqa: E402

# The TFLM sources KernelRunner and the binding reach (the wheel's _runtime.so is not instrumented, and a
# Python extension cannot be linked into an executable): the least set that links. debug_log.cc is left
# out: the harness has its own DebugLog (quiet unless MCUBERT_FUZZ_LOG is set).
TFLM_SOURCES = (
    "tensorflow/lite/micro/kernels/kernel_runner.cc",
    "tensorflow/lite/micro/kernels/kernel_util.cc",
    "tensorflow/lite/micro/kernels/decompress.cc",
    "tensorflow/lite/micro/kernels/decompress_common.cc",
    "tensorflow/lite/micro/fake_micro_context.cc",
    "tensorflow/lite/micro/mock_micro_graph.cc",
    "tensorflow/lite/micro/micro_context.cc",
    "tensorflow/lite/micro/arena_allocator/single_arena_buffer_allocator.cc",
    "tensorflow/lite/micro/memory_helpers.cc",
    "tensorflow/lite/micro/micro_log.cc",
    "tensorflow/lite/micro/micro_utils.cc",
    "tensorflow/lite/micro/tflite_bridge/flatbuffer_conversions_bridge.cc",
    "tensorflow/lite/micro/tflite_bridge/micro_error_reporter.cc",
    "tensorflow/lite/core/c/common.cc",
    "tensorflow/lite/core/api/flatbuffer_conversions.cc",
    "tensorflow/lite/kernels/internal/portable_tensor_utils.cc",
    "tensorflow/lite/kernels/internal/tensor_ctypes.cc",
    "tensorflow/compiler/mlir/lite/core/api/error_reporter.cc",
)
OUR_SOURCES = (
    *sorted((ROOT / "custom_ops" / "src").glob("*.c")),
    # The op registrations and their shared Prepare; not the text front end (it needs the interpreter).
    *sorted(p for p in (ROOT / "custom_ops" / "tflm").glob("*.cc") if p.name != "mcubert_tflm_text.cc"),
    ROOT / "tests" / "tflm" / "kernel_runner" / "mcubert_kernel_runner.cc",
    HERE / "fuzz_tflm_kernel.cc",
)
SANITIZE = ["-fsanitize=fuzzer-no-link,address,undefined", "-fno-sanitize-recover=undefined", "-g", "-O1"]
OPS = ("MCUBERT_EMBEDDING", "MCUBERT_ATTENTION", "MCUBERT_MLP", "MCUBERT_CLASSIFIER_HEAD")


def build(sources, out_dir: Path) -> Path:
    """The harness, from `sources` (runtime.tflm_binding.TflmSources, checked), built in out_dir."""
    from tflm_mcubert.kernel_sources import custom_ops_dir
    from tflm_mcubert.runtime.tflm_binding import TFLM_DEFINES

    cc = compiler()
    if cc is None:
        raise SystemExit("clang not found: the fuzz harnesses need clang with libFuzzer (Debian: clang)")
    custom_ops_dir()  # writes the generated contract header the kernels include
    includes = [f"-I{d}" for d in (*sources.include_dirs, ROOT / "tests" / "tflm")]
    defines = [f"-D{d}" for d in TFLM_DEFINES]
    jobs = [(Path(sources.tflm_dir) / s, f"tflm_{i}") for i, s in enumerate(TFLM_SOURCES)]
    jobs += [(p, f"ours_{i}") for i, p in enumerate(OUR_SOURCES)]
    out_dir.mkdir(parents=True, exist_ok=True)

    def compile_one(job) -> Path:
        source, stem = job
        obj = out_dir / f"{stem}_{source.stem}.o"
        language = ["clang", "-std=c99"] if source.suffix == ".c" else ["clang++", "-std=gnu++17", "-fno-exceptions"]
        command = [language[0], *language[1:], *SANITIZE, *includes, *defines, "-c", str(source), "-o", str(obj)]
        if source.suffix == ".cc":
            command.insert(3, "-fno-rtti")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"compiling {source} failed:\n{done.stderr[-3000:]}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        objects = list(pool.map(compile_one, jobs))
    binary = out_dir / "fuzz_tflm_kernel"
    done = subprocess.run(
        ["clang++", "-fsanitize=fuzzer,address,undefined", *map(str, objects), "-o", str(binary)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"linking the TFLM fuzzer failed:\n{done.stderr[-3000:]}")
    return binary


def encode(request: dict) -> bytes:
    """A tests/tflm/op_nodes.py request (one node) in fuzz_tflm_kernel.cc's input format."""
    count = sum(1 for k in request if k.startswith("tensor_"))
    tensors = [request[f"tensor_{i}"] for i in range(count)]
    inputs = request["input_count"]
    out = bytearray([OPS.index(request["op"]), count, inputs])
    for i, tensor in enumerate(tensors):
        out += bytes([request["types"][i]])
        if i < inputs:
            out += bytes([request["constant"][i]])
        out += bytes([tensor.ndim]) + struct.pack(f"<{tensor.ndim}H", *tensor.shape)
    options = bytes(request["options"])
    out += struct.pack("<H", len(options)) + options
    for tensor in tensors:
        out += tensor.tobytes()
    return bytes(out)


def write_seeds(directory: Path) -> int:
    """Every valid node of the KernelRunner test (each encoder case, the head) and the int4-weight attention
    and MLP (op version 3), with and without a scratch tensor, as seed files; returns how many."""
    sys.path.insert(0, str(ROOT / "tests" / "tflm"))
    import op_nodes

    cases = [*op_nodes.ENCODER_CASES.values()]
    cases += [
        lambda: op_nodes.kernel_cases.attention_case(8, 16, 2, 3, weight_bits=4),
        lambda: op_nodes.kernel_cases.mlp_case(8, 16, 64, 3, weight_bits=4),
    ]
    directory.mkdir(parents=True, exist_ok=True)
    requests = []
    for scratch in (False, True):
        requests += [op_nodes.encoder_node(make(), scratch)[0][0] for make in cases]
        requests.append(op_nodes.head_node(scratch)[0][0])
    for i, request in enumerate(requests):
        (directory / f"seed_{i:02d}").write_bytes(encode(request))
    return len(requests)


def main(argv=None) -> int:
    from tflm_mcubert.runtime.tflm_binding import TflmSources

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--runs", type=int, help="executions (default: --seconds)")
    budget.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--build", type=Path, default=Path(tempfile.gettempdir()) / "mcubert-tflm-fuzz")
    parser.add_argument("--artifacts", type=Path, default=Path("fuzz-artifacts"))
    args = parser.parse_args(argv)
    sources = TflmSources.from_environment()
    if sources is None:
        raise SystemExit("set TFLM_DIR to a tflite-micro checkout at 90b983c (tests/tflm/test_tflm_binding.py)")
    binary = build(sources.checked(), args.build)
    seeds = args.build / "seeds"
    print(f"{write_seeds(seeds)} seeds; fuzzing ...", flush=True)
    seconds = None if args.runs else args.seconds
    result = run(binary, "fuzz_tflm_kernel", seconds=seconds, runs=args.runs, artifacts=args.artifacts, seeds=seeds)
    print(
        f"{result.harness}: {result.executions:,} executions, cov {result.coverage}, ft {result.features}, "
        f"corpus {result.corpus}, findings {len(result.findings)}"
    )
    for finding in result.findings:
        print(f"  {finding}")
    return 1 if result.findings else 0


if __name__ == "__main__":
    sys.exit(main())

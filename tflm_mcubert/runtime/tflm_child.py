"""The child side of every TFLM run outside this process: a small server around the `tflite-micro`
wheel's interpreter. Its parent is tflm_process.TflmProcess.

Why a child at all: a too-small arena can crash TFLM (some kernels use a persistent buffer the
allocator could not provide: SIGSEGV on BERT at some too-small arena sizes), and a
crash must only mean "does not fit". And the binding of our ops must run in the Python 3.13
environment of the wheel that matches its TFLM (tflm_binding.py). So this file is self-contained on
purpose: it imports numpy, the wheel and the standard library only, never tflm_mcubert.

    python tflm_child.py

One request per line on stdin: "REQUEST.npz RESPONSE.npz OUTPUT.txt". Everything native code prints
while the request is handled goes to OUTPUT; the answer is one line on stdout, the status: 0 done,
3 TFLM refused (its report is in OUTPUT), 4 the installed wheel is not the expected version.

REQUEST: `mode` ("info" | "allocate" | "run" | "kernel"), `expected_version` ("" = any); for
"allocate" and "run": `model_path`, `arena_bytes`, optionally `library` (loaded RTLD_GLOBAL so the
interpreter's dlsym finds its registerer) and `registerer`; for "run": `output_count` and `input_0`,
`input_1`, ... in graph input order. RESPONSE: `version`, `runtime_dir` and, for "run", `output_0`, ...

"kernel" runs one op through TFLM's KernelRunner (tests/tflm/kernel_runner/: the per-op binding
test): `library` (that build; `entry` names another function with the same arguments), `op`,
`options` (uint8, the op's flexbuffer), `input_count`, `types` (TfLiteType codes), `constant` (per
input: 1 = read-only flatbuffer data) and `tensor_0`, ... (node inputs, then outputs). RESPONSE also
gets `tensor_0`, ... as the op left them.
"""

import ctypes
import importlib.metadata
import os
import sys

import numpy as np

STATUS_DONE = 0
STATUS_TFLM_ERROR = 3
STATUS_WRONG_WHEEL = 4


def _scalar(request, key: str) -> str:
    return str(request[key].item())


def _load(library: str, loaded_libraries: dict):
    if library not in loaded_libraries:
        loaded_libraries[library] = ctypes.CDLL(library, mode=os.RTLD_GLOBAL)
    return loaded_libraries[library]


def run_kernel(request, response: dict, loaded_libraries: dict) -> int:
    library = _load(_scalar(request, "library"), loaded_libraries)
    run = getattr(library, _scalar(request, "entry") if "entry" in request else "mcubert_kernel_runner_run")
    count = int(request["types"].size)
    tensors = [np.array(request[f"tensor_{i}"], order="C") for i in range(count)]  # writable copies

    def int32s(values):
        array = np.ascontiguousarray(values, np.int32)
        return array, array.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))

    types, types_p = int32s(request["types"])
    constant, constant_p = int32s(request["constant"])
    ranks, ranks_p = int32s([t.ndim for t in tensors])
    dims, dims_p = int32s([n for t in tensors for n in t.shape] or [0])
    sizes, sizes_p = int32s([t.nbytes for t in tensors])
    data = (ctypes.c_void_p * count)(*[t.ctypes.data for t in tensors])
    options = np.ascontiguousarray(request["options"], np.uint8)
    status = run(
        _scalar(request, "op").encode(),
        options.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
        ctypes.c_int32(options.size),
        ctypes.c_int32(count),
        ctypes.c_int32(int(request["input_count"])),
        types_p,
        constant_p,
        ranks_p,
        dims_p,
        data,
        sizes_p,
    )
    if status != 0:
        stage = {1: "InitAndPrepare", 2: "Invoke"}.get(status, "the call (bad arguments)")
        print(f"TFLM: KernelRunner: {stage} failed")
        return STATUS_TFLM_ERROR
    response.update({f"tensor_{i}": t for i, t in enumerate(tensors)})
    return STATUS_DONE


def invoke_steps(interpreter, request) -> dict:
    """One invoke (inputs `input_<p>`), or with `step_count` one a step on the same interpreter (each input
    and output then has a leading step axis): state in variable tensors carries from step to step."""
    steps = int(request["step_count"]) if "step_count" in request else 0
    count = int(request["output_count"])
    outputs: dict = {p: [] for p in range(count)}
    for step in range(max(steps, 1)):
        position = 0
        while f"input_{position}" in request:
            value = request[f"input_{position}"]
            interpreter.set_input(value[step] if steps else value, position)
            position += 1
        interpreter.invoke()
        for p in range(count):
            outputs[p].append(np.array(interpreter.get_output(p)))
    return {f"output_{p}": np.stack(values) if steps else values[0] for p, values in outputs.items()}


def handle(request, response_path: str, loaded_libraries: dict) -> int:
    version = importlib.metadata.version("tflite-micro")
    expected = _scalar(request, "expected_version")
    if expected and version != expected:
        print(f"tflite-micro {version} is installed, the binding is built for {expected}: their C++ interfaces differ")
        return STATUS_WRONG_WHEEL
    # Checked before the wheel's native module loads: a mismatched _runtime.so may not even import.
    from tflite_micro.python.tflite_micro import _runtime, runtime

    response = {"version": np.array(version), "runtime_dir": np.array(os.path.dirname(_runtime.__file__))}
    mode = _scalar(request, "mode")
    if mode == "kernel":
        status = run_kernel(request, response, loaded_libraries)
        if status != STATUS_DONE:
            return status
    if mode in ("allocate", "run"):
        registerers = []
        if "library" in request:
            _load(_scalar(request, "library"), loaded_libraries)
            registerers = [_scalar(request, "registerer")]
        with open(_scalar(request, "model_path"), "rb") as model_file:
            model = model_file.read()
        try:
            interpreter = runtime.Interpreter.from_bytes(
                model, custom_op_registerers=registerers, arena_size=int(request["arena_bytes"])
            )
            if mode == "run":
                response.update(invoke_steps(interpreter, request))
        except (RuntimeError, ValueError) as exc:
            print(f"TFLM: {exc}")
            return STATUS_TFLM_ERROR
        if mode == "run":
            sys.stdout.flush()
            interpreter.print_allocations()  # the recording allocator's arena breakdown
    np.savez(response_path, **response)
    return STATUS_DONE


def serve() -> None:
    # Answers go out on a private copy of stdout; during a request fds 1 and 2 point at its OUTPUT
    # file, so nothing native code prints can be mistaken for an answer or lost.
    answers = os.fdopen(os.dup(1), "w")
    quiet = os.dup(2)
    loaded_libraries: dict = {}
    for line in sys.stdin:
        request_path, response_path, output_path = line.split()
        with open(output_path, "wb") as output:
            os.dup2(output.fileno(), 1)
            os.dup2(output.fileno(), 2)
            try:
                with np.load(request_path, allow_pickle=False) as request:
                    status = handle(request, response_path, loaded_libraries)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(quiet, 1)
                os.dup2(quiet, 2)
        answers.write(f"{status}\n")
        answers.flush()


if __name__ == "__main__":
    serve()

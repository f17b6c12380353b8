"""Runs one request in the real TFLM interpreter, inside the Python 3.13 environment of the pinned
`tflite-micro` wheel (see tflm_binding.py for why it is a separate environment).

Self-contained on purpose: it imports numpy, the wheel and the standard library only, never
tflm_mcubert (whose dependencies that environment does not have). Usage:

    python tflm_child.py REQUEST.npz RESPONSE.npz

REQUEST holds `mode` ("info" | "run"), `expected_version`, and for "run": `library` (the binding,
loaded RTLD_GLOBAL so the interpreter's dlsym finds its registerer), `registerer`, `model` (uint8),
`arena_bytes`, `output_count` and `input_0`, `input_1`, ... in graph input order. RESPONSE gets `version`,
`runtime_dir` and, for "run", `output_0`, ... . TFLM's own messages go to stderr.

Exit status: 0 done, 3 TFLM refused (setup or invoke; the reason is on stderr), 4 the installed
wheel is not the expected version.
"""

import ctypes
import importlib.metadata
import os
import sys

import numpy as np

EXIT_TFLM_ERROR = 3
EXIT_WRONG_WHEEL = 4


def _scalar(request, key: str) -> str:
    return str(request[key].item())


def main(request_path: str, response_path: str) -> int:
    request = np.load(request_path, allow_pickle=False)
    version = importlib.metadata.version("tflite-micro")
    expected = _scalar(request, "expected_version")
    if version != expected:
        print(
            f"tflite-micro {version} is installed, the binding is built for {expected}: their C++ interfaces differ",
            file=sys.stderr,
        )
        return EXIT_WRONG_WHEEL
    # Checked before the wheel's native module loads: a mismatched _runtime.so may not even import.
    from tflite_micro.python.tflite_micro import _runtime, runtime

    response = {"version": np.array(version), "runtime_dir": np.array(os.path.dirname(_runtime.__file__))}
    if _scalar(request, "mode") == "run":
        ctypes.CDLL(_scalar(request, "library"), mode=os.RTLD_GLOBAL)
        model = request["model"].tobytes()
        try:
            interpreter = runtime.Interpreter.from_bytes(
                model, custom_op_registerers=[_scalar(request, "registerer")], arena_size=int(request["arena_bytes"])
            )
            position = 0
            while f"input_{position}" in request:
                interpreter.set_input(request[f"input_{position}"], position)
                position += 1
            interpreter.invoke()
        except (RuntimeError, ValueError) as exc:
            print(f"TFLM: {exc}", file=sys.stderr)
            return EXIT_TFLM_ERROR
        for position in range(int(request["output_count"])):
            response[f"output_{position}"] = np.array(interpreter.get_output(position))
        sys.stdout.flush()
        interpreter.print_allocations()  # the recording allocator's arena breakdown
    np.savez(response_path, **response)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

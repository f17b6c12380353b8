"""The child side of arena_probe.py: answers "allocate N" / "run N" lines about one model.

    python -m tflm_mcubert.runtime.arena_probe_child MODEL.tflite

Each line gets "1" (the model allocates, or runs on zero inputs, in an N-byte arena) or "0 " and
TFLM's report on one line. A crash of this process is the parent's answer "does not fit".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from tflm_mcubert.runtime.arena_search import TflmError
from tflm_mcubert.runtime.tflm_runner import TflmRunner
from tflm_mcubert.tflite.graph import parse


def serve(model_path: str) -> None:
    model_bytes = Path(model_path).read_bytes()
    zeros = {io.name: np.zeros(io.tensor.shape, io.tensor.dtype) for io in parse(model_bytes).inputs}
    # Answers go out on a private copy of stdout; fd 1 itself goes to stderr, so that nothing native
    # code prints can be mistaken for an answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        kind, arena = line.split()
        try:
            runner = TflmRunner.without_probe(model_bytes, int(arena))
            if kind == "run":
                runner.run(zeros)
            answer = "1"
        except TflmError as exc:
            answer = "0 " + " ".join(str(exc).split())  # one line, whatever line breaks TFLM used
        answers.write(answer + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(sys.argv[1])

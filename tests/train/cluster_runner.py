"""Workers of a `python -m tflm_mcubert` command as a TF_CONFIG cluster on 127.0.0.1 (free ports), each a
subprocess with its output in a file, bounded in time and killed by PID however the test ends."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports: list[int], index: int) -> str:
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


@dataclasses.dataclass
class Worker:
    index: int
    process: subprocess.Popen
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def last_line(self) -> str:
        lines = [line for line in self.stderr().splitlines() if line.strip()]
        return lines[-1] if lines else ""


class Cluster:
    """`argv(i)`: worker i's command line after `python -m tflm_mcubert`. `start`: the workers to start
    (all by default; leave one out to test a worker that never comes)."""

    def __init__(self, folder: Path, argv: Callable[[int], list], workers: int = 2, start: list[int] | None = None):
        self.ports = free_ports(workers)
        self.workers: list[Worker] = []
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(workers) if start is None else start:
            log = folder / f"worker-{index}.log"
            env = {**os.environ, "TF_CONFIG": tf_config(self.ports, index), "TF_CPP_MIN_LOG_LEVEL": "3"}
            command = [sys.executable, "-m", "tflm_mcubert", *map(str, argv(index))]
            with open(log, "wb") as out:
                process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
            self.workers.append(Worker(index, process, log))

    def wait(self, timeout: float) -> list[int]:
        """Every worker's exit code; a worker still running after `timeout` seconds is killed (-9)."""
        deadline = time.monotonic() + timeout
        codes = []
        for worker in self.workers:
            try:
                codes.append(worker.process.wait(max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                codes.append(worker.process.wait())
        return codes

    def signal(self, index: int, sig: int = signal.SIGTERM) -> None:
        next(w for w in self.workers if w.index == index).process.send_signal(sig)

    def kill(self) -> None:
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)

"""Training on several machines (`--strategy multiworker`, TF_CONFIG): the chief decides, every wait is
bounded, and SIGTERM / SIGINT stop every worker at a step boundary.

* **The chief decides.** Only the chief reads and writes the run directory. What it found (a fresh run,
  a resume from step k, or a refusal) and the state it resumes from are broadcast to every worker, so
  a worker never refuses, creates or resumes a run on its own: with a shared `--out` and with one per
  machine, every worker starts from the chief's state, or every worker stops with the chief's reason.
* **Bounded waits.** TensorFlow blocks while the cluster forms, holding the interpreter, and neither a
  Python thread nor SIGTERM can end that wait; a small watcher *process* (no TensorFlow) kills the worker
  with a message when the cluster has not formed within `--cluster-timeout`. After that, every
  collective op carries the same timeout (tf.distribute CommunicationOptions), so a worker that stops
  answering ends the others' steps with an error instead of a hang.
* **Signals.** SIGTERM and SIGINT set a flag (through a wake-up fd, so they are seen even while the main
  thread waits in a collective op); the workers agree on it after every step, the chief saves a
  checkpoint, and all exit non-zero naming the signal and the step to resume from. A worker that cannot
  reach a step boundary within the timeout exits anyway, with a message.

Broadcasts are sums of per-replica values that are zero except on replica 0 (the chief's first), over
int32 bit patterns, so floats (and -0.0) arrive bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import tensorflow as tf

from tflm_mcubert.errors import UserError

DEFAULT_CLUSTER_TIMEOUT = 600.0  # seconds: forming the cluster, and any one collective op

# The watcher: reads the worker's pid, the timeout and the message; exits quietly when "formed" arrives
# (or the worker closes the pipe), else prints the message and kills the worker.
_WATCHER = """
import os, select, signal, sys
pid, timeout, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], timeout)
if not ready:
    sys.stderr.write("error: " + message + "\\n")
    sys.stderr.flush()
    os.kill(pid, signal.SIGKILL)
"""


def task_of(strategy: tf.distribute.Strategy) -> tuple[str | None, int]:
    resolver = getattr(strategy, "cluster_resolver", None)
    return getattr(resolver, "task_type", None), int(getattr(resolver, "task_id", 0) or 0)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    task_type, task_id = task_of(strategy)
    if not task_type:
        return True
    has_chief = "chief" in strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def is_multiworker(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and bool(task_of(strategy)[0])


def worker_name(strategy: tf.distribute.Strategy) -> str:
    task_type, task_id = task_of(strategy)
    return f"{task_type} {task_id}" if task_type else "the only worker"


def _cluster_description() -> str:
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        task = config.get("task", {})
        addresses = [a for job in config.get("cluster", {}).values() for a in job]
        return f"{task.get('type', '?')} {task.get('index', '?')} of {', '.join(addresses) or '?'}"
    except (ValueError, AttributeError):
        return "TF_CONFIG is not valid JSON"


def multiworker_strategy(timeout: float) -> tf.distribute.MultiWorkerMirroredStrategy:
    """MultiWorkerMirroredStrategy from TF_CONFIG, formed within `timeout` seconds or the process is
    killed with a message naming the cluster; its collective ops time out after `timeout` too."""
    if timeout <= 0:
        raise UserError(f"--cluster-timeout must be positive, got {timeout:g}")
    if not os.environ.get("TF_CONFIG"):
        raise UserError(
            "--strategy multiworker needs TF_CONFIG (the cluster and this worker's task; docs/several-machines.md)"
        )
    who = _cluster_description()
    message = (
        f"{who}: the cluster did not form within {timeout:g} s (--cluster-timeout): "
        "is every worker started, with the same TF_CONFIG cluster, and are the ports reachable?"
    )
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, str(os.getpid()), str(timeout), message], stdin=subprocess.PIPE
    )
    try:
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        # The constructor returns before every worker has joined; the first collective waits for them.
        broadcast_bytes(strategy, b"formed")
    finally:
        watcher.stdin.close()  # formed (or failing): the watcher exits without a word
        watcher.wait()
    return strategy


# --- broadcasts from the chief --------------------------------------------------------------------------


def _sum_from_replica_zero(strategy, value: np.ndarray) -> np.ndarray:
    """The chief's `value` on every worker (int32; other workers pass zeros of the same shape)."""
    value = np.ascontiguousarray(value, dtype=np.int32)

    def local(context):
        return tf.constant(value if context.replica_id_in_sync_group == 0 else np.zeros_like(value))

    per_replica = strategy.experimental_distribute_values_from_function(local)
    return np.asarray(strategy.reduce("SUM", per_replica, axis=None), dtype=np.int32)


def broadcast_bytes(strategy, data: bytes | None) -> bytes:
    """The chief's `data` on every worker (others pass None): its length, then its bytes as int32 words."""
    chief = is_chief(strategy)
    length = int(_sum_from_replica_zero(strategy, np.array([len(data) if chief else 0]))[0])
    words = np.zeros(-(-length // 4), np.int32)
    if chief:
        words.view(np.uint8)[:length] = np.frombuffer(data, np.uint8)
    return _sum_from_replica_zero(strategy, words).view(np.uint8)[:length].tobytes()


def broadcast_json(strategy, value) -> object:
    data = json.dumps(value, sort_keys=True).encode() if is_chief(strategy) else None
    return json.loads(broadcast_bytes(strategy, data))


def broadcast_arrays(strategy, arrays: list[np.ndarray] | None, like: list[tuple[tuple, np.dtype]]) -> list:
    """The chief's `arrays` on every worker, bit for bit; `like`: every array's (shape, dtype), which
    every worker knows (the same model and optimizers)."""
    data = b"".join(np.ascontiguousarray(a, dtype=d).tobytes() for a, (_, d) in zip(arrays, like)) if arrays else None
    raw = broadcast_bytes(strategy, data)
    out, at = [], 0
    for shape, dtype in like:
        size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        out.append(np.frombuffer(raw[at : at + size], dtype).reshape(shape).copy())
        at += size
    if at != len(raw):
        raise UserError(f"the chief's state has {len(raw)} bytes, this worker's model {at}: the workers differ")
    return out


def flags(strategy, flag: bool) -> list[int]:
    """Every worker's `flag` (one per replica, in replica order), on every worker."""
    count = strategy.num_replicas_in_sync

    def local(context):
        row = np.zeros(count, np.int32)
        row[context.replica_id_in_sync_group] = int(flag)
        return tf.constant(row)

    per_replica = strategy.experimental_distribute_values_from_function(local)
    return [int(v) for v in np.asarray(strategy.reduce("SUM", per_replica, axis=None))]


# --- signals ---------------------------------------------------------------------------------------------


class StopSignals:
    """SIGTERM / SIGINT as a flag the training loop reads at step boundaries. The C-level handler writes
    the signal to a pipe at once; a thread reading it sets the flag even while the main thread waits in a
    collective op, and ends the process with a message when no step boundary comes within `grace` s."""

    def __init__(self, grace: float):
        self.grace, self.received = grace, None
        self._boundary = threading.Event()
        self._previous = {}
        self._active = threading.current_thread() is threading.main_thread()  # only there can signals be set
        if not self._active:
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        self._read = read
        self._previous_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, lambda *_: None)  # the wake-up fd does the work
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        number = os.read(self._read, 1)
        os.close(self._read)
        if not number:
            return
        self.received = signal.Signals(number[0]).name
        if not self._boundary.wait(self.grace):
            sys.stderr.write(f"error: {self.received}: no step boundary within {self.grace:g} s; stopping now\n")
            sys.stderr.flush()
            os._exit(128 + signal.Signals[self.received].value)

    def reached_boundary(self) -> None:
        """The loop saw the flag and is stopping: the watch thread need not end the process."""
        self._boundary.set()

    def close(self) -> None:
        if not self._active:
            return
        write = signal.set_wakeup_fd(self._previous_fd)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        os.close(write)  # the watch thread reads end-of-file and returns

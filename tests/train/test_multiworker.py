"""`--strategy multiworker` with two workers on 127.0.0.1: the chief decides what the run directory holds,
every worker starts from the chief's state, resumes are bitwise equal to an uninterrupted run with a
shared --out and with one per worker, SIGTERM stops both at a step boundary, and a worker whose partner
never comes exits within --cluster-timeout. These run the commands of docs/several-machines.md."""

from __future__ import annotations

import shutil
import signal
import time

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.cli.test_cli_compress import write_reviews
from tests.train.cluster_runner import Cluster, wait_for
from tflm_mcubert.cli import main

RUN_TIMEOUT = 240  # seconds a two-worker run may take on two busy cores before the test kills it
LONG = 30  # epochs (300 steps): long enough to stop a run after its first checkpoint and before its end


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from tests.conftest import build_hf_checkpoint

    root = tmp_path_factory.mktemp("multiworker")
    checkpoint = build_hf_checkpoint(root, classifier=True, vocab_size=30, num_labels=2)
    return root, checkpoint, write_reviews(root / "reviews.csv", count=96)


def finetune_argv(setup, out, *extra, epochs=2):
    _, checkpoint, data = setup
    return ["finetune", "--checkpoint", checkpoint, "--task", data, "--epochs", epochs, "--batch-size", 8,
            "--out", out, "--quiet", "--checkpoint-every", 5, *extra]  # fmt: skip


def run_cluster(folder, argv, **kwargs) -> tuple[list[int], Cluster]:
    cluster = Cluster(folder, argv, **kwargs)
    try:
        return cluster.wait(RUN_TIMEOUT), cluster
    finally:
        cluster.kill()


def weights(out) -> dict[str, np.ndarray]:
    return load_file(str(out / "model.safetensors"))


def assert_bitwise_equal(a, b):
    assert a.keys() == b.keys()
    different = [k for k in a if a[k].tobytes() != b[k].tobytes()]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def multiworker(out, setup, *extra, epochs=2):
    return lambda i: finetune_argv(setup, out(i), "--strategy", "multiworker", *extra, epochs=epochs)


@pytest.fixture(scope="module")
def uninterrupted(setup, tmp_path_factory):
    """A fresh two-worker finetune with a shared --out, and the single-process run of the same command."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    codes, cluster = run_cluster(folder, multiworker(lambda i: folder / "out", setup, epochs=LONG))
    assert codes == [0, 0], [w.stderr()[-2000:] for w in cluster.workers]
    assert main([str(a) for a in finetune_argv(setup, folder / "single", epochs=LONG)]) == 0
    return weights(folder / "out"), weights(folder / "single")


def test_two_workers_reach_the_single_process_result(uninterrupted):
    two, one = uninterrupted
    assert two.keys() == one.keys()
    # The same global-batch gradient, summed in another order: equal to float32 rounding.
    assert max(float(np.abs(two[k] - one[k]).max()) for k in two) < 1e-4


def test_sigterm_stops_both_workers_and_resume_is_bitwise_equal(setup, tmp_path, uninterrupted):
    out = tmp_path / "out"
    cluster = Cluster(tmp_path / "first", multiworker(lambda i: out, setup, epochs=LONG))
    try:
        wait_for(lambda: any((out / "run").glob("stage-*.npz")), RUN_TIMEOUT, "the chief's first checkpoint")
        cluster.signal(1, signal.SIGTERM)  # the worker that is not the chief
        codes = cluster.wait(RUN_TIMEOUT)
    finally:
        cluster.kill()
    if codes == [0, 0]:
        pytest.skip("the run finished before SIGTERM arrived (machine too fast for this test's 60 steps)")
    assert all(code != 0 for code in codes), codes
    assert "stopped by SIGTERM after step" in cluster.workers[1].last_line()
    assert "stopped by a signal to another worker" in cluster.workers[0].last_line()
    assert "rerun with --resume" in cluster.workers[0].last_line()
    codes, resumed = run_cluster(tmp_path / "second", multiworker(lambda i: out, setup, "--resume", epochs=LONG))
    assert codes == [0, 0], [w.stderr()[-2000:] for w in resumed.workers]
    assert_bitwise_equal(weights(out), uninterrupted[0])


def test_resume_with_one_out_per_worker_starts_every_worker_from_the_chiefs_checkpoint(setup, tmp_path, uninterrupted):
    """No shared file system: worker 1's --out holds nothing; it takes the chief's checkpoint."""
    outs = lambda i: tmp_path / f"out-{i}"  # noqa: E731
    cluster = Cluster(tmp_path / "first", multiworker(outs, setup, epochs=LONG))
    try:
        wait_for(lambda: any((outs(0) / "run").glob("stage-*.npz")), RUN_TIMEOUT, "the chief's first checkpoint")
        for worker in cluster.workers:
            worker.process.send_signal(signal.SIGKILL)
        cluster.wait(30)
    finally:
        cluster.kill()
    if (outs(0) / "model.safetensors").exists():
        pytest.skip("the run finished before it was killed")
    assert not (outs(1) / "run" / "run.json").exists()  # only the chief writes the run directory
    codes, resumed = run_cluster(tmp_path / "second", multiworker(outs, setup, "--resume", epochs=LONG))
    assert codes == [0, 0], [w.stderr()[-2000:] for w in resumed.workers]
    assert "resuming the run" in resumed.workers[0].stderr()
    assert_bitwise_equal(weights(outs(0)), uninterrupted[0])


def test_fresh_runs_with_a_shared_out_always_start(setup, tmp_path):
    """The startup race of issue 30 (2 in 10 fresh runs refused): only the chief looks at --out."""
    for attempt in range(3):
        out = tmp_path / f"out-{attempt}"
        codes, cluster = run_cluster(tmp_path / f"logs-{attempt}", multiworker(lambda i: out, setup, epochs=1))
        assert codes == [0, 0], (attempt, [w.last_line() for w in cluster.workers])


def test_the_chiefs_refusal_stops_every_worker_with_its_reason(setup, tmp_path):
    out = tmp_path / "out"
    (out / "run").mkdir(parents=True)
    shutil.copy(__file__, out / "run" / "run.json")  # an earlier run's file: refused without --resume
    codes, cluster = run_cluster(tmp_path / "logs", multiworker(lambda i: out, setup, epochs=1))
    assert all(code != 0 for code in codes), codes
    assert "holds an earlier run" in cluster.workers[0].last_line()
    assert "the chief refused the run" in cluster.workers[1].last_line()
    assert "holds an earlier run" in cluster.workers[1].last_line()


def test_a_worker_whose_partner_never_starts_exits_within_the_timeout(setup, tmp_path):
    argv = multiworker(lambda i: tmp_path / "out", setup, "--cluster-timeout", 10, epochs=1)
    began = time.monotonic()
    codes, cluster = run_cluster(tmp_path / "logs", argv, start=[0])
    assert time.monotonic() - began < 10 + 60  # the timeout, plus starting Python and TensorFlow
    assert codes == [-signal.SIGKILL]  # by its watcher, which names the cause:
    assert "the cluster did not form within 10 s (--cluster-timeout)" in cluster.workers[0].last_line()
    assert not (tmp_path / "out" / "run").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["distill", "--epochs", 1],
        ["search", "--target-embedding-params", 30 * 32 // 4, "--epochs", 0.5, "--finetune-epochs", 0.5],
    ],
    ids=["distill", "search"],
)
def test_distill_and_search_on_two_workers_reach_the_single_process_result(setup, tmp_path, command):
    _, teacher, data = setup
    source = ["--teacher" if command[0] == "distill" else "--checkpoint", teacher]
    argv = [*command, *source, "--task", data, "--batch-size", 8, "--quiet"]
    assert main([str(a) for a in [*argv, "--out", tmp_path / "single"]]) == 0
    codes, cluster = run_cluster(
        tmp_path / "logs", lambda i: [*argv, "--out", tmp_path / "two", "--strategy", "multiworker"]
    )
    assert codes == [0, 0], [w.stderr()[-2000:] for w in cluster.workers]
    one, two = weights(tmp_path / "single"), weights(tmp_path / "two")
    assert one.keys() == two.keys()  # the search: the same clusters and ranks, so the same tensors
    assert all(one[k].shape == two[k].shape for k in one)
    assert max(float(np.abs(two[k] - one[k]).max(initial=0.0)) for k in one) < 1e-3  # rank-0 factors are empty

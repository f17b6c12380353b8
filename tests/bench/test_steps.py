"""bench/steps.py's run_step: a step's wall seconds, counting the attempts a killed or failed run left."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import steps  # noqa: E402


def python_step(monkeypatch, code: str) -> None:
    """Each step runs `python -c code` (the command ignored) instead of a tflm_mcubert command."""
    monkeypatch.setattr(steps, "step_argv", lambda command: [sys.executable, "-c", code])


def test_a_finished_step_is_read_back_and_not_run_again(tmp_path, monkeypatch):
    python_step(monkeypatch, "raise SystemExit(3)")
    done = tmp_path / "student" / "metrics.json"
    done.parent.mkdir()
    done.write_text("{}")
    done.with_name("metrics.json.seconds").write_text("42.5\n")
    assert steps.run_step(["distill"], done, "[s] distill", tmp_path) == 42.5


def test_a_resumed_step_counts_the_earlier_attempts_seconds(tmp_path, monkeypatch):
    done = tmp_path / "student" / "metrics.json"
    monkeypatch.setattr(steps, "HEARTBEAT_SECONDS", 0.1)
    python_step(monkeypatch, "import sys, time; time.sleep(0.5); sys.exit(1)")
    assert steps.run_step(["distill"], done, "[s] distill", tmp_path) is None
    attempts = steps.attempts_file(tmp_path, done)
    failed = float(attempts.read_text())
    assert failed >= 0.5 and not done.parent.exists()  # the sleep at least; outside the command's own folder
    attempts.write_text(f"{failed + 100:.1f}\n")  # as a job killed part way would leave it
    python_step(monkeypatch, f"import pathlib; p = pathlib.Path({str(done)!r}); p.parent.mkdir(); p.write_text('x')")
    seconds = steps.run_step(["distill"], done, "[s] distill", tmp_path)
    assert seconds >= failed + 100 and float(done.with_name("metrics.json.seconds").read_text()) == round(seconds, 1)
    assert not attempts.exists()
    assert f"after {failed + 100:.0f} s of earlier attempts" in (tmp_path / "progress.log").read_text()

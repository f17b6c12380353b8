"""examples/end_to_end.py with `--preset bert-mini` on the NUCLEO-F767ZI (its own file, so that the test
runner gives it a worker of its own beside the bert-tiny run of test_end_to_end.py)."""

from __future__ import annotations

from tests.examples.test_end_to_end import read_json, run_example, skip_without_offline_data


def test_bert_mini_quick_fits_the_f767_with_int4_weights(tmp_path):
    """--preset bert-mini: the int4 encoder, and the search's word tables sized to what the F767ZI's Flash
    leaves (search --board): the export fits with at most 2% of the budget unused."""
    skip_without_offline_data()
    out = tmp_path / "mini"
    done = run_example("--quick", "--quiet", "--preset", "bert-mini", "--board", "nucleo-f767zi", "--out", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = read_json(out / "firmware" / "report.json")
    searched = read_json(out / "compressed" / "metrics.json")
    assert report["model"]["config"]["hidden_size"] == 256 and report["encoder"]["weight_bits"] == 4
    assert searched["flash_budget"]["budget_bytes"] == report["fits"]["flash"]["budget_bytes"]
    assert searched["embedding_bytes"] <= searched["flash_budget"]["embedding_bytes"]
    assert report["fits"]["ok"] and report["vocab_bytes"] > 0
    unused = report["fits"]["flash"]["budget_bytes"] - report["flash_bytes"]
    assert 0 <= unused <= 0.02 * report["fits"]["flash"]["budget_bytes"], unused

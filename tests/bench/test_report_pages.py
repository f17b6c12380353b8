"""The benchmark pages' generated tables equal what bench/report.py makes of the committed summaries, a
drifted table is caught, and a summary names its commit, environment and checkpoints."""

from __future__ import annotations

import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import report  # noqa: E402
from provenance import checkpoint_sha256, provenance  # noqa: E402


def test_every_generated_table_equals_its_summary():
    assert report.main(["--check"]) == 0


def test_every_table_is_on_a_page():
    pages = "".join(p.read_text() for p in report.pages())
    assert {m["name"] for m in report.BLOCK.finditer(pages)} == set(report.TABLES)


def test_a_drifted_figure_is_caught():
    page = next(p for p in report.pages() if report.BLOCK.search(p.read_text()))
    text = page.read_text()
    match = report.BLOCK.search(text)
    drifted = text[: match.start("body")] + match["body"].replace("±", "+/-", 1) + text[match.end("body") :]
    rendered, changed = report.render(drifted)
    assert changed == [match["name"]] and rendered == text


def test_every_summary_says_where_its_figures_came_from():
    """A summary made before provenance was recorded says so, and names the commits that committed it."""
    for path in sorted(report.RESULTS.glob("*.json")):
        record = json.loads(path.read_text())["provenance"]
        assert {"commit", "environment", "checkpoints"} <= set(record), path.name
        if record.get("recorded") is False:
            assert record["committed_in"] and record["environment"] == "not recorded", path.name


def test_provenance_names_the_commit_the_environment_and_each_checkpoint(tmp_path):
    (tmp_path / "student").mkdir()
    (tmp_path / "student" / "config.json").write_text("{}")
    record = provenance({"student": tmp_path / "student", "absent": tmp_path / "nothing"})
    assert len(record["commit"].removesuffix("+changes")) == 40
    assert record["environment"]["python"] and "numpy" in record["environment"]["packages"]
    assert set(record["checkpoints"]) == {"student"}
    before = record["checkpoints"]["student"]["sha256"]
    (tmp_path / "student" / "config.json").write_text("{ }")
    assert checkpoint_sha256(tmp_path / "student") != before

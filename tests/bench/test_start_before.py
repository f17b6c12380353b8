"""`--start-before HH:MM`, shared by the long bench runs: the next such UTC moment, a clear error otherwise."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import start_before  # noqa: E402

LATE = dt.datetime(2026, 12, 5, 23, 15, 30, tzinfo=dt.timezone.utc)


def test_a_time_still_to_come_today_is_today():
    assert start_before.next_utc("23:59", LATE) == dt.datetime(2026, 12, 5, 23, 59, tzinfo=dt.timezone.utc)


def test_a_time_already_past_today_is_tomorrow():
    """00:30 given at 23:15 is 75 minutes away (a string comparison took it as past and started nothing)."""
    deadline = start_before.next_utc("0:30", LATE)
    assert deadline == dt.datetime(2026, 12, 6, 0, 30, tzinfo=dt.timezone.utc)
    assert not start_before.reached(deadline, LATE)
    assert start_before.reached(deadline, deadline)
    assert start_before.name(deadline) == "2026-12-06 00:30 UTC"


def test_no_deadline_is_never_reached():
    assert not start_before.reached(None, LATE)


@pytest.mark.parametrize("text", ["24:00", "9.30", "noon", ""])
def test_a_malformed_time_is_refused_by_name(text):
    with pytest.raises(argparse.ArgumentTypeError, match="is not a time HH:MM"):
        start_before.next_utc(text, LATE)


def test_argparse_takes_the_option_and_refuses_a_bad_time():
    parser = argparse.ArgumentParser()
    start_before.add_argument(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--start-before", "25:00"])
    assert parser.parse_args(["--start-before", "12:00"]).start_before.tzinfo == dt.timezone.utc

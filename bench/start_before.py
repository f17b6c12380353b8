"""`--start-before HH:MM` for the long, resumable bench runs: start no step at or after that UTC time, the
next one to come (as `shutdown HH:MM` reads it: 00:30 given at 23:15 is in 75 minutes), so that the
finished steps are summarized and a rerun goes on."""

from __future__ import annotations

import argparse
import datetime as dt

HELP = (
    "HH:MM (UTC, the next one to come): start no step at or after it (the finished ones are summarized; rerun to go on)"
)


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--start-before", type=next_utc, metavar="HH:MM", help=HELP)


def next_utc(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """The next UTC moment at `text` (HH:MM) after `now`: today's, else tomorrow's."""
    try:
        clock = dt.datetime.strptime(text, "%H:%M")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time HH:MM (UTC)") from None
    now = now or dt.datetime.now(dt.timezone.utc)
    moment = now.replace(hour=clock.hour, minute=clock.minute, second=0, microsecond=0)
    return moment if moment > now else moment + dt.timedelta(days=1)


def reached(deadline: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    """Whether no step may start any more (never without a deadline)."""
    return deadline is not None and (now or dt.datetime.now(dt.timezone.utc)) >= deadline


def name(deadline: dt.datetime) -> str:
    return f"{deadline:%Y-%m-%d %H:%M} UTC"

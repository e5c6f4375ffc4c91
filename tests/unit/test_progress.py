"""Progress (ragtrack.core.progress) on a fake clock: plain lines at the interval where stderr is not a
terminal, nothing for short steps, one estimate line for long ones, a tqdm bar on a terminal."""

from __future__ import annotations

import io
import logging

import pytest

from ragtrack.core import progress
from ragtrack.core.progress import Progress, duration, track


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(total: int, seconds_per_update: float, per_update: int = 1, stream: io.StringIO | None = None) -> io.StringIO:
    """A step of ``total`` items, ``per_update`` at a time, each update ``seconds_per_update`` apart."""
    clock, stream = Clock(), stream if stream is not None else io.StringIO()
    with Progress("dense: encode", total, "texts", stream=stream, clock=clock) as counter:
        for _ in range(0, total, per_update):
            clock.now += seconds_per_update
            counter.update(per_update)
    return stream


@pytest.fixture(autouse=True)
def progress_log(caplog) -> None:
    caplog.set_level(logging.INFO, logger=progress.__name__)


def test_a_log_file_gets_one_plain_line_every_30_s_once_a_tenth_more_is_done(caplog) -> None:
    stream = run(1000, 1.0, per_update=10)  # 100 s; the rate is measured from the first update (10 texts)
    assert stream.getvalue() == ""  # no bar, no carriage return
    assert caplog.messages == [
        "dense: encode 1,000 texts: about 1 min 40 s (estimated from the first 20)",
        "dense: encode 300/1,000 texts (30%), 30 s elapsed, about 1 min 10 s left",
        "dense: encode 600/1,000 texts (60%), 1 min 0 s elapsed, about 40 s left",
        "dense: encode 900/1,000 texts (90%), 1 min 30 s elapsed, about 10 s left",
        "dense: encode 1,000 texts done, 1 min 40 s",
    ]


def test_the_tenth_of_the_work_sets_the_interval_when_it_takes_longer_than_30_s(caplog) -> None:
    run(1000, 1.0)  # 1000 s, one text a second: a line every 100 texts, not every 30 s
    lines = [m for m in caplog.messages if "elapsed" in m]
    assert [m.split()[2] for m in lines] == [f"{n:,}/1,000" for n in range(100, 1000, 100)]


def test_a_short_step_prints_nothing_and_one_under_the_threshold_no_estimate(caplog) -> None:
    assert run(1000, 0.0005).getvalue() == ""  # half a second
    assert run(100, 0.09).getvalue() == ""  # 9 s: past the bar's delay, under the estimate threshold
    assert caplog.messages == []


def test_the_estimate_leaves_out_a_slow_first_batch(caplog) -> None:
    clock = Clock()
    with Progress("bertscore: embed", 640, "texts", clock=clock, stream=io.StringIO()) as counter:
        clock.now = 20.0  # loading the model: the first batch takes 20 s
        counter.update(64)
        for _ in range(9):
            clock.now += 1.0
            counter.update(64)
    assert (
        caplog.messages[0] == "bertscore: embed 640 texts: about 29 s (estimated from the first 128)"
    )  # not 20 s × 10
    assert caplog.messages[-1] == "bertscore: embed 640 texts done, 29 s" and len(caplog.messages) == 2


def test_a_terminal_gets_a_bar_that_is_cleared_after(caplog, monkeypatch) -> None:
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.0)  # tqdm's own clock drives the bar's delay
    terminal = run(100, 0.5, stream=Terminal())  # 50 s: an estimate line, but no plain progress lines
    drawn = terminal.getvalue()
    assert "\r" in drawn and "dense: encode" in drawn and "/100 " in drawn
    assert drawn.rsplit("\r", 2)[-2].strip() == ""  # leave=False: the last thing drawn blanks the line
    assert [m for m in caplog.messages if "elapsed" in m] == [] and "estimated from the first" in caplog.messages[0]


def test_a_short_step_draws_no_bar() -> None:
    assert run(100, 0.0, stream=Terminal()).getvalue() == ""  # finished within tqdm's 1 s delay


def test_tqdm_disable_turns_bars_and_lines_off_but_not_the_estimate(caplog, monkeypatch) -> None:
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert run(1000, 1.0, per_update=10, stream=Terminal()).getvalue() == ""
    assert run(1000, 1.0, per_update=10).getvalue() == ""
    assert [m for m in caplog.messages if "elapsed" in m] == [] and sum("estimated" in m for m in caplog.messages) == 2


def test_track_yields_every_item_and_counts_silently_when_asked(caplog) -> None:
    clock = Clock()

    def ticking(items):
        for item in items:
            clock.now += 1.0
            yield item

    assert list(track(ticking(range(50)), "bm25: search", "queries", total=50, clock=clock, show=False)) == list(
        range(50)
    )
    assert list(
        track(ticking(range(50)), "bm25: search", "queries", total=50, clock=clock, stream=io.StringIO())
    ) == list(range(50))
    assert (
        caplog.messages[0] == "bm25: search 50 queries: about 50 s (estimated from the first 2)"
        and len(caplog.messages) == 3
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0 s"), (47, "47 s"), (80, "1 min 20 s"), (3599.6, "1 h 0 min"), (7530, "2 h 5 min")]
)
def test_durations_read_as_a_person_would_say_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text

"""Progress of long loops, the one way ragtrack shows it (encoding, indexing, searching, scoring).

A step shorter than ``SHOW_AFTER`` seconds shows nothing. A step estimated to take ``ESTIMATE_FROM``
seconds or more logs one line with its size and that estimate, once: the time so far plus the rest at
the rate measured since the first batch (which also pays for loading a model). Then, on a terminal, a
tqdm bar, cleared at the end (a widget in Jupyter). Anywhere else (a pipe, a file, CI): no carriage
returns, but a plain log line each time both ``LINE_EVERY`` seconds and ``LINE_STEP`` of the work have
passed since the last one, so at most about ten lines a step and at most two a minute. A step that
logged anything ends with a ``done`` line. ``TQDM_DISABLE`` (any value, as for tqdm) turns the bar and
the periodic lines off. Progress only counts: it never changes what a loop computes.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

SHOW_AFTER = 1.0  # seconds: the bar's delay, and how long a rate is measured before the estimate
ESTIMATE_FROM = 10.0  # seconds: a step estimated shorter gets no estimate line
LINE_EVERY = 30.0  # seconds, and
LINE_STEP = 0.1  # fraction of the work, both passed since the last plain line before the next one


class Progress:
    """Counts ``total`` items of one step named ``label`` (``dense: encode``), in ``unit`` (plural:
    ``texts``). Use as a context manager and call ``update(n)`` after each batch; ``show=False`` counts
    silently. ``stream`` is where a bar would draw (stderr), ``clock`` the time in seconds."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        *,
        show: bool = True,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label, self.total, self.unit, self.show, self.clock = label, total, unit, show, clock
        self.done = self.last_line_done = 0
        self.started = self.last_line = clock()
        self.first: tuple[float, int] | None = None  # (time, count) after the first update; rates start there
        self.estimated = False  # decided once
        self.logged = False
        stream = stream or sys.stderr
        self.bar = None
        if show and bars_shown(stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit=unit, file=stream, leave=False, delay=SHOW_AFTER)
        self.lines = show and self.bar is None and not os.environ.get("TQDM_DISABLE")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(finished=kind is None)

    def update(self, n: int = 1) -> None:
        """``n`` more items done."""
        now = self.clock()
        self.done += n
        if self.first is None:  # the first batch pays for loading and warming up: the rate leaves it out
            self.first = (now, self.done)
        since, counted = self.first
        if self.done == counted or self.done >= self.total:
            left = None
        else:
            left = (self.total - self.done) * (now - since) / (self.done - counted)
        if self.show and not self.estimated and left is not None and now - since >= SHOW_AFTER:
            self.estimated = True
            if now - self.started + left >= ESTIMATE_FROM:
                self._log(
                    f"{self.label} {self.total:,} {self.unit}: about {duration(now - self.started + left)} "
                    f"(estimated from the first {self.done:,})"
                )
        if self.bar is not None:
            self.bar.update(n)
        elif (
            self.lines
            and left is not None
            and now - self.last_line >= LINE_EVERY
            and self.done - self.last_line_done >= LINE_STEP * self.total
        ):
            self.last_line, self.last_line_done = now, self.done
            self._log(
                f"{self.label} {self.done:,}/{self.total:,} {self.unit} ({100 * self.done // self.total}%), "
                f"{duration(now - self.started)} elapsed, about {duration(left)} left"
            )

    def close(self, finished: bool = True) -> None:
        """Clear the bar; a finished step that logged anything says it is done."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if finished and self.logged:
            self.logged = False
            self._log(f"{self.label} {self.total:,} {self.unit} done, {duration(self.clock() - self.started)}")

    def _log(self, message: str) -> None:
        self.logged = True
        if self.bar is None:
            log.info(message)
            return
        with self.bar.external_write_mode():  # the line goes above the bar, not through it
            log.info(message)


def bars_shown(stream: TextIO | None = None) -> bool:
    """Whether a progress bar may draw: ``stream`` (stderr) is a terminal or this is a Jupyter kernel
    (tqdm.auto draws a widget there), and no ``TQDM_DISABLE``. Also the switch for a library's own bars."""
    return not os.environ.get("TQDM_DISABLE") and ((stream or sys.stderr).isatty() or "ipykernel" in sys.modules)


def track(items: Iterable[T], label: str, unit: str, total: int | None = None, **options) -> Iterator[T]:
    """``items`` one by one, counting each as done once the loop body has run (``Progress`` options)."""
    with Progress(label, len(items) if total is None else total, unit, **options) as progress:
        for item in items:
            yield item
            progress.update()


def duration(seconds: float) -> str:
    """``47 s``, ``1 min 20 s``, ``2 h 5 min``: rounded to what a reader plans by."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@contextmanager
def step(name: str, logger: logging.Logger = log) -> Iterator[None]:
    """Log ``name ...`` before a step of a job and ``name done in S s`` after it."""
    started = time.perf_counter()
    logger.info("%s ...", name)
    yield
    logger.info("%s done in %.2f s", name, time.perf_counter() - started)

"""One progress bar for long work (sweeps, searches, fits, simulations, validation).

``with progress("Sweeping", total=n) as advance: ... advance(k)`` draws a Rich bar on
stderr, so stdout (tables, ``--json``) stays clean. It draws nothing, and costs nothing,
when stderr is not a terminal (pipes, CI, notebooks), when the command line asked for
``--json``, when ``RACKMATH_PROGRESS=0`` is set, or inside :func:`quiet`. Bars do not
nest: work inside a bar (a search inside a sweep) reports through the outer bar only.
``RACKMATH_PROGRESS=1`` forces bars on (for a terminal that is not detected as one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_active: ContextVar[bool] = ContextVar("rackmath_progress_active", default=False)


def _noop(_: float = 1) -> None:
    return None


def enabled() -> bool:
    """Whether a bar would be drawn now."""
    setting = os.environ.get("RACKMATH_PROGRESS", "")
    if setting == "0" or _active.get():
        return False
    if setting == "1":
        return True
    if "--json" in sys.argv[1:]:
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


@contextmanager
def quiet() -> Iterator[None]:
    """No bars inside this block (a caller that draws its own or wants none)."""
    token = _active.set(True)
    try:
        yield
    finally:
        _active.reset(token)


@contextmanager
def progress(description: str, total: float | None = None) -> Iterator[Callable[[float], None]]:
    """A bar of ``total`` steps; yields ``advance(steps=1)``."""
    if not enabled():
        yield _noop
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True, force_terminal=os.environ.get("RACKMATH_PROGRESS") == "1" or None),
        transient=True,
    )
    task = bar.add_task(description, total=total)
    token = _active.set(True)

    def advance(steps: float = 1) -> None:
        bar.advance(task, steps)

    try:
        with bar:
            yield advance
    finally:
        _active.reset(token)


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items`` under a bar (one step per item): a one-line change to a loop."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with progress(description, total=total) as advance:
        for item in items:
            yield item
            advance(1)

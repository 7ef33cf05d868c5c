"""Work that can make a caller wait says so before it starts.

Measuring the machine, compiling kernels, timing candidates, planning a large network and
setting up dask workers can each take from a second to a minute.  Each says what it is
doing, and roughly how long it takes, *before* it starts: one line on the ``teir_plan``
logger (shown by Python's default handler, on stderr), and, where stderr is a terminal
and ``rich`` is installed, a spinner with the elapsed time until it ends.

``TEIR_PLAN_QUIET=1`` silences all of them (warnings such as ``tp.CalibrationWarning``
are Python warnings, filtered as usual).

>>> with working("counting sheep", "a moment"):
...     sheep = 3
>>> sheep
3
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

LOG = logging.getLogger("teir_plan")


def quiet() -> bool:
    """Whether announcements are off (``TEIR_PLAN_QUIET``, any value but ``0``/empty)."""
    return os.environ.get("TEIR_PLAN_QUIET", "").strip() not in ("", "0")


def announce(message: str) -> None:
    """One line on the ``teir_plan`` logger, unless quiet."""
    if not quiet():
        LOG.warning("teir_plan: %s", message)


def seconds_text(seconds: float) -> str:
    """A rough duration: "about 3 s", "about 2 min"."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    return f"about {round(seconds / 60)} min"


@contextmanager
def working(what: str, how_long: str) -> Iterator[None]:
    """Say ``what`` is starting and ``how_long`` it takes (e.g. "about 20 s") before the
    block runs; with a terminal and rich, show a spinner until it ends."""
    if quiet():
        yield
        return
    announce(f"{what} ({how_long}; TEIR_PLAN_QUIET=1 silences this)")
    status = None
    if sys.stderr.isatty():
        try:
            from rich.console import Console

            status = Console(stderr=True).status(f"teir_plan: {what}")
        except ImportError:
            status = None
    if status is None:
        yield
        return
    with status:
        yield

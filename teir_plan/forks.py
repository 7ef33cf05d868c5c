"""Locks that a forked child makes anew.

A forked child has only the thread that forked: a lock another thread held at the fork
would stay held there for ever.  Modules with locks of their own (the plan cache, the
workspace, the machine parameters, the executor's compile lock) register them here.  It
imports nothing of teir_plan's, so that the planner registers its locks without loading
the executor (and numba).
"""

from __future__ import annotations

import os
from collections.abc import Callable


def renew_after_fork(owner: object, name: str, make: Callable[[], object]) -> None:
    """In a forked child, ``owner.name`` (a module's lock: pass the module) becomes a new
    ``make()``: a lock another thread held at the fork would stay held there for ever."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: setattr(owner, name, make()))

"""The contenders that plans' trials kept (schedule/trials.py), stored per machine in the
cache folder (``choices.json`` beside ``machine.json``), so that the next process runs
the measured winner from its first call.

A problem is named by a hash of its plan-cache key (subscripts, operand layouts and
dtypes, result layout, options, thread count), a contender by a hash of its fingerprint
(its main step's TEIR program and packs, or ``numpy.einsum``): a stored choice applies
only where planning offers the same contender again, so new machine parameters or a new
version of the planner that no longer offer it fall back to trials.  The file is read
once per process and written whole through a temporary file; one that cannot be read or
has another shape is ignored (and replaced on the next write), one that cannot be
written leaves the choice to this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from teir_plan.machine import cache_dir, machine_key

FORM = 1
MAX_CHOICES = 4096  # per machine: the oldest go first

_lock = threading.Lock()
_loaded: dict[str, dict[str, str]] | None = None


def _path() -> Path:
    return cache_dir() / "choices.json"


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def _read(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("form") != FORM:
        return {}
    machines = data.get("machines")
    if not isinstance(machines, dict):
        return {}
    return {m: {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, str)}
            for m, entries in machines.items()
            if isinstance(m, str) and isinstance(entries, dict)}


def stored(problem: str) -> str | None:
    """The fingerprint digest stored for ``problem`` (a plan-cache key's repr) on this
    machine, or None."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _read(_path())
        return _loaded.get(machine_key(), {}).get(digest(problem))


def store(problem: str, fingerprint: str) -> bool:
    """Keep ``fingerprint`` as ``problem``'s choice on this machine (False when the
    cache folder cannot be written)."""
    global _loaded
    path = _path()
    machine = machine_key()
    with _lock:
        data = _read(path)  # what other processes stored meanwhile
        entries = data.setdefault(machine, {})
        entries.pop(digest(problem), None)
        entries[digest(problem)] = digest(fingerprint)
        while len(entries) > MAX_CHOICES:
            entries.pop(next(iter(entries)))
        _loaded = data
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"form": FORM, "machines": data}))
            tmp.replace(path)
            return True
        except OSError:
            return False


def forget() -> None:
    """Read the file again on the next lookup (after the cache folder changed)."""
    global _loaded
    with _lock:
        _loaded = None

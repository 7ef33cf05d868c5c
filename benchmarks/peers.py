"""TBLIS and JAX as peers of the TCCG, trees and everyday benchmarks: one place for their
import, thread setting, compiled-function cache and per-case calls.

* ``tblis``: TBLIS through pytblis, called as its users call it, ``pytblis.einsum``
  (numpy's path search, then each pairwise step through TBLIS), on the benchmark's thread
  count (``configure``).  Given a path (trees), the steps follow that path: through
  cotengra with ``implementation="pytblis"`` (its pairwise steps as pytblis.tensordot
  and pytblis.einsum) when cotengra is installed, which takes any number of indices,
  or else through ``pytblis.einsum(optimize=["einsum_path", *path])`` (52 letters at most).
* ``jax``: ``jax.jit`` of ``jnp.einsum``, compiled once before timing (the executable
  kept per expression, path, shapes and types), the operands put on the CPU device once,
  and every call waited for with ``block_until_ready``.  XLA's CPU thread pool has one
  thread per CPU the process may run on, and JAX has no setting for it: a benchmark run
  on fewer threads says so in the results.  JAX computes in 32 bits unless its x64 mode
  is on, so a float64 or complex128 case turns it on (float32 and complex64 cases keep
  their types with it on; nothing here asks for ``preferred_element_type``).

Both are optional: ``runs`` leaves out a peer that is not importable, and
``benchmarks.common.machine`` names it among those not installed, with each installed
peer's version and threads.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

NAMES = ("tblis", "jax")

_threads: int | None = None  # the benchmark's thread count, once configured
_compiled: dict[tuple, Any] = {}  # jax executables by (expr, path, shapes and types)


def configure(threads: int) -> None:
    """Run TBLIS on ``threads`` threads (the benchmark's count); JAX's count is XLA's and
    is only recorded (``describe``)."""
    global _threads
    _threads = threads
    try:
        import pytblis  # type: ignore[import-not-found]
    except ImportError:
        return
    pytblis.set_num_threads(threads)


def xla_threads() -> int:
    """The threads of XLA's CPU pool: one per CPU this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def describe() -> dict[str, object]:
    """Each peer's version and threads for the results' machine line; a peer that is not
    importable has version None."""
    info: dict[str, object] = {}
    try:
        import pytblis
    except ImportError:
        info["pytblis"] = None
    else:
        info["pytblis"] = importlib.metadata.version("pytblis")
        info["pytblis threads"] = pytblis.get_num_threads()
    try:
        import jax
    except ImportError:
        info["jax"] = None
    else:
        info["jax"] = jax.__version__
        info["jaxlib"] = importlib.metadata.version("jaxlib")
        n = xla_threads()
        info["jax threads"] = n if _threads in (None, n) else (
            f"{n} (XLA's pool, not settable; the benchmark runs {_threads})")
    return info


def runs(expr: str, ops: Sequence[np.ndarray], path: Sequence[tuple[int, ...]] | None = None,
         names: Sequence[str] = NAMES) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """Each importable peer's call on ``ops`` (of those in ``names``), along ``path`` when
    given, and the peers that could not be set up for this case, with why."""
    made: dict[str, Callable[[], object]] = {}
    failed: dict[str, str] = {}
    for name, make in (("tblis", tblis_run), ("jax", jax_run)):
        if name not in names:
            continue
        try:
            made[name] = make(expr, ops, path)
        except ImportError:
            pass
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case
            failed[name] = failure(exc)
    return made, failed


def failure(exc: BaseException) -> str:
    """What the results record for a peer that raised: "error", its exception's type and
    first line."""
    lines = str(exc).strip().splitlines()
    return f"error: {type(exc).__name__}" + (f": {lines[0][:120]}" if lines else "")


def wrong(res: object, ref: np.ndarray) -> str:
    """What the results record for a peer whose answer disagrees with the reference."""
    diff = np.abs(np.asarray(res) - ref)
    return (f"wrong: largest difference {float(diff.max()):.3g} where the largest value is "
            f"{float(np.abs(ref).max()):.3g}")


def cell(why: str) -> str:
    """A table cell for a peer left out of a case: "error" or "wrong"."""
    return why.split(":")[0]


def excluded_md(failed: list[tuple[str, str, str]]) -> str:
    """The line under a table naming each (case, peer, why) left out of a case."""
    if not failed:
        return ""
    return ("- left out where they raised or disagreed with numpy.einsum in float64: "
            + "; ".join(f"{peer} on {case} ({why})" for case, peer, why in failed))


def tblis_run(expr: str, ops: Sequence[np.ndarray],
              path: Sequence[tuple[int, ...]] | None = None) -> Callable[[], object]:
    import pytblis

    ops = list(ops)
    if path is None:
        return lambda: pytblis.einsum(expr, *ops, optimize=True)
    steps = [tuple(p) for p in path]
    try:
        import cotengra as ctg  # type: ignore[import-untyped]
    except ImportError:
        np_path = ["einsum_path", *steps]
        return lambda: pytblis.einsum(expr, *ops, optimize=np_path)
    return lambda: ctg.einsum(expr, *ops, optimize=steps, implementation="pytblis")


def jax_run(expr: str, ops: Sequence[np.ndarray],
            path: Sequence[tuple[int, ...]] | None = None) -> Callable[[], object]:
    import jax
    import jax.numpy as jnp

    if any(o.dtype in (np.float64, np.complex128) for o in ops):
        jax.config.update("jax_enable_x64", True)
    jops = [jax.device_put(o) for o in ops]
    if any(j.dtype != o.dtype for j, o in zip(jops, ops)):
        raise TypeError(f"JAX holds the operands as {jops[0].dtype}, not {ops[0].dtype}")
    steps = None if path is None else tuple(tuple(p) for p in path)
    key = (expr, steps, tuple((o.shape, o.dtype.str) for o in ops))
    fn = _compiled.get(key)
    if fn is None:
        optimize: Any = "auto" if steps is None else list(steps)
        fn = jax.jit(lambda *xs: jnp.einsum(expr, *xs, optimize=optimize)
                     ).lower(*jops).compile()
        _compiled[key] = fn
    return lambda: fn(*jops).block_until_ready()

"""Thread counts for the executor's parallel loops and for BLAS, and when numba's
parallel regions may run at all.

One setting governs the executor's threads: parallel TEIR axes run on that many numba
threads, each calling single-threaded BLAS, and so does a large BLAS tile of a program
without parallel axes, split into parts (walker.run_split).  BLAS' own threads are not
used (they spin after each call on the cores the next parallel region needs), and the
cores are never oversubscribed.

numba runs parallel regions on one of three threading layers, chosen when the
process first starts one (TBB if installed, else OpenMP, else its own workqueue),
and two of them have limits the executor must respect (numba's documentation,
"The Threading Layers"):

* the workqueue layer accepts one parallel region at a time in the whole process,
  and terminates the process when two threads start one together;
* GNU OpenMP cannot be used again in a child forked after its threads started
  (``multiprocessing``'s default on Linux): numba terminates the child when it tries,
  and the parent's pool then waits for ever.

So :class:`parallel_threads` serializes the executor's parallel regions until the layer
is known to be threadsafe, and in such a forked child :func:`parallel_usable` is
False: every program runs on the calling thread alone (the same tiles in the same
order as the parallel run, one worker's share after another).

Every lock of the library is made anew in a forked child (here, and in the plan
cache, the workspace and the machine parameters): one held by another thread at the
fork would stay held, and the child's first call would wait for ever.

GNU OpenMP's idle threads busy-wait before they sleep, by default 300,000 spins (about
5 ms after each of the executor's calls here), and OpenBLAS' about 0.1 s after each of
numpy's multi-threaded calls.  A user's loop that alternates tp.einsum with numpy.matmul
then runs two pools of spinning threads on the same cores, each call waiting out the
other pool's spin in 4 ms scheduler slices: on 2 cores a 256 x 256 product took 3.7-5.5
ms in such a loop against 0.16-0.19 ms alone, and numpy's 384 x 384 matmul 2.5-4.3 ms
against 0.6-0.7.  So numba's threading layer is started (before the first parallel
region) with ``GOMP_SPINCOUNT=10000`` in the environment, which is restored right after,
unless the user set ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` or an OpenMP runtime is
already loaded (benchmarks/mixed.py measures it).
"""

from __future__ import annotations

import ctypes
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager, suppress

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic
from numba.np.ufunc import parallel as _numba_parallel

from teir_plan.errors import PlanError

# Spins before an idle GNU OpenMP thread sleeps (see above).  benchmarks/mixed.py on 2
# cores, medians over four processes: with 10,000, numpy's matmul alternated with tp's
# calls stays within 1.3x of its time alone (default: up to 4.5x) and tp's calls take
# 1.3-9x theirs (default: 2.3-136x); small parallel calls alone that follow other work
# pay 30-60 us to wake the sleeping worker (3,000 spins: 15-20% on small calls alone;
# no spinning at all, OMP_WAIT_POLICY=PASSIVE: 30-100%; 30,000: alternated calls 1.5-4x
# slower than with 10,000, and 9-10x in a later run: a 256^2 product 968 against 103
# us).  The price: where a worker shares the caller's CPU, the calls right after a
# pause wait out the caller's spin, about 0.5 ms each with 10,000 against one call of
# 1.6 ms with 30,000 (docs/decisions.md: the shared host); the workers are kept off the
# caller's CPU for that reason (keep_workers_off_caller).
OMP_SPIN_COUNT = 10_000


def limit_openmp_spinning(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Set GOMP_SPINCOUNT in ``environ`` unless the user chose a spin policy; True if set.
    It takes effect only in an OpenMP runtime loaded afterwards."""
    if "GOMP_SPINCOUNT" in environ or "OMP_WAIT_POLICY" in environ:
        return False
    environ["GOMP_SPINCOUNT"] = str(OMP_SPIN_COUNT)
    return True


def openmp_loaded() -> bool:
    """Whether GNU OpenMP's runtime is mapped into this process (False where unknown)."""
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


_launched = False  # numba's threading layer has been started by the executor
_launch_lock = threading.Lock()


def _launch_numba_threads() -> None:
    """Start numba's threading layer (its first thread-count query does) with the spin
    limit in the environment while an OpenMP runtime loads and reads it, and only then:
    child processes and libraries loaded later see the user's own environment."""
    global _launched
    with _launch_lock:
        if _launched:
            return
        set_here = not openmp_loaded() and limit_openmp_spinning()
        try:
            numba.get_num_threads()
        finally:
            _launched = True
            if set_here and os.environ.get("GOMP_SPINCOUNT") == str(OMP_SPIN_COUNT):
                del os.environ["GOMP_SPINCOUNT"]


_num_threads: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (1 <= n <= the number numba was started with)."""
    global _num_threads
    limit: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
    try:  # a Python or numpy integer (not a bool, a float or a string)
        k = operator.index(n) if not isinstance(n, (bool, np.bool_)) else None
    except TypeError:
        k = None
    if k is None or not 1 <= k <= limit:
        raise PlanError(f"set_num_threads: n must be an integer in 1..{limit}, got {n!r}")
    _num_threads = int(k)


class _Local(threading.local):
    """A calling thread's own count (thread_count), None if it set none.  The class's
    None is what a thread that never set one reads: a missing attribute would raise an
    AttributeError inside ``getattr(..., None)``, 0.3-0.6 us on every planned call."""

    n: int | None = None


_local = _Local()


def get_num_threads() -> int:
    return _local.n or _num_threads


@contextmanager
def thread_count(n: int) -> Iterator[None]:
    """The calling thread plans and runs with ``n`` threads inside the block, whatever
    the process-wide count: for callers that run several contractions at once on their
    own threads (dask's threaded scheduler runs one task per core)."""
    old = _local.n
    limit: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
    _local.n = max(1, min(int(n), limit))
    try:
        yield
    finally:
        _local.n = old


# numba's thread count for the calling thread, after its threading layer started:
# numba.get_num_threads checks both each time (0.55 us; this 0.08).
_numba_count: Callable[[], int] = getattr(_numba_parallel, "_get_num_threads",
                                          numba.get_num_threads)

# Layers that start parallel regions from any number of threads at once.
THREADSAFE_LAYERS = frozenset({"tbb", "omp"})
_region_lock = threading.Lock()
_layer: str | None = None  # numba's threading layer, once known threadsafe
_usable = True  # False in a child forked after GNU OpenMP's threads started


def _started_layer() -> str | None:
    """numba's threading layer, or None before any parallel region has run."""
    try:
        return str(numba.threading_layer())
    except ValueError:  # numba raises ValueError until a layer has been started
        return None


_busy_end = 0.0  # time.perf_counter() when the executor last ended a call (0: none yet)
# When the last parallel region ended and on how many threads (its workers spin a while).
_region_end = 0.0
_region_threads = 1


class parallel_threads:  # noqa: N801  (used as a function: ``with parallel_threads(n):``)
    """Around every call of a parallel kernel, run on ``n`` threads: numba's thread
    count, which is per calling thread, set for the call; the regions one at a time in
    the process unless numba's threading layer is threadsafe (only known once one has
    started); the region's end and thread count recorded (:func:`idle_seconds`,
    :func:`free_cores`).  A class with slots rather than generator context managers,
    and numba's own count read without its public wrapper: 0.5 us a call against 2.3
    (AMD EPYC Zen 5), on every parallel call the executor makes."""

    __slots__ = ("n", "old", "locked")

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> None:
        if not _launched:
            _launch_numba_threads()
        self.old = old = _numba_count()
        if old != self.n:
            numba.set_num_threads(self.n)
        self.locked = _layer is None
        if self.locked:
            _region_lock.acquire()
        elif (self.n > 1 and _layer == "omp" and not _pool.finding
              and time.perf_counter() - _region_end > WAKE_PLACEMENT_SECONDS):
            keep_workers_off_caller()

    def __exit__(self, *exc: object) -> None:
        global _layer, _busy_end, _region_end, _region_threads
        try:
            if self.locked:
                try:
                    layer = _started_layer()
                    if layer in THREADSAFE_LAYERS:
                        _layer = layer
                finally:
                    _region_lock.release()
        finally:
            if self.old != self.n:
                numba.set_num_threads(self.old)
            _busy_end = _region_end = time.perf_counter()
            _region_threads = self.n


def mark_busy() -> None:
    """Record the end of a call that decided by :func:`idle_seconds` (whether or not it
    started a parallel region): calls that follow one another closely are a loop, whose
    first parallel region wakes the threads for the rest."""
    global _busy_end
    _busy_end = time.perf_counter()


def idle_seconds() -> float:
    """Seconds since the executor's last parallel region, or last call that asked this,
    ended.  Longer than the worker threads spin (OMP_SPIN_COUNT), they sleep, and
    waking them costs a parallel region tens of microseconds, which a small plan saves
    by running on the calling thread alone (schedule/idle.py).  A call that follows
    another within the spin time runs in parallel: in a loop of calls, the first region
    wakes the threads and the others find them spinning."""
    return time.perf_counter() - _busy_end


@numba.njit(parallel=True, cache=True, nogil=True)
def _touch(x: np.ndarray) -> None:  # pragma: no cover - compiled
    for i in numba.prange(x.shape[0]):
        x[i] += 1.0


def region_seconds(threads: int, x: np.ndarray) -> float:
    """Seconds of one parallel region that does nothing else than start ``threads``
    workers on an element of ``x`` each (the calibrations' probe of idle_seconds' cost:
    a kernel of its own, 0.4 s to compile, not one of the executor's, 10 s and more)."""
    start = time.perf_counter()
    with parallel_threads(threads):
        _touch(x[:threads])
    return time.perf_counter() - start


def _open_loadavg() -> int | None:
    """A descriptor of /proc/loadavg, kept open (a pread of it costs 2 us, an open and a
    read 10), or None: no such file, ``TEIR_PLAN_CHECK_CORES=0``, or this process may
    run on fewer CPUs than the machine has (a cpuset), where the machine-wide count says
    nothing of its own."""
    if os.environ.get("TEIR_PLAN_CHECK_CORES") == "0":
        return None
    try:
        if len(os.sched_getaffinity(0)) != os.cpu_count():
            return None
        return os.open("/proc/loadavg", os.O_RDONLY)
    except (OSError, AttributeError):
        return None


_loadavg_fd = _open_loadavg()


# A count that shows other tasks is read again this much later, and the fewer taken
# (time.sleep would give up the core for 50 us and more); and it counts only when the
# reading before it, within BUSY_CONFIRM_SECONDS, showed others too.  Tasks that wake
# for a moment (a pipe's reader as the caller prints, a kernel worker) showed in 2 of 12
# readings of a quiet loop and in every second one of a printing loop, each sending a
# plan to one thread for nothing; a thread that spins through a user's loop shows in
# every reading.
RECOUNT_SECONDS = 30e-6
BUSY_CONFIRM_SECONDS = 0.05
_last_busy = -1.0  # time.perf_counter() of the last reading that showed others


def _running() -> int | None:
    """The kernel's count of runnable tasks, the caller included, or None."""
    if _loadavg_fd is None:
        return None
    try:
        text = os.pread(_loadavg_fd, 128, 0)
        slash = text.index(b"/")
        return int(text[text.rindex(b" ", 0, slash) + 1:slash])
    except (OSError, ValueError):
        return None


@intrinsic
def _call_int_function(typingctx, fn):  # type: ignore[no-untyped-def]
    """The int that the C function of no arguments at address ``fn`` returns (gettid).
    An address passed at run time keeps the compiled kernel cacheable (executor/blas.py)."""
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.IntType(32), [])
        result = builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [])
        return builder.sext(result, ir.IntType(64))

    return types.int64(fn), codegen


@numba.njit(parallel=True, cache=True, nogil=True)
def _thread_ids(fn, out):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    for i in numba.prange(out.shape[0]):
        out[i] = _call_int_function(fn)


def _gettid_address() -> int | None:
    try:
        return ctypes.cast(ctypes.CDLL(None).gettid, ctypes.c_void_p).value
    except (AttributeError, OSError, TypeError):  # no gettid (glibc before 2.30, not Linux)
        return None


class _PoolIds(threading.local):
    """The kernel's ids of the threads that run this calling thread's parallel regions
    (GNU OpenMP gives each calling thread a team of its own), asked once (None before),
    and a descriptor of each one's /proc stat kept open (a pread of it costs 4-30 us, an
    open and a read 20-60 after the caller was idle); the CPU they were last kept off
    (keep_workers_off_caller; -1: none yet), and whether the region that asks their ids
    is running."""

    ids: tuple[int, ...] | None = None
    fds: tuple[int, ...] = ()
    away: int = -1
    finding: bool = False


_pool = _PoolIds()


def _pool_thread_ids() -> tuple[int, ...]:
    """The workers of numba's pool that run the calling thread's regions, found by a
    region that asks each worker its id (several iterations a thread, so that a
    work-stealing layer gives every worker some); () where the C library has no gettid."""
    if _pool.ids is None:
        fn = _gettid_address()
        ids: set[int] = set()
        if fn is not None and parallel_usable():
            limit: int = getattr(numba.config, "NUMBA_NUM_THREADS")  # noqa: B009
            out = np.zeros(8 * limit, np.int64)
            _pool.finding = True
            try:
                with parallel_threads(limit):
                    _thread_ids(fn, out)
            finally:
                _pool.finding = False
            ids = {int(t) for t in out} - {threading.get_native_id(), 0}
        _pool.ids = tuple(sorted(ids))
        fds = []
        for tid in _pool.ids:
            with suppress(OSError):
                fds.append(os.open(f"/proc/self/task/{tid}/stat", os.O_RDONLY))
        _pool.fds = tuple(fds)
    return _pool.ids


def _sched_getcpu() -> Callable[[], int] | None:
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (AttributeError, OSError):  # not Linux's C library
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return fn


# (TEIR_PLAN_PLACE_WORKERS=0 leaves the workers where the kernel puts them.)
_getcpu = None if os.environ.get("TEIR_PLAN_PLACE_WORKERS") == "0" else _sched_getcpu()
# A region that starts this long after the last one ended may find its workers asleep
# (they spin about 200-400 us: OMP_SPIN_COUNT) and wake them: then the kernel places
# them, and keep_workers_off_caller runs first.  In a tight loop they spin where they
# are, and the check (0.1 us: sched_getcpu through ctypes) is not made.
WAKE_PLACEMENT_SECONDS = 1e-4


def keep_workers_off_caller() -> None:
    """Let numba's workers that run the calling thread's regions use every CPU the caller
    may use except the one it runs on now (sched_setaffinity on each worker; again only
    when the caller has moved to another CPU).

    Linux tends to wake a sleeping worker on its waker's CPU, and there the caller then
    spins at the region's end barrier while the worker waits for its turn: the region's
    work is done on one core in scheduler slices.  Measured on a 2-core AMD EPYC
    (Zen 5, a virtual machine), a 3-step Tucker tree (predicted 0.28 ms) called 5 times
    after each 0.25 s pause: 33-36 of 48 calls took 1.7-2.4 ms with the worker on the
    caller's CPU (read from /proc) against 0.3-0.4 ms otherwise; kept off it, 0 of 48,
    with one change of affinity in the whole run.  Nothing is changed where the workers
    outnumber the CPUs left, where the C library cannot say where the caller runs, or
    with ``TEIR_PLAN_PLACE_WORKERS=0`` in the environment."""
    if _getcpu is None:
        return
    cpu = _getcpu()
    if cpu == _pool.away or cpu < 0:
        return
    _pool.away = cpu
    ids = _pool_thread_ids()
    try:
        others = os.sched_getaffinity(0) - {cpu}
    except OSError:
        return
    if not ids or len(ids) > len(others):
        return
    for tid in ids:
        # (A worker's id is checked to be this process's: an id that outlived its thread
        # may name another process's.)
        with suppress(OSError):
            if os.path.exists(f"/proc/self/task/{tid}"):
                os.sched_setaffinity(tid, others)


def _running_pool_threads() -> int:
    """How many of numba's workers (of the calling thread's team) the kernel counts as
    runnable now: the workers of a region that ended within their spin time, the user's
    own numba code's as well as the executor's, spin, and /proc/loadavg counts them."""
    _pool_thread_ids()
    n = 0
    for fd in _pool.fds:
        try:
            text = os.pread(fd, 512, 0)
            end = text.rindex(b")")
        except (OSError, ValueError):
            continue
        n += text[end + 2:end + 3] == b"R"
    return n


def free_cores(spin_seconds: float) -> int | None:
    """The machine's CPUs less the tasks runnable on them besides the calling thread and
    numba's workers (the kernel's instantaneous count, /proc/loadavg's "running/total";
    the workers of an executor's region that ended within ``spin_seconds`` are taken to
    be spinning, and where others show, the workers the kernel counts as runnable after
    a region of the user's own are found by their ids), or None where the machine does not say
    or others showed in this reading alone (see BUSY_CONFIRM_SECONDS).  Another
    library's threads that spin after their call (OpenBLAS' for about 0.1 s after each
    of numpy's multi-threaded products) count as running: schedule/idle.py runs a plan
    on the cores they leave."""
    global _last_busy
    if _loadavg_fd is None:
        return None
    _pool_thread_ids()  # (asked before the count: its region's workers are own)
    running = _running()
    if running is None:
        return None
    own = _region_threads - 1 if time.perf_counter() - _region_end < spin_seconds else 0
    if running - own > 1:
        # Others, or numba's workers spinning after a region the executor did not run
        # (the user's own numba code): after a 2-4 ms region of the user's, they made a
        # 384^2 product take 669 us instead of 393, a 1024 x 1024 x 160 one 3.4 ms
        # instead of 1.7 (2 threads, AMD EPYC).  (Their states: see _PoolIds.)
        own = max(own, _running_pool_threads())
    if running - own > 1:
        start = time.perf_counter()
        while time.perf_counter() - start < RECOUNT_SECONDS:
            pass
        running = min(running, _running() or running)
    now = time.perf_counter()
    if running - own > 1:
        confirmed = now - _last_busy < BUSY_CONFIRM_SECONDS
        _last_busy = now
        if not confirmed:
            return None
    else:
        _last_busy = -1.0
    return (os.cpu_count() or 1) - max(running - own - 1, 0)


class call_threads:  # noqa: N801  (used as a function: ``with call_threads(n):``)
    """The calling thread runs with ``n`` threads inside the block (thread_count(n),
    without a generator's cost: the block is a small plan's whole call)."""

    __slots__ = ("n", "old")

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> None:
        self.old = _local.n
        _local.n = self.n

    def __exit__(self, *exc: object) -> None:
        _local.n = self.old


def parallel_usable() -> bool:
    """False in a process forked after GNU OpenMP's threads started (see above)."""
    return _usable


def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: locks another thread held stay
    held for ever there, and its executor calls in progress never end."""
    global _usable, _region_lock, _launch_lock
    _region_lock = threading.Lock()
    _launch_lock = threading.Lock()
    for fd in _pool.fds:  # the parent's workers: the child's pool is its own
        with suppress(OSError):
            os.close(fd)
    _pool.ids, _pool.fds, _pool.away = None, (), -1
    if _started_layer() == "omp":
        import importlib

        # Intel's OpenMP runtime survives a fork; GNU's (the usual one) does not.
        vendor = getattr(importlib.import_module("numba.np.ufunc.omppool"), "openmp_vendor",
                         "GNU")
        if vendor == "GNU":
            _usable = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

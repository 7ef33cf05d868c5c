"""numba's disk cache for the executor, keyed so that compiled code is never stale.

numba checks a cached function against its own source file only.  The executor's
kernels inline functions from other modules (the walker inlines the tile kinds, the
tile kinds the micro-kernels), so an edit to one file, or an upgrade of teir_plan, would
leave every function that inlined it running its old machine code.  Kernels are also
generated for a vector target (:mod:`teir_plan.isa`) that numba's own key does not see
when ``TEIR_PLAN_VECTOR_BYTES`` narrows it.

This locator takes every function defined in ``teir_plan/executor/``: its cache lives in
a folder named by the vector target, and its source stamp is a hash of every executor
source file (and of ``teir_plan/tiles.py``, ``teir_plan/isa.py`` and the tile kinds'
``teir_plan/tilekinds/``, whose constants
the kernels compile in) together with that target and llvmlite's version (numba adds its own version
and the CPU).  Any edit to any executor file, a new release or another vector width
recompiles everything that could have inlined it; functions elsewhere keep numba's own
locators.  It must be installed before the first ``@njit(cache=True)`` of the executor
runs (``teir_plan/executor/__init__.py`` installs it first).

Where: beside the sources when the package folder can be written (a clone, a user's
own virtual environment), else the user's cache folder, the calibration cache's root
(``$TEIR_PLAN_CACHE_DIR/numba``, by default ``~/.cache/teir_plan/numba``: a system
install, a container run as another user), else a private folder in the temporary
folder; ``NUMBA_CACHE_DIR`` comes first when set.  The message that announces the first
compile names the folder.  A file of this cache that cannot be read (truncated by a crash
or a full disk) is a cache miss: compiled again and rewritten, with one warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from numba.core import caching

EXECUTOR_DIR = Path(__file__).resolve().parent


# The tile rules' constants and the vector target's shapes are compiled into the kernels
# too (both sit outside the executor so that the planner imports them without numba).
COMPILED_IN = (EXECUTOR_DIR.parent / "tiles.py", EXECUTOR_DIR.parent / "isa.py",
               *sorted((EXECUTOR_DIR.parent / "tilekinds").glob("*.py")))


def _sources() -> list[Path]:
    return [*sorted(EXECUTOR_DIR.glob("*.py")), *(p for p in COMPILED_IN if p.exists())]


def source_stamp(target_key: str) -> str:
    """A hash of every executor source file, the vector target and llvmlite's version."""
    import llvmlite

    h = hashlib.sha256()
    for path in _sources():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(target_key.encode())
    h.update(llvmlite.__version__.encode())
    return h.hexdigest()


def _target_key() -> str:
    from teir_plan.isa import target

    return target().key


class ExecutorCacheLocator(caching._CacheLocator):
    """numba cache locator for the executor's functions (see the module docstring)."""

    _stamp: dict[str, str] = {}  # per folder and target: the sources hashed once a process
    paths: set[str] = set()  # the folders this locator has handed to numba

    def __init__(self, py_func, py_file: str, cache_path: Path, stamp: str) -> None:  # type: ignore[no-untyped-def]
        self._lineno = py_func.__code__.co_firstlineno
        self._py_file = py_file
        self._cache_path = str(cache_path)
        self._stamp_value = stamp

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        return self._stamp_value

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):  # type: ignore[no-untyped-def]
        try:
            if Path(py_file).resolve().parent != EXECUTOR_DIR:
                return None
        except OSError:
            return None
        key = _target_key()
        memo = f"{EXECUTOR_DIR}:{key}"
        stamp = cls._stamp.get(memo)
        if stamp is None:
            stamp = cls._stamp[memo] = source_stamp(key)
        roots = _cache_roots()
        for root in (*roots, None):
            if root is None:  # nothing above can be written: the private temporary folder
                root = _private_temp_root()
                if root is None:
                    break
            self = cls(py_func, py_file, root / key, stamp)
            try:
                self.ensure_cache_path()
            except OSError:
                continue
            cls.paths.add(self._cache_path)
            return self
        return None


def user_cache_dir() -> Path | None:
    """The user's teir_plan cache folder, as the calibration cache picks it
    (``machine/store.py``'s ``cache_dir``): ``$TEIR_PLAN_CACHE_DIR``, else
    ``~/.cache/teir_plan``; None when there is no home folder to put it in."""
    if os.environ.get("TEIR_PLAN_CACHE_DIR"):
        return Path(os.environ["TEIR_PLAN_CACHE_DIR"])
    try:
        return Path.home() / ".cache" / "teir_plan"
    except RuntimeError:  # no HOME and no password entry (a container's anonymous uid)
        return None


def _private_temp_root() -> Path | None:
    """A folder of this user's own in the temporary folder, for a process that can write
    neither the package nor a home folder (a container run as an anonymous user).  Cached
    code is unpickled when loaded, so a folder another user made or can write is never
    used."""
    if not hasattr(os, "getuid"):
        return None
    root = Path(tempfile.gettempdir()) / f"teir_plan-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = root.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return root / "numba"


def _cache_roots() -> list[Path]:
    """Where compiled kernels go, the first that can be written: numba's cache folder if
    the user set one, else beside the sources (as numba does), else the user's cache
    folder (the calibration cache's: a package installed read-only, or by another user),
    else a private folder in the temporary folder."""
    roots = []
    if os.environ.get("NUMBA_CACHE_DIR"):
        roots.append(Path(os.environ["NUMBA_CACHE_DIR"]) / "teir_plan")
    roots.append(EXECUTOR_DIR / "__pycache__")
    user = user_cache_dir()
    if user is not None:
        roots.append(user / "numba")
    return roots


def install() -> None:
    """Put the locator first in numba's list and make a damaged cache file a miss
    (once)."""
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # type: ignore[attr-defined]
    classes = impl._locator_classes
    if ExecutorCacheLocator not in classes:
        classes.insert(0, ExecutorCacheLocator)
    if not issubclass(caching.IndexDataCacheFile, TolerantIndexDataCacheFile):
        caching.IndexDataCacheFile = TolerantIndexDataCacheFile  # type: ignore[misc]


# numba's Cache makes its IndexDataCacheFile by the module's name; the subclass below
# takes its place, and changes nothing for folders other than the executor's.
_BaseIndexDataCacheFile = caching.IndexDataCacheFile
# What unpickling a truncated or overwritten file raises (pickle's own error, a stream
# that ends early, a shape other than numba's, a class that no longer exists).
_DAMAGED = (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError)
_warned: set[str] = set()


def _warn_damaged(path: str, exc: BaseException) -> None:
    if path in _warned:
        return
    _warned.add(path)
    logging.getLogger("teir_plan").warning(
        "teir_plan: compiled-code cache file %s is damaged (%s: %s); compiling again "
        "and replacing it", path, type(exc).__name__, exc)


class TolerantIndexDataCacheFile(_BaseIndexDataCacheFile):  # type: ignore[misc, valid-type]
    """numba's index and data files, where a file of the executor's cache that cannot be
    read (truncated by a crash or a full disk, overwritten) is a cache miss: the function
    is compiled again and the file rewritten, instead of every call raising numba's
    UnpicklingError until someone deletes it.  Other folders keep numba's behaviour."""

    def _ours(self) -> bool:
        return str(self._cache_path) in ExecutorCacheLocator.paths

    def _load_index(self):  # type: ignore[no-untyped-def]
        if not self._ours():
            return super()._load_index()
        try:
            overloads = super()._load_index()
        except _DAMAGED as exc:
            _warn_damaged(self._index_path, exc)
            return {}
        if not isinstance(overloads, dict):
            _warn_damaged(self._index_path, TypeError(f"index of {type(overloads).__name__}"))
            return {}
        return overloads

    def _load_data(self, name):  # type: ignore[no-untyped-def]
        if not self._ours():
            return super()._load_data(name)
        try:
            return super()._load_data(name)
        except _DAMAGED as exc:
            path = self._data_path(name)
            _warn_damaged(path, exc)
            # load() takes an OSError as a missing file: a miss, compiled and saved again.
            raise OSError(f"damaged compiled-code file {path}") from exc

    # One compile per function and signature across processes: a miss takes that
    # signature's lock file and looks again; the process that still misses compiles with
    # the lock held and releases it once saved, and the others then load what it saved.
    # Two test workers (or two processes of a user's) starting cold otherwise compiled
    # every kernel twice, each at half the machine.  Another signature of the same
    # function compiles meanwhile (with one lock per function, a worker that wanted
    # float64's parallel reduction waited the 50 s of another's float32 one); the index
    # both write is read, extended and replaced under the function's own lock, held only
    # for that (numba names a new data file by the index's length: two processes
    # extending it at once would give two signatures one file).  numba's compiler lock
    # serialises compiles within a process; a callee compiled inside its caller's
    # compile takes its own lock (the calls between kernels form no cycle, so neither do
    # the locks).
    def _key_lock(self, key) -> str:  # type: ignore[no-untyped-def]
        digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
        return f"{self._index_path}-{digest}"

    def load(self, key):  # type: ignore[no-untyped-def]
        found = super().load(key)
        if found is not None or not self._ours() or fcntl is None:
            return found
        lock = self._key_lock(key)
        if _take_lock(lock):
            found = super().load(key)
            if found is not None:
                _release_lock(lock)
        return found

    def save(self, key, data):  # type: ignore[no-untyped-def]
        try:
            if self._ours() and fcntl is not None and _take_lock(self._index_path):
                try:
                    super().save(key, data)
                finally:
                    _release_lock(self._index_path)
            else:
                super().save(key, data)
        finally:
            _release_lock(self._key_lock(key))


try:
    import fcntl
except ImportError:  # not on Windows: compiles may then be repeated, never wrong
    fcntl = None  # type: ignore[assignment]

LOCK_WAIT_SECONDS = 900.0  # a holder that died released its lock; one that hangs, not
_held: dict[str, int] = {}  # lock path (without .lock) -> the descriptor holding it


def _take_lock(index_path: str) -> bool:
    """Hold the lock ``index_path + ".lock"`` (waiting while another process holds it);
    False when it cannot be taken (no lock file, or the wait ran out)."""
    import time

    if index_path in _held:
        return True
    try:
        fd = os.open(index_path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        return False
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _held[index_path] = fd
            return True
        except OSError:
            if time.monotonic() > deadline:
                os.close(fd)
                return False
            time.sleep(0.05)


def _release_lock(index_path: str) -> None:
    fd = _held.pop(index_path, None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


runners_called: set[int] = set()  # ids of the runners this process has called
_announced = False


def _announce(where: str) -> None:
    global _announced
    _announced = True
    from teir_plan.isa import target

    logging.getLogger("teir_plan").warning(
        "teir_plan: compiling the executor's kernels for %s; this happens once per machine "
        "and teir_plan version (cached in %s)", target().describe(), where)


def _cold(cache) -> str | None:  # type: ignore[no-untyped-def]
    """The cache folder when ``cache`` (a numba FunctionCache) holds nothing valid."""
    try:
        if cache._cache_file._load_index():
            return None
        return str(cache.cache_path)
    except Exception:  # noqa: BLE001 - a numba without these internals: say nothing
        return None


_guard = threading.local()  # .warm_only: this thread refuses to compile cold kernels


@contextmanager
def warm_only() -> Iterator[None]:
    """Within: a kernel whose compiled code is neither loaded nor on disk raises
    :class:`KernelNotCompiledError` instead of compiling (a plan's trial of another
    candidate must not make a call wait seconds for the compiler; schedule/trials.py)."""
    before = getattr(_guard, "warm_only", False)
    _guard.warm_only = True
    try:
        yield
    finally:
        _guard.warm_only = before


def _refuse_if_guarded(name: str) -> None:
    if getattr(_guard, "warm_only", False):
        from teir_plan.errors import KernelNotCompiledError

        raise KernelNotCompiledError(f"kernel {name} is not compiled on this machine yet")


def first_call(runner) -> None:  # type: ignore[no-untyped-def]
    """Called before a runner's first call in this process: when its compiled code is
    not on disk yet, say once that the kernels are being compiled (tens of seconds,
    once per machine and release), and where they go."""
    if runner.signatures:
        runners_called.add(id(runner))
        return
    cache = getattr(runner, "_cache", None)
    guarded = getattr(_guard, "warm_only", False)
    if _announced and not guarded:
        runners_called.add(id(runner))
        return
    where = _cold(cache) if cache is not None else None
    if where is not None:
        _refuse_if_guarded(getattr(runner, "__name__", "runner"))
        if not _announced:
            _announce(where)
    runners_called.add(id(runner))


def announce_if_cold(py_func) -> None:  # type: ignore[no-untyped-def]
    """As :func:`first_call`, before ``py_func`` is compiled as a C callback."""
    guarded = getattr(_guard, "warm_only", False)
    if _announced and not guarded:
        return
    try:
        cache = caching.FunctionCache(py_func)
    except Exception:  # noqa: BLE001 - no locator: nothing to say
        return
    where = _cold(cache)
    if where is not None:
        _refuse_if_guarded(py_func.__name__)
        if not _announced:
            _announce(where)

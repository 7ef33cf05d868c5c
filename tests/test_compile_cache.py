"""The executor's compiled-code cache cannot go stale.

numba checks a cached function against its own file only; the executor's functions
inline others from other files.  teir_plan's locator (executor/cache.py) stamps every
executor function with a hash of every executor source file and the vector target.
These tests run a cached function in fresh processes from a folder that stands in for
the executor, and edit *another* file of that folder between runs: numba must compile
again (with numba's own locator it would load the old code).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from teir_plan.executor import cache

_RUN = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from teir_plan.executor import cache
    folder = Path(sys.argv[1])
    cache.EXECUTOR_DIR = folder.resolve()
    sys.path.insert(0, str(folder))
    import kernel_mod
    result = kernel_mod.f(2)
    print(json.dumps({"result": result, "hits": sum(kernel_mod.f.stats.cache_hits.values()),
                      "misses": sum(kernel_mod.f.stats.cache_misses.values())}))
""")


def _run(folder: Path, cache_dir: Path) -> dict[str, int]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", _RUN, str(folder)], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_edit_to_any_executor_file_recompiles(tmp_path: Path) -> None:
    folder = tmp_path / "executor"
    folder.mkdir()
    (folder / "kernel_mod.py").write_text(textwrap.dedent("""
        from numba import njit
        from helper_mod import ADD

        @njit(cache=True)
        def f(x):
            return x + ADD
    """))
    helper = folder / "helper_mod.py"
    helper.write_text("ADD = 1\n")
    store = tmp_path / "numba-cache"
    first = _run(folder, store)
    assert first == {"result": 3, "hits": 0, "misses": 1}
    assert _run(folder, store) == {"result": 3, "hits": 1, "misses": 0}  # from the cache
    # The function's own file is unchanged; the constant it froze in comes from another.
    helper.write_text("ADD = 10\n")
    assert _run(folder, store) == {"result": 12, "hits": 0, "misses": 1}


def test_the_stamp_covers_every_executor_file_and_the_target(tmp_path: Path,
                                                             monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    monkeypatch.setattr(cache, "EXECUTOR_DIR", tmp_path)
    base = cache.source_stamp("avx512")
    assert cache.source_stamp("avx2") != base
    (tmp_path / "b.py").write_text("# b.py, edited\n")
    assert cache.source_stamp("avx512") != base
    # The tile rules, the vector target and the tile kinds (with the tile table's
    # schema) live outside the executor; the kernels compile their constants in.
    assert {"tiles.py", "isa.py", "table.py", "vec.py", "blas.py"} <= {
        p.name for p in cache.COMPILED_IN}
    assert all(p in cache._sources() for p in cache.COMPILED_IN)


def test_the_locator_takes_the_executor_functions_only() -> None:
    from teir_plan.executor import walker
    from teir_plan.planner import cost

    fn = walker.run_chunk.py_func
    loc = cache.ExecutorCacheLocator.from_function(fn, walker.__file__)
    assert loc is not None and Path(loc.get_cache_path()).name.startswith(
        cache._target_key().split("-")[0])
    assert cache.ExecutorCacheLocator.from_function(fn, cost.__file__) is None


_RUN_PRODUCT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from teir_plan.executor import cache
    folder = Path(sys.argv[1])
    cache.EXECUTOR_DIR = folder.resolve()
    sys.path.insert(0, str(folder))
    import kernel_mod
    dtypes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["float64"]
    for dt in dtypes:
        a = np.arange(12.0).reshape(3, 4).astype(dt)
        b = (np.arange(20.0).reshape(4, 5) - 7.0).astype(dt)
        got = kernel_mod.product(a, b)
        assert np.array_equal(got, np.einsum("ij,jk->ik", a, b)), dt
    print(json.dumps({"numpy": bool(np.array_equal(got, np.einsum("ij,jk->ik", a, b))),
                      "hits": sum(kernel_mod.product.stats.cache_hits.values()),
                      "misses": sum(kernel_mod.product.stats.cache_misses.values())}))
""")


def _run_product(folder: Path, cache_dir: Path) -> tuple[dict[str, int], str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", _RUN_PRODUCT, str(folder)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":  # a crash or a full disk in the middle of the write
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # numba's version header, then something of another shape
        import numba

        path.write_bytes(pickle.dumps(numba.__version__) + pickle.dumps("not an index"))


# (A data file of another shape that unpickles is numba's to rebuild: not a crash's work.)
@pytest.mark.parametrize(("which", "how"), [("index", "truncated"), ("index", "empty"),
                                            ("index", "other shape"), ("data", "truncated"),
                                            ("data", "empty")])
def test_a_damaged_cache_file_is_compiled_again(tmp_path: Path, which: str, how: str) -> None:
    """A compiled-code file cut short (or overwritten) is a cache miss, not numba's
    UnpicklingError on every call: the next process compiles again, gives numpy's
    result, says which file it replaced, and the one after loads the rewritten file."""
    folder = tmp_path / "executor"
    folder.mkdir()
    (folder / "kernel_mod.py").write_text(textwrap.dedent("""
        import numpy as np
        from numba import njit

        @njit(cache=True)
        def product(a, b):
            out = np.zeros((a.shape[0], b.shape[1]))
            for i in range(a.shape[0]):
                for k in range(a.shape[1]):
                    for j in range(b.shape[1]):
                        out[i, j] += a[i, k] * b[k, j]
            return out
    """))
    store = tmp_path / "numba-cache"
    first, _ = _run_product(folder, store)
    assert first == {"numpy": True, "hits": 0, "misses": 1}
    suffix = ".nbi" if which == "index" else ".nbc"
    (damaged,) = (p for p in (store / "teir_plan").rglob(f"*{suffix}"))
    _damage(damaged, how)
    again, err = _run_product(folder, store)
    assert again == {"numpy": True, "hits": 0, "misses": 1}
    assert "damaged" in err and damaged.name in err
    repaired, err = _run_product(folder, store)
    assert repaired == {"numpy": True, "hits": 1, "misses": 0}
    assert "damaged" not in err


def test_a_read_only_package_caches_in_the_users_folder(tmp_path: Path,
                                                        monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The package folder cannot be written (a system install, another user's
    environment): compiled code goes to the calibration cache's root, under numba/."""
    from teir_plan.executor import walker

    package = tmp_path / "executor"
    package.mkdir()
    (package / "__pycache__").write_text("a file where the folder would go\n")
    monkeypatch.setattr(cache, "EXECUTOR_DIR", package)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path / "user"))
    loc = cache.ExecutorCacheLocator.from_function(walker.run_chunk.py_func,
                                                   str(package / "walker.py"))
    assert loc is not None
    assert Path(loc.get_cache_path()) == tmp_path / "user" / "numba" / cache._target_key()
    # The user's folder cannot be written either: a private folder in the temporary one.
    (tmp_path / "no-home").write_text("not a folder\n")
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path / "no-home"))
    monkeypatch.setattr(cache.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    loc = cache.ExecutorCacheLocator.from_function(walker.run_chunk.py_func,
                                                   str(package / "walker.py"))
    assert loc is not None
    private = tmp_path / "tmp" / f"teir_plan-{os.getuid()}"
    assert Path(loc.get_cache_path()) == private / "numba" / cache._target_key()
    assert private.stat().st_mode & 0o777 == 0o700
    # One another user could write is never used (its pickles would be loaded).
    private.chmod(0o777)
    assert cache._private_temp_root() is None


def _product_module(tmp_path: Path, typed: bool) -> Path:
    """A folder holding ``kernel_mod.product``, a cached matrix product of many loop
    nests: long enough to compile that a second process asks meanwhile.  ``typed``: its
    result and factors of the operands' dtype (an int64 signature compiles too), else
    float64."""
    folder = tmp_path / "executor"
    folder.mkdir()
    one, zero, dtype = ("1", "0", ", a.dtype") if typed else ("1.0", "0.0", "")
    body = "\n".join(
        f"    for i in range(a.shape[0]):\n"
        f"        for k in range(a.shape[1]):\n"
        f"            for j in range(b.shape[1]):\n"
        f"                out[i, j] += a[i, k] * b[k, j] * {one if n == 0 else zero}"
        for n in range(12))
    (folder / "kernel_mod.py").write_text(
        "import numpy as np\nfrom numba import njit\n\n\n@njit(cache=True)\n"
        f"def product(a, b):\n    out = np.zeros((a.shape[0], b.shape[1]){dtype})\n"
        f"{body}\n    return out\n")
    return folder


def test_processes_starting_cold_compile_a_kernel_once(tmp_path: Path) -> None:
    """Two processes that need the same kernel at the same time, with nothing cached: one
    compiles it (its lock file held), the other waits and loads what it saved, instead
    of both compiling it.  Both give numpy's result."""
    folder = _product_module(tmp_path, typed=False)
    store = tmp_path / "numba-cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(store))
    procs = [subprocess.Popen([sys.executable, "-c", _RUN_PRODUCT, str(folder)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["numpy"] for r in results)
    assert sum(r["misses"] for r in results) == 1
    assert sum(r["hits"] for r in results) == 1


def test_processes_compiling_two_signatures_at_once_keep_both(tmp_path: Path) -> None:
    """Two processes compiling two signatures of one function at the same time (each
    under its own signature's lock) both save: a third process loads both from the
    index, each its own code (two saves at once extending the index could give both
    signatures one data file)."""
    folder = _product_module(tmp_path, typed=True)
    store = tmp_path / "numba-cache"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(store))
    procs = [subprocess.Popen([sys.executable, "-c", _RUN_PRODUCT, str(folder), dt], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for dt in ("float64", "int64")]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1])["misses"] == 1
    out = subprocess.run([sys.executable, "-c", _RUN_PRODUCT, str(folder), "float64,int64"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["numpy"] and r["misses"] == 0 and r["hits"] == 2

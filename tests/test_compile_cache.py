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
import subprocess
import sys
import textwrap
from pathlib import Path

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

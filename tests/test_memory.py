"""Memory (GitHub issue 5): many calls with distinct shapes leave resident memory
bounded (the plan cache evicts: len(tp.plan_cache) <= maxsize), and a long run of one
plan does not grow.

Each check runs in a fresh interpreter so that its resident set size (read from
/proc/self/statm) is not disturbed by other tests.  ``make test`` runs 2,000 distinct
shapes; the 10,000-shape run is marked ``slow`` (``make fuzz``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/statm").exists(), reason="needs /proc/self/statm (Linux)"
)

CHILD = textwrap.dedent(
    """
    import gc, json, os, sys
    import numpy as np
    import teir_plan as tp

    PAGE = os.sysconf("SC_PAGE_SIZE")

    def rss():
        gc.collect()
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    mode, count = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    b3 = rng.standard_normal((3, 3))
    shapes = [(1 + n % 97, 1 + n // 97 % 103) for n in range(count)]  # all distinct
    report = {"maxsize": tp.plan_cache.maxsize}

    def distinct(lo, hi):
        for m, k in shapes[lo:hi]:
            a = rng.standard_normal((m, 3))
            b = rng.standard_normal((3, k))
            r = tp.einsum("ij,jk->ik", a, b)
            assert r.shape == (m, k)
            report["max_len"] = max(report.get("max_len", 0), len(tp.plan_cache))

    if mode == "distinct":
        warm = min(count // 4, 2 * tp.plan_cache.maxsize)
        distinct(0, warm)  # fill the cache past maxsize: evictions begin
        report["rss_warm"] = rss()
        distinct(warm, count)
        report["rss_end"] = rss()
        report["calls"] = count - warm
    else:
        a = rng.standard_normal((30, 40))
        b = rng.standard_normal((40, 20))
        p = tp.plan("ij,jk->ik", a, b)
        out = np.empty((30, 20))
        for _ in range(200):
            p(a, b)
            p(a, b, out=out)
            tp.einsum("ij,jk->ik", a, b)
        report["rss_warm"] = rss()
        for _ in range(count):
            p(a, b)
            p(a, b, out=out)
            tp.einsum("ij,jk->ik", a, b)
        report["rss_end"] = rss()
        report["calls"] = 3 * count
    report["len"] = len(tp.plan_cache)
    print("REPORT " + json.dumps(report))
    """
)

MB = 1 << 20


def _run(mode: str, count: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(count)],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def _check_distinct(count: int, bound_mb: float) -> None:
    r = _run("distinct", count)
    assert r["len"] <= r["maxsize"] and r["max_len"] <= r["maxsize"], r
    assert r["len"] == r["maxsize"], "the cache stays full while it evicts"
    growth = (r["rss_end"] - r["rss_warm"]) / MB
    assert growth < bound_mb, f"RSS grew {growth:.1f} MB over {r['calls']} distinct calls"


def test_distinct_shapes_keep_memory_bounded():
    _check_distinct(2_000, bound_mb=20)


@pytest.mark.slow
def test_distinct_shapes_keep_memory_bounded_10k():
    _check_distinct(10_000, bound_mb=20)


def test_one_plan_run_long_does_not_grow():
    r = _run("one", 10_000)
    growth = (r["rss_end"] - r["rss_warm"]) / MB
    assert growth < 8, f"RSS grew {growth:.1f} MB over {r['calls']} calls of one plan"

"""The first call a new user makes: a fresh process with an empty compiled-code cache and
no calibration cached (what ``pip install teir_plan`` then one einsum meets), per case in
its own process and its own empty caches, then the same call in a new process with both
caches warm.

The time is the process' own from before ``import teir_plan`` to the first result
(the compile, the first-use measurement and the call); the wall time adds the
interpreter's start.  ``--python`` runs the cases with another checkout's interpreter
(its own editable install), so that two versions are timed back to back on one host:
``--python A --python B`` alternates them case by case, so a load that comes and goes
falls on both.

Run: .venv/bin/python -m benchmarks.first_call [--python PATH ...] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks.common import machine, machine_md, md_table, write_results

# (label, the code of the first call: numpy is imported as np, teir_plan as tp).  What each
# compiles depends on the plan the machine's parameters choose (explain() says): the
# 8 x 8 float64 product runs on numpy (a tiny product), the larger products on BLAS tiles
# or the vector kernel, the README's example packs in0 for one GEMM, the row sum runs
# the parallel reduction.
CASES = [
    ("8 x 8 float64 product (a tiny product)",
     "a = np.ones((8, 8)); tp.einsum('ij,jk->ik', a, a)"),
    ("256 x 256 float64 product",
     "a = np.ones((256, 256)); tp.einsum('ij,jk->ik', a, a)"),
    ("256 x 256 float32 product",
     "a = np.ones((256, 256), np.float32); tp.einsum('ij,jk->ik', a, a)"),
    ("64 x 64 float32 product",
     "a = np.ones((64, 64), np.float32); tp.einsum('ij,jk->ik', a, a)"),
    ("README's trus,pqtu->pqrs, float32",
     "a = np.ones((8, 24, 48, 48), np.float32); b = np.ones((8, 48, 8, 48), np.float32); "
     "tp.einsum('trus,pqtu->pqrs', a, b)"),
    ("row sum ij->i of 2000 x 3000 float64 (a reduction)",
     "a = np.ones((2000, 3000)); tp.einsum('ij->i', a)"),
]


def first_call(python: str, code: str, numba_cache: str, params_cache: str) -> tuple[float, float]:
    """(seconds from import to the first result, process wall seconds) of ``code`` in a
    fresh process of ``python`` with these cache folders."""
    script = ("import time; t = time.perf_counter(); import numpy as np, teir_plan as tp; "
              f"{code}; print(time.perf_counter() - t)")
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_cache, TEIR_PLAN_CACHE_DIR=params_cache,
               TEIR_PLAN_QUIET="1", PYTHONWARNINGS="ignore")
    env.pop("TEIR_PLAN_AUTOCALIBRATE", None)  # a user's default: measure on first use
    start = time.perf_counter()
    out = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir())
    return float(out.stdout.strip().splitlines()[-1]), time.perf_counter() - start


def version_of(python: str) -> str:
    out = subprocess.run([python, "-c", "import teir_plan, subprocess, pathlib; "
                          "d = pathlib.Path(teir_plan.__file__).parent.parent; "
                          "print(subprocess.run(['git', '-C', str(d), 'rev-parse', '--short', "
                          "'HEAD'], capture_output=True, text=True).stdout.strip() or "
                          "teir_plan.__version__)"],
                         capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append",
                    help="an interpreter whose teir_plan to time (repeatable; default: this one)")
    ap.add_argument("--repeats", type=int, default=1, help="cold runs per case and version")
    args = ap.parse_args()
    pythons = args.python or [sys.executable]
    versions = [version_of(p) for p in pythons]
    rows = []
    for label, code in CASES:
        for _ in range(args.repeats):
            for python, version in zip(pythons, versions):
                with (tempfile.TemporaryDirectory() as numba,
                      tempfile.TemporaryDirectory() as params):
                    cold, cold_wall = first_call(python, code, numba, params)
                    warm, warm_wall = first_call(python, code, numba, params)
                print(f"{version} {label}: cold {cold:.1f} s ({cold_wall:.1f} wall), "
                      f"warm {warm:.2f} s", flush=True)
                rows.append([label, version, cold, cold_wall, warm])
    info = machine()
    md = ("# First call in a fresh process\n\n" + machine_md(info) + "\n\n"
          "Each case in a new process with an empty compiled-code cache (`NUMBA_CACHE_DIR`) "
          "and no calibration cached (`TEIR_PLAN_CACHE_DIR`), the first-use measurement "
          "included; then again in a new process with both caches warm.  Seconds from "
          "`import teir_plan` to the first result (wall: the interpreter's start "
          "added).\n\n"
          + md_table(["case", "version", "cold (s)", "cold wall (s)", "warm (s)"], rows))
    print(f"results: {write_results('first-call', {'machine': info, 'rows': rows}, md)}")


if __name__ == "__main__":
    main()

"""What ``tp.calibrate()`` does to the plans: the everyday cases and a set of TCCG cases
planned with the first-use parameters and with the calibration's, timed in turns in
one run, so that a calibration that would make plans slower shows.

In one process with a cache folder of its own: the first plan measures the first-use
parameters; then ``tp.calibrate(save=False)`` as a user calls it (its check keeps the
parameters in force when the new ones rank its probe contractions worse) and
``tp.calibrate(save=False, check=False)`` (the fitted parameters whatever they rank).
Each case is planned with each set (the self-correction off: the model's choice alone)
and the plans are timed in turns, best of ``--repeats`` (a call under ``BATCH_SECONDS``
timed as the mean of a batch), after a pause before each.  The ratio is the first-use
plan's time over the calibrated plan's: above 1, the calibration made the plan faster.
Plans that are the same program under both sets count as 1 without timing.

Run: .venv/bin/python -m benchmarks.calibration_effect [--repeats 5] [--tccg 0,4,7,8,12,18]
At AVX2 width on an AVX-512 host, prefix ``make test-avx2``'s settings:
``NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES= OPENBLAS_CORETYPE=Haswell``.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from dataclasses import asdict

import numpy as np

from benchmarks.common import (
    machine,
    machine_md,
    md_table,
    progress,
    write_results,
)
from benchmarks.everyday import CASES
from benchmarks.self_correct import best_in_turns
from benchmarks.tccg import load_cases


def program_of(plan: object) -> str:
    """What tells two plans of one problem apart: their steps' kinds and programs."""
    steps = getattr(plan, "steps", ())
    return repr((getattr(plan, "numpy_call", None) is not None,
                 [(type(s).__name__, getattr(getattr(s, "chosen", None), "teir", None))
                  for s in steps]))


def geomean(xs: list[float]) -> float:
    return math.exp(float(np.mean(np.log(xs)))) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tccg", default="0,4,7,8,12,18",
                    help="TCCG case indices (benchmarks/tccg24.txt) besides the everyday set")
    args = ap.parse_args()
    os.environ["TEIR_PLAN_SELF_CORRECT"] = "0"
    os.environ["TEIR_PLAN_CACHE_DIR"] = tempfile.mkdtemp(prefix="teir_plan-calibration-")
    os.environ.pop("TEIR_PLAN_AUTOCALIBRATE", None)  # a user's default: measure on first use
    import teir_plan as tp
    from teir_plan.machine import store
    from teir_plan.schedule import calibrate as calibrate_module
    from teir_plan.schedule.in_force import machine_params

    rng = np.random.default_rng(0)
    cases: list[tuple[str, list[tuple[int, ...]], str]] = list(CASES)
    tccg = load_cases()
    for i in (int(s) for s in args.tccg.split(",") if s.strip()):
        expr, ext = tccg[i]
        ins = expr.split("->")[0].split(",")
        cases.append((expr, [tuple(ext[c] for c in s) for s in ins], "float32"))

    first = machine_params(np.dtype(np.float32))
    tp.einsum("ij,jk->ik", np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))
    first = machine_params(np.dtype(np.float32))  # (the vector kernel measured by now)
    started = time.perf_counter()
    checked = tp.calibrate(save=False)
    check = calibrate_module.last_check
    kept_old = checked is first
    store.set_machine_params(first)
    fitted = tp.calibrate(save=False, check=False)
    took = time.perf_counter() - started
    sets = {"first-use": first, "calibrated": checked, "fitted": fitted}

    rows: list[list[object]] = []
    records: list[dict] = []
    for n, (expr, shapes, dtype) in enumerate(cases):
        progress(n, len(cases), expr)
        ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
        ref = np.einsum(expr, *(o.astype(np.float64) for o in ops), optimize=True)
        plans = {}
        for name, params in sets.items():
            store.set_machine_params(params)
            tp.plan_cache.clear()
            plans[name] = tp.plan(expr, *ops)
            r = plans[name](*ops)
            scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
            assert np.allclose(r, ref, rtol=1e-3, atol=1e-3 * scale), (expr, name)
        same = {name: program_of(p) == program_of(plans["first-use"])
                for name, p in plans.items()}
        timed = {name: (lambda p=p, ops=ops: p(*ops)) for name, p in plans.items()
                 if name == "first-use" or not same[name]}
        best = best_in_turns(timed, args.repeats, warm=True) if len(timed) > 1 else {}
        t0 = best.get("first-use", math.nan)
        ratios = {name: 1.0 if same[name] else t0 / best[name]
                  for name in ("calibrated", "fitted")}
        rows.append([expr, dtype, t0 * 1e3 if best else "same plan",
                     ratios["calibrated"], ratios["fitted"]])
        records.append({"expr": expr, "shapes": shapes, "dtype": dtype,
                        "seconds": best, "same": same, "ratios": ratios})
    progress(len(cases), len(cases), "done")
    store.set_machine_params(None)
    gm = {k: geomean([r["ratios"][k] for r in records]) for k in ("calibrated", "fitted")}
    low = {k: min(r["ratios"][k] for r in records) for k in ("calibrated", "fitted")}
    every = [r for r in records if r["expr"] in {c[0] for c in CASES}]
    gm_every = {k: geomean([r["ratios"][k] for r in every]) for k in ("calibrated", "fitted")}
    info = machine()
    summary = (f"first-use time over calibrated time, geomean: tp.calibrate() "
               f"{gm['calibrated']:.3f} (everyday {gm_every['calibrated']:.3f}, lowest "
               f"{low['calibrated']:.2f}), the fitted parameters without the check "
               f"{gm['fitted']:.3f} (everyday {gm_every['fitted']:.3f}, lowest "
               f"{low['fitted']:.2f}); the check "
               f"{'kept the first-use parameters' if kept_old else 'took the new ones'}"
               f"{'' if check is None else ': ' + check.describe()}; both calibrations "
               f"took {took:.0f} s")
    md = "\n".join([
        "# What tp.calibrate() does to the plans", "", machine_md(info), "",
        f"{tp.get_num_threads()} threads; each case planned with the first-use parameters, "
        f"with tp.calibrate()'s (its check on) and with the fitted parameters (check off), "
        f"the self-correction off; the plans timed in turns, best of {args.repeats}. "
        f"Ratio: the first-use plan's time over the other's (above 1: the calibration "
        f"made it faster; 1.00 where the plans are the same).", "",
        md_table(["expression", "dtype", "first-use ms", "calibrated", "fitted"], rows), "",
        summary, ""])
    info["threads"] = tp.get_num_threads()
    # The parameter sets themselves (the cache file's form: machine.validate reads them
    # back), so that a plan that moved can be planned again as this run planned it.
    path = write_results(f"calibration-effect-{info.get('isa', 'unknown')}", {
        "machine": info, "cases": records, "summary": summary,
        "params": {name: asdict(p) for name, p in sets.items()}}, md)
    print(md)
    print(f"written {path}")


if __name__ == "__main__":
    main()

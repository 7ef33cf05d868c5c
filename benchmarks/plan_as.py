"""Planning as a machine the team does not have: the model's first choices for the TCCG
cases with another machine's parameters (``TEIR_PLAN_MACHINE``) and its vector width,
held against what was measured on that machine.

``benchmarks/data/zen3-avx2/`` holds an AMD EPYC Zen 3's (AVX2 + FMA, 2 cores, numpy on
OpenBLAS' Haswell kernels) machine parameters, first-use and after ``tp.calibrate()``,
and its cost-accuracy tables (``benchmarks/cost_accuracy.py`` run there): per case, the
predicted seconds of the model's first choice, which of its top five candidates was
fastest when they were timed in turns, and the first choice's time over the fastest's.

This script plans each case here as that machine (its parameters, AVX2's 32-byte vectors
and 16 registers) and reports whether today's first choice is the one timed there (the
same predicted seconds), and so how far from the fastest timed alternative it ran
there.  A model change that moves a Zen 3 choice shows here as "moved", with both
predictions.  Nothing is run: the script plans only, so it takes seconds.

Run: .venv/bin/python -m benchmarks.plan_as [--params first-use|calibrated]
Writes benchmarks/results/plan-as-zen3-<params>-latest.{md,json}.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "zen3-avx2"
# The Zen 3's kernels: what `make test-avx2` runs on a host with AVX-512.
AVX2_ENV = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "",
            "OPENBLAS_CORETYPE": "Haswell"}
# A first choice within this of the fastest timed alternative counts as a good one (the
# same machine's runs of one plan moved 10-30 % within minutes).
WITHIN = 1.10
# Predicted seconds this close are the same choice (the report prints 4 digits).
SAME = 2e-3


def recorded(params: str) -> dict[int, dict[str, object]]:
    """The cost-accuracy table measured on the Zen 3: per case number, its expression,
    predicted ms, and the first choice's time over the fastest timed alternative."""
    rows: dict[int, dict[str, object]] = {}
    for line in (DATA / f"cost-accuracy-{params}.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[0].isdigit():
            rows[int(cells[0])] = {
                "expr": cells[1], "predicted_ms": float(cells[2]),
                "fastest_rank": None if cells[7] == "-" else int(cells[7]),
                "chosen_over_fastest": None if cells[8] == "-" else float(cells[8])}
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", choices=["first-use", "calibrated"], default="first-use")
    args = ap.parse_args()
    machine_file = DATA / f"machine-{args.params}.json"
    wanted = {**AVX2_ENV, "TEIR_PLAN_MACHINE": str(machine_file),
              "TEIR_PLAN_SELF_CORRECT": "0", "TEIR_PLAN_QUIET": "1"}
    if any(os.environ.get(k) != v for k, v in wanted.items()):
        # numba reads the CPU name when it is imported: a process of its own.
        env = {**os.environ, **wanted}
        sys.exit(subprocess.call([sys.executable, "-m", "benchmarks.plan_as", *sys.argv[1:]],
                                 env=env))

    import numpy as np

    import teir_plan as tp
    from benchmarks.common import machine, machine_md, md_table, write_results
    from benchmarks.tccg import load_cases

    table = recorded(args.params)
    cases = load_cases()
    rows, records = [], []
    for i, row in sorted(table.items()):
        expr, ext = cases[i]
        assert expr == row["expr"], (i, expr, row["expr"])
        ops = [np.empty(tuple(ext[c] for c in s), np.float32)
               for s in expr.split("->")[0].split(",")]
        predicted = tp.plan(expr, *ops).predicted_seconds * 1e3
        was = float(row["predicted_ms"])  # type: ignore[arg-type]
        same = abs(predicted - was) <= SAME * was
        ratio = row["chosen_over_fastest"]
        good = same and ratio is not None and ratio <= WITHIN  # type: ignore[operator]
        rows.append([i, expr, was, predicted, "same" if same else "moved",
                     "-" if ratio is None else f"{ratio:.2f}",
                     "-" if ratio is None else ("yes" if good else "no")])
        records.append({"case": i, "expr": expr, "recorded_predicted_ms": was,
                        "predicted_ms": predicted, "same_choice": same,
                        "chosen_over_fastest": ratio, "within": good})
    timed = [r for r in records if r["chosen_over_fastest"] is not None]
    same = sum(1 for r in timed if r["same_choice"])
    good = sum(1 for r in timed if r["within"])
    summary = (f"{same} of {len(timed)} timed cases plan the choice timed on the Zen 3; "
               f"{good} of {len(timed)} are within {WITHIN:.2f}x of the fastest of its "
               f"top five there")
    info = machine()
    md = "\n".join([
        f"# Planning as the AMD EPYC Zen 3 ({args.params} parameters)", "",
        f"Planned on: {machine_md(info)}.", "",
        f"As: `{machine_file.relative_to(Path(__file__).parent.parent)}` with AVX2 kernels "
        "(32-byte vectors, 16 registers). The recorded columns are the Zen 3's "
        f"cost-accuracy table (`cost-accuracy-{args.params}.md` beside it).", "",
        md_table(["#", "expression", "Zen 3 predicted ms", "predicted ms now", "choice",
                  "its time / fastest of top 5 (Zen 3)", f"within {WITHIN:.2f}x"], rows),
        "", summary, ""])
    path = write_results(f"plan-as-zen3-{args.params}",
                         {"machine": info, "params": args.params, "cases": records,
                          "summary": summary}, md)
    print(md)
    print(f"written {path}")


if __name__ == "__main__":
    main()

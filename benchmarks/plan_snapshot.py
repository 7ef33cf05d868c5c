"""A snapshot of the plans teir_plan chooses, to show that a refactor changes none.

For every case of the TCCG set (``benchmarks/tccg24.txt``) and the everyday set
(``benchmarks/everyday.py``), in K and C order, on 1 and 2 threads, planned with the
fixed reference machine parameters (``TEIR_PLAN_AUTOCALIBRATE=reference``, set here
before teir_plan is imported), it records each step of the chosen plan: its kind, its
TEIR program's JSON (and its packs' and blocking's), the tile kind each program's
lowered tile runs on, and its predicted seconds.

    python -m benchmarks.plan_snapshot --write benchmarks/results/plan-snapshot.json
    python -m benchmarks.plan_snapshot --check benchmarks/results/plan-snapshot.json

``--check`` exits with status 1 and prints a unified diff when anything differs.
"""

from __future__ import annotations

import os

os.environ["TEIR_PLAN_AUTOCALIBRATE"] = "reference"

import argparse  # noqa: E402
import difflib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

import teir_plan as tp  # noqa: E402
from benchmarks.everyday import CASES as EVERYDAY  # noqa: E402
from benchmarks.tccg import load_cases  # noqa: E402
from teir_plan.executor.lower import Lowered, lower  # noqa: E402


def tile_kind(low: Lowered) -> str:
    """The name of the tile kind a lowered program's tiles run on."""
    return low.kind.name


def cases() -> list[tuple[str, str, list[tuple[int, ...]], str]]:
    """(set, expression, operand shapes, dtype) of every case."""
    out = []
    for expr, ext in load_cases():
        ins = expr.split("->")[0].split(",")
        out.append(("tccg", expr, [tuple(ext[c] for c in t) for t in ins], "float32"))
    for expr, shapes, dtype in EVERYDAY:
        out.append(("everyday", expr, [tuple(s) for s in shapes], dtype))
    return out


def _program(teir: tp.TEIR) -> dict[str, Any]:
    return {"teir": json.loads(teir.to_json(indent=None)), "tile": tile_kind(lower(teir))}


def _step(step: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"kind": type(step).__name__}
    chosen = getattr(step, "chosen", None)
    if chosen is not None:
        rec["program"] = _program(chosen.teir)
        rec["packs"] = [_program(p.copy.teir) for p in chosen.packs]
        rec["predicted"] = f"{chosen.cost.seconds:.9g}"
        blocking = getattr(step, "blocking", None)
        if blocking is not None:
            rec["blocking"] = blocking.describe()
    else:
        rec["describe"] = step.describe()
    return rec


def snapshot() -> dict[str, Any]:
    result: dict[str, Any] = {}
    for threads in (1, 2):
        tp.set_num_threads(threads)
        for which, expr, shapes, dtype in cases():
            for order in ("K", "C"):
                p = tp.plan(expr, *shapes, dtype=np.dtype(dtype), order=order)
                key = f"{which} {expr} {shapes} {dtype} order={order} threads={threads}"
                result[key] = [_step(s) for s in p.steps]
    return result


def _lines(snap: dict[str, Any]) -> list[str]:
    return json.dumps(snap, indent=1, sort_keys=True).splitlines(keepends=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the snapshot to this file")
    group.add_argument("--check", type=Path, help="compare with the snapshot in this file")
    args = ap.parse_args()
    snap = snapshot()
    if args.write:
        args.write.write_text("".join(_lines(snap)))
        print(f"{len(snap)} plans written to {args.write}")
        return
    stored = json.loads(args.check.read_text())
    if stored == snap:
        print(f"{len(snap)} plans: identical to {args.check}")
        return
    sys.stdout.writelines(difflib.unified_diff(_lines(stored), _lines(snap),
                                               str(args.check), "now"))
    sys.exit(1)


if __name__ == "__main__":
    main()

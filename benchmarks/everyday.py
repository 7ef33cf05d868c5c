"""Everyday einsums: the contractions users write outside the TCCG suite (matrix
products large and small, batched and attention-style products, matrix-vector and dot
products, elementwise products, permutations, diagonals, a three-operand chain), timed
against numpy.einsum(optimize=True), opt_einsum.contract, torch.einsum, pytblis.einsum
(TBLIS) and jax.jit of jnp.einsum (compiled before timing, waited for with
block_until_ready; benchmarks/peers.py) in the same run, each peer when installed.  Each
system is called as its users call it (no out=); the time is the best of ``--repeats``
calls after two warm-up calls.  Every system's answer is checked against numpy.einsum in
float64 on every case: tp's must agree, and a peer that raises or disagrees is left out
of that case, which the table says.  The cost model is calibrated first
(``tp.calibrate(save=False)``, as the TCCG benchmark does; ``--no-calibrate`` plans with
whatever parameters are in force).

Run: .venv/bin/python -m benchmarks.everyday [--repeats N] [--no-calibrate] [--cases 0,3]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import opt_einsum as oe

import teir_plan as tp
from benchmarks import peers
from benchmarks.common import machine, machine_md, md_table, progress, timeit, write_results

CASES: list[tuple[str, list[tuple[int, ...]], str]] = [
    ("ij,jk->ik", [(64, 64), (64, 64)], "float32"),
    ("ij,jk->ik", [(256, 256), (256, 256)], "float32"),
    ("ij,jk->ik", [(1024, 1024), (1024, 1024)], "float32"),
    ("ij,jk->ik", [(1024, 1024), (1024, 1024)], "float64"),
    ("bij,bjk->bik", [(64, 128, 128), (64, 128, 128)], "float32"),
    ("bij,bjk->bik", [(512, 32, 32), (512, 32, 32)], "float32"),
    ("bhqd,bhkd->bhqk", [(8, 12, 128, 64), (8, 12, 128, 64)], "float32"),
    ("bhqk,bhkd->bhqd", [(8, 12, 128, 128), (8, 12, 128, 64)], "float32"),
    ("ij,j->i", [(4096, 4096), (4096,)], "float32"),
    ("i,i->", [(1_000_000,), (1_000_000,)], "float32"),
    ("ij,ij->ij", [(2048, 2048), (2048, 2048)], "float32"),
    ("ijk->kji", [(256, 256, 256)], "float32"),
    ("ii->i", [(2048, 2048)], "float32"),
    ("abc,cd,de->abe", [(64, 64, 64), (64, 64), (64, 64)], "float32"),
    ("pqrs,tuqs->ptru", [(24, 24, 24, 24), (24, 24, 24, 24)], "float64"),
    ("ijk,jkl->il", [(256, 64, 64), (64, 64, 256)], "float32"),
]


def systems(expr: str, ops: list[np.ndarray]
            ) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """Each installed system's call on these operands, and the peers that could not be
    set up for them, with why."""
    out: dict[str, Callable[[], object]] = {
        "tp": lambda: tp.einsum(expr, *ops),
        "numpy": lambda: np.einsum(expr, *ops, optimize=True),
        "opt_einsum": lambda: oe.contract(expr, *ops),
    }
    try:
        import torch

        torch.set_num_threads(tp.get_num_threads())
        tops = [torch.from_numpy(o) for o in ops]
        out["torch"] = lambda: torch.einsum(expr, *tops)
    except ImportError:
        pass
    more, failed = peers.runs(expr, ops)
    return out | more, failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--cases", default="",
                    help="comma-separated case indices (0-15); results go to everyday-partial.*")
    args = ap.parse_args()
    chosen = [int(i) for i in args.cases.split(",") if i] or list(range(len(CASES)))
    if not args.no_calibrate:
        tp.calibrate(save=False)
    peers.configure(tp.get_num_threads())
    info = machine(with_peers=True)
    info["calibrated"] = not args.no_calibrate
    rng = np.random.default_rng(0)
    names = ["tp", "numpy", "opt_einsum", "torch", *peers.NAMES]
    rows = []
    records = []
    for i, (expr, shapes, dtype) in enumerate(CASES):
        # Every case's operands are drawn, so that a case has the same ones in a subset.
        ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
        if i not in chosen:
            continue
        progress(len(records), len(chosen), expr)
        ref = np.einsum(expr, *(o.astype(np.float64) for o in ops))
        got = np.asarray(tp.einsum(expr, *ops), dtype=np.float64)
        tol = 1e-3 if dtype == "float32" else 1e-9
        scale = max(1.0, float(np.max(np.abs(ref))))
        if not np.allclose(got, ref, rtol=tol, atol=tol * scale):
            raise SystemExit(f"{expr}: tp.einsum differs from numpy.einsum")
        runs, failed = systems(expr, ops)
        times = {}
        for name, fn in runs.items():
            if name != "tp":  # the check's call is the first of a peer's two warm-ups
                try:
                    res = np.asarray(fn(), dtype=np.float64)
                except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case
                    failed[name] = peers.failure(exc)
                    continue
                if not np.allclose(res, ref, rtol=tol, atol=tol * scale):
                    failed[name] = peers.wrong(res, ref)
                    continue
            times[name] = timeit(fn, args.repeats, warmup=2 if name == "tp" else 1)[0]
        best_peer = min(t for name, t in times.items() if name != "tp")
        shape_text = " ".join("x".join(map(str, s)) for s in shapes)
        rows.append([expr, shape_text, dtype,
                     *[times[n] * 1e6 if n in times else
                       peers.cell(failed[n]) if n in failed else None for n in names],
                     best_peer / times["tp"]])
        records.append({"expr": expr, "shapes": shapes, "dtype": dtype,
                        "seconds": times, "best_peer_over_tp": best_peer / times["tp"],
                        "failed": failed})
    progress(len(chosen), len(chosen), "done")
    ratios = [r["best_peer_over_tp"] for r in records]
    geo = float(np.exp(np.mean(np.log(ratios))))
    header = ["expression", "shapes", "dtype", *[f"{n} us" for n in names], "best peer / tp"]
    left_out = peers.excluded_md([(f"`{r['expr']}` {r['dtype']}", p, why) for r in records
                                  for p, why in r["failed"].items()])
    md = "\n\n".join([
        f"# Everyday einsums (best of {args.repeats}, microseconds)",
        machine_md(info),
        md_table(header, rows),
        f"- geomean best peer / tp (above 1: tp faster): {geo:.2f}\n"
        f"- cases where tp is the fastest: {sum(r >= 1.0 for r in ratios)} of {len(ratios)}"
        + ("\n" + left_out if left_out else ""),
    ]) + "\n"
    path = write_results("everyday", {"machine": info, "repeats": args.repeats,
                                      "cases": records, "geomean": geo}, md,
                         complete=len(records) == len(CASES))
    print(md)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

"""The 24 TCCG contractions in float32 (or ``--dtype complex64`` / ``complex128``):
teir_plan against numpy, opt_einsum, PyTorch, etops, TBLIS and JAX, all measured in the
same run, with each case's roofline.

Per case: GFLOP/s of tp.einsum (without out=; into a C-order out=; C order allocated
by tp; into an out= of the layout tp picks itself), numpy.einsum(optimize=True)
(called as users do, without out=), opt_einsum.contract, torch.einsum and etops
(its optimize, then TensorOperation.execute; only execute is timed), pytblis.einsum
(TBLIS) and jax.jit of jnp.einsum (compiled before timing, waited for with
block_until_ready; benchmarks/peers.py), each when installed.  Every system's answer is
checked against numpy.einsum in float64 (complex128); a peer that raises or disagrees is
left out of that case, and the table says so.  Roofline = min(GEMM rate, arithmetic
intensity x memory bandwidth), with the float32 GEMM rate from a large numpy.matmul and
the bandwidth from a large copy (the faster of numpy's and one with non-temporal stores),
both measured in this run.  Each system is timed in a block of calls, except tp's four
variants, which share one thread pool and are timed in turns (one call of each per
round), so that their ratios (out= against C order) do not depend on when the machine
was busy.  A GEMM-like case is also timed as the one GEMM it is, numpy.matmul on its own arrays
viewed as matrices (``same_gemm``): the rate BLAS reaches at the case's own m, n, k.

The cost model is calibrated first (``tp.calibrate()``, 15-20 seconds), as the
documentation asks users to do once per machine; ``--no-calibrate`` plans with the
parameters in force instead.

Complex runs count 8 real flops per complex multiply-add (the GFLOP/s are real flops),
take the GEMM rate from numpy.matmul in the same complex type (2048^3), leave out etops
(it has no complex type) and write ``tccg-<dtype>-latest.*`` beside the float32 results.

Run: .venv/bin/python -m benchmarks.tccg [--quick] [--cases 0,5,20] [--repeats N]
[--dtype complex64] [--systems tp,numpy,tblis,jax]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from numba import njit, prange

import teir_plan as tp
from benchmarks import peers
from benchmarks.common import machine, machine_md, md_table, progress, timeit, write_results

# The block copy's non-temporal line store (64-byte aligned destination).
from teir_plan.executor.intrinsics import store_line_nt  # noqa: E402

CASES_FILE = Path(__file__).with_name("tccg24.txt")


def load_cases() -> list[tuple[str, dict[str, int]]]:
    cases = []
    for line in CASES_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            expr, sizes = line.split()
            cases.append((expr, {k: int(v) for k, v in (s.split("=") for s in sizes.split(","))}))
    return cases


DTYPES = ("float32", "complex64", "complex128")
FLOAT32 = np.dtype(np.float32)


def flops_per_madd(dtype: np.dtype) -> int:
    """Real flops of one multiply-add: 2, or 8 for complex values."""
    return 8 if np.dtype(dtype).kind == "c" else 2


def random_array(rng: np.random.Generator, shape: list[int], dtype: np.dtype) -> np.ndarray:
    """Uniform [0, 1) values; complex ones in both parts."""
    if np.dtype(dtype).kind == "c":
        return (rng.random(shape) + 1j * rng.random(shape)).astype(dtype)
    return rng.random(shape, dtype=dtype)


def gemm_rate(repeats: int, dtype: np.dtype = FLOAT32) -> float:
    n = 4096 if np.dtype(dtype).kind == "f" else 2048
    a = random_array(np.random.default_rng(0), [n, n], dtype)
    t, _ = timeit(lambda: a @ a, repeats)
    return flops_per_madd(dtype) * n**3 / t


def bandwidth(repeats: int) -> float:
    """Bytes per second a large copy moves (read plus write), the faster of numpy's copy
    and one that writes with non-temporal stores on every core: numpy's stores read each
    line for ownership first, which a contraction writing its result with non-temporal
    stores does not pay, so numpy's rate alone would be a roofline some cases exceed
    (25 against 36 GB/s on this project's machine)."""
    a = _line_aligned(64 * 1024 * 1024)  # 512 MiB of float64
    a[:] = np.random.default_rng(0).random(a.size)
    b = _line_aligned(a.size)
    t_np, _ = timeit(lambda: np.copyto(b, a), repeats)
    lanes = 8
    t_nt, _ = timeit(lambda: _copy_nt(b, a, a.size // lanes, lanes), repeats)
    if not np.array_equal(a, b):
        raise AssertionError("the non-temporal copy did not copy")
    return 2 * a.nbytes / min(t_np, t_nt)


def _line_aligned(size: int) -> np.ndarray:
    raw = np.empty(size + 8)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip: skip + size]


@njit(parallel=True, nogil=True, cache=True)
def _copy_nt(dst, src, lines, lanes):  # type: ignore[no-untyped-def]
    for i in prange(lines):
        store_line_nt(dst, i * lanes, src, i * lanes)


def etops_runner(expr: str, a: np.ndarray, b: np.ndarray, out: np.ndarray):  # type: ignore[no-untyped-def]
    """etops as its users call it: describe, optimize, then execute."""
    import etops

    from teir_plan.frontend.contraction import describe, layout_of

    ins, out_idx = expr.split("->")
    t0, t1 = ins.split(",")
    ext = dict(zip(t0, a.shape)) | dict(zip(t1, b.shape))
    c = describe(layout_of(t0, a, ext), layout_of(t1, b, ext), layout_of(out_idx, out, ext))
    dim = {"c": etops.dim.c, "m": etops.dim.m, "n": etops.dim.n, "k": etops.dim.k}
    cfg = etops.TensorOperationConfig(
        backend="tpp", data_type=etops.float32, prim_first=etops.prim.zero,
        prim_main=etops.prim.gemm, prim_last=etops.prim.none,
        dim_types=tuple(dim[str(x.role)] for x in c.axes),
        exec_types=tuple(etops.exec.seq for _ in c.axes),
        dim_sizes=tuple(x.extent for x in c.axes),
        strides=(tuple(tuple(x.strides[j] for x in c.axes) for j in range(3)),),
    )
    op = etops.TensorOperation(etops.optimize(cfg))
    return lambda: op.execute(a, b, out)


def timeit_in_turns(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best seconds of each function over ``repeats`` rounds, one call of each per round
    (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: min(ts) for name, ts in times.items()}


def systems(expr: str, a: np.ndarray, b: np.ndarray, wanted: set[str]
            ) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """Each system's call on this case (those in ``wanted``, or all), and the peers that
    could not be set up for it, with why."""
    out_idx = expr.split("->")[1]
    ext = dict(zip(expr.split("->")[0].split(",")[0], a.shape))
    ext |= dict(zip(expr.split("->")[0].split(",")[1], b.shape))
    out = np.empty([ext[c] for c in out_idx], a.dtype)
    own = tp.plan(expr, a, b).empty_out()
    runs = {
        "tp": lambda: tp.einsum(expr, a, b),
        "tp(out=)": lambda: tp.einsum(expr, a, b, out=out),
        # The same C-order result allocated by tp: what tp(out=) is compared with (without
        # out=, tp may return a permuted view, a layout out= does not allow).
        "tp(C)": lambda: tp.einsum(expr, a, b, order="C"),
        # out= in the layout tp picks for itself (plan.empty_out()): what out= costs
        # when the layout is the same as without it.
        "tp(out=own)": lambda: tp.einsum(expr, a, b, out=own),
        "numpy": lambda: np.einsum(expr, a, b, optimize=True),
    }
    failed: dict[str, str] = {}
    try:
        import opt_einsum

        runs["opt_einsum"] = lambda: opt_einsum.contract(expr, a, b)
    except ImportError:
        pass
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        runs["torch"] = lambda: torch.einsum(expr, ta, tb)
    except ImportError:
        pass
    try:
        if a.dtype != np.float32:
            raise ImportError  # etops has float32 and float64 only
        eout = np.empty_like(out)
        runs["etops"] = etops_runner(expr, a, b, eout)
        runs["etops"].out = eout  # type: ignore[attr-defined]
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case
        failed["etops"] = peers.failure(exc)
        print(f"\netops failed on {expr}: {exc}", file=sys.stderr)

    def keep(name: str) -> bool:
        return name in wanted or not wanted

    more, why = peers.runs(expr, [a, b], names=[n for n in peers.NAMES if keep(n)])
    runs |= more
    failed |= why
    return ({k: v for k, v in runs.items() if keep(k)},
            {k: v for k, v in failed.items() if keep(k)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repeats instead of 7")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--cases", default="", help="comma-separated case indices (0-23)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--systems", default="", help="comma-separated subset of systems")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="plan with the cost model's parameters in force instead of running "
                         "tp.calibrate() first (as a user does once per machine)")
    ap.add_argument("--dtype", choices=DTYPES, default="float32",
                    help="the operands' type (complex: 8 real flops per multiply-add)")
    ap.add_argument("--once-over", type=float, default=20.0,
                    help="a system whose second call takes longer is timed by that call "
                         "alone (the first may include compiling)")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 7)
    dtype = np.dtype(args.dtype)
    if args.threads:
        tp.set_num_threads(args.threads)
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            pass
    try:
        import torch

        torch.set_num_threads(tp.get_num_threads())
    except ImportError:
        pass
    peers.configure(tp.get_num_threads())
    cases = load_cases()
    chosen = [int(i) for i in args.cases.split(",") if i] or list(range(len(cases)))
    wanted = {s for s in args.systems.split(",") if s}
    if not args.no_calibrate:
        tp.calibrate(save=False)
    info = machine(with_peers=True)
    info["cost model"] = "calibrated in this run" if tp.machine_params().calibrated else (
        "default parameters")
    peak = gemm_rate(repeats, dtype)
    bw = bandwidth(repeats)
    print(f"{dtype} GEMM rate {peak / 1e9:.1f} GFLOP/s, copy bandwidth {bw / 1e9:.1f} GB/s")
    records: list = []
    once: list[str] = []
    names: list[str] = []
    rng = np.random.default_rng(0)
    for n, i in enumerate(chosen):
        expr, ext = cases[i]
        progress(n, len(chosen), expr)
        t0, t1 = expr.split("->")[0].split(",")
        a = random_array(rng, [ext[c] for c in t0], dtype)
        b = random_array(rng, [ext[c] for c in t1], dtype)
        flops = flops_per_madd(dtype) * math.prod(ext.values())
        out_elems = math.prod(ext[c] for c in expr.split("->")[1])
        bytes_min = dtype.itemsize * (a.size + b.size + out_elems)
        # The float64 (complex128) reference through BLAS: numpy's C loops
        # (optimize=False) would take minutes on the 7248^3 case.
        wide = np.complex128 if dtype.kind == "c" else np.float64
        ref = np.einsum(expr, a.astype(wide), b.astype(wide), optimize=True)
        runs, failed = systems(expr, a, b, wanted)
        measured: dict[str, float | None] = dict.fromkeys(runs)  # the columns' order
        in_turns: dict[str, Callable[[], object]] = {}  # tp's variants, timed in turns
        for name, fn in runs.items():
            if not name.startswith("tp") and in_turns:
                # tp's variants (one thread pool, so no runtime spins on another's
                # cores; systems() lists them first) are timed in turns, before any
                # peer's runtime has run: a slow spell of this shared machine then falls
                # on all of them, not on one (case 3's out= read 79 GFLOP/s in a run
                # whose C-order column read 140; in the run before, 135 and 138).
                for turn_name, best in timeit_in_turns(in_turns, repeats).items():
                    measured[turn_name] = flops / best / 1e9
                in_turns = {}
            t_first = time.perf_counter()
            try:
                res = fn()
            except Exception as exc:
                if name.startswith("tp"):
                    raise
                failed[name] = peers.failure(exc)  # a peer that cannot run this case
                print(f"\n{name} failed on {expr}: {failed[name]}", file=sys.stderr)
                continue
            t_first = time.perf_counter() - t_first
            res = getattr(fn, "out", res)
            if not _matches(res, ref):
                failed[name] = peers.wrong(res, ref)
                print(f"\n{name} gave a wrong answer on {expr}", file=sys.stderr)
                continue
            # A first call slower than 2 s may be compiling (teir_plan's kernels on a
            # fresh numba cache took 27 s, counted as its time until the rule below), so
            # a system's speed is judged on its second call: under 2 s it is timed
            # ``repeats`` times; slower, it is timed once more and the faster kept;
            # slower than --once-over seconds, the second call's time is kept.
            t_next = t_first
            if t_first >= 2.0:
                t_next, _ = timeit(fn, 1, warmup=0)
            if t_next >= args.once_over:
                best = t_next
                once.append(f"{name} on {expr} ({t_next:.0f} s)")
            elif t_next >= 2.0:
                best = min(t_next, timeit(fn, 1, warmup=0)[0])
            elif name.startswith("tp"):
                in_turns[name] = fn
                continue
            else:
                best, _ = timeit(fn, repeats, warmup=0 if t_first >= 2.0 else 1)
            measured[name] = flops / best / 1e9
        for turn_name, best in timeit_in_turns(in_turns, repeats).items():  # no peers ran
            measured[turn_name] = flops / best / 1e9
        rates = {k: v for k, v in measured.items() if v is not None}  # wrong answers dropped
        names = sorted(set(names) | set(rates), key=lambda s: list(rates).index(s)
                       if s in rates else 99)
        others = {k: v for k, v in rates.items() if not k.startswith("tp")}
        best_peer = max(others.values()) if others else float("nan")
        tp_rate = rates.get("tp", float("nan"))
        gemm_like = _gemm_like(expr)
        record = {"case": i, "expr": expr, "sizes": ext, "gflops": rates, "flops": flops,
                  "bytes_min": bytes_min, "tp_vs_best_peer": tp_rate / best_peer,
                  "best_peer_gflops": best_peer, "gemm_like": gemm_like,
                  "failed": failed}
        if gemm_like:
            # Not a peer: the GEMM a user could call by hand for this case, timed like one.
            gout = np.empty([ext[c] for c in expr.split("->")[1]], dtype)
            gemm, mnk = same_gemm(expr, a, b, gout)
            gemm()
            if _matches(gout, ref):
                best, _ = timeit(gemm, repeats)
                record["same_gemm"] = {"mnk": mnk, "gflops": flops / best / 1e9,
                                       "in_cache_gflops": in_cache_gemm(*mnk, repeats,
                                                                        dtype)}
            else:
                print(f"\nnumpy.matmul on the matrix views of {expr} gave a wrong answer",
                      file=sys.stderr)
        records.append(record)
        # Partial results survive an interrupt.
        _write(info, peak, bw, repeats, records, once, dtype=dtype)
    progress(len(chosen), len(chosen), "done")
    # The machine is shared: a neighbour's load while the rates were measured would lower
    # every case's roofline, so they are measured again at the end and the higher kept.
    peak = max(peak, gemm_rate(repeats, dtype))
    bw = max(bw, bandwidth(repeats))
    print(_write(info, peak, bw, repeats, records, once, final=True, dtype=dtype))


def _write(info: dict, peak: float, bw: float, repeats: int, records: list,
           once: list[str], final: bool = False,
           dtype: np.dtype = FLOAT32) -> str:
    def geo(xs: list[float]) -> float:
        xs = [x for x in xs if x and x == x]
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")

    # The peers' columns: those of every run, then TBLIS and JAX where this run had them
    # (results files written before they were added have none).
    shown = ["numpy", "opt_einsum", "torch", "etops"] + [
        p for p in peers.NAMES if any(p in r["gflops"] or p in r.get("failed", {})
                                      for r in records)]
    rows = []
    for r in records:
        # Roofline: the GEMM rate, or the bytes each tensor must move once at the copy
        # bandwidth (the faster of numpy's and a non-temporal one), whichever is lower.
        roof = min(peak, r["flops"] / r["bytes_min"] * bw)
        r["roofline_gflops"] = roof / 1e9
        rates = r["gflops"]
        failed = r.get("failed", {})
        rows.append([r["case"], r["expr"] + (" *" if r["gemm_like"] else ""),
                     *[rates.get(s, peers.cell(failed[s]) if s in failed else None)
                       for s in ("tp", "tp(out=)", "tp(C)", "tp(out=own)", *shown)],
                     r["tp_vs_best_peer"], 100 * rates.get("tp", float("nan")) * 1e9 / roof,
                     100 * r["best_peer_gflops"] * 1e9 / roof])

    header = ["#", "expression (* GEMM-like)", "tp", "tp(out=)", "tp(C)", "tp(out=own)",
              *shown, "tp/best peer", "tp %roof", "best peer %roof"]

    def lowest(xs: list[float]) -> float:
        return min((x for x in xs if x == x), default=float("nan"))

    def ratio(r: dict, num: str, den: str) -> float:
        g = r["gflops"]
        return g[num] / g[den] if num in g and den in g else float("nan")

    same = [r["gflops"].get("tp", 0) / r["same_gemm"]["gflops"] for r in records
            if "same_gemm" in r]
    summary = {
        "geomean tp/best peer": geo([r["tp_vs_best_peer"] for r in records]),
        "geomean tp %roofline": geo([r[-2] for r in rows]),
        "geomean best peer %roofline": geo([r[-1] for r in rows]),
        "GEMM-like cases: geomean tp/GEMM rate": geo(
            [r["gflops"].get("tp", 0) * 1e9 / peak for r in records if r["gemm_like"]]),
        "GEMM-like cases: lowest tp/GEMM rate": lowest(
            [r["gflops"].get("tp", 0) * 1e9 / peak for r in records if r["gemm_like"]]),
        "GEMM-like cases: geomean tp/the same GEMM through numpy.matmul": geo(same),
        "GEMM-like cases: lowest tp/the same GEMM through numpy.matmul": lowest(same),
        "geomean tp(out=)/tp(C) (the same C-order result, into out= or allocated)": geo(
            [ratio(r, "tp(out=)", "tp(C)") for r in records]),
        "lowest tp(out=)/tp(C)": lowest([ratio(r, "tp(out=)", "tp(C)") for r in records]),
        "geomean tp(out=)/tp (C order against the layout tp chooses)": geo(
            [ratio(r, "tp(out=)", "tp") for r in records]),
        "geomean tp(out=own)/tp (out= in the layout tp chooses, against no out=)": geo(
            [ratio(r, "tp(out=own)", "tp") for r in records]),
        "lowest tp(out=own)/tp": lowest([ratio(r, "tp(out=own)", "tp") for r in records]),
        "geomean tp(out=)/best peer": geo(
            [r["gflops"].get("tp(out=)", float("nan")) / r["best_peer_gflops"]
             for r in records]),
    }
    for sysname in shown:
        summary[f"geomean {sysname} %roofline"] = geo(
            [100 * r["gflops"][sysname] / r["roofline_gflops"] for r in records
             if sysname in r["gflops"]])
    table = md_table(header, rows)
    gemm_rows = [[r["case"], r["expr"], *r["same_gemm"]["mnk"], r["gflops"].get("tp"),
                  r["same_gemm"]["gflops"], r["same_gemm"]["in_cache_gflops"],
                  r["gflops"].get("tp", 0) / r["same_gemm"]["gflops"],
                  r["gflops"].get("tp", 0) * 1e9 / peak]
                 for r in records if "same_gemm" in r]
    if gemm_rows:
        table += (
            "\n\nGEMM-like cases against the same GEMM: numpy.matmul (BLAS) on the case's "
            "own arrays viewed as matrices, no copy, with the case's m, n, k; and "
            f"numpy.matmul at the case's m and k with n cut to {IN_CACHE_N}, repeated on "
            "arrays in cache (the shape's arithmetic alone; only where they fit "
            f"{IN_CACHE_BYTES >> 20} MiB)\n\n"
            + md_table(["#", "expression", "m", "n", "k", "tp", "same GEMM (numpy.matmul)",
                        "same m, k in cache", "tp/same GEMM", "tp/GEMM rate"], gemm_rows))
    summ = "\n".join(f"- {k}: {v:.2f}" for k, v in summary.items())
    left_out = peers.excluded_md([(f"#{r['case']}", p, why) for r in records
                                  for p, why in r.get("failed", {}).items()])
    if left_out:
        summ += "\n" + left_out
    if once:
        summ += "\n- timed by their second call alone (slower than --once-over): " + "; ".join(once)
    partial = "" if final else f" (partial: {len(records)} cases so far)"
    side = 4096 if dtype.kind == "f" else 2048
    md = (f"# TCCG benchmark{partial} ({dtype}, GFLOP/s, best of {repeats})\n\n"
          f"{machine_md(info)}\n\n"
          f"{dtype} GEMM rate (numpy.matmul {side}^3): {peak / 1e9:.1f} GFLOP/s; "
          f"copy bandwidth: {bw / 1e9:.1f} GB/s (the faster of numpy's copy and one with "
          f"non-temporal stores; each the higher of a measurement before "
          f"the cases and one after)\n\n{table}\n\n{summ}\n")
    name = "tccg" if dtype == np.float32 else f"tccg-{dtype}"
    path = write_results(name, {"dtype": str(dtype), "machine": info, "gemm_gflops": peak / 1e9,
                                  "bandwidth_gbs": bw / 1e9, "cases": records,
                                  "summary": summary, "timed_once": once,
                                  "complete": final},
                         md, complete=final and len(records) == len(load_cases()))
    return f"{md}\nresults: {path}"


def _matches(res: np.ndarray, ref: np.ndarray) -> bool:
    """Whether a float32 (complex64) result agrees with the float64 (complex128)
    reference."""
    return bool(np.allclose(res, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max()))


def _roles(expr: str) -> dict[str, list[str]]:
    ins, out = expr.split("->")
    a, b = ins.split(",")
    return {"m": [c for c in out if c in a], "n": [c for c in out if c in b],
            "k": [c for c in a if c in b and c not in out]}


def same_gemm(expr: str, a: np.ndarray, b: np.ndarray, out: np.ndarray
              ) -> tuple[Callable[[], object], tuple[int, int, int]]:
    """numpy.matmul on a GEMM-like case's own arrays viewed as matrices (reshapes of
    C-contiguous arrays and their transposes, no copy): the same m x k by k x n GEMM
    through BLAS, written into ``out``.  Its rate is the GEMM rate of the case's own
    shape, against which a GEMM-like case can be judged: a large square GEMM's rate is
    not reachable when k is short and the operands stream from memory."""
    ins, o = expr.split("->")
    ta, tb = ins.split(",")
    r = _roles(expr)
    ext = dict(zip(ta, a.shape)) | dict(zip(tb, b.shape))
    m, n, k = (math.prod(ext[c] for c in r[x]) for x in ("m", "n", "k"))
    a2 = a.reshape(m, k) if ta[0] in r["m"] else a.reshape(k, m).T
    b2 = b.reshape(k, n) if tb[0] in r["k"] else b.reshape(n, k).T
    if o[0] in r["m"]:
        o2 = out.reshape(m, n)
        return (lambda: np.matmul(a2, b2, out=o2)), (m, n, k)
    o2 = out.reshape(n, m)
    return (lambda: np.matmul(b2.T, a2.T, out=o2)), (m, n, k)


IN_CACHE_BYTES = 1 << 20  # the operands and result of an in-cache GEMM, at most
IN_CACHE_N = 1024


def in_cache_gemm(m: int, n: int, k: int, repeats: int,
                  dtype: np.dtype = FLOAT32) -> float | None:
    """GFLOP/s of numpy.matmul at m and k with n cut to IN_CACHE_N columns, called
    repeatedly on the same arrays, so that everything is in cache: the rate of the
    shape's arithmetic alone.  None when the cut GEMM does not fit IN_CACHE_BYTES."""
    n = min(n, IN_CACHE_N)
    if dtype.itemsize * (m * k + k * n + m * n) > IN_CACHE_BYTES:
        return None
    rng = np.random.default_rng(1)
    a = random_array(rng, [m, k], dtype)
    b = random_array(rng, [k, n], dtype)
    c = np.empty((m, n), dtype)
    fl = flops_per_madd(dtype) // 2
    calls = max(1, int(20e-3 / max(2 * fl * m * n * k / 200e9, 1e-6)))  # about 20 ms

    def block() -> None:
        for _ in range(calls):
            np.matmul(a, b, out=c)

    best, _ = timeit(block, repeats)
    return flops_per_madd(dtype) * m * n * k * calls / best / 1e9


def _gemm_like(expr: str) -> bool:
    """One GEMM covers the contraction once axes that are adjacent in every operand fuse:
    no C index and each role's indices appear contiguously, in one order, everywhere."""
    ins, out = expr.split("->")
    a, b = ins.split(",")
    roles = _roles(expr)
    if any(c in a and c in b for c in out):
        return False

    def contiguous(term: str, idx: list[str]) -> bool:
        pos = [term.index(c) for c in idx]
        return not pos or pos == list(range(min(pos), min(pos) + len(pos)))

    def same_order(idx: list[str], *terms: str) -> bool:
        orders = [[c for c in t if c in idx] for t in terms]
        return all(o == orders[0] for o in orders)

    return (contiguous(a, roles["m"]) and contiguous(out, roles["m"])
            and contiguous(b, roles["n"]) and contiguous(out, roles["n"])
            and contiguous(a, roles["k"]) and contiguous(b, roles["k"])
            and same_order(roles["m"], a, out) and same_order(roles["n"], b, out)
            and same_order(roles["k"], a, b))


if __name__ == "__main__":
    main()

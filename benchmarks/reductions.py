"""Reductions (issue 36): one-operand sums and matrix-vector products with a long summed
axis, memory-bound, and contractions with a short output over a long K (Gram matrices,
a weight gradient: parallel K), and mid-sized sums of operands that stay in the caches
from call to call, against numpy.einsum(optimize=True), numpy's own sum / matmul and
torch (einsum, sum or matmul: its fastest), with the machine's read bandwidth measured
in the same run.

The read bandwidth is the best rate of a plain read of a 128 MiB buffer: numpy's
add.reduce (one thread), a numba prange sum or torch.sum (tp's thread count), whichever
is fastest; the numba read is also timed among each case's systems in every round, and
``% of read, paired`` is the median over rounds of tp's rate over that read's.
Each system is timed best of ``--repeats`` back to back, in ``--rounds`` rounds that
take turns over the systems (a round of every system, then the next: a busy spell on a
shared machine slows a round, not one system), the best of all rounds kept; the
``paired`` column is the median over rounds of each round's best peer over tp, the
ratio to read where the host's memory bandwidth moves within seconds.  Each system's
timings start after a pause, so that no system runs beside the spinning threads of the
one before it; torch, in a process of its own, is timed on each case within its round,
in an order that turns from round to round.

Run: .venv/bin/python -m benchmarks.reductions [--repeats N] [--rounds R] [--dtype D]
[--threads T] [--no-calibrate] [--cases sums|contractions|mid|all] [--only TEXT]
(tp plans with the parameters of a full ``tp.calibrate()`` unless ``--no-calibrate``:
then with what the library uses out of the box, its first-use measurement)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit, prange

import teir_plan as tp
from benchmarks.common import (
    PAUSE_SECONDS,
    machine,
    machine_md,
    md_table,
    timeit,
    write_results,
)

MiB = 1 << 20

# (subscripts, shapes, numpy's own call, torch's own call); a None call: none fits.
CASES: list[tuple[str, list[tuple[int, ...]], Callable | None, Callable | None]] = [
    ("ij->j", [(100_000, 300)], lambda x: x.sum(0), lambda x: x.sum(0)),
    ("ij->i", [(100_000, 300)], lambda x: x.sum(1), lambda x: x.sum(1)),
    ("ijk->k", [(256, 256, 256)], lambda x: x.sum((0, 1)), lambda x: x.sum((0, 1))),
    ("ij->", [(100_000, 300)], lambda x: x.sum(), lambda x: x.sum()),
    ("ki,k->i", [(3_000_000, 24), (3_000_000,)], lambda x, v: v @ x, lambda x, v: v @ x),
    ("ik,k->i", [(24, 3_000_000), (3_000_000,)], lambda x, v: x @ v, lambda x, v: x @ v),
    # Weighted rows of 256 bytes (float32): the rows kernel, prefetched, not ?gemv.
    ("ki,k->i", [(1_125_000, 64), (1_125_000,)], lambda x, v: v @ x, lambda x, v: v @ x),
    # A few channels summed, or mixed by weights, along a middle axis (rows of 24).
    ("bkd->bd", [(1_000_000, 4, 24)], lambda x: x.sum(1), lambda x: x.sum(1)),
    ("bkd,k->bd", [(1_000_000, 4, 24), (4,)], lambda x, w: (x * w[:, None]).sum(1),
     lambda x, w: (x * w[:, None]).sum(1)),
]
# Short outputs over a long K: Gram matrices and a weight gradient (parallel K).
CONTRACTIONS: list[tuple[str, list[tuple[int, ...]], Callable | None, Callable | None]] = [
    ("ki,kj->ij", [(2_000_000, 32), (2_000_000, 32)], lambda a, b: a.T @ b,
     lambda a, b: a.T @ b),
    ("ki,kj->ij", [(500_000, 64), (500_000, 64)], lambda a, b: a.T @ b, lambda a, b: a.T @ b),
    ("ki,kj->ij", [(100_000, 256), (100_000, 256)], lambda a, b: a.T @ b,
     lambda a, b: a.T @ b),
    ("bi,bj->ij", [(1_000_000, 64), (1_000_000, 64)], lambda a, b: a.T @ b,
     lambda a, b: a.T @ b),
]
# Operands of 1-16 MiB summed again and again, which stay in the caches between calls
# (an iterative method's matrix-vector products): the kernels' own speed, ?gemv from the
# caches, each worker's own chunks and the choice of one thread over a split.
MID: list[tuple[str, list[tuple[int, ...]], Callable | None, Callable | None]] = [
    ("ij->", [(1000, 300)], lambda x: x.sum(), lambda x: x.sum()),
    ("ij->i", [(3000, 300)], lambda x: x.sum(1), lambda x: x.sum(1)),
    ("ij->j", [(3000, 300)], lambda x: x.sum(0), lambda x: x.sum(0)),
    ("ki,k->i", [(4000, 64), (4000,)], lambda x, v: v @ x, lambda x, v: v @ x),
    ("ki,k->i", [(64000, 64), (64000,)], lambda x, v: v @ x, lambda x, v: v @ x),
    ("ki,k->i", [(32000, 128), (32000,)], lambda x, v: v @ x, lambda x, v: v @ x),
]
SECTIONS = {"sums": CASES, "contractions": CONTRACTIONS, "mid": MID,
            "all": CASES + CONTRACTIONS + MID}


def selected(section: str, only: str | None) -> list:
    """The section's cases whose subscripts and shapes, as in :func:`case_id` without its
    backquotes ("ij->i 100000x300"), contain ``only`` (all if None)."""
    return [c for c in SECTIONS[section]
            if only is None or only in case_id(c[0], c[1]).replace("`", "")]


def case_id(sub: str, shapes: list[tuple[int, ...]]) -> str:
    """A case's name: its subscripts and shapes (a subscripts string repeats)."""
    return f"`{sub}` {' '.join('x'.join(map(str, sh)) for sh in shapes)}"


def flops(sub: str, shapes: list[tuple[int, ...]]) -> int:
    """Multiply-adds x 2 over every index (a sum's additions count once each)."""
    extent: dict[str, int] = {}
    for term, shape in zip(sub.split("->")[0].split(","), shapes):
        extent.update(zip(term, shape))
    total = 1
    for n in extent.values():
        total *= n
    return (2 if "," in sub else 1) * total


@njit(parallel=True, fastmath={"reassoc"})
def _parallel_read(x):  # type: ignore[no-untyped-def]
    acc = x.dtype.type(0)
    for i in prange(x.size):
        acc += x[i]
    return acc


def read_bandwidth(dtype: str, repeats: int) -> dict[str, float]:
    """Bytes per second of plain reads of 128 MiB: numpy's add.reduce (one thread) and a
    numba prange sum on tp's threads (the same threading layer and thread count)."""
    x = np.ones(128 * MiB // np.dtype(dtype).itemsize, dtype)
    numba.set_num_threads(tp.get_num_threads())
    return {"numpy.add.reduce": x.nbytes / timeit(lambda: np.add.reduce(x), repeats)[0],
            "numba prange sum": x.nbytes / timeit(lambda: _parallel_read(x), repeats)[0]}


def gemm_peak(dtype: str, repeats: int) -> float:
    """FLOP/s of numpy's matmul on 2048^3 on all its BLAS threads: what the machine's
    best GEMM reaches in this run.  A compute-bound case whose best peer is above
    two thirds of it cannot be run 1.5x faster than that peer on this machine."""
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2048, 2048)).astype(dtype) for _ in range(2))
    return 2 * 2048**3 / timeit(lambda: a @ b, repeats)[0]


def operands(shapes: list[tuple[int, ...]], dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def systems(sub: str, ops: list[np.ndarray], own: Callable | None
            ) -> dict[str, Callable[[], object]]:
    plan = tp.plan(sub, *ops)
    out: dict[str, Callable[[], object]] = {
        "tp": lambda: plan(*ops),
        "numpy.einsum": lambda: np.einsum(sub, *ops, optimize=True),
    }
    if own is not None:
        out["numpy own"] = lambda: own(*ops)
    return out


class TorchWorker:
    """torch in a process of its own (its OpenMP threads spin after each call, on the
    cores tp's threads need, and slowed tp 3-8x when both ran in one process), asked for
    one case at a time so that its timings lie beside tp's: on a shared host a case
    timed minutes apart from the others compares two different machines."""

    def __init__(self, dtype: str, repeats: int, threads: int, section: str,
                 only: str | None) -> None:
        cmd = [sys.executable, "-m", "benchmarks.reductions", "--torch-worker",
               "--dtype", dtype, "--repeats", str(repeats), "--threads", str(threads),
               "--cases", section, *(["--only", only] if only is not None else [])]
        self.proc: subprocess.Popen | None = None
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         text=True)
        except OSError:
            return
        if self.ask("ready") is None:
            self.close()

    def ask(self, what: str) -> float | None:
        """Seconds for ``what`` (a case's index, or "read": bytes per second of a read
        of 128 MiB); None without torch."""
        if self.proc is None or self.proc.stdin is None or self.proc.stdout is None:
            return None
        try:
            self.proc.stdin.write(what + "\n")
            self.proc.stdin.flush()
            reply = json.loads(self.proc.stdout.readline() or "null")
        except (OSError, ValueError):  # the worker died, or wrote something else
            reply = None
        if reply is None:
            self.close()  # no torch, or no worker: the table goes on without torch
            return None
        return float(reply)

    def close(self) -> None:
        if self.proc is not None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait()
            self.proc = None


def torch_worker(dtype: str, repeats: int, threads: int, section: str,
                 only: str | None) -> None:
    """Answer TorchWorker's questions, a JSON line each: "ready" (1, or null without
    torch), "read" (bytes per second of torch.sum over 128 MiB), a case's index (its
    best time: torch.einsum or torch's own call), each after a pause (see main)."""
    try:
        import torch
    except ImportError:
        print("null", flush=True)
        return
    torch.set_num_threads(threads)
    x = torch.ones(128 * MiB // np.dtype(dtype).itemsize, dtype=getattr(torch, dtype))
    held: tuple[int, list] = (-1, [])  # the last case's operands (one case's at a time)
    # Each case's call: torch.einsum or torch's own, whichever a short trial found the
    # faster, so that torch is timed ``repeats`` times a round like every other system
    # (the best of both calls' runs would be a best of twice as many runs).
    chosen: dict[int, int] = {}  # case -> index into its calls
    for line in sys.stdin:
        what = line.strip()
        if what == "ready":
            print(1, flush=True)
            continue
        time.sleep(PAUSE_SECONDS)
        if what == "read":
            print(x.numel() * x.element_size() / timeit(lambda: x.sum(), repeats)[0],
                  flush=True)
            continue
        i = int(what)
        sub, shapes, _, own = selected(section, only)[i]
        if held[0] != i:
            held = (-1, [])
            held = (i, [torch.from_numpy(o) for o in operands(shapes, dtype)])
        tops = held[1]
        calls = [lambda sub=sub, tops=tops: torch.einsum(sub, *tops)]
        if own is not None:
            calls.append(lambda own=own, tops=tops: own(*tops))
        if i not in chosen:
            chosen[i] = min(range(len(calls)), key=lambda c: timeit(calls[c], 3)[0])
            time.sleep(PAUSE_SECONDS)
        print(timeit(calls[chosen[i]], repeats)[0], flush=True)


def paired_ratio(rounds: list[dict[str, float]]) -> float:
    """The median over rounds of (the best peer's time in the round) / (tp's in it).
    Best-of-all-rounds ratios compare each system's luckiest moment, and on a host
    whose memory bandwidth moves by up to 2x within seconds, those moments differ;
    within a round the systems run seconds apart."""
    ratios = [min(t for k, t in times.items() if k != "tp") / times["tp"]
              for times in rounds if len(times) > 1]
    return float(np.median(ratios))


def lscpu() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "lscpu unavailable"
    keep = ("Model name", "CPU(s)", "L2 cache", "L3 cache")
    lines = [" ".join(ln.split()) for ln in text.splitlines()
             if ln.split(":")[0].strip() in keep]
    flags = next((ln for ln in text.splitlines() if ln.startswith("Flags")), "")
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl") if f" {f}" in flags]
    return "; ".join(lines + [f"ISA: {' '.join(isa)}"])


def _ms(seconds: float | None) -> str | None:
    """Milliseconds to three significant digits (the mid-sized cases take microseconds)."""
    return None if seconds is None else f"{seconds * 1e3:.3g}"


def render(saved: dict) -> str:
    """The results' markdown, from what main() saves (``--render`` reads it back)."""
    results, bw, load = saved["results"], saved["read_bandwidth"], saved["load"]
    peak = saved.get("gemm_peak", 0.0)  # (results saved before it was measured: none)
    read = max(bw.values())
    header = ["case", "MiB read", "MiB written", "tp ms", "numpy.einsum ms", "numpy own ms",
              "torch ms",
              "best peer / tp", "paired", "tp GB/s", "% of best read", "% of read, paired",
              "tp GFLOP/s", "best peer, % of GEMM peak", "parallel K",
              "predicted ms", "measured / predicted"]
    rows = []
    for r in results:
        s = r["seconds"]
        peer = min(v for k, v in s.items() if k != "tp")
        # Memory traffic: the operands read once and the result written once (a
        # result as large as bkd->bd's, 92 MiB beside 366 read, is a fifth of it).
        written = r.get("out_MiB", 0.0)  # (results saved before it was recorded: 0)
        rate = (r["MiB"] + written) * MiB / s["tp"]
        rows.append([case_id(r["case"], r["shapes"]),
                     f"{r['MiB']:.0f}", f"{written:.2g}", _ms(s["tp"]), _ms(s["numpy.einsum"]),
                     _ms(s.get("numpy own")), _ms(s.get("torch")), peer / s["tp"],
                     r["paired"], rate / 1e9, 100 * rate / read, 100 * r["read_share"],
                     r["flops"] / s["tp"] / 1e9,
                     f"{100 * r['flops'] / peer / peak:.0f}" if peak else None,
                     {True: "yes", False: "no", None: "reduction kernel"}[r["parallel_k"]],
                     _ms(r["predicted"]), s["tp"] / r["predicted"]])
    table = md_table(header, rows)
    peak_note = (f"GEMM peak: numpy's matmul on 2048^3 (all BLAS threads), the best of "
                 f"the run: {peak / 1e9:.0f} GFLOP/s; where the best peer runs above 67% "
                 f"of it, 1.5x that peer would be above the machine's peak. ") if peak else ""
    rates = ", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in bw.items())
    return "\n".join([
        "# Reductions", "", machine_md(saved["machine"]), "", f"lscpu: {saved['lscpu']}", "",
        f"dtype {saved['dtype']}, {saved['threads']} threads; best of {saved['repeats']} "
        f"runs x {saved['rounds']} rounds (torch in a process of its own). Read bandwidth, "
        f"a plain read of 128 MiB, the best of {rates}: {read / 1e9:.1f} GB/s. Load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after (other processes on the machine: a "
        f"system's best time is its best spell). `paired`: the median over rounds of "
        f"the best peer's time in a round over tp's in the same round (the systems "
        f"of a round run within seconds of each other, in an order that turns each "
        f"round: a fast or slow spell of the host's memory then counts for all of "
        f"them). `tp GB/s`: the operands read and the result written, once each, over "
        f"tp's time. `% of read, paired`: the median over rounds of that rate over a "
        f"plain read's (numba prange sum of 128 MiB) timed among the case's systems in "
        f"the same round. {peak_note}The cases of 1-16 "
        f"MiB (section `mid`) stay in the caches between calls: their share of the read "
        f"rate measures the caches, not memory.",
        "", table, ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="tp's (default: all)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="predict with the cost model's default parameters")
    ap.add_argument("--cases", choices=sorted(SECTIONS), default="all")
    ap.add_argument("--only", default=None,
                    help="only the cases whose id contains this, such as 'ij->i '")
    ap.add_argument("--render", metavar="JSON",
                    help="print the markdown of saved results (reductions-latest.json)")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)), end="")
        return
    if args.threads is not None:
        tp.set_num_threads(args.threads)
    if args.torch_worker:
        torch_worker(args.dtype, args.repeats, tp.get_num_threads(), args.cases, args.only)
        return
    if not args.no_calibrate:
        tp.calibrate(save=False)  # predictions with this machine's parameters
    cpu = lscpu()
    print(f"{cpu}\nthreads {tp.get_num_threads()}, dtype {args.dtype}, best of "
          f"{args.repeats} x {args.rounds} rounds", flush=True)
    cases = []
    for sub, shapes, own, _ in selected(args.cases, args.only):
        ops = operands(shapes, args.dtype)
        calls = systems(sub, ops, own)
        got = np.asarray(calls["tp"]())
        want = np.einsum(sub, *[o.astype(np.float64) for o in ops])
        assert np.allclose(got, want, rtol=1e-3, atol=1e-2 * np.sqrt(ops[0].size)), sub
        cases.append((case_id(sub, shapes), sub, shapes, ops, calls))
    load = [os.getloadavg()[0]]
    best: dict[str, dict[str, float]] = {name: {} for name, *_ in cases}
    bw: dict[str, float] = {}
    torch_proc = TorchWorker(args.dtype, args.repeats, tp.get_num_threads(), args.cases,
                             args.only)
    # Each round's time of each system, for the paired ratio (see paired_ratio).
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in cases}
    # ... and of a plain read of 128 MiB beside them, in bytes per second: the host's
    # bandwidth moves by 2x within seconds, so each case's share of it is taken from
    # a read timed among its systems in each round, not from the run's best read.
    reads: dict[str, list[float]] = {name: [] for name, *_ in cases}
    buffer = np.ones(128 * MiB // np.dtype(args.dtype).itemsize, args.dtype)
    peak = 0.0
    for r in range(args.rounds):
        for name, rate in read_bandwidth(args.dtype, args.repeats).items():
            bw[name] = max(bw.get(name, 0.0), rate)
        peak = max(peak, gemm_peak(args.dtype, args.repeats))
        read = torch_proc.ask("read")
        if read is not None:
            bw["torch.sum"] = max(bw.get("torch.sum", 0.0), read)
        for i, (case, _, _, _, calls) in enumerate(cases):
            # The systems' order turns from round to round: the first after the
            # previous case, or right after the pause, is not always the same one.
            order = [*calls, "torch", "read"]
            order = order[r % len(order):] + order[:r % len(order)]
            this_round: dict[str, float] = {}
            rounds[case].append(this_round)
            for name in order:
                if name == "read":
                    time.sleep(PAUSE_SECONDS)
                    reads[case].append(buffer.nbytes / timeit(lambda: _parallel_read(buffer),
                                                              args.repeats)[0])
                    continue
                if name == "torch":
                    t: float | None = torch_proc.ask(str(i))  # (it pauses itself)
                    if t is None:
                        continue
                else:
                    time.sleep(PAUSE_SECONDS)  # (common.PAUSE_SECONDS)
                    t = timeit(calls[name], args.repeats)[0]
                best[case][name] = min(best[case].get(name, float("inf")), t)
                this_round[name] = t
    torch_proc.close()
    load.append(os.getloadavg()[0])
    results = []
    for case, sub, shapes, ops, _ in cases:
        plan = tp.plan(sub, *ops)
        teir = plan.teir
        # None: no TEIR program (the reduction kernels, which split a summed axis
        # themselves where the output is short).
        parallel_k = None if teir is None else any(
            d is tp.DimType.K and e is tp.ExecType.PARALLEL
            for d, e in zip(teir.schedule.dim_types, teir.schedule.exec_types))
        read_bytes, written_bytes = sum(o.nbytes for o in ops), plan.empty_out().nbytes
        moved = read_bytes + written_bytes
        results.append({"case": sub, "shapes": shapes, "flops": flops(sub, shapes),
                        "MiB": read_bytes / MiB, "out_MiB": written_bytes / MiB,
                        "seconds": best[case],
                        "rounds": rounds[case], "paired": paired_ratio(rounds[case]),
                        "reads": reads[case],
                        "read_share": float(np.median([
                            moved / times["tp"] / rd
                            for times, rd in zip(rounds[case], reads[case])])),
                        "predicted": plan.predicted_seconds, "parallel_k": parallel_k,
                        "steps": [s.kind for s in plan.steps]})
    info = machine()  # imports torch: only after tp's timings (see TorchWorker)
    info["calibrated"] = not args.no_calibrate
    saved = {"machine": info, "lscpu": cpu, "load": load, "read_bandwidth": bw,
             "gemm_peak": peak,
             "dtype": args.dtype, "threads": tp.get_num_threads(), "repeats": args.repeats,
             "rounds": args.rounds, "results": results}
    text = render(saved)
    print(text)
    if not args.no_save:
        path = write_results("reductions", saved, text, complete=args.cases == "all")
        print(f"saved {path}")


if __name__ == "__main__":
    main()

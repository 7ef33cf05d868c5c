"""16-bit contractions (issue 65, item 6): one-operand sums, matrix-vector products and
products (section ``products``: GEMM-shaped TCCG cases, attention, a batch of dot
products, a chain of three) on float16 and bfloat16 operands, against teir_plan's own
float32 on the same shapes and values, numpy's float16, torch's 16-bit tensors and JAX
(``jax.jit`` of ``jnp.einsum`` with ``preferred_element_type=float32``).

teir_plan reads the 16-bit operands of these reductions in place, widening each element
to float32 in registers and summing in float32 (teir_plan/schedule/half.py): the
memory-bound cases (section ``memory``: operands of 64 MiB in 16 bits, twice the L3 of
the machines measured) move half the bytes of float32, and issue 65 asks them to take
at most 0.65x of teir_plan's own float32 time.  Section ``cache`` holds operands of
1-2 MiB summed again and again, which stay in the caches between calls: there the
kernels' speed, not memory's, decides.

Timing: each system best of ``--repeats`` calls back to back, in ``--rounds`` rounds.
In a round, teir_plan's three dtypes and numpy run in this process, one case after
another, the systems' order turning from round to round, each after a pause
(common.PAUSE_SECONDS); torch and JAX each run every case in a process of their own,
started for the round and ended before the next system (their threads spin after each
call, on the cores the others need).  ``16 / 32``: teir_plan's 16-bit time over its
float32 time, best of all rounds; ``paired``: the median over rounds of that ratio
within a round (the two run seconds apart: a busy spell of a shared host slows both).
Every system's result is checked against numpy's float64 einsum of the same values
(teir_plan's must agree; a peer's disagreement is reported on stderr, and timed as it
is).

Run: .venv/bin/python -m benchmarks.half [--repeats N] [--rounds R] [--threads T]
[--cases memory|cache|all] [--only TEXT] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

import teir_plan as tp
from benchmarks.common import PAUSE_SECONDS, machine, machine_md, md_table, timeit, write_results

MiB = 1 << 20
HALVES = ("float16", "bfloat16")
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(ml_dtypes.bfloat16)}

Case = tuple[str, list[tuple[int, ...]], str | None]  # subscripts, shapes, own call's name
MEMORY: list[Case] = [
    ("ij->i", [(8192, 4096)], "sum1"),
    ("ij->j", [(8192, 4096)], "sum0"),
    ("ijk->k", [(256, 512, 256)], "sum01"),
    ("ij->", [(8192, 4096)], "sum"),
    ("i,i->", [(1 << 25,), (1 << 25,)], "dot"),
    ("ij,j->i", [(8192, 4096), (4096,)], "matvec"),
    ("ji,j->i", [(4096, 8192), (4096,)], "vecmat"),
]
CACHE: list[Case] = [
    ("ij->i", [(1024, 512)], "sum1"),
    ("ij->j", [(1024, 512)], "sum0"),
    ("ij,j->i", [(1024, 512), (512,)], "matvec"),
    ("ji,j->i", [(512, 1024), (512,)], "vecmat"),
]
# Products (item 6's TCCG, everyday and tree cases): compute-bound GEMM shapes, whose
# 16-bit time the issue holds to 1.15x of float32, and memory-bound ones (a batch of
# dot products, attention's second product), held to 0.65x like the reductions.
PRODUCTS: list[Case] = [
    ("ij,jk->ik", [(2048, 2048), (2048, 2048)], None),
    ("efbad,cf->abcde", [(48, 36, 36, 48, 36), (24, 36)], None),  # TCCG 0
    ("dbea,ec->abcd", [(96, 84, 96, 96), (96, 24)], None),  # TCCG 2
    ("bhqd,bhkd->bhqk", [(4, 12, 512, 64), (4, 12, 512, 64)], None),  # attention scores
    ("bhqk,bhkd->bhqd", [(4, 12, 512, 512), (4, 12, 512, 64)], None),  # and values
    ("ij,ij->i", [(8192, 4096), (8192, 4096)], None),  # a batch of dot products
    ("bij,bij->bi", [(16, 512, 4096), (16, 512, 4096)], None),  # ... batched again
    ("ab,bc,cd->ad", [(1024, 1024), (1024, 1024), (1024, 1024)], None),  # a chain (tree)
]
SECTIONS = {"memory": MEMORY, "cache": CACHE, "products": PRODUCTS,
            "all": MEMORY + CACHE + PRODUCTS}
# Each case's own call in numpy's and torch's terms (x, or x and v).
OWN: dict[str, Callable] = {
    "sum1": lambda x: x.sum(1), "sum0": lambda x: x.sum(0),
    "sum01": lambda x: x.sum((0, 1)), "sum": lambda x: x.sum(),
    "dot": lambda x, y: x @ y, "matvec": lambda x, v: x @ v, "vecmat": lambda x, v: v @ x,
}
# The 16-bit CPU features a result belongs to (issue 65: the table per machine class).
FEATURES = ("f16c", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "avx_vnni",
            "fphp", "asimdhp", "bf16")


def selected(section: str, only: str | None) -> list[Case]:
    return [c for c in SECTIONS[section] if only is None or only in case_id(c)]


def case_id(case: Case) -> str:
    sub, shapes, _ = case
    return f"{sub} {' '.join('x'.join(map(str, s)) for s in shapes)}"


def operands(case: Case, dtype: str) -> list[np.ndarray]:
    """The case's operands: the same values in every dtype (float32 rounded from one
    draw, then each 16-bit type rounded from the float32 values)."""
    rng = np.random.default_rng(0)
    wide = [rng.standard_normal(s, dtype=np.float32) for s in case[1]]
    return [w.astype(DTYPES[dtype]) for w in wide]


def check(case: Case, ops: list[np.ndarray], got: object, what: str) -> None:
    """``got`` against numpy's float64 einsum of ``ops``: within the error of a float32
    accumulation of K terms of 16-bit values, and a 16-bit result's rounding, with a
    margin (numpy's float16 sums in float16: looser, 2^-11 per term)."""
    sub = case[0]
    wide = [o.astype(np.float64) for o in ops]
    ref = np.einsum(sub, *wide)
    size = np.einsum(sub, *[np.abs(w) for w in wide])
    terms = max(1, int(np.prod([n for c, n in _extents(case).items()
                                 if c not in sub.split("->")[1]])))
    g = np.asarray(got, dtype=np.float64)
    per_term = 2.0**-11 if what.startswith("numpy") else 2.0**-20
    bound = 2.0**-7 * np.abs(ref) + terms * per_term * size + 1e-30
    err = np.abs(g - ref)
    if not (err <= bound).all():
        raise AssertionError(f"{what}: {case_id(case)} off by {err.max():.3g} "
                             f"(bound {bound.flat[np.argmax(err - bound)]:.3g})")


def _extents(case: Case) -> dict[str, int]:
    ext: dict[str, int] = {}
    for term, shape in zip(case[0].split("->")[0].split(","), case[1]):
        ext.update(zip(term, shape))
    return ext


def tp_round(cases: list[Case], held: dict, repeats: int, r: int) -> dict[str, dict]:
    """One round of teir_plan (float32, float16, bfloat16) and numpy (float16, and
    bfloat16 where ml_dtypes' loops run it) on every case: seconds by case and system."""
    out: dict[str, dict] = {}
    systems = [("tp", "float32"), ("tp", "float16"), ("tp", "bfloat16"),
               ("numpy", "float16"), ("numpy", "bfloat16")]
    for case in cases:
        times: dict[str, float] = {}
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for system, dtype in order:
            call = held[case_id(case)].get((system, dtype))
            if call is None:
                continue
            time.sleep(PAUSE_SECONDS)
            times[f"{system} {dtype}"] = timeit(call, repeats)[0]
        out[case_id(case)] = times
    return out


def prepare_here(cases: list[Case]) -> dict:
    """Each case's calls in this process: teir_plan's plans, numpy's einsum or own call
    (the faster of a short trial), each checked once."""
    held: dict = {}
    for case in cases:
        calls: dict = {}
        for dtype in ("float32", *HALVES):
            ops = operands(case, dtype)
            plan = tp.plan(case[0], *ops)
            check(case, ops, plan(*ops), f"tp {dtype}")
            calls[("tp", dtype)] = lambda plan=plan, ops=ops: plan(*ops)
        for dtype in HALVES:
            ops = operands(case, dtype)
            own = OWN[case[2]] if case[2] else None
            options = [lambda ops=ops, sub=case[0]: np.einsum(sub, *ops, optimize=True)]
            if own is not None:
                options.append(lambda ops=ops, own=own: own(*ops))
            working = []
            for fn in options:
                try:
                    check(case, ops, fn(), f"numpy {dtype}")
                except (TypeError, ValueError) as exc:  # no loop for the dtype
                    sys.stderr.write(f"numpy {dtype} {case_id(case)}: {exc}\n")
                    continue
                except AssertionError as exc:  # timed all the same: numpy as it is
                    sys.stderr.write(f"warning: {exc}\n")
                working.append(fn)
            if working:
                calls[("numpy", dtype)] = min(working, key=lambda fn: timeit(fn, 1)[0])
        held[case_id(case)] = calls
    return held


def peer_worker(peer: str, section: str, only: str | None, repeats: int,
                threads: int) -> None:
    """Print, as one JSON line, the peer's best seconds for every case and 16-bit type
    (null where it cannot run it)."""
    cases = selected(section, only)
    out: dict[str, dict[str, float | None]] = {}
    if peer == "torch":
        import torch

        torch.set_num_threads(threads)
        types = {"float16": torch.float16, "bfloat16": torch.bfloat16}

        def make(case: Case, dtype: str) -> Callable[[], object]:
            ops = operands(case, dtype)
            tops = [torch.from_numpy(o.astype(np.float32)).to(types[dtype]) for o in ops]
            calls = [lambda: torch.einsum(case[0], *tops)]
            if case[2]:
                own = OWN[case[2]]
                calls.append(lambda: own(*tops))
            for fn in calls:
                try:
                    check(case, ops, fn().float().numpy(), f"torch {dtype}")
                except AssertionError as exc:  # timed all the same: torch as it is
                    sys.stderr.write(f"warning: {exc}\n")
            return min(calls, key=lambda fn: timeit(fn, 1)[0])
    else:
        import jax
        import jax.numpy as jnp

        def make(case: Case, dtype: str) -> Callable[[], object]:
            ops = operands(case, dtype)
            jops = [jax.device_put(o) for o in ops]
            fn = jax.jit(lambda *xs: jnp.einsum(case[0], *xs,
                                                preferred_element_type=jnp.float32))
            compiled = fn.lower(*jops).compile()
            try:
                check(case, ops, np.asarray(compiled(*jops)), f"jax {dtype}")
            except AssertionError as exc:  # timed all the same: JAX as it is
                sys.stderr.write(f"warning: {exc}\n")
            return lambda: compiled(*jops).block_until_ready()

    for case in cases:
        out[case_id(case)] = {}
        for dtype in HALVES:
            try:
                call = make(case, dtype)
            except (RuntimeError, TypeError, ValueError) as exc:
                sys.stderr.write(f"{peer} {dtype} {case_id(case)}: {exc}\n")
                out[case_id(case)][dtype] = None
                continue
            time.sleep(PAUSE_SECONDS)
            out[case_id(case)][dtype] = timeit(call, repeats)[0]
    print(json.dumps(out), flush=True)


def peer_round(peer: str, args: argparse.Namespace) -> dict | None:
    """One round of a peer, in a process of its own; None when it is not installed or
    fails."""
    cmd = [sys.executable, "-m", "benchmarks.half", "--peer-worker", peer,
           "--cases", args.cases, "--repeats", str(args.repeats),
           "--threads", str(tp.get_num_threads()),
           *(["--only", args.only] if args.only else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"{peer}: {proc.stderr.strip().splitlines()[-1:]}\n")
        return None
    if proc.stderr.strip():
        sys.stderr.write(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def cpu_features() -> str:
    """The CPU's 16-bit features (from /proc/cpuinfo's flags), or 'none'."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f
                          if ln.startswith(("flags", "Features"))), [])
    except OSError:
        flags = []
    have = [f for f in FEATURES if f in flags]
    return " ".join(have) if have else "none"


def _us(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1e6:.0f}"


def render(saved: dict) -> str:
    rows = []
    for r in saved["results"]:
        b = r["best"]
        for dtype in HALVES:
            mine, f32 = b.get(f"tp {dtype}"), b.get("tp float32")
            peers = {k: b.get(f"{k} {dtype}") for k in ("numpy", "torch", "jax")}
            best_peer = min((v for v in peers.values() if v), default=None)
            rows.append([r["case"], f"{r['MiB'][dtype]:.0f}", dtype, _us(f32), _us(mine),
                         mine / f32, r["paired"][dtype], _us(peers["numpy"]),
                         _us(peers["torch"]), _us(peers["jax"]),
                         None if best_peer is None else best_peer / mine])
    header = ["case", "MiB read (16-bit)", "dtype", "tp float32 us", "tp 16-bit us",
              "16 / 32", "paired", "numpy us", "torch us", "JAX us", "best peer / tp"]
    m = saved["machine"]
    return "\n".join([
        "# 16-bit reductions", "", machine_md(m), "",
        f"CPU 16-bit features: {saved['features']}; {saved['threads']} threads; best of "
        f"{saved['repeats']} calls x {saved['rounds']} rounds; load average "
        f"{saved['load'][0]:.1f} before, {saved['load'][1]:.1f} after.  `16 / 32`: "
        f"teir_plan's 16-bit time over its float32 time on the same shapes (best of all "
        f"rounds); `paired`: the median over rounds of that ratio within a round.  numpy: "
        f"einsum or its own call (sum, matmul), the faster; torch likewise, on 16-bit "
        f"tensors; JAX: jit of einsum with preferred_element_type=float32.", "",
        md_table(header, rows), ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="tp's (default: all)")
    ap.add_argument("--cases", choices=sorted(SECTIONS), default="all")
    ap.add_argument("--only", default=None, help="only the cases whose id contains this")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--no-peers", action="store_true", help="teir_plan and numpy only")
    ap.add_argument("--render", metavar="JSON", help="print the markdown of saved results")
    ap.add_argument("--peer-worker", choices=("torch", "jax"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)), end="")
        return
    if args.threads is not None:
        tp.set_num_threads(args.threads)
    if args.peer_worker:
        peer_worker(args.peer_worker, args.cases, args.only, args.repeats,
                    tp.get_num_threads())
        return
    cases = selected(args.cases, args.only)
    print(f"CPU 16-bit features: {cpu_features()}; threads {tp.get_num_threads()}; best of "
          f"{args.repeats} x {args.rounds} rounds", flush=True)
    load = [os.getloadavg()[0]]
    held = prepare_here(cases)
    rounds: list[dict[str, dict]] = []
    for r in range(args.rounds):
        this = tp_round(cases, held, args.repeats, r)
        for peer in () if args.no_peers else ("torch", "jax"):
            got = peer_round(peer, args)
            for case in cases:
                for dtype in HALVES:
                    t = None if got is None else got[case_id(case)].get(dtype)
                    if t is not None:
                        this[case_id(case)][f"{peer} {dtype}"] = t
        rounds.append(this)
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    load.append(os.getloadavg()[0])
    results = []
    for case in cases:
        name = case_id(case)
        best: dict[str, float] = {}
        for this in rounds:
            for k, t in this[name].items():
                best[k] = min(best.get(k, float("inf")), t)
        paired = {d: float(np.median([this[name][f"tp {d}"] / this[name]["tp float32"]
                                      for this in rounds])) for d in HALVES}
        nbytes = sum(int(np.prod(s)) for s in case[1])
        results.append({"case": name, "best": best, "paired": paired,
                        "MiB": {d: nbytes * DTYPES[d].itemsize / MiB
                                for d in ("float32", *HALVES)},
                        "rounds": [this[name] for this in rounds]})
    saved = {"machine": machine(with_peers=True), "features": cpu_features(),
             "threads": tp.get_num_threads(), "repeats": args.repeats,
             "rounds": args.rounds, "load": load, "results": results}
    text = render(saved)
    print(text)
    if not args.no_save:
        path = write_results("half", saved, text,
                             complete=args.only is None and args.cases == "all"
                             and not args.no_peers)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""The ``teir-plan`` command line: explain, run, calibrate, validate, execute.

Errors print one line on stderr.  Exit status: 0 done, 1 an invalid TEIR program (or a
result that disagrees with numpy), 2 bad usage (arguments, options, unreadable files).
Shapes are planned as float64 unless ``--dtype`` says otherwise, as ``tp.plan`` plans
shapes (numpy's default dtype).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Any

import numpy as np

import teir_plan as tp
from teir_plan.errors import TEIRError, TEIRPlanError
from teir_plan.teir.enums import bfloat16, is_half


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Usage(message)


def _sizes(expr: str, text: str) -> list[tuple[int, ...]]:
    """Operand shapes from ``--sizes i=64,j=32``; the expression is checked first, so a
    malformed one is reported as such rather than as a size mismatch."""
    from teir_plan.frontend.expression import is_index, parse

    if "." in expr:
        raise _Usage("'...' needs arrays; give explicit indices on the command line")
    ext: dict[str, int] = {}
    for part in filter(None, (text or "").replace(" ", "").split(",")):
        if "=" not in part:
            raise _Usage(f"--sizes: expected index=extent, got {part!r}")
        k, v = part.split("=", 1)
        if len(k) != 1 or not is_index(k):
            raise _Usage(f"--sizes: {k!r} is not a one-character index")
        if k in ext:
            raise _Usage(f"--sizes: index {k} given twice")
        digits = v[1:] if v.startswith("-") else v
        if not (digits.isascii() and digits.isdigit()):  # (int() takes "1_0", "+3", "٣")
            raise _Usage(f"--sizes: extent of {k!r} is not an integer: {v!r}")
        ext[k] = int(v)
        if ext[k] < 0:
            raise _Usage(f"--sizes: extent of {k!r} is negative: {ext[k]}")
    terms = expr.replace(" ", "").split("->")[0].split(",")
    parse(expr, [tuple(ext.get(c, 1) for c in t) for t in terms])  # EinsumError if malformed
    used = {c for t in terms for c in t}
    missing = sorted(used - set(ext))
    extra = sorted(set(ext) - used)
    if missing:
        raise _Usage(f"--sizes: no extent for index {', '.join(missing)}")
    if extra:
        raise _Usage(f"--sizes: index {', '.join(extra)} is not in the expression")
    return [tuple(ext[c] for c in t) for t in terms]


_DTYPES = ("float32", "float64", "complex64", "complex128", "float16", "bfloat16")


def _dtype(name: str) -> np.dtype:
    if name not in _DTYPES:
        raise _Usage(f"--dtype: expected one of {', '.join(_DTYPES)}, got {name!r}")
    return bfloat16() if name == "bfloat16" else np.dtype(name)


def _optimize(text: str) -> object:
    """``--optimize``: true/false as numpy's booleans, else a name tp.plan checks
    ("autotune", "plain", "greedy", "optimal", any opt_einsum strategy)."""
    words = {"true": True, "false": False}
    return words.get(text.lower(), text)


def _plan_options(args: argparse.Namespace) -> dict[str, Any]:
    """tp.plan's options from ``--optimize/--threads/--order`` (threads: the executor's
    count for this process, which plans are made for)."""
    if args.threads is not None:
        tp.set_num_threads(args.threads)
    return {"optimize": _optimize(args.optimize), "order": args.order}


def _cmd_explain(args: argparse.Namespace) -> int:
    shapes = _sizes(args.expr, args.sizes)
    report = tp.explain(args.expr, *shapes, dtype=_dtype(args.dtype), measure=args.measure,
                        **_plan_options(args))
    if args.format == "text":
        text = report.text(rich=None if args.output is None else False)
    elif args.format == "markdown":
        text = report.markdown()
    elif args.format == "html":
        text = report.html()
    else:
        text = json.dumps(report.to_dict(), indent=2)
    if args.output is None:
        print(text)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as exc:
            raise _Usage(f"cannot write {args.output}: {exc.strerror}") from None
        print(f"report written to {args.output}", file=sys.stderr)
    if args.figure:
        fig = report.figure()
        try:
            fig.savefig(args.figure, dpi=110, bbox_inches="tight")
        except (OSError, ValueError) as exc:
            raise _Usage(f"cannot write the figure {args.figure}: {exc}") from None
        print(f"tile figure written to {args.figure}", file=sys.stderr)
    return 0


def _best(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    """The best of ``repeats`` calls after one that compiles and plans."""
    from teir_plan.calibration import best_seconds

    return best_seconds(fn, repeats, warmup=1)  # type: ignore[no-any-return]


# The random operands the run and execute commands allocate, at most (each).
_MAX_RANDOM_BYTES = 4 << 30


def _cmd_run(args: argparse.Namespace) -> int:
    shapes = _sizes(args.expr, args.sizes)
    dt = _dtype(args.dtype)
    for i, s in enumerate(shapes):
        if math.prod(s) * dt.itemsize > _MAX_RANDOM_BYTES:
            raise _Usage(f"--sizes: operand {i} would have shape {s}, more than this command "
                         f"allocates for random data ({_MAX_RANDOM_BYTES >> 30} GiB)")
    rng = np.random.default_rng(0)
    complex_ = dt.kind == "c"
    ops = [(rng.standard_normal(s) + 1j * rng.standard_normal(s) if complex_
            else rng.standard_normal(s)).astype(dt) for s in shapes]
    ext: dict[str, int] = {}
    for t, s in zip(args.expr.replace(" ", "").split("->")[0].split(","), shapes):
        ext.update(zip(t, s))
    # Multiply-adds over all indices, two real flops each (a complex one: eight).
    flops = (8 if complex_ else 2) * float(np.prod(list(ext.values()) or [1]))
    plan = tp.plan(args.expr, *ops, **_plan_options(args))
    res = plan(*ops)
    wide = np.complex128 if complex_ else np.float64
    ref = np.einsum(args.expr, *[o.astype(wide) for o in ops])
    err = float(np.abs(res.astype(wide) - ref).max()) if res.size else 0.0
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    if is_half(dt):  # float32 sums rounded once to 16 bits: half a unit in the last place
        bound = float(np.finfo(dt).eps)
    else:
        bound = 1e-3 if dt in (np.float32, np.complex64) else 1e-9
    ok = err <= bound * scale
    t_tp = _best(lambda: plan(*ops))
    try:  # (numpy has no bfloat16 loop)
        t_np: float | None = _best(lambda: np.einsum(args.expr, *ops, optimize=True))
    except TypeError:
        t_np = None

    def rate(t: float) -> float:
        return flops / t / 1e9 if t > 0 else float("inf")

    print(f"{args.expr}  sizes {args.sizes}  {dt}")
    print(f"teir_plan     {t_tp:.3e} s  {rate(t_tp):8.2f} GFLOP/s  "
          f"(predicted {plan.predicted_seconds:.3e} s)")
    if t_np is None:
        print(f"numpy.einsum  cannot sum {dt} operands")
    else:
        print(f"numpy.einsum  {t_np:.3e} s  {rate(t_np):8.2f} GFLOP/s")
    speed = "" if t_np is None else f"speed-up {t_np / t_tp:.2f}x; "
    print(f"{speed}max abs error vs {np.dtype(wide)} numpy {err:.2e} "
          f"({'ok' if ok else 'WRONG'})")
    return 0 if ok else 1


_SHORT = 8  # calibrate prints sequences longer than this only with --verbose


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from teir_plan.machine import cache_dir

    if args.quick:
        from teir_plan.calibration import quick_calibrate

        params = quick_calibrate(save=not args.no_save)
    else:
        params = tp.calibrate(save=not args.no_save)
    for k, v in params.__dict__.items():
        if isinstance(v, (tuple, list)) and len(v) > _SHORT and not args.verbose:
            # The efficiency tables: 864 numbers that say nothing at a glance.
            v = f"({len(v)} values; --verbose prints them)"
        print(f"{k:24s} {v}")
    if not args.no_save:
        print(f"saved under {cache_dir()}", file=sys.stderr)
    return 0


def _load(path: str) -> tp.TEIR:
    """A program from a JSON file, or from standard input for ``-``."""
    if path == "-":
        text = sys.stdin.buffer.read()
    else:
        try:
            with open(path, "rb") as f:
                text = f.read()  # bytes: from_json reports a file that is not UTF-8 JSON
        except OSError as exc:
            raise _Usage(f"cannot read {path}: {exc.strerror}") from None
    return tp.TEIR.from_json(text)


def _cmd_validate(args: argparse.Namespace) -> int:
    prog = _load(args.program)
    prog.validate()
    print(prog)
    print("valid")
    return 0


def reference_execute(prog: tp.TEIR, arrays: list[np.ndarray]) -> None:
    """An independent numpy reference: every tensor viewed over all D axes with the
    program's strides, contracted by numpy.einsum (no tiles, no loop order)."""
    s = prog.schedule
    letters = [chr(ord("a") + i) if i < 26 else chr(ord("A") + i - 26) for i in range(s.num_dims)]
    views = []
    for j, arr in enumerate(arrays):
        flat = arr.reshape(-1)
        views.append(np.lib.stride_tricks.as_strided(
            flat, shape=s.dim_sizes, strides=[st * arr.itemsize for st in s.strides[j]]))
    wide = np.complex128 if prog.primitives.data_type.is_complex else np.float64
    if prog.is_unary:
        val = views[0].astype(wide)
        if prog.primitives.prim_main is tp.Prim.RELU:
            val = np.maximum(val, 0)
        views[1][...] = val
        return
    keep = [i for i in range(s.num_dims) if s.dim_types[i] is not tp.DimType.K]
    sub = "".join(letters) + "," + "".join(letters) + "->" + "".join(letters[i] for i in keep)
    acc = np.einsum(sub, views[0].astype(wide), views[1].astype(wide))
    # (Ellipsis: with no free axis the index is all integers, and a view, not a scalar,
    # is what the result is written into.)
    index = tuple(slice(None) if i in keep else 0 for i in range(s.num_dims))
    out = views[2][index + (Ellipsis,)]
    if prog.primitives.prim_first is not tp.Prim.ZERO:
        acc = acc + out
    if prog.primitives.prim_last is tp.Prim.RELU:
        acc = np.maximum(acc, 0)
    out[...] = acc


def _cmd_execute(args: argparse.Namespace) -> int:
    prog = _load(args.program)
    prog.validate()
    s = prog.schedule
    if s.num_dims > 52:
        raise _Usage(f"execute: the numpy reference names axes a-z, A-Z: at most 52, the "
                     f"program has {s.num_dims}")
    rng = np.random.default_rng(0)
    dt = prog.primitives.data_type.numpy
    arrays = []
    for j in range(prog.num_tensors):
        lo = sum(min(0, (n - 1) * st) for n, st in zip(s.dim_sizes, s.strides[j]))
        hi = sum(max(0, (n - 1) * st) for n, st in zip(s.dim_sizes, s.strides[j]))
        if lo < 0:
            raise _Usage(f"strides[{j}]: negative offsets need arrays; use tp.execute from Python")
        if (hi + 1) * dt.itemsize > _MAX_RANDOM_BYTES:
            raise _Usage(f"strides[{j}]: the program spans {hi + 1} elements of tensor {j}, "
                         f"more than this command allocates for random data "
                         f"({_MAX_RANDOM_BYTES >> 30} GiB); use tp.execute from Python")
        values = rng.standard_normal(hi + 1)
        if dt.kind == "c":  # both parts non-zero
            values = values + 1j * rng.standard_normal(hi + 1)
        arrays.append(values.astype(dt))
    ref = [a.copy() for a in arrays]
    t = _best(lambda: tp.execute(prog, *[a.copy() for a in arrays]), 3)
    tp.execute(prog, *arrays)
    reference_execute(prog, ref)
    wide = np.complex128 if dt.kind == "c" else np.float64
    err = float(np.abs(arrays[-1].astype(wide) - ref[-1]).max())
    scale = max(1.0, float(np.abs(ref[-1]).max()))
    tol = (1e-3 if dt in (np.float32, np.complex64) else 1e-9) * scale
    print(prog)
    print(f"executed in {t:.3e} s; max abs error vs numpy reference {err:.2e} "
          f"({'ok' if err <= tol else 'WRONG'})")
    return 0 if err <= tol else 1


def parser() -> argparse.ArgumentParser:
    """The command line's parser (every argument has a help text)."""
    p = _Parser(prog="teir-plan", description="Plan, explain and run einsum as TEIR programs.")
    p.add_argument("--version", action="version", version=f"teir-plan {tp.__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    helps = {"explain": "plan an einsum for these sizes and explain the plan",
             "run": "run the plan on random data, timed and checked against numpy.einsum",
             "validate": "check a TEIR program (JSON) against the TEIR specification's rules",
             "execute": "run a TEIR program on random data, checked against numpy"}
    for name, fn in (("explain", _cmd_explain), ("run", _cmd_run)):
        q = sub.add_parser(name, help=helps[name])
        q.add_argument("expr", help="einsum subscripts, e.g. 'ij,jk->ik' (quote it)")
        q.add_argument("--sizes", required=True, help="index=extent,... e.g. i=64,j=32,k=48")
        q.add_argument("--dtype", default="float64", metavar="DTYPE",
                       help=f"operands' dtype: {', '.join(_DTYPES)} (default float64, "
                       "as tp.plan plans shapes)")
        q.add_argument("--optimize", default="true", metavar="OPT",
                       help="tp.plan's optimize: true (default), false (left to right, as "
                       "numpy's), autotune, plain, or a path strategy (greedy, optimal, "
                       "...) for three or more operands")
        q.add_argument("--threads", type=int, default=None, metavar="N",
                       help="threads the plan runs on (default: the executor's count)")
        q.add_argument("--order", default="K", choices=["K", "C", "F", "A"],
                       help="the result's memory layout, as numpy.einsum's order= "
                       "(default K: the planner chooses)")
        if name == "explain":
            q.add_argument("--format", default="text",
                           choices=["text", "markdown", "html", "json"],
                           help="report format (default text)")
            q.add_argument("--figure", default=None,
                           help="write the tile figure (PNG, SVG or PDF; needs matplotlib)")
            q.add_argument("--measure", action="store_true",
                           help="time the plan and its alternatives on random data")
            q.add_argument("-o", "--output", default=None,
                           help="write the report to this file instead of stdout")
        q.set_defaults(fn=fn)
    q = sub.add_parser("calibrate", help="measure the cost model's machine parameters")
    q.add_argument("--no-save", action="store_true", help="use them in this run only")
    q.add_argument("--quick", action="store_true",
                   help="the first-use measurement (about a second once compiled) instead "
                   "of the full calibration (15-40 s)")
    q.add_argument("-v", "--verbose", action="store_true",
                   help="also print the BLAS efficiency tables (864 values)")
    q.set_defaults(fn=_cmd_calibrate)
    for name, fn in (("validate", _cmd_validate), ("execute", _cmd_execute)):
        q = sub.add_parser(name, help=helps[name])
        q.add_argument("program", help="TEIR program as JSON (teir_plan's or etops'); "
                       "- reads it from standard input")
        q.set_defaults(fn=fn)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        return int(args.fn(args))
    except TEIRError as exc:  # the program breaks a rule of the spec, or is not one
        print(f"teir-plan: error: {exc}", file=sys.stderr)
        return 1
    except (_Usage, TEIRPlanError) as exc:
        print(f"teir-plan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `teir-plan explain ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""A catalogue of bad inputs (GitHub issue 5): each raises a tp.TEIRPlanError that is
also a ValueError or TypeError, with a message naming the problem, and raises before
anything is written to ``out`` (every test fills ``out`` with a sentinel and checks it
is unchanged).

TEIR programs whose strides reach outside their arrays run in a subprocess: if a
check ever failed, the interpreter could crash, and only that process would die.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import teir_plan as tp

SENTINEL = -777.0
ROOT = Path(__file__).resolve().parents[1]


def _fresh_out(shape=(3, 5), dtype=np.float64) -> np.ndarray:
    return np.full(shape, SENTINEL, dtype)


def assert_error(info: pytest.ExceptionInfo, base: type, *words: str) -> None:
    """The exception is a TEIRPlanError and a ``base`` (ValueError or TypeError), and
    its message contains every one of ``words`` (case-insensitive)."""
    exc = info.value
    assert isinstance(exc, tp.TEIRPlanError), type(exc)
    assert isinstance(exc, base), f"{type(exc).__name__} is not a {base.__name__}"
    msg = str(exc).lower()
    for w in words:
        assert w.lower() in msg, f"{w!r} not in message {str(exc)!r}"


# ---- malformed expressions ----------------------------------------------------------

A = np.ones((3, 4))
B = np.ones((4, 5))

EXPRESSIONS = [
    # (id, subscripts, operands, words the message must contain)
    ("invalid character", "i$,jk->ik", [A, B], ["invalid character", "'$'"]),
    ("digit", "i1,jk->ik", [A, B], ["invalid character", "'1'"]),
    ("two arrows", "ij,jk->ik->i", [A, B], ["more than one '->'"]),
    ("stray dash", "ij-jk", [A, B], ["stray"]),
    ("stray gt", "ij,jk>ik", [A, B], ["stray"]),
    ("output index absent", "ij,jk->iz", [A, B], ["'z'", "does not appear"]),
    ("output index repeated", "ij,jk->ii", [A, B], ["'i'", "more than once"]),
    ("too few operands", "ij,jk->ik", [A], ["2 operand", "1 were given"]),
    ("too many operands", "ij,jk->ik", [A, B, B], ["2 operand", "3 were given"]),
    ("no operands", "", [], ["operand"]),
    ("two dots", "i..j,jk->ik", [A, B], ["'...'"]),
    ("four dots", "....j,jk->k", [A, B], ["'...'"]),
    ("two ellipses", "...i...,jk->ik", [A, B], ["'...'"]),
    ("ellipsis dims dropped", "...j,jk->k", [A, B], ["'...'", "operand 0"]),
    ("term longer than operand", "ijk,jk->ik", [A, B], ["operand 0", "3 axes", "2 dimensions"]),
    ("term shorter than operand", "i,jk->ik", [A, B], ["operand 0", "1 axes", "2 dimensions"]),
    ("ellipsis term too long", "...ijk,jk->ik", [A, B], ["operand 0", "3 axes"]),
    ("extents disagree", "ij,jk->ik", [A, np.ones((5, 6))], ["'j'", "extent"]),
    ("extents disagree in ellipsis", "...i,...i->...i", [np.ones((2, 3)), np.ones((5, 3))],
     ["extent"]),
    ("diagonal extents differ", "ii->i", [A], ["'i'"]),
]


@pytest.mark.parametrize(
    "sub,ops,words", [e[1:] for e in EXPRESSIONS], ids=[e[0] for e in EXPRESSIONS]
)
def test_malformed_expressions(sub, ops, words):
    with pytest.raises((ValueError, TypeError)):
        np.einsum(sub, *ops)  # numpy refuses them too
    out = _fresh_out()
    with pytest.raises(tp.EinsumError) as info:
        tp.einsum(sub, *ops, out=out)
    assert_error(info, ValueError, *words)
    assert (out == SENTINEL).all()
    with pytest.raises(tp.EinsumError) as info:
        tp.plan(sub, *ops)
    assert_error(info, ValueError, *words)


def test_ellipsis_in_the_output_only_stands_for_no_dims():
    # numpy accepts it; so does tp
    for sub in ("ij,jk->...ik", "ij,jk->ik..."):
        np.testing.assert_array_equal(tp.einsum(sub, A, B), np.einsum(sub, A, B))


@pytest.mark.parametrize("sub", [5, None, b"ij->ji", ["ij->ji"]])
def test_subscripts_must_be_a_string(sub):
    for fn in (tp.einsum, tp.plan):
        with pytest.raises(tp.EinsumError) as info:
            fn(sub, A)
        assert_error(info, ValueError, "subscripts", "string")


def test_negative_extent_in_a_planned_shape():
    with pytest.raises(tp.EinsumError) as info:
        tp.plan("ij,jk->ik", (-1, 4), (4, 5))
    assert_error(info, ValueError, "operand 0", "negative")


# ---- operands of the wrong type ------------------------------------------------------


@pytest.mark.parametrize(
    "bad,words",
    [
        (None, ["operand 0", "NoneType"]),
        ("abc", ["operand 0", "str"]),
        (b"abc", ["operand 0", "bytes"]),
        (np.array([[1, 2]], dtype=object), ["operand 0", "object"]),
        ({1: 2}, ["operand 0", "object"]),
        ([[1.0, 2.0], [3.0]], ["operand 0", "cannot convert"]),
        (np.array(["ab", "cd"]), ["operand 0", "not numeric"]),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), ["operand 0", "not numeric"]),
    ],
    ids=["None", "str", "bytes", "object array", "dict", "ragged list", "unicode", "datetime"],
)
def test_operands_that_are_not_numeric_arrays(bad, words):
    out = _fresh_out((2,))
    with pytest.raises(tp.OperandTypeError) as info:
        tp.einsum("i->i", bad, out=out)
    assert_error(info, TypeError, *words)
    assert (out == SENTINEL).all()
    with pytest.raises(tp.OperandTypeError):
        tp.plan("i->i", bad)
    p = tp.plan("i->i", (2,))
    with pytest.raises(tp.OperandTypeError) as info:
        p(bad, out=out)
    assert_error(info, TypeError, *words)
    assert (out == SENTINEL).all()


def test_lists_and_scalars_are_converted_as_numpy_does():
    lists = ([[1.0, 2.0], [3.0, 4.0]], [[5.0], [6.0]])
    np.testing.assert_array_equal(tp.einsum("ij,jk->ik", *lists), np.einsum("ij,jk->ik", *lists))
    assert tp.einsum(",", 2.0, 3.0) == 6.0
    np.testing.assert_array_equal(tp.einsum("i,->i", [1, 2, 3], 2), [2, 4, 6])
    p = tp.plan("ij,jk->ik", *[np.asarray(x) for x in lists])
    np.testing.assert_array_equal(p(*lists), np.einsum("ij,jk->ik", *lists))


# ---- dtypes ----------------------------------------------------------------------------


# (float16 and bfloat16 are computed as float32 programs: tests/test_half.py)
@pytest.mark.parametrize(
    "dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint64"]
)
def test_dtypes_outside_teir_give_numpys_answer(dtype):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, (4, 5)).astype(dtype)
    b = rng.integers(0, 3, (5, 6)).astype(dtype)
    for sub, ops in [("ij,jk->ik", (a, b)), ("ij->ji", (a,)), ("ii->i", (a[:4, :4],)),
                     ("ij,jk,kl->il", (a, b, b.T))]:
        got, want = tp.einsum(sub, *ops), np.einsum(sub, *ops)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    p = tp.plan("ij,jk->ik", a, b)
    assert p.steps[0].kind == "numpy", "computed by a numpy step (shown in the plan)"
    np.testing.assert_array_equal(p(a, b), np.einsum("ij,jk->ik", a, b))


def test_dtype_errors():
    ia, ib = np.arange(12).reshape(3, 4), np.arange(20).reshape(4, 5)
    out = _fresh_out((3, 5), np.float32)
    with pytest.raises(tp.DTypeError) as info:
        tp.einsum("ij,jk->ik", ia, ib, dtype=np.float32, out=out)
    assert_error(info, TypeError, "operand 0", "cannot cast", "int64", "float32")
    assert (out == SENTINEL).all()
    with pytest.raises(tp.DTypeError) as info:
        tp.einsum("ij,jk->ik", A, B, dtype="no such dtype")
    assert_error(info, TypeError, "dtype", "not a numpy dtype")
    iout = _fresh_out((3, 5), np.int64)
    with pytest.raises(tp.DTypeError) as info:
        tp.einsum("ij,jk->ik", ia, ib, epilogue="relu", out=iout)
    assert_error(info, TypeError, "relu", "int64")
    assert (iout == SENTINEL).all()


# ---- options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,words",
    [
        ({"optimize": "fast"}, ["optimize", "'fast'"]),
        ({"optimize": [1]}, ["optimize"]),
        ({"optimize": None}, ["optimize"]),
        ({"epilogue": "tanh"}, ["epilogue", "'tanh'"]),
        ({"epilogue": True}, ["epilogue"]),
    ],
)
def test_bad_options(kw, words):
    out = _fresh_out()
    with pytest.raises(tp.PlanError) as info:
        tp.einsum("ij,jk->ik", A, B, out=out, **kw)
    assert_error(info, ValueError, *words)
    assert (out == SENTINEL).all()


@pytest.mark.parametrize("n", [0, -1, 10_000, 1.5, True, "2"])
def test_bad_thread_counts(n):
    before = tp.get_num_threads()
    with pytest.raises(tp.PlanError) as info:
        tp.set_num_threads(n)
    assert_error(info, ValueError, "set_num_threads")
    assert tp.get_num_threads() == before


def test_a_numpy_integer_thread_count_is_an_integer():
    before = tp.get_num_threads()
    try:
        tp.set_num_threads(np.int64(1))
        assert tp.get_num_threads() == 1 and type(tp.get_num_threads()) is int
    finally:
        tp.set_num_threads(before)


# ---- out ---------------------------------------------------------------------------------


def _einsum_out_cases():
    ro = _fresh_out()
    ro.flags.writeable = False
    return [
        ("wrong shape", _fresh_out((5, 3)), tp.EinsumError, ValueError, ["out", "shape"]),
        ("wrong ndim", _fresh_out((15,)), tp.EinsumError, ValueError, ["out", "shape"]),
        ("unsafe dtype", _fresh_out(dtype=np.float32), tp.DTypeError, TypeError,
         ["out", "float32", "float64"]),
        ("int dtype", _fresh_out(dtype=np.int64), tp.DTypeError, TypeError, ["out", "int64"]),
        ("read-only", ro, tp.PlanError, ValueError, ["out", "read-only"]),
        ("a list", [[SENTINEL] * 5] * 3, tp.OperandTypeError, TypeError, ["out", "list"]),
    ]


@pytest.mark.parametrize("case", _einsum_out_cases(), ids=lambda c: c[0])
def test_einsum_out_errors(case):
    _, out, exc, base, words = case
    with pytest.raises(exc) as info:
        tp.einsum("ij,jk->ik", A, B, out=out)
    assert_error(info, base, *words)
    assert (np.asarray(out) == SENTINEL).all()


def test_einsum_out_overlapping_an_input():
    buf = np.arange(30.0)
    a = buf[:12].reshape(3, 4)
    keep = buf.copy()
    for out in (buf[:15].reshape(3, 5), buf[10:25].reshape(3, 5), buf[::2].reshape(3, 5)):
        with pytest.raises(tp.PlanError) as info:
            tp.einsum("ij,jk->ik", a, B, out=out)
        assert_error(info, ValueError, "out", "overlaps operand 0")
        np.testing.assert_array_equal(buf, keep)
    sq = np.arange(16.0).reshape(4, 4)
    with pytest.raises(tp.PlanError):
        tp.einsum("ij->ji", sq, out=sq)  # in-place transpose: refused, not garbled
    np.testing.assert_array_equal(sq, np.arange(16.0).reshape(4, 4))
    # out overlapping a second operand
    b = np.arange(40.0)
    with pytest.raises(tp.PlanError) as info:
        tp.einsum("ij,jk->ik", A, b[:20].reshape(4, 5), out=b[5:20].reshape(3, 5))
    assert_error(info, ValueError, "overlaps operand 1")


def test_autotune_into_an_out_with_gaps():
    """optimize="autotune" times each candidate on an output of out's own layout: a
    contiguous stand-in was written past its end by programs planned for out's gaps (a
    heap corruption).  In a subprocess, so that a corruption fails this test, not the run."""
    code = textwrap.dedent("""
        import numpy as np, teir_plan as tp
        a = np.ones((200, 300), np.float32); b = np.ones((300, 100), np.float32)
        big = np.zeros((200, 400), np.float32)
        for out in (big[:, ::4], big[::-1, 1::4]):
            assert tp.einsum("ij,jk->ik", a, b, out=out, optimize="autotune") is out
            assert np.all(out == 300)
        assert np.all(big[:, 2::4] == 0) and np.all(big[:, 3::4] == 0)  # the gaps
        p = tp.plan("ij,jk->ik", a, b, out=big[:, ::4])
        assert p.explain(measure=True).measured_seconds > 0
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]


def test_a_plan_for_an_out_with_gaps_allocates_that_layout():
    """A plan made for an out= with gaps or negative strides, called without out (and
    each alternative), writes a new array of exactly that layout: its programs are
    proven for those strides alone (a contiguous result was written past its end)."""
    from teir_plan.schedule.operands import OperandSpec

    a = np.arange(12.0).reshape(3, 4)
    b = np.arange(20.0).reshape(4, 5)
    big = np.zeros((3, 24))
    ref = a @ b
    for out in (big[:, ::4][:, :5], big[::-1, :5], big[:, 10:15][::-1, ::-1],
                np.zeros((5, 3)).T):
        p = tp.plan("ij,jk->ik", a, b, out=out)
        for alt in [p, *p.alternatives]:
            r = alt(a, b)
            assert OperandSpec.of(r) == p.out_spec
            np.testing.assert_array_equal(r, ref)
        assert np.all(big == 0)  # only new arrays were written


@pytest.mark.parametrize("shape,strides", [((3, 4), (8, 1)), ((3, 4), (-4, 2)),
                                           ((2, 3, 4), (1, -2, 6)), ((0, 5), (0, 0)),
                                           ((5, 1), (1, 0))])
def test_allocate_gives_exactly_the_layout(shape, strides):
    from teir_plan.schedule.operands import OperandSpec

    spec = OperandSpec(shape, strides, np.dtype(np.float32))
    arr = spec.allocate()
    assert OperandSpec.of(arr) == spec and arr.flags.writeable
    arr[...] = 1.0  # every element is inside the allocation


def test_an_out_layout_seen_before_is_still_checked():
    """A plan remembers out layouts it has checked; a read-only or overlapping out of a
    remembered layout is refused all the same."""
    p = tp.plan("ij,jk->ik", A, B)
    assert p(A, B, out=_fresh_out()) is not None  # the layout is now remembered
    ro = _fresh_out()
    ro.flags.writeable = False
    with pytest.raises(tp.PlanError) as info:
        p(A, B, out=ro)
    assert_error(info, ValueError, "read-only")
    b = np.ones(60)
    a = b[:12].reshape(3, 4)
    p(a, B, out=b[40:55].reshape(3, 5))  # a C-order 3 x 5 out, apart from a
    with pytest.raises(tp.PlanError) as info:
        p(a, B, out=b[5:20].reshape(3, 5))  # the same layout, over a
    assert_error(info, ValueError, "overlaps operand 0")
    np.testing.assert_array_equal(b[:40], 1.0)


def test_plan_out_errors():
    p = tp.plan("ij,jk->ik", A, B)
    ro = _fresh_out()
    ro.flags.writeable = False
    cases = [
        (_fresh_out((5, 3)), tp.PlanError, ValueError, ["out", "shape"]),
        (_fresh_out(dtype=np.float32), tp.DTypeError, TypeError, ["out", "dtype"]),
        # a plan's out dtype is fixed: a wider out needs a plan made with out=
        (_fresh_out(dtype=np.complex128), tp.DTypeError, TypeError, ["out", "dtype"]),
        (np.full((5, 3), SENTINEL).T, tp.PlanError, ValueError, ["out", "strides"]),
        (np.full((3, 10), SENTINEL)[:, ::2], tp.PlanError, ValueError, ["out", "strides"]),
        (ro, tp.PlanError, ValueError, ["read-only"]),
        ("out", tp.OperandTypeError, TypeError, ["out", "str"]),
    ]
    for out, exc, base, words in cases:
        with pytest.raises(exc) as info:
            p(A, B, out=out)
        assert_error(info, base, *words)
        if isinstance(out, np.ndarray):
            assert (out == SENTINEL).all()
    buf = np.ones(40)
    a = buf[:12].reshape(3, 4)
    with pytest.raises(tp.PlanError) as info:
        p(a, B, out=buf[5:20].reshape(3, 5))
    assert_error(info, ValueError, "overlaps operand 0")
    np.testing.assert_array_equal(buf, 1.0)
    # a plan made for an F-ordered out runs only with F-ordered outs
    pf = tp.plan("ij,jk->ik", A, B, out=np.empty((5, 3)).T)
    c_out = _fresh_out()
    with pytest.raises(tp.PlanError) as info:
        pf(A, B, out=c_out)
    assert_error(info, ValueError, "out", "strides")
    assert (c_out == SENTINEL).all()
    f_out = np.full((5, 3), SENTINEL).T
    assert pf(A, B, out=f_out) is f_out
    np.testing.assert_array_equal(f_out, A @ B)


# ---- sizes that overflow 64-bit offsets --------------------------------------------------


@pytest.mark.parametrize(
    "sub,shapes",
    [
        ("ij,jk->ik", [(2**40, 2**40), (2**40, 2)]),
        ("i,j->ij", [(2**32,), (2**32,)]),
        ("ij->j", [(2**40, 2**40)]),  # ("ij->ji" is a view: nothing is addressed)
        ("ijk->", [(2**21, 2**21, 2**21)]),
    ],
)
def test_planned_shapes_whose_offsets_overflow(sub, shapes):
    with pytest.raises(tp.TEIRPlanError) as info:
        tp.plan(sub, *shapes)
    assert_error(info, ValueError, "overflow")


# ---- TEIR programs run through tp.execute: in a subprocess -----------------------------

# Each case builds (program, arrays); the child runs tp.execute and reports the
# exception and whether every array kept its contents.
EXECUTE_CASES = {
    "control (valid)": "copy([6], [[1], [1]], np.arange(6.0), out(6))",
    "positive stride past the end of in0": "copy([7], [[1], [1]], np.arange(6.0), out(7))",
    "positive stride past the end of out": "copy([6], [[1], [2]], np.arange(6.0), out(6))",
    "negative stride before the start of in0": "copy([6], [[-1], [1]], np.arange(6.0), out(6))",
    "negative stride before the start of out": "copy([6], [[1], [-1]], np.arange(6.0), out(6))",
    "negative stride past a reversed view": (
        "copy([4], [[-1], [1]], np.arange(6.0)[::-1][:3], out(4))"),
    "stride into the gaps of a strided view": "copy([3], [[1], [1]], np.arange(6.0)[::2], out(3))",
    "strided view, stride past its last element": (
        "copy([4], [[2], [1]], np.arange(6.0)[::2], out(4))"),
    "2-d view, row stride past the last row": (
        "copy([3, 4], [[5, 1], [4, 1]], np.arange(20.0).reshape(4, 5)[:2, :4], out(12))"),
    "gemm, in1 too small": (
        "gemm([4, 5, 6], np.ones(24), np.ones(29), out(20))"),
    "gemm, out too small": (
        "gemm([4, 5, 6], np.ones(24), np.ones(30), out(19))"),
    "overflow: sizes 2**40 x 2**40": (
        "copy([2**40, 2**40], [[1, 2**40], [1, 2**40]], np.ones(6), out(6))"),
    "overflow: negative strides": (
        "copy([2**40, 2**40], [[-1, -2**40], [1, 2**40]], np.ones(6), out(6))"),
    "overflow: huge stride": "copy([3], [[2**62], [1]], np.ones(6), out(3))",
    "wrong dtype": "copy([6], [[1], [1]], np.ones(6, np.float32), out(6))",
    "wrong dtype of out": "copy([6], [[1], [1]], np.ones(6), out(6, np.float32))",
    "integer arrays": "copy([6], [[1], [1]], np.ones(6, np.int64), out(6, np.int64))",
    "non-native byte order": "copy([6], [[1], [1]], np.ones(6, '>f8'), out(6))",
    "out is in0": "same([6], [[1], [1]])",
    "out overlaps in0": "shifted([4], [[1], [1]])",
    "out read-only": "copy([6], [[1], [1]], np.ones(6), readonly(out(6)))",
    "too few arrays": "(prog_copy([6], [[1], [1]]), [out(6)])",
    "too many arrays": "(prog_copy([6], [[1], [1]]), [np.ones(6), np.ones(6), out(6)])",
    "a list instead of an array": "(prog_copy([2], [[1], [1]]), [[1.0, 2.0], out(2)])",
    "empty array": "copy([2], [[1], [1]], np.ones(0), out(2))",
    "misaligned array": "copy([4], [[1], [1]], misaligned(4), out(4))",
    "output stride 0 on a C axis": "copy([6], [[1], [0]], np.arange(6.0), out(6))",
    "not a TEIR program": "('copy', [np.ones(2), out(2)])",
}

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import teir_plan as tp

    S = -777.0

    def out(n, dtype=np.float64):
        return np.full(n, S, dtype)

    def readonly(a):
        a.flags.writeable = False
        return a

    def misaligned(n):
        raw = np.zeros(n * 8 + 1, np.uint8)
        return np.frombuffer(raw.data, dtype=np.float64, count=n, offset=1)

    def prog_copy(sizes, strides, dt="float64"):
        return tp.TEIR.from_fields(
            data_type=dt, prim_first="none", prim_main="copy", prim_last="none",
            dim_types=["c"] * len(sizes), exec_types=["seq"] * len(sizes),
            dim_sizes=sizes, strides=strides)

    def copy(sizes, strides, x, y, dt="float64"):
        return prog_copy(sizes, strides, dt), [x, y]

    def gemm(mnk, a, b, c):
        m, n, k = mnk
        prog = tp.TEIR.from_fields(
            data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
            dim_types=["m", "n", "k"], exec_types=["prim", "prim", "prim"],
            dim_sizes=[m, n, k], strides=[[1, 0, m], [0, k, 1], [1, m, 0]])
        return prog, [a, b, c]

    def same(sizes, strides):
        a = np.full(6, S)
        return prog_copy(sizes, strides), [a, a]

    def shifted(sizes, strides):
        buf = np.full(8, S)
        return prog_copy(sizes, strides), [buf[:4], buf[2:6]]

    for name, src in json.loads(sys.argv[1]).items():
        prog, arrays = eval(src)
        before = [np.array(a, copy=True) for a in arrays]
        rec = {"name": name}
        try:
            tp.execute(prog, *arrays)
            rec["error"] = None
        except Exception as exc:  # reported to the parent
            rec["error"] = type(exc).__name__
            rec["teir_plan_error"] = isinstance(exc, tp.TEIRPlanError)
            rec["value_or_type"] = isinstance(exc, (ValueError, TypeError))
            rec["message"] = str(exc)
        rec["unchanged"] = all(
            np.array_equal(np.asarray(a), b, equal_nan=b.dtype.kind == "f")
            for a, b in zip(arrays, before)
        )
        print("CASE " + json.dumps(rec), flush=True)
    print("DONE", flush=True)
    """
)


@pytest.fixture(scope="module")
def execute_results():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(EXECUTE_CASES)],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CASE "):
            rec = json.loads(line[5:])
            results[rec["name"]] = rec
    return proc, results


EXPECTED = {
    # name: (exception class name, words in the message)
    "positive stride past the end of in0": ("TEIRError", ["strides[0]", "in0"]),
    "positive stride past the end of out": ("TEIRError", ["strides[1]", "out"]),
    "negative stride before the start of in0": ("TEIRError", ["strides[0]", "-5"]),
    "negative stride before the start of out": ("TEIRError", ["strides[1]", "-5"]),
    "negative stride past a reversed view": ("TEIRError", ["strides[0]", "in0"]),
    "stride into the gaps of a strided view": ("TEIRError", ["strides[0]", "in0"]),
    "strided view, stride past its last element": ("TEIRError", ["strides[0]", "in0"]),
    "2-d view, row stride past the last row": ("TEIRError", ["strides[0]", "in0"]),
    "gemm, in1 too small": ("TEIRError", ["strides[1]", "in1"]),
    "gemm, out too small": ("TEIRError", ["strides[2]", "out"]),
    "overflow: sizes 2**40 x 2**40": ("TEIRError", ["overflow"]),
    "overflow: negative strides": ("TEIRError", ["overflow"]),
    "overflow: huge stride": ("TEIRError", ["overflow"]),
    "wrong dtype": ("DTypeError", ["in0", "float32", "float64"]),
    "wrong dtype of out": ("DTypeError", ["out", "float32"]),
    "integer arrays": ("DTypeError", ["int64"]),
    "non-native byte order": ("DTypeError", ["in0", ">f8"]),
    "out is in0": ("TEIRError", ["overlaps", "in0"]),
    "out overlaps in0": ("TEIRError", ["overlaps", "in0"]),
    "out read-only": ("TEIRError", ["read-only"]),
    "too few arrays": ("TEIRError", ["takes 2 arrays", "got 1"]),
    "too many arrays": ("TEIRError", ["takes 2 arrays", "got 3"]),
    "a list instead of an array": ("OperandTypeError", ["in0", "list"]),
    "empty array": ("TEIRError", ["in0", "empty"]),
    "misaligned array": ("TEIRError", ["aligned"]),
    "output stride 0 on a C axis": ("TEIRError", ["strides[1]"]),
    "not a TEIR program": ("TEIRError", ["str"]),
}


def test_execute_subprocess_survived(execute_results):
    proc, results = execute_results
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    assert "DONE" in proc.stdout
    assert set(results) == set(EXECUTE_CASES)
    control = results["control (valid)"]
    assert control["error"] is None and not control["unchanged"], "the control case writes"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_execute_refuses_before_writing(execute_results, name):
    proc, results = execute_results
    assert name in results, f"child did not reach this case:\n{proc.stderr[-3000:]}"
    rec = results[name]
    exc_name, words = EXPECTED[name]
    assert rec["error"] == exc_name, rec
    assert rec["teir_plan_error"] and rec["value_or_type"], rec
    for w in words:
        assert w.lower() in rec["message"].lower(), (w, rec["message"])
    assert rec["unchanged"], f"{name}: an array was written before the error"


# ---- layouts the kernels cannot index by whole elements ---------------------------------

_REC = np.dtype([("x", "<f4"), ("y", "u1")])  # packed records: the x field's stride is 5 bytes


def _odd_address(shape: tuple[int, ...], fill: np.ndarray | None = None) -> np.ndarray:
    """A float32 array starting one byte past an element boundary."""
    n = int(np.prod(shape))
    arr = np.zeros(4 * n + 1, np.uint8)[1:].view(np.float32).reshape(shape)
    if fill is not None:
        arr[...] = fill
    return arr


def test_operands_of_packed_records_and_odd_addresses_are_read_right():
    """A field of a packed record array (byte strides of 5) and an array at an odd
    address: numpy.einsum's answer, on the first call and the cached ones, from
    tp.einsum and from a plan (the kernels read a copy of such operands)."""
    s = np.zeros((6, 7), _REC)
    s["x"] = np.arange(42.0).reshape(6, 7)
    s["y"] = 7
    b = np.arange(35.0, dtype=np.float32).reshape(7, 5)
    for a in (s["x"], s["x"][::-1, ::2], _odd_address((6, 7), np.arange(42.0).reshape(6, 7))):
        sub = "ij,jk->ik" if a.shape[1] == 7 else "ij,j->i"
        ops = (a, b) if a.shape[1] == 7 else (a, np.arange(4.0, dtype=np.float32))
        ref = np.einsum(sub, *(o.astype(np.float64) for o in ops))
        for _ in range(2):  # the first call plans; the second takes the cached path
            np.testing.assert_allclose(tp.einsum(sub, *ops), ref, rtol=1e-6)
        np.testing.assert_allclose(tp.plan(sub, *ops)(*ops), ref, rtol=1e-6)
        np.testing.assert_array_equal(tp.einsum("ij->ji", a), a.T)
        # a plan made for contiguous operands refuses nothing it cannot run: it reads
        # such an operand through its copy
        p = tp.plan(sub, *(np.ascontiguousarray(o) for o in ops))
        np.testing.assert_allclose(p(*ops), ref, rtol=1e-6)
    assert np.all(s["y"] == 7)


def test_an_out_of_packed_records_or_at_an_odd_address_is_written_through_a_copy():
    """Such an out gets numpy's answer and nothing between or around its elements is
    touched (the kernels' writes along rounded-down strides went into the records'
    other field, and before the array for negative strides)."""
    a = np.arange(20.0, dtype=np.float32).reshape(4, 5)
    b = np.arange(30.0, dtype=np.float32).reshape(5, 6)
    ref = a.astype(np.float64) @ b
    s = np.zeros((12, 14), _REC)
    s["y"] = 7
    keep = s.copy()
    for out in (s["x"][2:6, 3:9], s["x"][6:10, 3:9][::-1, ::-1], _odd_address((4, 6))):
        for _ in range(2):
            assert tp.einsum("ij,jk->ik", a, b, out=out) is out
            np.testing.assert_allclose(out, ref, rtol=1e-6)
        p = tp.plan("ij,jk->ik", a, b, out=out)
        out[...] = 0
        assert p(a, b, out=out) is out
        np.testing.assert_allclose(out, ref, rtol=1e-6)
        q = tp.plan("ij,jk->ik", a, b)  # a plan of its own layout, given this out
        out[...] = 0
        np.testing.assert_allclose(q(a, b, out=out), ref, rtol=1e-6)
    assert np.all(s["y"] == 7)
    untouched = np.ones((12, 14), bool)
    untouched[2:10, 3:9] = False
    assert np.all(s["x"][untouched] == keep["x"][untouched])
    s.flags.writeable = False
    with pytest.raises(tp.PlanError, match="read-only"):
        tp.einsum("ij,jk->ik", a, b, out=s["x"][2:6, 3:9])
    # An operand of such a layout is read from its copy before out is written: an out
    # over it gets the answer for the operand's values before the call.
    t = np.zeros((4, 6), _REC)
    t["x"] = np.arange(24.0).reshape(4, 6)
    want = t["x"][:, :5].astype(np.float64) @ b
    tp.einsum("ij,jk->ik", t["x"][:, :5], b, out=t["x"])
    np.testing.assert_allclose(t["x"], want, rtol=1e-6)
    # An out over an operand the kernels read in place is refused, as for any out.
    c = np.zeros((5, 7), np.float32)
    over = c.view(np.uint8).ravel()[1:1 + 4 * 24].view(np.float32).reshape(4, 6)
    with pytest.raises(tp.PlanError, match="overlaps operand 0"):
        tp.einsum("ij,jk->ik", c[:4, :5], b, out=over)

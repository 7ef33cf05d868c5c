"""Tiny matrix products run by ``numpy.dot``: a cached 8 x 8 product's whole call.

A plan whose one step is a single BLAS GEMM tile on its operands in place (no loops,
no packs, no ReLU, small enough that OpenBLAS runs it on the calling thread) does, when
it runs, what ``ndarray.dot`` does with the same operands: one ``?gemm`` call on numpy's
own OpenBLAS, which the executor's BLAS tiles call too (:mod:`teir_plan.blaslib`).
Through the executor that call also pays for the flat views of its arrays and numba's
checks of a dozen arguments, more than the product itself for tiny operands
(docs/decisions.md, "Tiny products on numpy.dot").  A plan whose one tile runs on the
executor's own kernels instead (the vector kernels, the scalar loops) qualifies up to
TINY_MNK_BYTES, below which ``dot``'s call is the cheaper one too.  Such a plan keeps the
route made here (:func:`dot_route`), and its calls (:meth:`Plan.run`, and a call
without ``out``) take it.

Only plain two-operand products qualify: each operand and the result 2-D, with one
index of each role (``ij,jk->ik`` and its transposes), so that the route is a ``dot``
of the operands or their transposes (views), whatever their strides; the result is
written in the layout the plan chose (``Plan.out_spec``, C or F order).  Matrix-vector
products (``ij,j->i``, its transpose, either operand first) qualify too, up to a
matrix of TINY_MV_BYTES, whether the plan runs them as one TEIR tile or on the
reduction kernel (whose call checks 19 arguments), and so do dot products
(``i,i->``) of vectors of up to TINY_DOT_BYTES.

Below TINY_UFUNC_BYTES, the reduction kernel's other calls and the products without a
summed index take numpy's own loops too: a one-operand sum as ``add.reduce`` over a
transposed view (:func:`sum_route`), a product without a summed index as ``multiply``
of views with the result's axes (:func:`multiply_route`), and a diagonal's sum or a
weighted sum of more than two axes as ``numpy.einsum`` itself, its C loop without a
path search (:func:`weighted_sum_route`).  :attr:`Plan.numpy_call` names the function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from teir_plan.frontend.expression import Expression
from teir_plan.schedule.operands import OperandSpec
from teir_plan.schedule.steps import ReduceStep, Step, TEIRStep
from teir_plan.teir.enums import Prim

try:  # numpy's floating-point error state, as np.errstate sets it (a context variable)
    from numpy._core.multiarray import c_einsum as _c_einsum
    from numpy._core.umath import _extobj_contextvar as _errstate
    from numpy._core.umath import _make_extobj

    _QUIET: Any = _make_extobj(all="ignore")
except (ImportError, TypeError):  # numpy 1.x: no route
    _QUIET = None

# The largest m n k (times the element's bytes) of a product the executor would run on
# its own kernels that dot runs instead: 16384 in float64 (25^3), 32768 in float32
# (docs/decisions.md).  A product the plan runs as one BLAS call is the same call either
# way, at any size that runs on one thread.
TINY_MNK_BYTES = 131072
# The largest matrix (in bytes) of a matrix-vector product the reduction kernel or a
# TEIR program would run that dot runs instead (docs/decisions.md): numpy's OpenBLAS
# runs such a ?gemv on one thread up to at least 1 MiB (the same time with its threads
# limited to one, and no thread of its own left running after: 181^2 to 512^2 float32,
# 256^2 and 362^2 float64).
TINY_MV_BYTES = 1 << 20
TINY_DOT_BYTES = 131072  # ... and the largest vectors of a dot product (``i,i->``)

# The most flops of a two-operand product that numpy.einsum's own C loop (no path
# search) runs instead of the executor, whatever its form (``abc,cd->abd``): below it
# the executor's fixed cost of a call (its arguments checked by numba, the flat views:
# some 6-7 us on an AMD EPYC Zen 3) is more than the loop's whole time (3-5 us up to a
# few thousand multiply-adds; equal near 10,000 flops, and 3-4x slower at 200,000).
TINY_EINSUM_FLOPS = 4096

# The largest operand (in bytes) of a one-operand sum, and the largest result of a
# product without a summed index (``ij,j->ij``, ``i,j->ij``), that numpy's add.reduce
# and multiply run instead of the executor (docs/decisions.md).
TINY_UFUNC_BYTES = 131072

# (x, y) -> the result, a new array in the plan's layout
Route = Callable[[np.ndarray, np.ndarray], np.ndarray]
# (x, y, out) -> None, out written (checked by the caller)
RouteInto = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
# The same for one operand: x -> the result; (x, out) -> None
Route1 = Callable[[np.ndarray], np.ndarray]
RouteInto1 = Callable[[np.ndarray, np.ndarray], None]
Empty = Callable[[], np.ndarray]  # a new result in the plan's layout


def dot_route(step: Step, expression: Expression, out_axes: tuple[int, ...]
              ) -> tuple[Route, RouteInto] | None:
    """The product of a plan of one step from its two operands into the result, as
    ``dot`` calls (into a new array, into ``out``), or None unless the step qualifies
    as the module's text says.  ``out_axes``: the result's memory order, outermost
    first, of a contiguous result."""
    if type(step) is ReduceStep:
        # A matrix-vector product on the reduction kernel, whose call checks 19 arguments.
        red = step.reduction
        if (red.weighted and red.dtype.kind == "f" and step.dst == 2
                and sorted(step.inputs) == [0, 1]):
            return _vector_route(expression, red.dtype)
        return None
    if type(step) is not TEIRStep:
        return None
    low = step.chosen.lowered
    prims = step.teir.primitives
    if not (low.serial and not low.limits_blas and len(low.loops) == 0
            and not step.chosen.packs and low.dtype.kind == "f"
            and prims.prim_first is Prim.ZERO
            and prims.prim_main is Prim.GEMM and prims.prim_last is Prim.NONE
            and step.inputs == (0, 1) and step.dst == 2):
        return None
    if len(expression.inputs) != 2:
        return None
    if len(expression.output) <= 1:
        return _vector_route(expression, low.dtype)
    if out_axes not in ((0, 1), (1, 0)):
        return None
    t0, t1 = expression.inputs
    to = expression.output
    if not all(len(t) == len(set(t)) == 2 for t in (t0, t1, to)):
        return None
    shared = set(t0) & set(t1)
    if len(shared) != 1 or shared & set(to) or set(to) != (set(t0) | set(t1)) - shared:
        return None
    (k,) = shared
    p, q = to[0], to[1]
    mnk = expression.extent(p) * expression.extent(q) * expression.extent(k)
    if not low.plain_blas and mnk * low.dtype.itemsize > TINY_MNK_BYTES:
        return None
    # The result's rows (p) come from the operand holding p: "left", as (p, k); the
    # other, "right", as (k, q).
    swap = p not in t0
    left, right = (t1, t0) if swap else (t0, t1)
    tl = left != p + k  # left is (k, p): its transpose
    tr = right != k + q
    if out_axes == (1, 0):
        # Column-major result: its transpose (q, p) = right^T (q, k) @ left^T (k, p) is a
        # new C-order array; the result is its transposed view.
        return _make(not swap, not tr, not tl, True)
    return _make(swap, tl, tr, False)


def _vector_route(expression: Expression, dtype: np.dtype) -> tuple[Route, RouteInto] | None:
    """A tiny matrix-vector product (``ij,j->i``, its transpose, either operand first) or
    dot product (``i,i->``, into a 0-d array) as ``dot``, or None unless ``expression``
    is one."""
    if len(expression.inputs) != 2:
        return None
    t0, t1 = expression.inputs
    to = expression.output
    if len(t0) == len(t1) == 1 and t0 == t1 and to == "":
        if expression.extent(t0) * dtype.itemsize > TINY_DOT_BYTES:
            return None
        return _make_dot(dtype)
    swap = len(t0) == 1  # the matrix is operand 1
    mat, vec = (t1, t0) if swap else (t0, t1)
    if not (len(mat) == len(set(mat)) == 2 and len(vec) == 1 and len(to) == 1
            and vec in mat and to in mat and to != vec):
        return None
    extents = expression.extent_map
    if extents[mat[0]] * extents[mat[1]] * dtype.itemsize > TINY_MV_BYTES:
        return None
    return _make(swap, mat != to + vec, False, False)


def _make_dot(dtype: np.dtype) -> tuple[Route, RouteInto] | None:
    """x.dot(y) of two vectors into a 0-d array (dot itself returns a numpy scalar)."""
    if _QUIET is None:
        return None

    def route(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = np.empty((), dtype)
        into(x, y, r)
        return r

    def into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        token = _errstate.set(_QUIET)
        try:
            if out.flags.carray:
                x.dot(y, out=out)
            else:
                out[()] = x.dot(y)
        finally:
            _errstate.reset(token)

    return route, into


def _make(swap: bool, ta: bool, tb: bool, tout: bool) -> tuple[Route, RouteInto] | None:
    """A.dot(B) with A the first operand (the second if ``swap``), transposed if ``ta``,
    B the other, transposed if ``tb``; the result transposed if ``tout``.  numpy's
    floating-point error state is set to ignore around the product, as the executor and
    numpy.einsum ignore it (a product of inf and 0 is nan, with no RuntimeWarning or
    FloatingPointError); None where that state cannot be set (numpy before 2.0)."""
    if _QUIET is None:
        return None

    def route(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        token = _errstate.set(_QUIET)
        try:
            if swap:
                x, y = y, x
            r = (x.T if ta else x).dot(y.T if tb else y)
        finally:
            _errstate.reset(token)
        return r.T if tout else r  # type: ignore[no-any-return]

    def into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        if swap:
            x, y = y, x
        _dot_into((x.T if ta else x), (y.T if tb else y), (out.T if tout else out))

    if not (swap or ta or tb or tout):
        def route_plain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            token = _errstate.set(_QUIET)
            try:
                return x.dot(y)
            finally:
                _errstate.reset(token)

        return route_plain, _dot_into
    return route, into


def _dot_into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """x @ y into ``out``, numpy's floating-point error state ignored around it."""
    token = _errstate.set(_QUIET)
    try:
        if out.flags.carray:  # (dot's condition for out=: C order, aligned)
            x.dot(y, out=out)
        else:
            np.matmul(x, y, out=out)
    finally:
        _errstate.reset(token)


def sum_route(step: Step, expression: Expression, dtype: np.dtype, empty: Empty,
              layout: Callable[[], str] = str
              ) -> tuple[str, tuple[Route1, RouteInto1]] | None:
    """A tiny one-operand sum (``ij->j``, ``ijk->ki``, ``ij->``) on numpy, named: its
    einsum loop, or ``add.reduce`` over a transposed view of the operand (kept axes in
    the result's order, then the summed ones) where an index is not one of numpy's
    letters; None unless the plan's one step is the reduction kernel on an operand (of
    ``dtype``, the result's) of distinct indices of at most TINY_UFUNC_BYTES.
    ``empty`` makes the result of a call without ``out``, where numpy's own is not in
    the plan's layout (``layout``, as for :func:`small_product_route`).  einsum's loop
    took half of add.reduce's time up to TINY_UFUNC_BYTES (0.84-8.0 against 1.6-26 us
    on 2.7-131 KB operands, Xeon): a reduction over several axes costs the ufunc
    more."""
    if _QUIET is None or type(step) is not ReduceStep:
        return None
    if step.reduction.weighted or step.inputs != (0,) or step.dst != 1:
        return None
    if not _one_operand_sum(expression, dtype):
        return None
    (term,) = expression.inputs
    out = expression.output
    if len(set(term)) != len(term):
        return None  # a diagonal: diagonal_sum_route
    routed = _einsum_route(expression, empty, layout)  # (of one operand: a Route1)
    if routed is not None:
        return "einsum", routed  # type: ignore[return-value]
    perm = tuple(term.index(c) for c in out) + tuple(
        i for i, c in enumerate(term) if c not in out)
    axes = tuple(range(len(out), len(term)))

    def into(x: np.ndarray, r: np.ndarray) -> None:
        token = _errstate.set(_QUIET)
        try:
            np.add.reduce(x.transpose(perm), axis=axes, out=r)
        finally:
            _errstate.reset(token)

    return "add.reduce", (partial(_new, empty, into), into)


def diagonal_sum_route(step: Step, expression: Expression, dtype: np.dtype, empty: Empty
                       ) -> tuple[Route1, RouteInto1] | None:
    """A tiny sum over a diagonal (``ii->``, ``iij->j``) as numpy.einsum's own loop, or
    None unless the plan's one step is the reduction kernel on such an operand of at
    most TINY_UFUNC_BYTES."""
    if type(step) is not ReduceStep or step.reduction.weighted:
        return None
    if not _one_operand_sum(expression, dtype):
        return None
    (term,) = expression.inputs
    if len(set(term)) == len(term):
        return None  # no diagonal: sum_route
    into = _einsum_into(expression)
    return None if into is None else (partial(_new, empty, into), into)


def _one_operand_sum(expression: Expression, dtype: np.dtype) -> bool:
    """Whether ``expression`` sums one operand (of the result's ``dtype``, float or
    complex) of at most TINY_UFUNC_BYTES into distinct indices of it."""
    if len(expression.inputs) != 1 or dtype.kind not in "fc":
        return False
    (term,) = expression.inputs
    out = expression.output
    return (len(set(out)) == len(out) and set(out) <= set(term)
            and _operand_bytes(expression, dtype) <= TINY_UFUNC_BYTES)


def multiply_route(step: Step, expression: Expression, empty: Empty
                   ) -> tuple[Route, RouteInto] | None:
    """A tiny product of two operands without a summed index (``ij,ij->ij``,
    ``ij,j->ij``, ``i,j->ij``) as numpy's ``multiply`` of views of the operands with the
    result's axes (transposed, a new axis where an operand lacks one), or None unless
    the plan's one step is a TEIR program without ReLU writing at most TINY_UFUNC_BYTES.
    Each element is one product, as the executor computes it: the same values."""
    if _QUIET is None or type(step) is not TEIRStep:
        return None
    low = step.chosen.lowered
    if (low.dtype.kind not in "fc" or step.teir.primitives.prim_last is not Prim.NONE
            or step.inputs != (0, 1) or step.dst != 2 or len(expression.inputs) != 2):
        return None
    out = expression.output
    terms = expression.inputs
    if (any(len(set(t)) != len(t) for t in (*terms, out))
            or set(terms[0]) | set(terms[1]) != set(out)):
        return None
    extents = expression.extent_map
    if math.prod(extents[c] for c in out) * low.dtype.itemsize > TINY_UFUNC_BYTES:
        return None
    # Per operand: its axes in the result's order, then a new axis per missing index.
    views = []
    for t in terms:
        perm = tuple(t.index(c) for c in out if c in t)
        index = tuple(slice(None) if c in t else None for c in out)
        views.append((perm, index))
    (p0, i0), (p1, i1) = views

    def into(x: np.ndarray, y: np.ndarray, r: np.ndarray) -> None:
        token = _errstate.set(_QUIET)
        try:
            np.multiply(x.transpose(p0)[i0], y.transpose(p1)[i1], out=r)
        finally:
            _errstate.reset(token)

    return partial(_new, empty, into), into


def weighted_sum_route(step: Step, expression: Expression, dtype: np.dtype, empty: Empty,
                       layout: Callable[[], str] = str) -> tuple[Route, RouteInto] | None:
    """A tiny operand times weights along its summed indices (``ij,ij->``,
    ``ijk,jk->i``: the reduction kernel's weighted sums that are not a matrix-vector
    product of two 2-D operands) as numpy.einsum's own loop, or None unless the plan's
    one step is that kernel on operands of at most TINY_UFUNC_BYTES in all."""
    if type(step) is not ReduceStep or not step.reduction.weighted or dtype.kind not in "fc":
        return None
    if sorted(step.inputs) != [0, 1] or step.dst != 2 or len(expression.inputs) != 2:
        return None
    if _operand_bytes(expression, dtype) > TINY_UFUNC_BYTES:
        return None
    return _einsum_route(expression, empty, layout)


def small_product_route(step: Step, expression: Expression, dtype: np.dtype, empty: Empty,
                        layout: Callable[[], str] = str) -> tuple[Route, RouteInto] | None:
    """A two-operand product of at most TINY_EINSUM_FLOPS as numpy.einsum's own loop
    (its C loop: numpy.einsum without optimize), or None: the plan's one step must be a
    TEIR program reading the two operands into the result."""
    if type(step) is not TEIRStep or dtype.kind not in "fc" or len(expression.inputs) != 2:
        return None
    if sorted(step.inputs) != [0, 1] or step.dst != 2:
        return None
    prims = step.teir.primitives
    if (step.chosen.cost.flops > TINY_EINSUM_FLOPS or prims.prim_first is not Prim.ZERO
            or prims.prim_last is not Prim.NONE):
        return None  # (ReLU, or a sum into what out holds: not numpy.einsum's)
    return _einsum_route(expression, empty, layout)


def _operand_bytes(expression: Expression, dtype: np.dtype) -> int:
    extents = expression.extent_map
    return sum(math.prod(extents[c] for c in t) for t in expression.inputs) * dtype.itemsize


def _new(empty: Empty, into: Callable[..., None], *ops: np.ndarray) -> np.ndarray:
    """``into`` the operands' result, written into a new array from ``empty``."""
    r = empty()
    into(*ops, r)
    return r


def _einsum_into(expression: Expression) -> Callable[..., None] | None:
    """numpy.einsum of the expression (no optimize: its C loop, no path search) into
    ``out``, the last argument; None when an index is not one of numpy's 52 letters."""
    subscripts = expression.subscripts
    if _QUIET is None or not all(c in _NUMPY_LETTERS for c in subscripts if c not in ",->"):
        return None

    def into(*arrays: np.ndarray) -> None:
        # numpy.einsum without optimize is this call, after checking its arguments.  Its
        # loops read no floating-point flags (inf * 0 gives nan under
        # np.errstate(all="raise")), so unlike the ufunc routes it needs no errstate.
        _c_einsum(subscripts, *arrays[:-1], out=arrays[-1])

    return into


def _einsum_route(expression: Expression, empty: Empty, layout: Callable[[], str]
                  ) -> tuple[Route, RouteInto] | None:
    """numpy.einsum's loop as a route: into the result it allocates itself when that is
    in the plan's layout (``layout()``, asked only of a route: :func:`einsum_layout`'s
    "K" when numpy's own choice is the plan's, "C" when the plan's is C order) or else
    into ``empty``'s.
    Each call that numpy's allocation saves is a fifth of a tiny product's time, and a
    keyword argument (``order``) a tenth."""
    into = _einsum_into(expression)
    if into is None:
        return None
    order = layout()
    if order == "K":
        return partial(_c_einsum, expression.subscripts), into
    if order == "C":
        return partial(_c_einsum, expression.subscripts, order="C"), into
    return partial(_new, empty, into), into


def einsum_layout(subscripts: str, operands: Sequence[OperandSpec], out: OperandSpec,
                  c_order: bool) -> str:
    """"K" when numpy.einsum (order "K") lays the result of operands of these layouts
    out as ``out`` is, "C" when ``out`` is in C order (``c_order``), else "": read off
    one call on arrays of the operands' layouts (tiny: the routes' operands are)."""
    arrays = []
    for spec in operands:
        extent = 1 + sum((n - 1) * abs(st) for n, st in zip(spec.shape, spec.strides))
        base = np.zeros(extent, spec.dtype)
        offset = sum((n - 1) * -st for n, st in zip(spec.shape, spec.strides) if st < 0)
        arrays.append(np.lib.stride_tricks.as_strided(
            base[offset:], spec.shape, tuple(st * spec.dtype.itemsize for st in spec.strides)))
    try:
        r = _c_einsum(subscripts, *arrays)
    except (TypeError, ValueError):  # (whatever numpy refuses is not routed)
        return "C" if c_order else ""
    same = r.dtype == out.dtype and all(
        n == 1 or st // r.itemsize == want
        for n, st, want in zip(r.shape, r.strides, out.strides))
    return "K" if same else ("C" if c_order else "")


_NUMPY_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

"""Checks between a program and the arrays it runs on, made before anything is written.

The executor addresses each array as flat memory from its first element, so the
one property that keeps it memory-safe is proven here: every offset
``sum(i_k * strides[j][k])`` the program can form lies on an element of array j.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.divisors import divisors
from teir_plan.errors import DTypeError, OperandTypeError, TEIRError
from teir_plan.teir.records import TEIR

if TYPE_CHECKING:
    from teir_plan.teir.parallel_k import PartialLayout

_OFFSET_LIMIT = 2**62


def check_arrays(teir: TEIR, arrays: Sequence[object]) -> None:
    """Raise unless ``arrays`` (in0, [in1,] out) can run ``teir`` safely."""
    names = teir.tensor_names
    if len(arrays) != len(names):
        kind = "unary" if teir.is_unary else "binary"
        raise TEIRError(
            f"execute: a {kind} program ({teir.primitives.prim_main}) takes "
            f"{len(names)} arrays {names}, got {len(arrays)}"
        )
    if teir.primitives.data_type.is_half:
        raise DTypeError(
            f"data_type: the executor's TEIR kernels have no 16-bit type yet, so a "
            f"{teir.primitives.data_type} program cannot run (run its schedule with "
            f"data_type float32 on float32 arrays; tp.einsum takes float16 and bfloat16 "
            f"arrays: its reductions read them in place, its other steps convert them to "
            f"float32 once per call)"
        )
    want = teir.primitives.data_type.numpy
    for name, arr in zip(names, arrays):
        if not isinstance(arr, np.ndarray):
            raise OperandTypeError(f"{name}: expected a numpy.ndarray, got {type(arr).__name__}")
        if arr.dtype != want:
            raise DTypeError(
                f"{name}: dtype {arr.dtype} does not match the program's data_type "
                f"{teir.primitives.data_type}"
            )
        if not arr.dtype.isnative:
            raise DTypeError(f"{name}: non-native byte order {arr.dtype.str} is not supported")
        if not arr.flags.aligned or any(st % arr.itemsize for st in arr.strides):
            raise TEIRError(f"{name}: array is not aligned to its element size")
    out = arrays[-1]
    assert isinstance(out, np.ndarray)
    if not out.flags.writeable:
        raise TEIRError(f"{names[-1]}: array is read-only")
    s = teir.schedule
    for j, (name, arr) in enumerate(zip(names, arrays)):
        assert isinstance(arr, np.ndarray)
        check_reach(name, j, arr, s.dim_sizes, s.strides[j])
    for name, arr in zip(names[:-1], arrays[:-1]):
        if arrays_overlap(out, arr):  # type: ignore[arg-type]
            raise TEIRError(f"{names[-1]}: output overlaps input {name} in memory")


def prove_partials(teir: TEIR, layout: PartialLayout) -> None:
    """Prove that a program with parallel K axes, run by workers into private blocks
    (teir/parallel_k.py), reaches no address the program itself does not, given that
    :func:`check_arrays` accepted the program: the block program reads each input along
    the program's own (extent, stride) pairs; its output offsets, and the reduction's
    block offsets, lie in [0, elements) of a block; and the reduction writes the output
    along the program's own output axes, from its origin.  Raises TEIRError (a bug in
    the split, never the caller's) if not."""
    s, b = teir.schedule, layout.block.schedule

    def axes(sizes: Sequence[int], strides: Sequence[int]) -> list[tuple[int, int]]:
        return sorted((n, st) for n, st in zip(sizes, strides) if n > 1 and st != 0)

    for j in range(teir.num_tensors - 1):
        if axes(s.dim_sizes, s.strides[j]) != axes(b.dim_sizes, b.strides[j]):
            raise TEIRError(f"strides[{j}]: the parallel-k block program does not read "
                            f"{teir.tensor_names[j]} along the program's own axes")
    rows = list(layout.rows)
    spans = {
        "the block program's output": [(n, st) for n, st in zip(b.dim_sizes, b.strides[-1])],
        "the reduction's blocks": [(n, sb) for n, _, sb in rows],
    }
    for what, pairs in spans.items():
        if any(st < 0 for _, st in pairs) or sum((n - 1) * st for n, st in pairs) >= max(
                layout.elements, 1):
            raise TEIRError(f"strides[{teir.num_tensors - 1}]: {what} reaches outside a "
                            f"block of {layout.elements} elements")
    if rows and rows[-1][2] != 1:
        raise TEIRError(f"strides[{teir.num_tensors - 1}]: the parallel-k reduction's "
                        f"innermost row must have unit stride in the blocks")
    if axes([n for n, _, _ in rows], [so for _, so, _ in rows]) != axes(s.dim_sizes,
                                                                      s.strides[-1]):
        raise TEIRError(f"strides[{teir.num_tensors - 1}]: the parallel-k reduction does "
                        f"not write the output along the program's own axes")


def arrays_overlap(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=1_000_000))  # type: ignore[arg-type]
    except np.exceptions.TooHardError:
        return True  # cannot rule it out cheaply: refuse rather than risk a wrong answer


def _element_dims(arr: np.ndarray) -> list[tuple[int, int]]:
    """(extent, element stride) of the dims that move through memory, with dims whose
    strides compose merged, largest stride first."""
    return list(_dims_of(tuple(arr.shape), tuple(arr.strides), arr.itemsize))


def forget_layouts() -> None:
    """Drop the remembered layouts' dims (timing a plan as for a problem never seen)."""
    _dims_of.cache_clear()


# Layouts whose dims are remembered: a plan proves each of its candidates' reach in the
# same few buffers (a 100-tensor network: 2658 proofs of tensors in a plan).
@lru_cache(maxsize=1024)
def _dims_of(shape: tuple[int, ...], strides: tuple[int, ...], isz: int
             ) -> tuple[tuple[int, int], ...]:
    dims = sorted(
        ((n, st // isz) for n, st in zip(shape, strides) if n > 1 and st != 0),
        key=lambda d: -abs(d[1]),
    )
    merged: list[tuple[int, int]] = []
    for n, st in reversed(dims):  # smallest stride first
        if merged and merged[-1][1] * merged[-1][0] == st:
            inner_n, inner_st = merged.pop()
            merged.append((inner_n * n, inner_st))
        else:
            merged.append((n, st))
    return tuple(sorted(merged, key=lambda d: -abs(d[1])))


def check_reach(
    name: str, j: int, arr: np.ndarray, sizes: Sequence[int], strides: Sequence[int]
) -> None:
    axes = [(n, st) for n, st in zip(sizes, strides) if n > 1 and st != 0]
    lo = sum(min(0, (n - 1) * st) for n, st in axes)
    hi = sum(max(0, (n - 1) * st) for n, st in axes)
    if max(-lo, hi) >= _OFFSET_LIMIT:
        raise TEIRError(f"strides[{j}]: offsets into {name} overflow 64-bit integers")
    if arr.size == 0:
        raise TEIRError(f"{name}: array is empty, but the program reads or writes it")
    dims = _element_dims(arr)
    # Offsets of the array's elements relative to its first element.
    a_lo = sum(min(0, (n - 1) * st) for n, st in dims)
    a_hi = sum(max(0, (n - 1) * st) for n, st in dims)
    if _dense(dims):
        # The elements tile [a_lo, a_hi] once each, without gaps: a range check is exact.
        if lo < a_lo or hi > a_hi:
            raise TEIRError(
                f"strides[{j}]: the program reaches offsets {lo}..{hi} of {name}, whose "
                f"elements span offsets {a_lo}..{a_hi} from its first element"
            )
        return
    # A view with gaps (or with dims that overlap): every program axis must step along
    # the array's own dims, each with a non-negative index step, so that all the
    # program's index steps together keep every dim's index inside 0..n-1.  Then
    # every offset the program forms is the offset of an element.
    axes_at = [(i, n, st) for i, (n, st) in enumerate(zip(sizes, strides)) if n > 1 and st != 0]
    options: list[tuple[int, list[tuple[int, ...]]]] = []
    for i, n, st in axes_at:
        if not _walk_options(n, st, dims, options):
            raise TEIRError(
                f"strides[{j}][{i}]: stride {st} over {n} steps does not stay on elements "
                f"of {name} (a non-contiguous view with strides {[d[1] for d in dims]} in "
                f"elements)"
            )
    if not _fits(options, [n - 1 for n, _ in dims]):
        raise TEIRError(
            f"strides[{j}]: the program reaches outside the elements of {name} "
            f"(a non-contiguous view of shape {arr.shape})"
        )


_SEARCH_LIMIT = 20_000  # nodes per proof; past it the program is refused (never accepted)
_SPLIT_LIMIT = 64  # splits of one program axis tried (see _walk_options)


def _dense(dims: list[tuple[int, int]]) -> bool:
    """Do dims of these (extent, stride) pairs hit every offset of their span exactly once?"""
    expect = 1
    for n, st in sorted(dims, key=lambda d: abs(d[1])):
        if abs(st) != expect:
            return False
        expect *= n
    return True


def _walk_options(n: int, st: int, dims: list[tuple[int, int]],
                  options: list[tuple[int, list[tuple[int, ...]]]],
                  budget: list[int] | None = None) -> bool:
    """Append to ``options`` the ways a program axis of extent ``n`` and stride ``st``
    walks the array's dims, and return True; False if it cannot.  An axis that walks
    none of them uniformly is taken as an outer and an inner axis (extent n = n1 * n2:
    offsets (i1 * n2 + i2) * st, the same ones), each of which must: a planner's fused
    axis over a diagonal and another dim (strides 8, -4, 2: diagonal 4, fused with 2 into
    4 steps of 2) walks the dims only as its two parts."""
    budget = [_SPLIT_LIMIT] if budget is None else budget
    found = _decompose(st, n, dims)
    if found:
        options.append((n, found))
        return True
    for inner in _divisors(n):
        budget[0] -= 1
        if budget[0] < 0:
            return False  # refused, never accepted
        parts: list[tuple[int, list[tuple[int, ...]]]] = []
        if (_walk_options(n // inner, st * inner, dims, parts, budget)
                and _walk_options(inner, st, dims, parts, budget)):
            options.extend(parts)
            return True
    return False


def _divisors(n: int) -> Iterator[int]:
    """The divisors of n other than 1 and n (each pair d, n / d, smallest d first): read
    from teir_plan.divisors' factoring, which is bounded on any extent, where a scan up
    to sqrt(n) ran for hours on a prime near 2**62."""
    for d in divisors(n)[1:]:
        if d * d > n:
            return
        yield d
        if d != n // d:
            yield n // d


def _decompose(st: int, n: int, dims: list[tuple[int, int]]) -> list[tuple[int, ...]]:
    """Index steps q (q[d] >= 0, (n-1) * q[d] <= extent_d - 1) with sum q[d] * stride_d
    == st: the ways one program axis of extent n can walk the array's dims."""
    caps = [(m - 1) // (n - 1) for m, _ in dims]
    # Offsets the dims after d can still add: prune branches that cannot reach st.
    lo_rest = [0] * (len(dims) + 1)
    hi_rest = [0] * (len(dims) + 1)
    for d in range(len(dims) - 1, -1, -1):
        step = caps[d] * dims[d][1]
        lo_rest[d] = lo_rest[d + 1] + min(0, step)
        hi_rest[d] = hi_rest[d + 1] + max(0, step)
    found: list[tuple[int, ...]] = []
    budget = [_SEARCH_LIMIT]

    def walk(d: int, rest: int, q: list[int]) -> None:
        budget[0] -= 1
        if budget[0] < 0 or len(found) >= 16:
            return
        if d == len(dims):
            if rest == 0:
                found.append(tuple(q))
            return
        s = dims[d][1]
        # c with lo_rest[d + 1] <= rest - c * s <= hi_rest[d + 1], and 0 <= c <= caps[d].
        a, b = rest - hi_rest[d + 1], rest - lo_rest[d + 1]
        if s < 0:
            a, b, s = -b, -a, -s
        for c in range(max(0, -(-a // s)), min(caps[d], b // s) + 1):
            if budget[0] < 0 or len(found) >= 16:
                return
            q.append(c)
            walk(d + 1, rest - c * dims[d][1], q)
            q.pop()

    if lo_rest[0] <= st <= hi_rest[0]:
        walk(0, st, [])
    return found


def _fits(options: list[tuple[int, list[tuple[int, ...]]]], room: list[int]) -> bool:
    """Can each program axis (extent n, its candidate index steps) pick one so that the
    index steps, times n - 1, summed over axes stay within every dim's room?"""
    budget = [_SEARCH_LIMIT]

    def pick(a: int, left: list[int]) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        if a == len(options):
            return True
        n, found = options[a]
        for q in found:
            used = [left[d] - q[d] * (n - 1) for d in range(len(left))]
            if min(used, default=0) >= 0 and pick(a + 1, used):
                return True
        return False

    return pick(0, list(room))


def as_type(view: tuple[np.ndarray, int], dtype: np.dtype) -> tuple[np.ndarray, int]:
    """A flat view (:func:`flat_view`) and offset in a program's element type: a complex64
    Copy program runs on float64 words (lower: copy_alias), a real program or reduction
    on a complex array addresses its parts (schedule/parts.py), whose offsets are twice
    its elements'."""
    arr, offset = view
    if arr.dtype == dtype:
        return view
    return arr.view(dtype), offset * arr.itemsize // dtype.itemsize


def flat_view(arr: np.ndarray) -> tuple[np.ndarray, int]:
    """A writable-typed 1-D view of the memory ``arr`` spans, and the index of its first
    element in that view.  The kernels never write through views of inputs."""
    flags = arr.flags  # a new object on each access: read once
    if flags.writeable and (flags.c_contiguous or flags.f_contiguous):
        # ravel of a contiguous array is a view (and 5x faster to call than reshape).
        return arr.ravel("A"), 0
    isz = arr.itemsize
    start = arr.ctypes.data
    lo = start + sum(min(0, (n - 1) * st) for n, st in zip(arr.shape, arr.strides))
    hi = start + sum(max(0, (n - 1) * st) for n, st in zip(arr.shape, arr.strides)) + isz
    buf = (ctypes.c_char * (hi - lo)).from_address(lo)
    return np.frombuffer(buf, dtype=arr.dtype), (start - lo) // isz

"""The checks between a program and its arrays (teir_plan/executor/checks.py), the one
property that keeps the executor memory-safe: every offset ``sum(i_k * strides[j][k])``
the program can form lies on an element of array j.  Checked against enumerating both
sets of offsets: a proof that accepts is never wrong; on an array without gaps it is
exact (an access just inside passes, one element past is refused); a program that walks
a gapped view's own dimensions is accepted; through ``tp.execute`` a refusal comes
before anything is written.  And the flat views the kernels address: each element where
its offset says; the overlap test as numpy's exact one.

(tests/test_bad_inputs.py runs a catalogue of bad arrays through ``tp.execute`` in a
child process; here the proof itself, case by case and against enumeration.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.executor.checks import (
    arrays_overlap,
    as_type,
    check_arrays,
    check_reach,
    flat_view,
)
from tests.strategies import fuzz_settings


def _offsets(sizes: list[int], strides: list[int]) -> set[int]:
    return {sum(i * s for i, s in zip(idx, strides))
            for idx in itertools.product(*(range(n) for n in sizes))}


def _element_offsets(arr: np.ndarray) -> set[int]:
    """Offsets of ``arr``'s elements from its first, in elements (numpy's own strides)."""
    return _offsets(list(arr.shape), [s // arr.itemsize for s in arr.strides])


def _accepts(arr: np.ndarray, sizes: list[int], strides: list[int]) -> bool:
    try:
        check_reach("in0", 0, arr, sizes, strides)
    except tp.TEIRError as exc:
        assert str(exc).startswith(("strides[0]", "in0")), str(exc)
        return False
    return True


@st.composite
def views(draw: st.DrawFn) -> np.ndarray:
    """A float64 view of 1-3 dims over a fresh buffer: sliced with steps, some dims
    reversed, transposed, a diagonal: gaps, negative strides and overlapping dims."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    arr: np.ndarray = np.arange(float(np.prod(shape))).reshape(shape)
    arr = arr[tuple(slice(None, None, draw(st.sampled_from([1, 1, 2, -1, -2])))
                    for _ in shape)]
    if arr.ndim >= 2 and draw(st.booleans()):
        arr = arr.transpose(draw(st.permutations(range(arr.ndim))))
    if arr.ndim >= 2 and arr.shape[0] > 1 and arr.shape[1] > 1 and draw(st.booleans()):
        arr = np.lib.stride_tricks.as_strided(  # a diagonal fused with the next dim
            arr, (min(arr.shape[:2]),) + arr.shape[2:],
            (arr.strides[0] + arr.strides[1],) + arr.strides[2:])
    return arr


def _dense(arr: np.ndarray) -> bool:
    """Its elements fill the offsets from the lowest to the highest, each once."""
    offs = _element_offsets(arr)
    return len(offs) == arr.size and len(offs) == max(offs) - min(offs) + 1


program_axes = st.lists(st.tuples(st.integers(1, 5), st.integers(-7, 7)), min_size=1,
                        max_size=3)


@fuzz_settings(default=300)
@given(arr=views(), axes=program_axes)
def test_an_accepted_program_stays_on_elements_and_a_dense_array_is_decided_exactly(
        arr: np.ndarray, axes: list[tuple[int, int]]) -> None:
    sizes, strides = [n for n, _ in axes], [s for _, s in axes]
    inside = _offsets(sizes, strides) <= _element_offsets(arr)
    accepted = _accepts(arr, sizes, strides)
    if accepted:
        assert inside
    if _dense(arr):
        assert accepted == inside


@fuzz_settings(default=200)
@given(arr=views(), data=st.data())
def test_a_program_that_walks_the_arrays_own_dims_is_accepted(arr: np.ndarray,
                                                              data: st.DataObject) -> None:
    # Any subset of the array's dims, in any order, each over a prefix of its extent.
    dims = data.draw(st.permutations(range(arr.ndim)))
    dims = dims[:data.draw(st.integers(1, arr.ndim))]
    sizes = [data.draw(st.integers(1, arr.shape[d])) for d in dims]
    strides = [arr.strides[d] // arr.itemsize for d in dims]
    assert _accepts(arr, sizes, strides)


Axes = tuple[list[int], list[int]]  # a program's sizes and strides


@pytest.mark.parametrize(("what", "arr", "inside", "past"), [
    # (array, a program that reaches its last (or first) element, one that reaches one
    # element further; offsets in elements from the array's first element)
    ("contiguous", np.zeros(12), ([12], [1]), ([13], [1])),
    ("contiguous, 2 axes", np.zeros(12), ([2, 2], [10, 1]), ([2, 2], [11, 1])),
    ("reversed: its first element is the last in memory", np.zeros(12)[::-1],
     ([2], [-11]), ([2], [-12])),
    # rows reversed: offsets -8..3
    ("2-d, rows reversed", np.zeros((3, 4))[::-1], ([3, 4], [-4, 1]), ([3, 5], [-4, 1])),
    ("2-d, rows reversed, below", np.zeros((3, 4))[::-1], ([3, 4], [-4, 1]),
     ([4, 4], [-3, 1])),
    ("transposed", np.zeros((3, 4)).T, ([4, 3], [1, 4]), ([5, 3], [1, 4])),
    # every other column of 3 x 8: offsets 8 i + 2 j, up to 22
    ("gapped, a column past", np.zeros((3, 8))[:, ::2], ([3, 4], [8, 2]), ([3, 5], [8, 2])),
    ("gapped, a row past", np.zeros((3, 8))[:, ::2], ([3, 4], [8, 2]), ([4, 4], [8, 2])),
    ("gapped, into a gap", np.zeros((3, 8))[:, ::2], ([3, 4], [8, 2]), ([2], [1])),
])
def test_just_inside_passes_and_one_element_past_is_refused(
        what: str, arr: np.ndarray, inside: Axes, past: Axes) -> None:
    elements = _element_offsets(arr)
    assert _offsets(*inside) <= elements
    assert max(_offsets(*inside)) == max(elements) or min(_offsets(*inside)) == min(elements)
    assert not _offsets(*past) <= elements
    assert _accepts(arr, *inside), what
    assert not _accepts(arr, *past), what


def _copy(sizes: list[int], strides: list[list[int]]) -> tp.TEIR:
    return tp.TEIR.from_fields(
        data_type="float64", prim_first="none", prim_main="copy", prim_last="none",
        dim_types=["c"] * len(sizes), exec_types=["seq"] * len(sizes), dim_sizes=sizes,
        strides=strides)


def test_execute_refuses_one_element_past_before_writing_anything() -> None:
    x = np.arange(12.0)
    out = np.full(12, -1.0)
    tp.execute(_copy([3, 4], [[4, 1], [1, 3]]), x, out)  # the last element: offset 11
    np.testing.assert_array_equal(out, x.reshape(3, 4).T.reshape(-1))
    for bad in ([[4, 1], [1, 4]],  # out's offset 2 + 3 x 4 = 14: past its 12 elements
                [[5, 1], [1, 3]]):  # in0's offset 2 x 5 + 3 = 13
        out[:] = -1.0
        with pytest.raises(tp.TEIRError, match=r"^strides\[[01]\]"):
            tp.execute(_copy([3, 4], bad), x, out)
        assert (out == -1.0).all()
    # A GEMM's in1 one element short (k x n = 4 x 3 needs 12), out untouched.
    gemm = tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["m", "n", "k"], exec_types=["prim"] * 3, dim_sizes=[2, 3, 4],
        strides=[[1, 0, 2], [0, 4, 1], [1, 2, 0]])
    a, b, c = np.ones(8), np.ones(12), np.full(6, 5.0)
    tp.execute(gemm, a, b, c)
    np.testing.assert_array_equal(c, np.full(6, 4.0))  # each a sum of four ones
    c[:] = 5.0
    with pytest.raises(tp.TEIRError, match=r"^strides\[1\].*in1"):
        tp.execute(gemm, a, b[:11], c)
    assert (c == 5.0).all()


def test_check_arrays_names_the_array_at_fault() -> None:
    prog = _copy([4], [[1], [1]])
    x, out = np.arange(4.0), np.zeros(4)
    check_arrays(prog, [x, out])
    with pytest.raises(tp.TEIRError, match=r"^strides\[1\]"):
        check_arrays(prog, [x, out[:3]])
    with pytest.raises(tp.TEIRError, match="out: output overlaps input in0"):
        check_arrays(prog, [out, out])
    with pytest.raises(tp.DTypeError, match="^in0: dtype float32"):
        check_arrays(prog, [x.astype(np.float32), out])


@fuzz_settings(default=150)
@given(arr=views(), write=st.booleans())
def test_a_flat_view_puts_each_element_at_its_offset(arr: np.ndarray, write: bool) -> None:
    if not write:
        arr.flags.writeable = False
    flat, origin = flat_view(arr)
    steps = [s // arr.itemsize for s in arr.strides]
    for idx in itertools.product(*(range(n) for n in arr.shape)):
        assert flat[origin + sum(i * s for i, s in zip(idx, steps))] == arr[idx]
    assert np.shares_memory(flat, arr)


def test_as_type_rescales_the_offset() -> None:
    z = np.arange(6, dtype=np.complex64) * (1 + 2j)
    view, offset = as_type((z, 2), np.dtype(np.float32))
    assert view.dtype == np.float32 and offset == 4  # 2 complex64 = 4 float32 in
    assert (view[offset], view[offset + 1]) == (2.0, 4.0)  # z[2] = 2 + 4j
    same = (z, 2)
    assert as_type(same, np.dtype(np.complex64)) is same


@fuzz_settings(default=150)
@given(st.data())
def test_overlap_is_sharing_an_element(data: st.DataObject) -> None:
    buf = np.zeros(24)

    def view() -> np.ndarray:
        start = data.draw(st.integers(0, 11))
        step = data.draw(st.sampled_from([1, 2, 3, -1]))
        n = data.draw(st.integers(1, 6))
        sl = buf[start::step] if step > 0 else buf[start::-1]
        return sl[:n].reshape(-1, 1) if data.draw(st.booleans()) else sl[:n]

    def addresses(v: np.ndarray) -> set[int]:
        return {v.ctypes.data + sum(i * s for i, s in zip(idx, v.strides))
                for idx in itertools.product(*(range(n) for n in v.shape))}

    a, b = view(), view()
    assert arrays_overlap(a, b) == bool(addresses(a) & addresses(b))

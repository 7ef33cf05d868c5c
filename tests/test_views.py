"""Rearranging one operand returns a view, as numpy.einsum does; anything else a copy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from tests.strategies import fuzz_settings


def _arange(shape: tuple[int, ...], dtype: object = np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


VIEWS = [
    ("ijk->kji", _arange((3, 4, 5))),  # permutation
    ("ij->ij", _arange((3, 4))),  # identity
    ("ij", _arange((3, 4))),  # implicit output, identity
    ("ji", _arange((3, 4))),  # implicit output: sorted, a transpose
    ("ii->i", _arange((4, 4))),  # diagonal
    ("iij->ji", _arange((3, 3, 5), np.float64)),  # diagonal and transpose
    ("iji->ij", _arange((4, 2, 4))),
    ("i...->...i", _arange((2, 3, 4))),  # ellipsis
    ("ij->ji", _arange((6, 8))[::2, ::-3]),  # strided, negative stride
    ("ij->ji", _arange((3, 4), np.int64)),  # dtypes TEIR does not compute
    ("ij->ji", _arange((3, 4)) > 5),
    ("ij->ji", _arange((3, 4), np.complex128)),
    ("ij->ji", _arange((3, 4), ">f4")),  # non-native byte order: kept, as numpy keeps it
    ("ij->ji", _arange((0, 4))),  # empty
    ("ijk->kij", _arange((1, 4, 1))),  # extent 1
]


@pytest.mark.parametrize("sub,a", VIEWS, ids=[f"{s}-{a.dtype}-{a.shape}" for s, a in VIEWS])
def test_rearranging_one_operand_is_a_view_like_numpy(sub: str, a: np.ndarray) -> None:
    want = np.einsum(sub, a)
    got = tp.einsum(sub, a)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype and got.shape == want.shape
    if a.size:
        assert np.shares_memory(got, a) == np.shares_memory(want, a) == True  # noqa: E712
        assert got.flags.writeable


def test_writing_the_view_writes_the_operand() -> None:
    a = _arange((4, 4))
    d = tp.einsum("ii->i", a)
    d[:] = -1
    np.testing.assert_array_equal(np.diag(a), -np.ones(4))
    assert a[0, 1] == 1  # off the diagonal: untouched


def test_a_read_only_operand_gives_a_read_only_view() -> None:
    a = _arange((3, 4))
    a.flags.writeable = False
    v = tp.einsum("ij->ji", a)
    assert not v.flags.writeable and np.shares_memory(v, a)


@pytest.mark.parametrize("sub", ["ij->i", "ii", "ij->", "ij,jk->ik"])
def test_anything_computed_is_a_new_array(sub: str) -> None:
    a = _arange((4, 4))
    ops = (a, a) if "," in sub else (a,)
    got = tp.einsum(sub, *ops)
    assert not np.shares_memory(got, a)
    np.testing.assert_allclose(got, np.einsum(sub, *(o.astype(np.float64) for o in ops)))


def test_out_dtype_and_order_ask_for_a_copy() -> None:
    a = _arange((3, 4, 5))
    out = np.empty((5, 4, 3), np.float32)
    assert tp.einsum("ijk->kji", a, out=out) is out
    np.testing.assert_array_equal(out, a.T)
    wide = tp.einsum("ijk->kji", a, dtype=np.float64)
    assert wide.dtype == np.float64 and not np.shares_memory(wide, a)
    np.testing.assert_array_equal(wide, a.T)
    c = tp.einsum("ijk->kji", a, order="C")  # a transpose is not C order: copied
    assert c.flags.c_contiguous and not np.shares_memory(c, a)
    np.testing.assert_array_equal(c, a.T)
    same = tp.einsum("ijk->ijk", a, order="C")  # already C order: the view will do
    assert np.shares_memory(same, a)
    relu = tp.einsum("ij->ji", a[0] - 10, epilogue="relu")
    np.testing.assert_array_equal(relu, np.maximum(a[0].T - 10, 0))


def test_a_view_plan() -> None:
    a = _arange((3, 3, 5), np.float64)
    p = tp.plan("iij->ji", a)
    assert p.view is not None and p.teir is None and p.predicted_seconds == 0.0
    assert [s.kind for s in p.steps] == ["view"]
    assert "a diagonal of operand 0" in str(p.explain())
    b = a + 1
    assert np.shares_memory(p(b), b)  # a new array of the same layout: its own view
    out = p.empty_out()  # with out=, the plan copies the view into it
    assert p(b, out=out) is out and not np.shares_memory(out, b)
    np.testing.assert_array_equal(out, np.einsum("iij->ji", b))
    with pytest.raises(tp.PlanError, match="operand 0"):
        p(np.ones((4, 4, 5)))
    with pytest.raises(tp.PlanError, match="out"):
        p(b, out=np.empty((3, 5)))


@fuzz_settings()
@given(st.data())
def test_random_rearrangements_match_numpy(data: st.DataObject) -> None:
    """Random permutations and diagonals of random strided views: numpy's values, and a
    view exactly when numpy returns one."""
    letters = "abcd"
    out = data.draw(st.permutations(letters[:data.draw(st.integers(1, 4))]))
    # Each input axis is an output index; an index may repeat (a diagonal).
    term = data.draw(st.lists(st.sampled_from(out), min_size=len(out), max_size=len(out) + 2)
                     .filter(lambda t: set(t) == set(out)))
    ext = {ch: data.draw(st.integers(1, 4)) for ch in out}
    step = [data.draw(st.sampled_from([1, 2, -1])) for _ in term]
    base = _arange(tuple(ext[ch] * abs(s) for ch, s in zip(term, step)), np.float64)
    a = base[tuple(slice(None, None, s) for s in step)]
    sub = "".join(term) + "->" + "".join(out)
    want = np.einsum(sub, a)
    got = tp.einsum(sub, a)
    np.testing.assert_array_equal(got, want)
    assert np.shares_memory(got, a) == np.shares_memory(want, a)

"""Expressions beyond numpy's 52 letters: opt_einsum's symbols (``oe.get_symbol``) as
indices, in tp.einsum, tp.plan, the interleaved form and the command line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.errors import EinsumError


def _chain(n: int) -> str:
    """A chain of ``n`` matrices over n + 1 indices, the first and last kept."""
    s = [oe.get_symbol(i) for i in range(n + 1)]
    return ",".join(s[i] + s[i + 1] for i in range(n)) + "->" + s[0] + s[n]


def test_chain_of_60_matrices_matches_opt_einsum():
    rng = np.random.default_rng(0)
    expr = _chain(60)  # 61 indices, most of them beyond numpy's letters
    ops = [rng.standard_normal((3, 3)) * 0.5 for _ in range(60)]
    want = oe.contract(expr, *ops, backend="numpy")
    got = tp.einsum(expr, *ops)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    # the same product, by numpy, on a chain it can name
    ref = ops[0]
    for m in ops[1:]:
        ref = ref @ m
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_interleaved_labels_beyond_52():
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal((2, 3)) for _ in range(30)]
    args: list[object] = []
    for i, op in enumerate(ops):  # labels 0..59: 30 matrices, each its own pair
        args += [op, [2 * i, 2 * i + 1]]
    args.append([58, 59, 0])
    got = tp.einsum(*args)
    want = np.einsum(ops[-1], [0, 1], ops[0], [2, 3], [0, 1, 2]) * np.prod(
        [op.sum() for op in ops[1:-1]])
    np.testing.assert_allclose(got, want, rtol=1e-9)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_relabelled_expression_matches_numpy(data):
    """A random expression in letters, relabelled to opt_einsum's symbols past 52: the
    same result as numpy.einsum on the letters."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    letters = "abcdefg"
    n_ops = data.draw(st.integers(1, 4))
    terms = [data.draw(st.lists(st.sampled_from(letters), min_size=1, max_size=3))
             for _ in range(n_ops)]
    used = sorted({c for t in terms for c in t})
    out = data.draw(st.lists(st.sampled_from(used), unique=True, max_size=len(used)))
    ext = {c: data.draw(st.integers(1, 4)) for c in used}
    ops = [rng.standard_normal([ext[c] for c in t]) for t in terms]
    expr = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    relabel = {c: oe.get_symbol(60 + 17 * i) for i, c in enumerate(letters)}
    uni = "".join(relabel.get(c, c) for c in expr)
    np.testing.assert_allclose(tp.einsum(uni, *ops), np.einsum(expr, *ops),
                               rtol=1e-10, atol=1e-10)


def test_plan_with_shapes_and_unicode():
    s = [oe.get_symbol(i) for i in (52, 75, 200)]  # 'À', '×', and a CJK-range symbol
    expr = f"{s[0]}{s[1]},{s[1]}{s[2]}->{s[0]}{s[2]}"
    p = tp.plan(expr, (4, 5), (5, 6))
    a, b = np.ones((4, 5)), np.ones((5, 6))
    np.testing.assert_allclose(p(a, b), a @ b)


@pytest.mark.parametrize("expr,char", [("i$,jk->ik", "$"), ("i\tj->ij", "\\t"),
                                        ("i1->i", "1")])
def test_ascii_punctuation_and_whitespace_stay_errors(expr, char):
    with pytest.raises(EinsumError, match="invalid character"):
        tp.einsum(expr, np.ones((2, 2)), *([np.ones((2, 2))] if "," in expr else []))


def test_cli_explain_unicode_indices():
    s = [oe.get_symbol(i) for i in (52, 53, 54)]
    expr = f"{s[0]}{s[1]},{s[1]}{s[2]}->{s[0]}{s[2]}"
    r = subprocess.run([sys.executable, "-m", "teir_plan", "explain", expr, "--sizes",
                        f"{s[0]}=8,{s[1]}=16,{s[2]}=4"], capture_output=True, text=True,
                       timeout=300, encoding="utf-8")
    assert r.returncode == 0, r.stderr
    assert expr in r.stdout


def test_tnlm_network_of_88_indices_plans_and_runs():
    """The Einsum Trees paper's TNLM network (52 tensors, 88 indices, its own path), at
    extent 2 for every index: parsed, planned along the path and run, against
    opt_einsum on numpy."""
    from benchmarks.trees import paper_trees

    name, expr, extents, path = next(c for c in paper_trees(True) if c[0] == "TNLM")
    terms = expr.split("->")[0].split(",")
    assert len(terms) == 52 and len(extents) == 88
    rng = np.random.default_rng(5)
    ops = [rng.standard_normal([2] * len(t)) * 0.5 for t in terms]
    got = tp.einsum(expr, *ops, optimize=path)
    want = oe.contract(expr, *ops, optimize=path, backend="numpy")
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)

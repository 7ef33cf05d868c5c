"""Expressions of three or more operands planned as one tree: the tree value, the
intermediates' layouts chosen across it, their memory shared by lifetime, and random
networks against numpy in float64."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.errors import PlanError
from teir_plan.planner.tree import tree_for
from teir_plan.schedule import tree_plan
from teir_plan.schedule.workspace import workspace
from tests.strategies import assert_einsum_close, fuzz_settings, operand_recipes


def test_tree_from_an_explicit_path():
    ext = dict(a=2, b=3, c=4, d=5, e=6)
    t = tree_for(("ab", "bc", "cd", "de"), "ae", ext, path=((2, 3), (0, 1), (0, 1)))
    assert t.num_operands == 4 and len(t.steps) == 3 and t.root == 6
    assert [sorted(n.children) for n in t.steps] == [[2, 3], [0, 1], [4, 5]]
    assert sorted(t.steps[0].term) == ["c", "e"] and t.steps[-1].term == "ae"
    g = t.graph
    assert set(g.predecessors(6)) == {4, 5} and t.parent(2) == 4 and t.parent(6) is None
    assert g.nodes[4]["shape"] == tuple(ext[c] for c in t.nodes[4].term)
    assert t.flops(4) == 2 * 4 * 5 * 6
    assert t.path == ((2, 3), (0, 1), (0, 1))


def test_a_step_of_three_is_split_left_to_right():
    t = tree_for(("ab", "bc", "cd"), "ad", dict(a=2, b=3, c=4, d=5), path=((0, 1, 2),))
    assert len(t.steps) == 2 and t.steps[-1].term == "ad"


@contextlib.contextmanager
def tracked_borrows() -> Iterator[dict[str, int]]:
    """Bytes borrowed from the workspace while the block runs: outstanding and peak."""
    seen = {"now": 0, "peak": 0}
    live: dict[int, int] = {}
    borrow, give_back = workspace.borrow, workspace.give_back

    def tracking_borrow(shape, dtype, axis_order=None):  # type: ignore[no-untyped-def]
        arr = borrow(shape, dtype, axis_order)
        live[id(arr)] = arr.nbytes
        seen["now"] += arr.nbytes
        seen["peak"] = max(seen["peak"], seen["now"])
        return arr

    def tracking_give_back(arr):  # type: ignore[no-untyped-def]
        seen["now"] -= live.pop(id(arr), 0)
        give_back(arr)

    with mock.patch.object(workspace, "borrow", tracking_borrow), \
            mock.patch.object(workspace, "give_back", tracking_give_back):
        yield seen


@st.composite
def networks(draw: st.DrawFn, min_operands: int = 3, max_operands: int = 12):
    """A random tensor network: 3-12 operands over a pool of indices, some in one
    operand, some shared, some in three or more (hyper), some broadcast from size 1,
    in random layouts; a random output and path strategy or explicit path."""
    n = draw(st.integers(min_operands, max_operands))
    pool = "abcdefghij"[: draw(st.integers(3, 10))]
    ext = {c: draw(st.integers(1, 4)) for c in pool}
    terms, shapes = [], []
    for _ in range(n):
        term = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True))
        shape = [1 if ext[c] > 1 and draw(st.integers(0, 9)) == 0 else ext[c] for c in term]
        terms.append("".join(term))
        shapes.append(tuple(shape))
    used = sorted({c for t in terms for c in t})
    out = "".join(c for c in draw(st.permutations(used)) if draw(st.integers(0, 2)) == 0)
    expr = ",".join(terms) + "->" + out
    how = draw(st.sampled_from(["auto", "greedy", "explicit"]))
    if how == "explicit":
        path, left = [], n
        while left > 1:
            i = draw(st.integers(0, left - 1))
            j = draw(st.integers(0, left - 2))
            path.append((i, j + (j >= i)))
            left -= 1
        optimize: object = path
    else:
        optimize = how
    recipes = [draw(operand_recipes(s, "float64", allow_broadcast=False)) for s in shapes]
    seed = draw(st.integers(0, 2**32 - 1))
    return expr, recipes, optimize, seed


@fuzz_settings(40, 2000)
@given(networks())
def test_random_networks_match_numpy(case):
    expr, recipes, optimize, seed = case
    rng = np.random.default_rng(seed)
    ops = [r.build(rng) for r in recipes]
    # Every step tries layouts (not only large ones), so that the choice is exercised.
    with mock.patch.object(tree_plan, "MIN_FLOPS", 0):
        tp.plan_cache.clear()
        plan = tp.plan(expr, *ops, optimize=optimize)
        with tracked_borrows() as seen:
            got = plan(*ops)
    assert_einsum_close(got, expr, ops, np.float64)
    np.testing.assert_allclose(got, oe.contract(expr, *[np.asarray(o) for o in ops]),
                               rtol=1e-9, atol=1e-9)
    assert seen["now"] == 0
    assert seen["peak"] == plan.peak_bytes


def test_syn_tree_writes_intermediates_in_the_orders_their_consumers_read():
    """The Einsum Trees paper's SYN tree at half size: the layouts chosen are predicted
    faster than opt_einsum's orders, and some intermediate is written permuted."""
    expr = "iaje,bf,dcba,cigj,dh->hgfei"
    ext = dict(a=12, b=24, c=12, d=28, e=32, f=32, g=8, h=42, i=8, j=36)
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal([ext[c] for c in t]) for t in expr.split("->")[0].split(",")]
    path = [(1, 2), (2, 3), (0, 1), (0, 1)]
    plan = tp.plan(expr, *ops, optimize=path)
    layouts = plan.info.tree_layouts
    assert layouts.predicted < layouts.predicted_default
    assert any(b.axis_order not in (None, tuple(range(len(b.shape)))) for b in plan.buffers)
    np.testing.assert_allclose(plan(*ops), np.einsum(expr, *ops, optimize=["einsum_path",
                                                                           *path]),
                               rtol=1e-10, atol=1e-9)


def test_a_chain_shares_memory_between_intermediates():
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal((40, 40)) for _ in range(7)]
    expr = "ab,bc,cd,de,ef,fg,gh->ah"
    plan = tp.plan(expr, *ops, optimize=[(0, 1), (0, 5), (0, 4), (0, 3), (0, 2), (0, 1)])
    m = plan.memory
    assert len([b for b in plan.buffers if b.kind == "temp"]) == 5
    assert len(m.slot_bytes) == 2 and m.peak_bytes < m.naive_bytes
    with tracked_borrows() as seen:
        got = plan(*ops)
    assert seen["peak"] == plan.peak_bytes
    np.testing.assert_allclose(got, np.linalg.multi_dot(ops), rtol=1e-10)


def test_memory_limit_that_cannot_be_met_is_an_error_before_anything_runs():
    ops = [np.ones((30, 30)), np.ones((30, 30)), np.ones((30, 30))]
    with pytest.raises(PlanError, match="memory_limit of 10 elements cannot be met"):
        tp.einsum("ab,bc,cd->ad", *ops, optimize=("greedy", 10))
    got = tp.einsum("ab,bc,cd->ad", *ops, optimize=("greedy", 900))
    np.testing.assert_allclose(got, np.full((30, 30), 900.0))


@pytest.mark.parametrize(("expr", "extents", "optimize"), [
    # opt_einsum's dynamic programming finds no path under 100 (it raises); greedy's
    # intermediates exceed 4: the tree of the smallest intermediates meets both limits
    ("ab,bc,cd,de->ae", {"a": 60, "b": 20, "c": 60, "d": 2, "e": 5}, ("dp", 100)),
    ("ab,bc,cd,ea,de->e", {"a": 5, "b": 2, "c": 2, "d": 2, "e": 2}, ("optimal", 4)),
])
def test_memory_limit_the_strategy_breaks_takes_the_smallest_intermediates(
        expr: str, extents: dict[str, int], optimize: tuple[str, int]) -> None:
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(tuple(extents[c] for c in t))
           for t in expr.split("->")[0].split(",")]
    plan = tp.plan(expr, *ops, optimize=optimize)
    temps = [b.shape for b in plan.buffers if b.kind == "temp"]
    assert temps and all(int(np.prod(s)) <= optimize[1] for s in temps)
    np.testing.assert_allclose(plan(*ops), np.einsum(expr, *ops), rtol=1e-10)
    with pytest.raises(PlanError, match="neither the path"):
        tp.plan(expr, *ops, optimize=(optimize[0], 3))


def test_cotengra_tree_as_the_path():
    ctg = pytest.importorskip("cotengra")
    expr = "ab,bc,cd,de->ae"
    rng = np.random.default_rng(2)
    ops = [rng.standard_normal((6, 7)), rng.standard_normal((7, 8)),
           rng.standard_normal((8, 9)), rng.standard_normal((9, 5))]
    inputs = [tuple(t) for t in expr.split("->")[0].split(",")]
    size = dict(zip("abcde", (6, 7, 8, 9, 5)))
    tree = ctg.ContractionTree.from_path(inputs, tuple("ae"), size,
                                         path=[(2, 3), (0, 1), (0, 1)])
    plan = tp.plan(expr, *ops, optimize=tree)
    assert plan.info.optimize.path == ((2, 3), (0, 1), (0, 1))
    np.testing.assert_allclose(plan(*ops), np.linalg.multi_dot(ops), rtol=1e-10)


class _RecordingOptimizer:
    """An opt_einsum path optimizer that returns a fixed path and records its calls."""

    def __init__(self, path: list[tuple[int, ...]]) -> None:
        import opt_einsum as oe

        class Fixed(oe.paths.PathOptimizer):
            calls: list[tuple[object, ...]] = []

            def __call__(self, inputs, output, size_dict, memory_limit=None):  # type: ignore[no-untyped-def]
                Fixed.calls.append((tuple(map(frozenset, inputs)), dict(size_dict)))
                return list(path)

        self.optimizer = Fixed()
        self.calls = Fixed.calls


def test_a_path_optimizer_object_is_asked_for_the_path():
    expr = "ab,bc,cd,de->ae"
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal((6, 7)), rng.standard_normal((7, 8)),
           rng.standard_normal((8, 9)), rng.standard_normal((9, 5))]
    rec = _RecordingOptimizer([(2, 3), (0, 1), (0, 1)])
    plan = tp.plan(expr, *ops, optimize=rec.optimizer)
    assert rec.calls and rec.calls[0][1] == dict(zip("abcde", (6, 7, 8, 9, 5)))
    assert plan.info.optimize.path is rec.optimizer
    np.testing.assert_allclose(plan(*ops), np.linalg.multi_dot(ops), rtol=1e-10)
    # The same object on the same shapes: the cached plan, no second search.
    calls = len(rec.calls)
    np.testing.assert_allclose(tp.einsum(expr, *ops, optimize=rec.optimizer),
                               np.linalg.multi_dot(ops), rtol=1e-10)
    assert len(rec.calls) == calls


def test_cotengra_hyper_optimizer_as_the_path():
    ctg = pytest.importorskip("cotengra")
    expr = "ab,bc,cd,de->ae"
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal((6, 7)), rng.standard_normal((7, 8)),
           rng.standard_normal((8, 9)), rng.standard_normal((9, 5))]
    opt = ctg.HyperOptimizer(max_repeats=4, methods=["greedy"], optlib="random",
                             progbar=False)
    np.testing.assert_allclose(tp.einsum(expr, *ops, optimize=opt),
                               np.linalg.multi_dot(ops), rtol=1e-10)


def test_explain_shows_the_layouts_the_savings_and_the_peak_memory(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from teir_plan.render.tree import draw_tree, layout_rows

    expr = "iaje,bf,dcba,cigj,dh->hgfei"
    ext = dict(a=12, b=24, c=12, d=28, e=32, f=32, g=8, h=42, i=8, j=36)
    shapes = [tuple(ext[c] for c in t) for t in expr.split("->")[0].split(",")]
    plan = tp.plan(expr, *shapes, optimize=[(1, 2), (2, 3), (0, 1), (0, 1)])
    rows = layout_rows(plan)
    assert rows[0][2] == "writes (memory order)" and len(rows) == 5
    layouts = plan.info.tree_layouts
    assert [r[1] for r in rows[1:]] == [s.subscripts for s in layouts.steps]
    assert any(r[2] != r[3] for r in rows[1:-1])  # an intermediate written permuted
    text = str(plan.explain())
    assert "opt_einsum's order" in text and "peak scratch memory" in text
    assert plan.explain().to_dict()["contraction_tree"][-1].startswith("peak scratch memory")
    fig = draw_tree(plan)
    fig.savefig(tmp_path / "tree.png")
    assert (tmp_path / "tree.png").read_bytes()[:4] == b"\x89PNG"
    two = tp.plan("ij,jk->ik", (4, 5), (5, 6))
    assert layout_rows(two) == []
    with pytest.raises(PlanError, match="not a tree"):
        draw_tree(two)


@pytest.mark.parametrize("order", ["K", "C"])
def test_tree_result_layouts_under_order_k(order):
    """With order='K' a tree's result may be written in a layout its last step writes in
    place (the paper's GETD tree); order='C' keeps C order."""
    expr = "aib,bjc,ckd,dle,ema->ijklm"
    ext = dict(a=16, b=16, c=16, d=16, e=16, i=10, j=10, k=10, l=10, m=10)
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal([ext[c] for c in t]) for t in expr.split("->")[0].split(",")]
    path = [(0, 1), (0, 1), (0, 1), (0, 1)]
    plan = tp.plan(expr, *ops, optimize=path, order=order)
    got = plan(*ops)
    np.testing.assert_allclose(got, np.einsum(expr, *ops, optimize=["einsum_path", *path]),
                               rtol=1e-10, atol=1e-9)
    if order == "K":
        considered = plan.info.result_layouts
        assert len(considered) > 1 and considered[0][0] == "ijklm"
    else:
        assert got.flags.c_contiguous

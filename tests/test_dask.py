"""tp.einsum on dask arrays (teir_plan/distributed/): results against numpy.einsum in
float64 over random chunkings, the chunk choice's budget, the graph's contents, explain,
and a LocalCluster of worker processes."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import teir_plan as tp
from teir_plan.distributed.chunks import Contraction, Rates, choose_chunks
from teir_plan.errors import EinsumError, OperandTypeError, PlanError

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

RNG = np.random.default_rng(7)
RATES = Rates(50e9, 10e9, threads=4)


def _reference(subscripts: str, *arrays: np.ndarray) -> np.ndarray:
    return np.einsum(subscripts, *[np.asarray(a, np.float64) for a in arrays])


def _random(shape: tuple[int, ...], dtype: object = np.float64) -> np.ndarray:
    return (RNG.standard_normal(shape)).astype(dtype)


def _chunked(x: np.ndarray, draw: st.DrawFn) -> object:
    chunks = tuple(draw(st.integers(1, max(1, n))) for n in x.shape)
    return da.from_array(x, chunks=chunks)


EXTENTS = {"i": 37, "j": 19, "k": 23, "l": 9, "a": 6, "b": 5, "c": 8, "d": 4, "e": 3,
           "t": 5, "r": 6, "u": 7, "s": 4, "p": 3, "q": 2}
EXPRESSIONS = ["ik,kj->ij", "trus,pqtu->pqrs", "abc,cd->abd", "ij->j", "ijk->k", "ki,k->i",
               "bi,bj->ij", "ij,jk,kl->il", "abc,cbd,de->ae", "ij,ij->i"]


def _shapes(subscripts: str) -> list[tuple[int, ...]]:
    return [tuple(EXTENTS[c] for c in op) for op in subscripts.split("->")[0].split(",")]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(EXPRESSIONS), st.data(),
       st.sampled_from([None, 2048, 1 << 20]), st.booleans())
def test_dask_einsum_matches_numpy(case, data, budget, rechunk) -> None:
    subscripts = case
    arrays = [_random(s) for s in _shapes(subscripts)]
    chunked = [_chunked(a, data.draw) for a in arrays]
    options = {} if budget is None else {"memory_budget": budget}
    result = tp.distributed.einsum(subscripts, *chunked, rechunk=rechunk, **options)
    assert isinstance(result, da.Array)
    np.testing.assert_allclose(result.compute(), _reference(subscripts, *arrays),
                               rtol=1e-10, atol=1e-10)


def test_tp_einsum_takes_dask_arrays_and_mixed_numpy_operands() -> None:
    a, b = _random((40, 30), np.float32), _random((30, 20), np.float32)
    result = tp.einsum("ik,kj->ij", da.from_array(a, chunks=(10, 7)), b)
    assert isinstance(result, da.Array) and result.dtype == np.float32
    np.testing.assert_allclose(result.compute(), _reference("ik,kj->ij", a, b),
                               rtol=2e-5, atol=2e-5)
    # numpy's interleaved form
    result = tp.einsum(da.from_array(a, chunks=10), [0, 1], b, [1, 2], [0, 2])
    np.testing.assert_allclose(result.compute(), _reference("ik,kj->ij", a, b),
                               rtol=2e-5, atol=2e-5)


def test_split_summed_index_is_summed_by_dask_and_relu_follows_the_full_sum() -> None:
    # k split in chunks whose partial sums are negative while the total is positive:
    # ReLU applied per partial would give a different (wrong) answer.
    a = np.ones((4, 64))
    a[:, :32] = -1.0
    a[:, 32:] = 2.0
    b = np.ones((64, 3))
    x, y = da.from_array(a, chunks=(4, 8)), da.from_array(b, chunks=(8, 3))
    dplan = tp.distributed.plan_dask("ik,kj->ij", x, y, rechunk=False, split_every=2,
                                     epilogue="relu")
    assert dplan.steps[0].choice.partials == 8
    np.testing.assert_array_equal(dplan(x, y).compute(), np.maximum(a @ b, 0))
    neg = da.from_array(-a, chunks=(4, 8))
    np.testing.assert_array_equal(tp.einsum("ik,kj->ij", neg, y, epilogue="relu").compute(),
                                  np.zeros((4, 3)))


def test_nan_and_inf_propagate_through_partial_sums() -> None:
    a = _random((8, 40))
    a[1, 3], a[2, 30] = np.nan, np.inf
    b = _random((40, 5))
    x, y = da.from_array(a, chunks=(8, 10)), da.from_array(b, chunks=(10, 5))
    got = tp.distributed.einsum("ik,kj->ij", x, y, rechunk=False).compute()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(a @ b))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(a @ b))


def test_the_chunk_choice_keeps_tasks_within_the_budget() -> None:
    c = Contraction(("ik", "kj"), "ij", {"i": 4096, "j": 4096, "k": 65536}, 4)
    given = {"i": 1024, "j": 1024, "k": 1024}
    for budget in (8 << 20, 64 << 20, 512 << 20):
        choice = choose_chunks(c, given, budget, RATES)
        assert choice.task_bytes <= budget
    # summed indices are taken whole where that fits: no partial results at all
    roomy = choose_chunks(c, given, 4 << 30, RATES)
    assert roomy.partials == 1 and roomy.partial_bytes == 0
    # as given, only costed
    kept = choose_chunks(c, given, 1 << 20, RATES, rechunk=False)
    assert dict(kept.chunks) == given and kept.partials == 64
    with pytest.raises(PlanError, match="budget"):
        choose_chunks(c, given, 4, RATES)


def test_the_chunk_choice_grows_tiny_tasks() -> None:
    c = Contraction(("ik", "kj"), "ij", {"i": 2048, "j": 2048, "k": 256}, 8)
    choice = choose_chunks(c, {"i": 16, "j": 16, "k": 16}, 1 << 30, RATES)
    assert choice.chunks["i"] * choice.chunks["j"] > 16 * 16
    assert choice.tasks < (2048 // 16) ** 2 * 16
    assert any(r.startswith("rechunked") for r in choice.reasons)


def test_building_the_graph_runs_nothing_and_holds_no_plan() -> None:
    x = da.from_array(_random((30, 20)), chunks=10)
    y = da.from_array(_random((20, 40)), chunks=10)
    dplan = tp.distributed.plan_dask("ik,kj->ij", x, y, rechunk=False)
    before = (tp.plan_cache.hits, tp.plan_cache.misses)
    result = dplan(x, y)
    assert (tp.plan_cache.hits, tp.plan_cache.misses) == before
    graph = pickle.dumps(dict(result.__dask_graph__()))
    assert b"teir_plan.distributed.tasks" in graph
    assert b"teir_plan.schedule" not in graph and b"numba" not in graph


def test_explain_shows_the_grid_the_tasks_and_one_block() -> None:
    x = da.from_array(_random((300, 200)), chunks=(50, 40))
    y = da.from_array(_random((200, 100)), chunks=(40, 100))
    report = tp.explain("ik,kj->ij", x, y, memory_budget=200_000, rechunk=True)
    d = report.to_dict()
    step = d["steps"][0]
    assert step["task_bytes"] <= 200_000 and d["peak_task_bytes"] == step["task_bytes"]
    grid = step["grid"]
    assert step["tasks"] == grid["i"] * grid["j"] * grid["k"]
    text = report.text()
    assert "block grid" in text and "one block" in text and "ik,kj->ij" in text


def test_bad_options_are_refused() -> None:
    x = da.from_array(_random((6, 4)), chunks=2)
    with pytest.raises(OperandTypeError, match="out"):
        tp.einsum("ij->j", x, out=np.empty(4))
    with pytest.raises(EinsumError, match="memory_budget"):
        tp.distributed.einsum("ij->j", x, memory_budget=0)
    with pytest.raises(EinsumError, match="split_every"):
        tp.distributed.einsum("ij->j", x, split_every=1)
    with pytest.raises(PlanError, match="epilogue"):
        tp.distributed.einsum("ij->j", x, epilogue="gelu")
    with pytest.raises(EinsumError):
        tp.einsum("ij,jk->ik", x, da.from_array(_random((5, 3)), chunks=2))
    with pytest.raises(EinsumError, match="shapes"):
        tp.distributed.plan_dask("ij->j", x)(da.from_array(_random((6, 5)), chunks=2))


def test_the_threaded_scheduler_gives_each_task_one_thread() -> None:
    from teir_plan.distributed.cluster import cluster_shape, task_threads

    with dask.config.set(num_workers=2):
        assert task_threads(cluster_shape(None)) == max(1, len(_affinity()) // 2)


def _affinity() -> set[int]:
    import os

    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(
        range(os.cpu_count() or 1))


def test_a_local_cluster_of_processes_runs_it() -> None:
    distributed = pytest.importorskip("distributed")
    a, b = _random((120, 90), np.float32), _random((90, 70), np.float32)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit="1GiB") as cluster, \
            distributed.Client(cluster) as client:
        x, y = da.from_array(a, chunks=(30, 45)), da.from_array(b, chunks=(45, 35))
        result = tp.einsum("ik,kj->ij", x, y)
        np.testing.assert_allclose(result.compute(), _reference("ik,kj->ij", a, b),
                                   rtol=2e-5, atol=2e-5)
        # the workers were set up without being asked: teir_plan threads per task are
        # the machine's cores over the dask threads on it, BLAS at one
        threads = client.run(lambda: tp.get_num_threads())
        cores = len(_affinity())
        assert set(threads.values()) == {max(1, cores // 2)}
        report = tp.distributed.plan_dask("ik,kj->ij", x, y).explain().to_dict()
        assert report["cluster"]["workers"] == 2 and report["cluster"]["distributed"]
        # teir_plan's workspace keeps no idle buffers between a worker's tasks
        assert set(client.run(_pool_limit).values()) == {0}


def _pool_limit() -> int:
    from teir_plan.schedule.workspace import workspace

    return workspace.limit_bytes + workspace.last_limit_bytes + workspace.idle_bytes()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(EXPRESSIONS), st.data())
def test_the_chosen_chunking_predicts_no_more_time_than_the_given_one(subscripts, data) -> None:
    from teir_plan.distributed.chunks import ChunkChoice, predicted_seconds

    ins, out = subscripts.split("->")
    scale = data.draw(st.sampled_from([1, 100, 10_000]))
    ext = {c: EXTENTS[c] * (scale if c in "ik" else 1) for c in set(ins.replace(",", ""))}
    c = Contraction(tuple(ins.split(",")), out, ext, 4)
    given = {i: data.draw(st.integers(1, ext[i])) for i in c.indices}
    budget = data.draw(st.sampled_from([1 << 16, 1 << 22, 1 << 30]))
    as_given = ChunkChoice(c, given, 4, ())
    try:
        chosen = choose_chunks(c, given, budget, RATES)
    except PlanError:  # refused only when even one element per block is over the budget
        assert ChunkChoice(c, dict.fromkeys(c.indices, 1), 4, ()).task_bytes > budget
        return
    assert chosen.task_bytes <= budget
    if as_given.task_bytes <= budget:
        assert (predicted_seconds(chosen, RATES, given)
                <= predicted_seconds(as_given, RATES, given) * (1 + 1e-9))


def test_opt_einsum_with_the_teir_plan_backend_takes_the_dask_path() -> None:
    oe = pytest.importorskip("opt_einsum")
    a, b, c = _random((30, 20)), _random((20, 25)), _random((25, 10))
    x, y, z = (da.from_array(v, chunks=7) for v in (a, b, c))
    result = oe.contract("ij,jk,kl->il", x, y, z, backend="teir_plan")
    assert isinstance(result, da.Array)
    np.testing.assert_allclose(result.compute(), _reference("ij,jk,kl->il", a, b, c),
                               rtol=1e-10, atol=1e-10)


def test_a_summed_index_taken_whole_is_joined_in_the_task_not_rechunked() -> None:
    a, b = _random((40, 64)), _random((64, 30))
    x, y = da.from_array(a, chunks=(40, 16)), da.from_array(b, chunks=(16, 30))
    dplan = tp.distributed.plan_dask("ik,kj->ij", x, y, memory_budget=1 << 30)
    assert dplan.steps[0].choice.grid["k"] == 1  # k whole: one task per output block
    result = dplan(x, y)
    layers = result.__dask_graph__().layers
    assert not any(name.startswith("rechunk") for name in layers), list(layers)
    np.testing.assert_allclose(result.compute(), _reference("ik,kj->ij", a, b),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n", [2, 50])
def test_a_task_sums_the_pieces_contractions_or_joins_them_whichever_holds_less(
        n, monkeypatch) -> None:
    """Pieces along two summed indices (k and l of both): a small result is the sum
    of one contraction per combination of pieces, a large one the contraction of the
    joined blocks; both against numpy.einsum."""
    from teir_plan.distributed import tasks

    joined: list[bool] = []
    real = tasks._joined
    monkeypatch.setattr(tasks, "_joined",
                        lambda b, ax: joined.append(isinstance(b, list)) or real(b, ax))
    a, c = _random((n, 4, 3)), _random((4, 3, n))
    ka, lc = [0, 1, 4], [0, 1, 3]
    a_pieces = [[a[:, ka[p]:ka[p + 1], lc[q]:lc[q + 1]] for q in range(2)] for p in range(2)]
    c_pieces = [[c[ka[p]:ka[p + 1], lc[q]:lc[q + 1]] for q in range(2)] for p in range(2)]
    got = tasks.contract_blocks(a_pieces, c_pieces, subscripts="ikl,klj->ij",
                                partial_axes=0, join_axes=((1, 2), (0, 1)))
    np.testing.assert_allclose(got, _reference("ikl,klj->ij", a, c), rtol=1e-10, atol=1e-10)
    # joined when the result (n x n) is at least the pieces given (a's and c's)
    assert any(joined) == (n == 50)


def test_a_summed_index_is_taken_whole_with_other_indices_split_to_make_room() -> None:
    """ea,ebcd->abcd chunked 8 ways along e and b: e whole (no partial results) fits the
    budget of the given chunks' task only with b split further; the choice finds it."""
    from teir_plan.distributed.chunks import ChunkChoice

    c = Contraction(("ea", "ebcd"), "abcd",
                    {"a": 384, "b": 64, "c": 64, "d": 64, "e": 384}, 4)
    given = {"e": 48, "a": 48, "b": 8, "c": 64, "d": 64}
    budget = ChunkChoice(c, given, 4, ()).task_bytes
    chosen = choose_chunks(c, given, budget, RATES)
    assert chosen.task_bytes <= budget
    assert chosen.partials == 1 and chosen.chunks["b"] < 8


def test_a_task_counts_the_copies_a_join_or_a_rechunk_makes() -> None:
    from teir_plan.distributed.chunks import ChunkChoice

    c = Contraction(("ik", "kj"), "ij", {"i": 256, "j": 256, "k": 1024}, 8)
    given = {"i": 64, "j": 64, "k": 128}
    as_given = ChunkChoice(c, given, 4, (), given)
    assert as_given.join_bytes == 0 and as_given.rechunk_bytes == 0
    # k whole from 8 pieces: the task adds 8 products into a temporary of the output
    whole_k = ChunkChoice(c, {**given, "k": 1024}, 4, (), given)
    assert whole_k.join_bytes == 64 * 64 * 8 and whole_k.rechunk_bytes == 0
    # i merged to 128: dask's rechunk copies a's blocks, b's stay as they are
    merged = ChunkChoice(c, {**given, "i": 128}, 4, (), given)
    assert merged.rechunk_bytes == 128 * 128 * 8 and merged.join_bytes == 0


def test_the_default_budget_is_what_a_task_of_the_given_chunks_holds() -> None:
    from teir_plan.distributed.chunks import ChunkChoice
    from teir_plan.distributed.contract import MIN_BUDGET_BYTES

    x = da.zeros((4096, 4096), chunks=1024, dtype=np.float32)
    dplan = tp.distributed.plan_dask("ik,kj->ij", x, x)
    (step,) = dplan.steps
    as_given = ChunkChoice(step.choice.contraction, dict.fromkeys("ijk", 1024), 4, ())
    assert step.budget_bytes == max(as_given.task_bytes, MIN_BUDGET_BYTES)
    # the operands' pieces a task reads in place count against the cluster's limit only
    assert step.choice.own_bytes <= step.budget_bytes
    assert step.choice.task_bytes <= dplan.cluster.task_budget


def test_pieces_read_in_place_count_against_the_cluster_s_limit_not_the_budget() -> None:
    """gram 2e6 x 64 in 250000 x 8 chunks: i and j whole from the pieces (each task
    reads its 16 pieces once, a slab at a time), k as given: 8 contractions, where the
    given chunks' 512 read every block 8 times.  With a budget given, the pieces count
    against it as before."""
    x = da.zeros((2_000_000, 64), chunks=(250_000, 8), dtype=np.float32)
    (step,) = tp.distributed.plan_dask("ki,kj->ij", x, x).steps
    assert dict(step.choice.chunks) == {"k": 250_000, "i": 64, "j": 64}
    assert step.choice.own_bytes <= step.budget_bytes < step.choice.task_bytes
    (given,) = tp.distributed.plan_dask("ki,kj->ij", x, x, memory_budget=16 << 20).steps
    assert dict(given.choice.chunks) == {"k": 250_000, "i": 8, "j": 8}
    # abc,bda->dc in halves: a and c whole would read 2/3 as much as the chunking within
    # the budget, not half: the pieces count against the budget
    y = da.zeros((312, 24, 1024), chunks=(156, 24, 512), dtype=np.float32)
    z = da.zeros((24, 2048, 312), chunks=(24, 1024, 156), dtype=np.float32)
    (step,) = tp.distributed.plan_dask("abc,bda->dc", y, z).steps
    assert step.choice.task_bytes <= step.budget_bytes


def test_kept_indices_taken_whole_are_joined_in_the_task_a_slab_at_a_time() -> None:
    """A Gram matrix of a tall operand chunked along both axes: the result's indices are
    taken whole from the pieces dask hands each task (no rechunk), joined a slab of the
    summed index at a time."""
    a, b = _random((200_000, 16)), _random((200_000, 12))
    x, y = da.from_array(a, chunks=(50_000, 4)), da.from_array(b, chunks=(50_000, 3))
    dplan = tp.distributed.plan_dask("ki,kj->ij", x, y)
    grid = dplan.steps[0].choice.grid
    assert grid["i"] == grid["j"] == 1
    result = dplan(x, y)
    layers = result.__dask_graph__().layers
    assert not any(name.startswith("rechunk") for name in layers), list(layers)
    np.testing.assert_allclose(result.compute(), _reference("ki,kj->ij", a, b),
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("subscripts", "slab_bytes"),
                         [("ki,kj->ij", 1 << 10), ("ki,kj->ij", 1 << 30), ("i,j->ij", 1)])
def test_a_task_given_pieces_along_kept_indices_matches_numpy(subscripts, slab_bytes,
                                                              monkeypatch) -> None:
    from teir_plan.distributed import tasks

    monkeypatch.setattr(tasks, "SLAB_BYTES", slab_bytes)
    ins = subscripts.split("->")[0].split(",")
    ext = {"k": 301, "i": 7, "j": 5}
    arrays = [_random(tuple(ext[c] for c in ix)) for ix in ins]
    cuts = {"i": [0, 3, 7], "j": [0, 1, 4, 5]}
    pieces = []
    for ix, arr in zip(ins, arrays):
        kept = ix[-1]
        ax = len(ix) - 1
        pieces.append([arr[(slice(None),) * ax + (slice(lo, hi),)]
                       for lo, hi in zip(cuts[kept], cuts[kept][1:])])
    join_axes = tuple((len(ix) - 1,) for ix in ins)
    got = tasks.contract_blocks(*pieces, subscripts=subscripts, partial_axes=0,
                                join_axes=join_axes)
    np.testing.assert_allclose(got, _reference(subscripts, *arrays), rtol=1e-10, atol=1e-10)


def test_by_default_the_tasks_read_the_operands_no_more_often_than_the_given_chunks() -> None:
    """abc,bda->dc in halves: splitting c and d further would read each operand more
    often (more copies on the workers); with a budget given, the reads are not bound."""
    from teir_plan.distributed.chunks import ChunkChoice

    x = da.zeros((312, 24, 1024), chunks=(156, 24, 512), dtype=np.float32)
    y = da.zeros((24, 2048, 312), chunks=(24, 1024, 156), dtype=np.float32)
    (step,) = tp.distributed.plan_dask("abc,bda->dc", x, y).steps
    given = {"a": 156, "b": 24, "c": 512, "d": 1024}
    as_given = ChunkChoice(step.choice.contraction, given, 4, ())
    assert step.choice.read_bytes <= as_given.read_bytes
    c = Contraction(("ik", "kj"), "ij", {"i": 4096, "j": 4096, "k": 4096}, 4)
    g = dict.fromkeys("ijk", 1024)
    limit = ChunkChoice(c, g, 4, ()).read_bytes
    assert choose_chunks(c, g, 20 << 20, RATES, read_limit=limit).read_bytes <= limit
    assert choose_chunks(c, g, 20 << 20, RATES).read_bytes > limit


def test_a_rechunk_s_tasks_count_in_the_prediction() -> None:
    """gram 2e6 x 64 in 250000 x 8 chunks: splitting k 16 ways to take i and j whole
    would add 2,048 rechunk tasks for 128 contractions: the given chunks stay."""
    from teir_plan.distributed.chunks import ChunkChoice, predicted_seconds

    c = Contraction(("ki", "kj"), "ij", {"k": 2_000_000, "i": 64, "j": 64}, 4)
    given = {"k": 250_000, "i": 8, "j": 8}
    rates = Rates(120e9, 18e9, threads=2)
    split = ChunkChoice(c, {"k": 15_625, "i": 64, "j": 64}, 4, (), given)
    as_given = ChunkChoice(c, given, 4, (), given)
    assert predicted_seconds(split, rates, given) > predicted_seconds(as_given, rates, given)
    assert dict(choose_chunks(c, given, 16 << 20, rates).chunks) == given


def test_a_memory_limit_picks_the_same_tree_as_tp_einsum() -> None:
    # opt_einsum's dynamic programming finds no path under 100 elements; tp.einsum then
    # contracts the tree of the smallest intermediates, and so do the dask steps
    extents = {"a": 60, "b": 20, "c": 60, "d": 2, "e": 5}
    subscripts = "ab,bc,cd,de->ae"
    arrays = [_random(tuple(extents[c] for c in t)) for t in subscripts[:11].split(",")]
    chunked = [da.from_array(a, chunks=16) for a in arrays]
    result = tp.distributed.einsum(subscripts, *chunked, optimize=("dp", 100))
    np.testing.assert_allclose(result.compute(scheduler="synchronous"),
                               _reference(subscripts, *arrays), rtol=1e-10, atol=1e-10)
    with pytest.raises(PlanError, match="memory_limit of 3 elements cannot be met"):
        tp.distributed.einsum(subscripts, *chunked, optimize=("dp", 3))


def _exit_once(block: np.ndarray, marker: str) -> np.ndarray:
    """Kill the worker running this the first time any block gets here (the marker file
    is created atomically: exactly one worker dies), then pass blocks through."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return block
    os._exit(1)


def test_a_worker_killed_during_a_computation_still_gives_the_right_answer(tmp_path) -> None:
    # A worker dies holding blocks teir_plan's tasks computed: dask's nanny restarts it
    # and the scheduler runs the lost tasks again, teir_plan's included.
    distributed = pytest.importorskip("distributed")
    a, b = _random((240, 180)), _random((180, 200))
    marker = str(tmp_path / "killed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, memory_limit="1GiB") as cluster, \
            distributed.Client(cluster) as client:
        pids = set(client.run(os.getpid).values())
        x, y = da.from_array(a, chunks=(60, 45)), da.from_array(b, chunks=(45, 50))
        # (meta given: dask would otherwise call _exit_once here to infer it)
        result = tp.einsum("ik,kj->ij", x, y).map_blocks(_exit_once, marker,
                                                         meta=np.empty((0, 0), a.dtype))
        got = client.compute(result).result(timeout=120)
        client.wait_for_workers(2, timeout=60)
        # a worker did die, and the nanny started another in its place
        assert len(pids - set(client.run(os.getpid).values())) == 1
        np.testing.assert_allclose(got, _reference("ik,kj->ij", a, b), rtol=1e-10,
                                   atol=1e-10)

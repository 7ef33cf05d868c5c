"""Plans that correct themselves (teir_plan/schedule/trials.py, choices.py).

The decision rules are tested on contenders whose run times a fake clock sets, so that
every assertion is exact; the plans' own trials are tested for what they must never get
wrong whatever the machine's timings: every call's result (against numpy.einsum in
float64), the budget's bookkeeping, the stored choice and what explain says.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import teir_plan as tp
from teir_plan import api
from teir_plan.errors import KernelNotCompiledError
from teir_plan.schedule import choices, trials
from teir_plan.schedule.trials import Contender, Trials


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_contenders(clock: FakeClock, seconds: dict[str, list[float]],
                    predicted: dict[str, float | None]) -> tuple[list[Contender], list[str]]:
    """Contenders named as ``seconds``' keys (the model's first), each taking its listed
    times in turn (the last repeated), and the log of which ran."""
    ran: list[str] = []

    def make(name: str) -> Contender:
        runs = iter(seconds[name])
        last = [seconds[name][0]]

        def execute(arrays, out):  # type: ignore[no-untyped-def]
            last[0] = next(runs, last[0])
            clock.now += last[0]
            ran.append(name)
            return np.array(list(seconds).index(name))

        def run(arrays, out):  # type: ignore[no-untyped-def]
            execute(arrays, out)

        return Contender(name, execute, run, predicted[name], name)

    return [make(n) for n in seconds], ran


def test_a_plan_called_once_runs_the_models_choice_alone() -> None:
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "a": [0.5], "numpy": [0.4]},
                              {"model": 1.0, "a": 1.1, "numpy": None})
    t = Trials(cs, clock=clock)
    assert int(t.execute([], None)) == 0
    assert ran == ["model"]
    assert all(not c.times for c in cs)  # the first call is a warm-up, not a sample


def test_trials_keep_the_fastest_and_stay_within_the_budget() -> None:
    clock = FakeClock()
    seconds = {"model": [1.0], "a": [0.6], "b": [1.1], "numpy": [1.8]}
    cs, ran = fake_contenders(clock, seconds,
                              {"model": 1.0, "a": 1.05, "b": 1.1, "numpy": None})
    settled: list[Trials] = []
    t = Trials(cs, on_settled=settled.append, clock=clock)
    calls = 0
    while t.winner is None:
        t.execute([], None)
        calls += 1
        assert t.spent <= trials.TRIAL_BUDGET * t._spendable() + 1e-12
        assert calls < 1000
    assert t.winner is cs[1] and settled == [t]
    assert t.outcome is not None and t.outcome.kept == "a"
    assert "measured faster than 3 alternatives" in t.outcome.describe()
    # In turns: each contender's timed runs are interleaved with the others'.
    timed = [n for n in ran[1:] if n != "model"]
    assert timed.index("a") < timed.index("b") < timed.index("numpy")
    # After the trials every call runs the winner, untimed.
    before = len(ran)
    for _ in range(5):
        assert int(t.execute([], None)) == 1
    assert ran[before:] == ["a"] * 5


def test_the_models_choice_is_kept_unless_clearly_beaten() -> None:
    clock = FakeClock()
    cs, _ = fake_contenders(clock, {"model": [1.0], "a": [0.99], "numpy": [5.0]},
                            {"model": 1.0, "a": 1.0, "numpy": None})
    t = Trials(cs, clock=clock)
    for _ in range(2000):
        if t.winner is not None:
            break
        t.execute([], None)
    assert t.winner is cs[0]  # 1 % faster is within the timing's noise
    assert cs[2].dropped  # numpy, 5x slower, dropped after one run
    assert len(cs[2].times) == 1


def test_a_contender_estimated_cheap_is_tried_first_and_settles_in_twenty_calls() -> None:
    # numpy's estimate (numpy_path.numpy_seconds) below the model's: tried before the
    # runner-up estimated slower, within the 5 % budget, and kept.
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "a": [1.3], "numpy": [0.6]},
                              {"model": 1.0, "a": 1.3, "numpy": 0.7})
    t = Trials(cs, clock=clock)
    for _ in range(20):
        t.execute([], None)
        assert t.spent <= trials.TRIAL_BUDGET * t._spendable() + 1e-12
    assert t.winner is cs[2]
    timed = [n for n in ran[1:] if n != "model"]
    assert timed.index("numpy") < timed.index("a")


def test_numpys_estimate_counts_its_copies() -> None:
    from teir_plan.frontend.expression import Expression
    from teir_plan.machine.params import MachineParams
    from teir_plan.schedule.numpy_path import numpy_seconds

    p = MachineParams.reference()
    f32 = np.dtype(np.float32)

    def est(inputs: tuple[str, ...], output: str) -> float | None:
        extents = tuple((c, 64) for c in sorted(set("".join(inputs) + output)))
        return numpy_seconds(Expression(inputs, output, extents), f32, p, 2)

    plain, transposed = est(("ab", "bc"), "ac"), est(("ba", "bc"), "ac")
    assert plain is not None and transposed is not None
    assert plain == pytest.approx(transposed)  # BLAS takes either order without a copy
    permuted = est(("abc", "bd"), "acd")  # a's k between its m letters: copied
    reordered = est(("acb", "bd"), "acd")
    assert permuted is not None and reordered is not None and permuted > reordered
    assert est(("ab", "bc", "cd"), "ad") is None  # a network: no estimate
    assert est(("aa", "ab"), "b") is None  # a diagonal: numpy's own loops


def test_a_contender_is_kept_only_if_every_run_beats_the_models_best() -> None:
    # One fast run among slow ones is a busy machine's noise, not a faster plan.
    clock = FakeClock()
    cs, _ = fake_contenders(clock, {"model": [1.0], "a": [0.8, 1.2]},
                            {"model": 1.0, "a": 1.0})
    t = Trials(cs, clock=clock)
    for _ in range(200):
        if t.winner is not None:
            break
        t.execute([], None)
    assert t.winner is cs[0]
    assert len(cs[0].times) >= trials.ROUNDS  # the model timed on the calls it ran


def test_a_contender_is_built_when_first_picked_at_the_trials_cost() -> None:
    # Building a runner-up (its plan, its lowered program) happens once, before its
    # first run and outside its timing, and is charged to the trials' budget.
    clock = FakeClock()
    cs, _ = fake_contenders(clock, {"model": [1.0], "a": [1.0]},
                            {"model": 1.0, "a": 1.0})
    built: list[float] = []

    def build() -> None:
        clock.now += 0.25
        built.append(clock.now)

    cs[1].prepare = build
    t = Trials(cs, clock=clock)
    t.execute([], None)
    t.execute([], None)  # the model's reference run
    assert not built and t.spent == 0.0
    for _ in range(200):
        if cs[1].times:
            break
        t.execute([], None)
    assert len(built) == 1 and cs[1].times == [1.0]  # its run timed without the build
    assert t.spent == pytest.approx(0.25)  # the build charged, the equal run free
    for _ in range(200):
        t.execute([], None)
    assert len(built) == 1


def test_the_runners_up_are_made_plans_only_when_picked(self_correcting) -> None:  # type: ignore[no-untyped-def]
    expr, sa, sb = CASE
    rng = np.random.default_rng(2)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    plan = tp.plan(expr, a, b)
    tp.einsum(expr, a, b)
    tp.einsum(expr, a, b)  # adds the contenders, builds none of them
    assert plan.trials is not None
    runners = [c for c in plan.trials.contenders if "candidate" in c.name]
    assert runners and all(c.prepare is not None for c in runners)
    main = plan.main_step
    assert main is not None
    for c in runners:
        cand = main.alternatives[int(c.name.rsplit(" ", 1)[1])]
        assert c.predicted == pytest.approx(
            plan.predicted_seconds - main.chosen.cost.seconds + cand.cost.seconds)


@pytest.mark.parametrize("stored", [False, True])
def test_contenders_are_added_when_the_budget_covers_it(monkeypatch: pytest.MonkeyPatch,
                                                        stored: bool) -> None:
    # Adding the contenders costs 2 s here, a call 1 s: the budget (5 %) covers it after
    # about 40 calls, not at the second; a choice stored by an earlier process is looked
    # up at the second call all the same.
    monkeypatch.setattr(trials, "expand_seconds", [2.0])
    clock = FakeClock()
    cs, _ = fake_contenders(clock, {"model": [1.0], "a": [1.0]}, {"model": 1.0, "a": 1.0})
    added: list[int] = []

    def expand(t: Trials) -> None:
        clock.now += 2.0
        added.append(t.calls)
        t.contenders.append(cs[1])

    t = Trials([cs[0]], expand=expand, clock=clock, has_stored=lambda: stored)
    for _ in range(80):
        t.execute([], None)
        assert stored or t.spent <= trials.TRIAL_BUDGET * t._spendable() + 1e-12
    if stored:
        assert added == [2]
    else:
        assert len(added) == 1 and added[0] >= 40
    assert trials.expand_seconds == [2.0]


def test_a_first_run_far_over_its_estimate_is_a_warm_up() -> None:
    clock = FakeClock()
    cs, _ = fake_contenders(clock, {"model": [1.0], "a": [40.0, 0.7]},
                            {"model": 1.0, "a": 1.0})
    t = Trials(cs, clock=clock)
    for _ in range(5000):
        if t.winner is not None:
            break
        t.execute([], None)
    assert t.winner is cs[1]
    assert 40.0 not in cs[1].times


def test_a_warm_up_far_over_its_estimate_waits_for_the_budget_to_run_again() -> None:
    """numpy estimated at 1.2x the model's choice that takes 6.5x: its first run is taken
    for a warm-up, and its second waits until the calls' 5 % covers a third of that run
    beyond the model's time, instead of following at once."""
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "numpy": [6.5]},
                              {"model": 1.0, "numpy": 1.2})
    t = Trials(cs, clock=clock)
    for _ in range(20):
        t.execute([], None)
    assert ran.count("numpy") == 1 and cs[1].warmup == 6.5 and not cs[1].times
    assert t.spent <= 6.0  # (the one run's 5.5 beyond the model's, nothing more)
    for _ in range(200):
        if t.winner is not None:
            break
        t.execute([], None)
    first_again = [i for i, name in enumerate(ran) if name == "numpy"][1]
    # By then the calls have paid for the second run's expected 6.5 / 3 - 1 seconds on
    # top of the first's 5.5: 5 % of the calls' time before it (the model's 1 s a call,
    # numpy's first run), not one call later as a cold contender's rerun would be.
    calls_time = (first_again - 1) * 1.0 + 6.5
    assert 0.05 * (calls_time - 1.0) < 5.5 + (6.5 / 3 - 1.0) <= 0.05 * (calls_time + 1.0)
    assert t.winner is cs[0] and cs[1].dropped


def test_a_spinning_contenders_aftermath_is_charged_and_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy.einsum leaves its BLAS threads spinning after it returns: the model's calls
    that start within AFTERMATH_SECONDS of its run take longer, which the trials pay
    for (their time beyond the model's best) and do not take for the model's time; and
    numpy's run waits until the budget covers its expected aftermath as well."""
    monkeypatch.setattr(trials, "AFTERMATH_SECONDS", 4.0)
    clock = FakeClock()
    slow_until = [float("-inf")]
    ran: list[str] = []

    def model_execute(arrays, out):  # type: ignore[no-untyped-def]
        clock.now += 1.5 if clock.now < slow_until[0] else 1.0
        ran.append("model")
        return np.array(0)

    def numpy_execute(arrays, out):  # type: ignore[no-untyped-def]
        clock.now += 0.9  # (faster than the model's choice: it stays a contender)
        slow_until[0] = clock.now + 4.0  # (its threads spin for 4 s after it)
        ran.append("numpy")
        return np.array(1)

    model = Contender("model", model_execute, model_execute, 1.0, "model")
    numpy = Contender("numpy", numpy_execute, numpy_execute, 1.0, "numpy", spins=True)
    t = Trials([model, numpy], clock=clock, threads=2)
    assert t._aftermath(numpy) == 2.0 and t._aftermath(model) == 0.0
    for _ in range(200):
        if "numpy" in ran:
            break
        t.execute([], None)
    first = ran.index("numpy")
    # Estimated at the model's time (predicted alike) plus half of 4 s (two threads, one
    # left): run once 5 % of the calls' time covers 2 s, not at the third call.
    assert first > 30 and 0.05 * (first + 3.0) >= 2.0
    spent = t.spent
    for _ in range(4):
        t.execute([], None)
    after = ran[first + 1:]
    assert after[:3] == ["model"] * 3  # the calls within the 4 s (no timed rerun yet)
    assert t.spent == pytest.approx(spent + 3 * 0.5)  # each 0.5 s beyond the best
    assert max(model.times) == 1.0  # none of the slowed calls is a sample


def test_a_contender_that_could_not_be_kept_is_dropped_after_one_run() -> None:
    """Kept only if every run beats the model's best by SWITCH_MARGIN (and that best only
    falls), a contender whose one run does not is out at once: the trials settle on the
    model's choice without timing it again, and a contender that can be kept is not
    hidden behind it."""
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "a": [0.97], "b": [0.9]},
                              {"model": 1.0, "a": 1.0, "b": 1.0})
    t = Trials(cs, clock=clock)
    for _ in range(200):
        if t.winner is not None:
            break
        t.execute([], None)
    assert cs[1].dropped and cs[1].times == [pytest.approx(0.97)]  # 3 % faster: noise
    assert ran.count("a") == 1
    assert t.winner is cs[2]  # b's runs each beat 0.95 of the model's best


def test_runners_up_that_overrun_their_estimate_slow_the_others_estimates() -> None:
    """Three runners-up predicted as fast as the model's choice that each take twice as
    long: the first one's run shows the estimate 2x low, so the next waits until the
    budget covers a run of twice the model's time, instead of running at the next call."""
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "a": [2.0], "b": [2.0], "c": [2.0]},
                              {"model": 1.0, "a": 1.0, "b": 1.0, "c": 1.0})
    for c in cs[1:]:
        c.made = []  # (runners-up: the model's own candidates)
    t = Trials(cs, clock=clock)
    for _ in range(15):
        t.execute([], None)
    assert [n for n in ran if n != "model"] == ["a"]  # a's 1.0 over, then b waits
    assert t.overrun == pytest.approx(2.0)
    for _ in range(200):
        t.execute([], None)
        assert t.spent <= trials.TRIAL_BUDGET * t._spendable() + 1.0 + 1e-9
    assert "b" in ran and ran.index("b") > 30


def test_a_contender_whose_kernels_are_not_compiled_is_left_out() -> None:
    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "cold": [0.1]},
                              {"model": 1.0, "cold": 1.0})

    def refuse(arrays, out):  # type: ignore[no-untyped-def]
        raise KernelNotCompiledError("kernel x is not compiled on this machine yet")

    cs[1].execute = refuse
    t = Trials(cs, clock=clock)
    results = [int(t.execute([], None)) for _ in range(200)]
    assert results == [0] * 200  # every call answered, by the model's choice
    assert cs[1].dropped and cs[1].cold
    assert t.winner is cs[0]


def test_a_contender_whose_build_would_compile_is_left_out() -> None:
    """Building a runner-up lowers its programs, which compiles the tile kind they run
    on: that happens under the same guard as its run, so a build that needs the
    compiler drops the contender and the call answers with the model's choice."""
    from teir_plan.executor import cache as executor_cache

    clock = FakeClock()
    cs, ran = fake_contenders(clock, {"model": [1.0], "cold": [0.1]},
                              {"model": 1.0, "cold": 0.1})
    guarded = []

    def build() -> None:
        guarded.append(getattr(executor_cache._guard, "warm_only", False))
        raise KernelNotCompiledError("kernel vec_t is not compiled on this machine yet")

    cs[1].prepare = build
    t = Trials(cs, clock=clock)
    results = [int(t.execute([], None)) for _ in range(50)]
    assert results == [0] * 50 and guarded == [True]
    assert cs[1].dropped and cs[1].cold and "cold" not in ran
    assert t.winner is cs[0]


@pytest.fixture
def self_correcting(monkeypatch: pytest.MonkeyPatch, tmp_path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TEIR_PLAN_SELF_CORRECT", "1")
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(trials, "TRIAL_BUDGET", 1.0)  # settle within the test's calls
    # ... and add the contenders at the second call, whatever an earlier addition in
    # this process cost
    monkeypatch.setattr(trials, "expand_seconds", [0.0])
    # ... and time numpy.einsum whatever its spinning threads cost the calls after it
    monkeypatch.setattr(trials, "AFTERMATH_SECONDS", 0.0)
    api.plan_cache.clear()
    choices.forget()
    yield tmp_path
    api.plan_cache.clear()
    choices.forget()


CASE = ("abcd,cde->abe", (32, 24, 30, 16), (30, 16, 24))


def test_every_call_during_trials_gives_numpys_result(self_correcting) -> None:  # type: ignore[no-untyped-def]
    expr, sa, sb = CASE
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    plan = tp.plan(expr, a, b)
    assert plan.trials is not None
    assert [c.name for c in plan.trials.contenders] == ["the model's choice"]
    for _ in range(2):  # the second call adds the other contenders
        np.testing.assert_allclose(tp.einsum(expr, a, b), ref, rtol=1e-4, atol=1e-4)
    names = [c.name for c in plan.trials.contenders]
    assert names[0] == "the model's choice" and "numpy.einsum" in names
    out = np.empty(plan.shape, np.float32)
    for i in range(60):
        r = tp.einsum(expr, a, b) if i % 2 else tp.einsum(expr, a, b, out=out)
        np.testing.assert_allclose(r, ref, rtol=1e-4, atol=1e-4)
    assert plan.choice is not None and not plan.choice.stored
    assert "calls run" in str(plan.explain())
    assert (self_correcting / "choices.json").exists()

    # The next process starts with the stored choice: no trials.
    api.plan_cache.clear()
    choices.forget()
    again = tp.plan(expr, a, b)
    assert again is not plan
    for _ in range(2):  # the first call runs the model's choice, the second reads the store
        np.testing.assert_allclose(tp.einsum(expr, a, b), ref, rtol=1e-4, atol=1e-4)
    assert again.choice is not None and again.choice.stored
    assert "earlier process" in str(again.explain())


def test_an_out_with_gaps_is_written_during_trials(self_correcting) -> None:  # type: ignore[no-untyped-def]
    expr, sa, sb = CASE
    rng = np.random.default_rng(2)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = np.einsum(expr, a.astype(np.float64), b.astype(np.float64))
    big = np.zeros((32, 24 * 2, 24), np.float32)
    out = big[:, ::2, :]
    for _ in range(30):
        tp.einsum(expr, a, b, out=out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert not big[:, 1::2, :].any()  # nothing written between out's elements


def test_no_trials_when_turned_off_or_tiny(monkeypatch: pytest.MonkeyPatch) -> None:
    api.plan_cache.clear()
    expr, sa, sb = CASE
    assert tp.plan(expr, sa, sb, dtype=np.float32).trials is None  # the suite: off
    monkeypatch.setenv("TEIR_PLAN_SELF_CORRECT", "1")
    api.plan_cache.clear()
    assert tp.plan("ij,jk->ik", (4, 4), (4, 4), dtype=np.float32).trials is None
    api.plan_cache.clear()


def test_a_damaged_choices_file_is_ignored(self_correcting) -> None:  # type: ignore[no-untyped-def]
    for text in ("[1, 2]", "null", '{"form": 1, "machines": {"x": 3}}', "{not json"):
        (self_correcting / "choices.json").write_text(text)
        choices.forget()
        assert choices.stored("anything") is None
        assert choices.store("problem", "fingerprint")
        choices.forget()
        assert choices.stored("problem") == choices.digest("fingerprint")


def test_a_tree_times_numpy_along_its_own_path(self_correcting) -> None:  # type: ignore[no-untyped-def]
    expr = "ab,bc,cd->ad"
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(s).astype(np.float32)
           for s in ((192, 160), (160, 224), (224, 128))]
    ref = np.einsum(expr, *(o.astype(np.float64) for o in ops))
    plan = tp.plan(expr, *ops)
    for _ in range(2):
        tp.einsum(expr, *ops)
    assert plan.trials is not None
    assert "numpy.einsum" in [c.name for c in plan.trials.contenders]
    # (up to 200 calls: on a loaded machine warm-ups and drops take more turns)
    for _ in range(200):
        np.testing.assert_allclose(tp.einsum(expr, *ops), ref, rtol=1e-4, atol=1e-3)
        if plan.choice is not None:
            break
    assert plan.choice is not None


def test_a_trees_steps_take_rounds_one_after_the_other(self_correcting, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Two steps of comparable time: the main step's runners-up first, then the other
    # step's runners-up on what the first round kept; every call is right.  (numpy is
    # left out: kept, it would end the rounds.)
    monkeypatch.setattr(trials, "numpy_contender", lambda plan, path=None: None)
    expr = "ab,bc,cd->ad"
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s).astype(np.float32)
           for s in ((192, 160), (160, 224), (224, 128))]
    ref = np.einsum(expr, *(o.astype(np.float64) for o in ops))
    plan = tp.plan(expr, *ops)
    steps = trials.trial_steps(plan)
    assert len(steps) == 2 and steps[0] == plan.steps.index(plan.main_step)
    rounds: set[str] = set()
    for _ in range(200):
        np.testing.assert_allclose(tp.einsum(expr, *ops), ref, rtol=1e-4, atol=1e-3)
        if plan.trials is None:
            break
        rounds |= {c.name for c in plan.trials.contenders}
        if plan.trials.winner is not None and any(f"for step {steps[1]}" in n
                                                  for n in rounds):
            break
    assert any(f"for step {steps[1]}" in n for n in rounds), rounds
    assert plan.choice is not None
    stored = json.loads((self_correcting / "choices.json").read_text())["machines"]
    (entries,) = stored.values()
    assert len(entries) == 2  # one choice per round, the next process starts with both


def test_a_plan_of_one_big_step_takes_one_round(self_correcting) -> None:  # type: ignore[no-untyped-def]
    expr, sa, sb = CASE
    rng = np.random.default_rng(1)
    plan = tp.plan(expr, rng.standard_normal(sa).astype(np.float32),
                   rng.standard_normal(sb).astype(np.float32))
    assert trials.trial_steps(plan) == [plan.steps.index(plan.main_step)]

"""Plans that correct themselves: a plan called repeatedly times its runner-up candidates
and numpy's own einsum against the model's choice, in turns, during its first calls, and
keeps the fastest.

The cost model ranks candidates with one machine's parameters; on a CPU it was never
tuned for it can rank them wrongly (on an AMD EPYC Zen 3 its first choice was the fastest
of its timed top five on 6 of 20 TCCG cases), and nothing it prices can tell it that
numpy's tensordot would have been faster.  Timing settles it, as FFTW's MEASURE planner
and cuDNN's benchmark mode do; here the timing is done by the user's own calls, so a trial
costs only the difference between the contender's time and the best one's:

* the first call runs the model's choice (a plan called once is never slowed); the
  other contenders are added once the budget covers adding them (at the second call
  when an earlier process stored a choice);
* later calls run a contender instead while the trials' extra time so far, with the
  contender's estimated extra time, stays within ``TRIAL_BUDGET`` (5 %) of all the
  calls' time so far;
* every contender is timed ``ROUNDS`` times in turns (the one with fewest timings next,
  the cheapest trial first), so a busy spell of a shared machine falls on all of them,
  and the model's choice on every call it runs meanwhile; one measured ``DROP_RATIO``
  slower than the best is dropped;
* when all are timed the fastest is kept (another than the model's choice only when
  each of its runs is ``SWITCH_MARGIN`` faster than the model's best), stored per
  machine (:mod:`teir_plan.schedule.choices`) so the next process starts with it, and
  later calls run it without any timing.

Every trial is a real call that returns the correct result.  The contenders are the
model's choice, its next ``RUNNERS_UP`` candidates (the same steps, another candidate
for the main contraction) and, for operands of the result's dtype, numpy.einsum: with
``optimize=True`` for one or two operands (what numpy itself would run: its pairwise
steps on BLAS through tensordot), along the plan's own path for more, so a plan cannot
stay slower than numpy once its trials are done.  A tree's other steps of a fifth or more
of its predicted time then take rounds of their own, one after the other, each timing
that step's runners-up within what the rounds before kept (:func:`trial_steps`).

``TEIR_PLAN_SELF_CORRECT=0`` turns this off (the test suite does, so that plans are
deterministic); plans predicted under ``MIN_PLAN_SECONDS`` never take trials (their time
is the call's overhead, which a trial could only add to).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.errors import KernelNotCompiledError
from teir_plan.executor.cache import warm_only
from teir_plan.schedule import choices
from teir_plan.schedule.in_force import machine_params
from teir_plan.schedule.numpy_path import numpy_seconds, path_of
from teir_plan.schedule.steps import Candidate, TEIRStep
from teir_plan.teir.enums import is_half

if TYPE_CHECKING:
    from teir_plan.schedule.plan import Plan

TRIAL_BUDGET = 0.05
# Two timed runs each, so that five contenders settle within the 20 calls a training
# loop's first epoch or a solver's first iterations make; a contender is kept over the
# model's choice only when both its runs are SWITCH_MARGIN faster than the model's best
# (see _settle).
ROUNDS = 2
RUNNERS_UP = 3
# A tree's steps other than the main one take a round of trials of their own when they
# are predicted at least this share of the plan's time, up to MAX_ROUNDS rounds in all.
STEP_SHARE = 0.2
MAX_ROUNDS = 3
# A contender this much slower than the best after its runs is dropped; only the chance
# of a switch is lost if noise drops a good one, never a call's speed.
DROP_RATIO = 1.15
DROP_FIRST_RATIO = 1.4  # ... or this much slower on its first timed run
SWITCH_MARGIN = 0.95
MIN_PLAN_SECONDS = 50e-6
# A contender's first run this much slower than its estimate is taken for a warm-up (its
# kernels compiled or loaded, its pages first touched): not a timing.  The plan's first
# call, which is such a warm-up too, counts towards the budget for at most this many
# times the model's best time (a first call that compiled for seconds does not buy
# seconds of trials).
WARMUP_RATIO = 3.0
# The least that adding a plan's contenders has cost in this process, 1 ms until measured
# (the runners-up's records compared, numpy's estimate, the stored choices looked up;
# 0.5-1.2 ms on an AMD EPYC Zen 4): a plan of 0.3 ms a call pays for it from its budget
# after about 70 calls, not on its second.  The least, not the last: one addition slowed
# by a busy spell or a first import would otherwise hold back every later plan's trials.
expand_seconds = [1e-3]
# numpy.einsum's products run on numpy's OpenBLAS threads, which spin for about 0.1 s
# after each call (2^28 cycles by default) before they sleep: the executor's threads
# share the cores with them meanwhile.  On a 2-core Xeon (AVX-512), one call of
# numpy.einsum on attention's 1 ms product made the next 110 ms of the plan's calls run
# at half speed, 57-62 ms of extra time in all: four times numpy's call itself, and
# more than the first 20 calls' whole budget.  So the calls of the model's choice that
# start within AFTERMATH_SECONDS of such a contender's run are charged to the trials
# (their time beyond the model's best; they are not samples of the model's time), and
# such a contender's trial is estimated to cost its run's extra time plus what the spin
# takes from the plan's threads: AFTERMATH_SECONDS of every core but the caller's.
AFTERMATH_SECONDS = 0.12

Clock = Callable[[], float]


def enabled() -> bool:
    """Whether plans take trials (``TEIR_PLAN_SELF_CORRECT``, on unless ``0``)."""
    return os.environ.get("TEIR_PLAN_SELF_CORRECT", "1").strip() != "0"


class Contender:
    """One way to compute the plan's result: ``execute(arrays, out or None)`` returns
    the result (a new array when ``out`` is None), ``run(arrays, out)`` writes ``out``."""

    def __init__(self, name: str, execute: Callable[[Sequence[np.ndarray], np.ndarray | None],
                                                    np.ndarray],
                 run: Callable[[Sequence[np.ndarray], np.ndarray], None],
                 predicted: float | None, fingerprint: str | Callable[[], str],
                 prepare: Callable[[], None] | None = None,
                 made: list[Plan] | None = None, spins: bool = False) -> None:
        self.name = name
        # Runs on threads that keep spinning after it returns (numpy's OpenBLAS): the
        # calls after it pay for that (AFTERMATH_SECONDS).
        self.spins = spins
        self.execute = execute
        self.run = run
        # Builds what the contender runs, before its first run and outside its timing
        # (its cost is the trials' all the same): a contender never picked is never built.
        self.prepare = prepare
        # The plan it runs, once made (None for numpy.einsum): a tree's next round of
        # trials runs on the one kept.
        self.made = made
        self.predicted = predicted
        self._fingerprint = fingerprint
        self.times: list[float] = []
        self.warmed = False
        # Its first run's seconds when that run was taken for a warm-up (see
        # WARMUP_RATIO), else None: what its next run is estimated from.
        self.warmup: float | None = None
        self.dropped = False
        self.cold = False  # dropped because its kernels are not compiled yet

    @property
    def best(self) -> float:
        return min(self.times) if self.times else float("inf")

    @property
    def plan(self) -> Plan | None:
        return self.made[0] if self.made else None

    @property
    def fingerprint(self) -> str:
        """What tells this contender apart across processes (computed when first asked:
        a plan called once never asks)."""
        if callable(self._fingerprint):
            self._fingerprint = self._fingerprint()
        return self._fingerprint


@dataclass(frozen=True)
class Outcome:
    """What the trials found, for explain: the contender kept, and each contender's best
    time (None: dropped before it was timed, or never run)."""

    kept: str
    calls: int
    seconds: tuple[tuple[str, float | None], ...]
    stored: bool = False  # taken from an earlier process' trials (choices.py)

    def describe(self) -> str:
        if self.stored:
            return (f"chosen by measurement in an earlier process on this machine: "
                    f"{self.kept}")
        timed = [(n, s) for n, s in self.seconds if s is not None]
        others = len(self.seconds) - 1
        parts = ", ".join(f"{n} {s * 1e3:.3f} ms" for n, s in timed)
        if self.kept == "the model's choice":
            return (f"the model's choice, measured no slower than {others} alternatives "
                    f"after {self.calls} calls ({parts})")
        return (f"{self.kept}, measured faster than {others} alternatives after "
                f"{self.calls} calls ({parts})")


@dataclass
class Trials:
    """The trials of one plan (thread-safe: the choice of what a call runs and the
    bookkeeping are under a lock; the runs are not)."""

    contenders: list[Contender]  # the model's choice first
    # Adds the other contenders (and applies a choice stored by an earlier process): at
    # the second call when a choice is stored (``has_stored``), else once the budget
    # covers what adding them costs (``expand_seconds``); a plan called once never
    # builds them.
    expand: Callable[[Trials], None] | None = None
    has_stored: Callable[[], bool] = lambda: False
    on_settled: Callable[[Trials], None] | None = None
    clock: Clock = time.perf_counter
    calls: int = 0
    total: float = 0.0  # seconds of every call after the first, trials included
    first: float = 0.0  # seconds of the first call
    spent: float = 0.0  # the trials' seconds beyond the model's best time
    winner: Contender | None = None
    outcome: Outcome | None = None
    in_flight: int = 0
    expand_now: bool | None = None
    # The most a runner-up's first run took over its estimate (its prediction over the
    # model's, times the model's best), at least 1: the other runners-up are estimated
    # that much slower until timed.  The model predicts its runners-up from the same
    # terms as its choice, so where it misjudged one it tends to misjudge them all: on
    # the Xeon, acd,dbc->ab's three runners-up, predicted within a few % of its 200 ms
    # choice, each ran far slower, back to back in calls 2-4, and the first 20 calls took
    # 47 % longer than the model's choice alone.
    overrun: float = 1.0
    # Calls of the model's choice that start before this clock reading follow a
    # spinning contender's run (AFTERMATH_SECONDS): charged to the trials.
    aftermath_until: float = float("-inf")
    threads: int = 1  # the plan's threads (what a spinning contender's aftermath takes)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- what a call runs -------------------------------------------------------
    def _best_time(self) -> float:
        return min((c.best for c in self.contenders), default=float("inf"))

    def _estimate(self, c: Contender) -> float:
        """Seconds ``c`` is expected to take: its best so far, else the model's best
        scaled by the predictions (numpy's from numpy_path.numpy_seconds), else (numpy
        on a network, which has no estimate) twice the model's best: a slower one is
        dropped after that one run."""
        if c.times:
            return c.best
        if c.warmup is not None:
            # A warm-up as slow as WARMUP_RATIO times what was expected: the next run is
            # expected at a WARMUP_RATIO-th of it, no less than before, so that the
            # budget decides when it comes (numpy.einsum estimated at 1.2x the model's
            # choice and run at 6.5x was run again at once as if it had been cold, and
            # its two runs were a quarter of a TCCG plan's first 20 calls).
            return c.warmup / WARMUP_RATIO
        model = self.contenders[0].best
        if c.predicted and self.contenders[0].predicted:
            scaled = model * c.predicted / self.contenders[0].predicted
            return scaled * self.overrun if c.made is not None else scaled
        return 2.0 * model

    def _learn_overrun(self, c: Contender, seconds: float) -> None:
        """After a runner-up's first timed run: how far it ran over its estimate, the most
        so far, applied to the runners-up not timed yet (see ``overrun``)."""
        model = self.contenders[0]
        if c.made is None or not (c.predicted and model.predicted and model.times):
            return
        scaled = model.best * c.predicted / model.predicted
        self.overrun = max(self.overrun, seconds / scaled)

    def _pick(self) -> tuple[Contender, bool]:
        """The contender this call runs, and whether its time is a sample."""
        self.calls += 1
        model = self.contenders[0]
        if self.calls == 1 or self.in_flight:
            return model, False  # the first call (a warm-up), or overlapping calls
        if self.expand is not None:
            if self.expand_now is None:  # (asked once: a stored choice applies at once)
                self.expand_now = self.has_stored()
            if not (self.expand_now or self.spent + expand_seconds[0]
                    <= TRIAL_BUDGET * self._spendable()):
                return model, True  # timed: the reference the trials will need
            expand, self.expand = self.expand, None
            t = self.clock()
            expand(self)
            took = self.clock() - t
            self.spent += took  # building the contenders is the trials' cost
            expand_seconds[0] = min(expand_seconds[0], took)
            if self.winner is not None:  # stored, or no other contender
                return self.winner, False
        pending = [c for c in self.contenders if not c.dropped and len(c.times) < ROUNDS]
        if not pending:
            return model, False
        if self.clock() < self.aftermath_until:
            # Another library's threads still spin: a contender timed now would be
            # timed slow, and the aftermath is not all charged yet.
            return model, True
        if not model.times:
            return model, True  # the reference every trial's cost is counted against
        fewest = min(len(c.times) for c in pending)
        if model in pending and len(model.times) == fewest:
            return model, True
        # The cheapest trial first: what the budget covers now runs now, and a
        # contender estimated slower waits for the calls that pay for it.
        extras = sorted((max(0.0, self._estimate(c) - model.best) + self._aftermath(c), i)
                        for i, c in enumerate(self.contenders)
                        if c in pending and len(c.times) == fewest)
        for extra, i in extras:
            if self.spent + extra <= TRIAL_BUDGET * self._spendable():
                return self.contenders[i], True
        # The budget does not cover a contender yet: the model's choice runs, and is
        # timed (each of its runs lowers the best time a contender must beat, so that
        # a busy spell during the model's few runs does not hand a contender the win).
        return model, True

    def _aftermath(self, c: Contender) -> float:
        """What a run of ``c`` is expected to cost the calls after it: the share of the
        plan's threads that another library's spinning threads take for
        AFTERMATH_SECONDS (0.06 s on 2 threads: 57-62 ms measured, above)."""
        if not c.spins or self.threads <= 1:
            return 0.0
        return AFTERMATH_SECONDS * (1.0 - 1.0 / self.threads)

    def _spendable(self) -> float:
        """The calls' time so far that the budget is a share of."""
        return self.total + min(self.first, WARMUP_RATIO * self.contenders[0].best)

    def _record(self, c: Contender, sample: bool, seconds: float,
                start: float = float("-inf")) -> None:
        best = self._best_time()
        if not self.first and not sample and c is self.contenders[0]:
            self.first = seconds  # the first call's (a warm-up: see WARMUP_RATIO)
        else:
            self.total += seconds
        model = self.contenders[0]
        if c is not model and model.times:
            # A trial costs what it took beyond the model's choice, which the call would
            # have run otherwise (a faster contender's trials pay back).
            self.spent += seconds - model.best
        if c.spins:
            self.aftermath_until = start + seconds + AFTERMATH_SECONDS
        elif c is model and start < self.aftermath_until and model.times:
            # Slowed by the spinning threads a contender left behind: the trials' cost,
            # and no measure of the model's choice.
            self.spent += max(0.0, seconds - model.best)
            return
        if not sample:
            return
        if not c.warmed and c is not model:
            c.warmed = True
            estimate = self._estimate(c)
            if seconds > WARMUP_RATIO * estimate:
                c.warmup = seconds  # loaded or first touched: run again before judging,
                return  # when the budget covers what this run suggests it costs
        if c is not model and not c.times:
            self._learn_overrun(c, seconds)
        c.times.append(seconds)
        if len(c.times) > ROUNDS:  # (the model's: only its fastest matter, and a plan
            c.times = sorted(c.times)[:ROUNDS]  # may run many calls before settling)
        if c is not model and best < float("inf") and c.best > (
                DROP_RATIO if len(c.times) >= 2 else DROP_FIRST_RATIO) * best:
            c.dropped = True
        if c is not model and model.times and seconds >= SWITCH_MARGIN * model.best:
            # It could never be kept (every run must beat the model's best by the margin,
            # and that best only falls): timing it again would spend the budget for
            # nothing, and as the fastest by its best it would hide one that can be kept.
            c.dropped = True
        if self.expand is None and all(c.dropped or len(c.times) >= ROUNDS
                                       for c in self.contenders):
            self._settle()

    def _settle(self) -> None:
        model = self.contenders[0]
        timed = [c for c in self.contenders if c.times and not c.dropped]
        fastest = min(timed, key=lambda c: c.best)
        # Every run of the contender, not only its best, must beat the model's best by
        # the margin: on a shared machine a run of the same plan moves 10-30 % within
        # minutes, and a best of two against a best of two switched AVX2 Zen 3 plans to
        # contenders 1.2-1.75x slower than the model's choice (degc,gfab->abcdef).
        kept = fastest if max(fastest.times) < SWITCH_MARGIN * model.best else model
        self.winner = kept
        self.outcome = Outcome(
            kept=kept.name, calls=self.calls,
            seconds=tuple((c.name, c.best if c.times else None) for c in self.contenders))
        self.contenders = [c for c in self.contenders if c is model or c is kept]  # (memory)
        if self.on_settled is not None:
            self.on_settled(self)

    def _call(self, go: Callable[[Contender], np.ndarray | None]) -> np.ndarray | None:
        with self._lock:
            winner = self.winner
            if winner is None:
                c, sample = self._pick()
                self.in_flight += 1
        if winner is not None:
            return go(winner)
        model = self.contenders[0]
        t = self.clock()
        try:
            if c is model:
                return go(c)
            with warm_only():  # no trial waits for the compiler: see below
                if c.prepare is not None:
                    # Built outside its timing, at the trials' cost; under warm_only
                    # too: lowering a program compiles the tile kind it lowers onto,
                    # which a contender of another kind would have compiled here (1.3 s
                    # into the first 20 calls of a 24 ms plan, dega,gfbc->abcdef).
                    c.prepare()
                    c.prepare = None
                    with self._lock:
                        self.spent += self.clock() - t
                    t = self.clock()
                return go(c)
        except KernelNotCompiledError:
            # The contender needs kernels this machine has not compiled yet (seconds of
            # the compiler, for a call of milliseconds): it is left out of this
            # process' trials, and the call runs the model's choice.  Nothing was
            # written: the check comes before any kernel runs.
            with self._lock:
                c.dropped = True
                c.cold = True
                sample = False
            c = model
            return go(model)
        finally:
            seconds = self.clock() - t
            with self._lock:
                self.in_flight -= 1
                if self.winner is None:
                    self._record(c, sample, seconds, t)

    def execute(self, arrays: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray:
        r = self._call(lambda c: c.execute(arrays, out))
        assert r is not None
        return r

    def run(self, arrays: Sequence[np.ndarray], out: np.ndarray) -> None:
        self._call(lambda c: c.run(arrays, out))


# ---- the contenders of a plan --------------------------------------------------------
def _numpy_subscripts(subscripts: str) -> bool:
    return all(ch.isascii() and (ch.isalpha() or ch in ",->. ") for ch in subscripts)


def numpy_contender(plan: Plan, path: list[object] | None = None) -> Contender | None:
    """numpy.einsum on the plan's operands (``optimize=True`` for two, else along
    ``path``, the plan's own pairwise steps as numpy's path), for operands of the
    result's dtype with numpy's letters and no epilogue (numpy would compute anything
    else otherwise than the plan: casts, ReLU), and not 16-bit (numpy's einsum has no
    bfloat16 loop, and sums float16 in float16, not in float32 as the plan does)."""
    if (plan.info.epilogue or is_half(plan.dtype)
            or any(s.dtype != plan.dtype for s in plan.operands)
            or not _numpy_subscripts(plan.subscripts)):
        return None
    if len(plan.operands) > 2 and path is None:
        return None
    optimize: object = True if len(plan.operands) <= 2 else path
    subscripts = plan.subscripts
    own_layout = plan.info.order == "K"

    def execute(arrays: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray:
        if out is None and own_layout:  # order='K': numpy's own layout is a result too
            return np.einsum(subscripts, *arrays, optimize=optimize)  # type: ignore[no-any-return, call-overload]
        target = plan.empty_out() if out is None else out
        np.einsum(subscripts, *arrays, out=target, optimize=optimize)  # type: ignore[call-overload]
        return target

    def run(arrays: Sequence[np.ndarray], out: np.ndarray) -> None:
        np.einsum(subscripts, *arrays, out=out, optimize=optimize)  # type: ignore[call-overload]

    predicted = numpy_seconds(plan.expression, plan.dtype, machine_params(),
                              plan.info.threads or 1)
    return Contender("numpy.einsum", execute, run, predicted, "numpy.einsum", spins=True)


def plan_fingerprint(plan: Plan, step: int | None = None) -> str:
    """What tells a plan's candidate for step ``step`` (the main step by default) apart,
    stable across processes."""
    st = plan.main_step if step is None else plan.steps[step]
    if not isinstance(st, TEIRStep):
        return "steps"
    return candidate_fingerprint(st.chosen)


def candidate_fingerprint(cand: Candidate) -> str:
    return repr((cand.teir.to_json(), tuple(p.describe() for p in cand.packs)))


def eligible(plan: Plan) -> bool:
    """Whether ``plan`` takes trials: long enough to time, not a view or a tiny call's
    numpy route, not autotuned already."""
    return (plan.view is None and plan.numpy_call is None
            and plan.predicted_seconds >= MIN_PLAN_SECONDS
            and not plan.info.autotuned)


def trial_steps(plan: Plan) -> list[int]:
    """The steps whose candidates the trials time, in the order they take their turns:
    the main step (the most flops), then a tree's other steps of at least STEP_SHARE of
    the plan's predicted time, slowest first, at most MAX_ROUNDS in all."""
    main = plan.main_step
    if main is None:
        return []
    total = plan.predicted_seconds
    others = sorted(((s.chosen.cost.seconds, i) for i, s in enumerate(plan.steps)
                     if isinstance(s, TEIRStep) and s is not main and len(s.alternatives) > 1
                     and s.chosen.cost.seconds >= STEP_SHARE * total), reverse=True)
    first = next(i for i, s in enumerate(plan.steps) if s is main)
    return [first, *(i for _, i in others)][:MAX_ROUNDS]


def attach(plan: Plan, problem: str) -> None:
    """Give ``plan`` (cached under the key whose repr is ``problem``) its trials: its
    first call runs the model's choice; the second builds the other contenders, or takes
    the choice an earlier process' trials stored for it on this machine.  A tree's steps
    take their turns one after the other (:func:`trial_steps`): each round times one
    step's runners-up within what the rounds before kept."""
    _round(plan, problem, plan, "the model's choice", trial_steps(plan), 0, None)


def _round(plan: Plan, problem: str, base: Plan, base_name: str, steps: list[int],
           index: int, before: Trials | None) -> None:
    """Round ``index``: ``base`` (the model's choice, or what the rounds before kept,
    named ``base_name``) against the runners-up of step ``steps[index]`` on it (and, in
    the first round, numpy.einsum); ``before``: the last round's trials, whose calls'
    time the budget carries on from."""
    step = steps[index] if index < len(steps) else None
    key = problem if index == 0 else f"{problem} step {step}"
    model = Contender(base_name, base.execute_planned, base.run_planned,
                      base.predicted_seconds, lambda: plan_fingerprint(base, step), None,
                      [base])

    def keep(trials: Trials, outcome: Outcome | None) -> None:
        if outcome is not None:
            plan.choice = outcome
        if trials.winner is model and base is plan:
            plan.trials = None  # no timing, no indirection from here on

    def settled(trials: Trials) -> None:
        keep(trials, trials.outcome)
        winner = trials.winner
        assert winner is not None
        choices.store(key, winner.fingerprint)
        if winner.plan is not None and index + 1 < len(steps):
            _round(plan, problem, winner.plan, winner.name, steps, index + 1, trials)

    def expand(trials: Trials) -> None:
        # Only the runners-up are made plans, and they are told apart by their TEIR
        # records' equality; the JSON fingerprints (about a millisecond each, most of
        # this call's cost) are computed only when a stored choice is looked up or a
        # winner stored.
        st = None if step is None else base.steps[step]
        assert st is None or isinstance(st, TEIRStep)
        seen = [] if st is None else [_same_as(st.chosen)]
        of = "" if index == 0 else f" for step {step}"
        for rank, cand in enumerate(() if st is None else st.alternatives[1:1 + RUNNERS_UP],
                                    start=1):
            if _same_as(cand) in seen:
                continue
            seen.append(_same_as(cand))
            trials.contenders.append(_candidate_contender(
                base, step, f"the model's candidate {rank}{of}", cand))
        if index == 0:
            baseline = numpy_contender(plan, path_of(plan) if len(plan.operands) > 2
                                       else None)
            if baseline is not None:
                trials.contenders.append(baseline)
        if len(trials.contenders) == 1:  # nothing to time it against
            trials.winner = model
            keep(trials, None)
            return
        kept = choices.stored(key)
        for c in trials.contenders if kept is not None else ():
            if choices.digest(c.fingerprint) == kept:
                trials.winner = c
                trials.outcome = Outcome(kept=c.name, calls=0, seconds=(), stored=True)
                settled(trials)
                return

    trials = Trials([model], expand=expand, on_settled=settled,
                    has_stored=lambda: choices.stored(key) is not None,
                    threads=plan.info.threads or 1)
    if before is not None:  # the budget is a share of all the calls so far
        trials.total, trials.spent = before.total + before.first, before.spent
        trials.aftermath_until = before.aftermath_until
    plan.trials = trials


def _candidate_contender(base: Plan, step: int | None, name: str,
                         cand: Candidate) -> Contender:
    """``base`` with its step ``step`` running ``cand``: made a plan of its own (and its
    program lowered) only when the trials first pick it."""
    assert step is not None
    made: list[Plan] = []
    was = base.steps[step]
    assert isinstance(was, TEIRStep)

    def prepare() -> None:
        made.append(base.with_candidate(cand, step))
        cand.lowered  # noqa: B018  (lowered once, outside the contender's timing)

    return Contender(name, lambda arrays, out: made[0].execute(arrays, out),
                     lambda arrays, out: made[0].run(arrays, out),
                     base.predicted_seconds - was.chosen.cost.seconds + cand.cost.seconds,
                     lambda: candidate_fingerprint(cand), prepare, made)


def _same_as(cand: Candidate) -> tuple[object, ...]:
    """What tells two candidates of one step apart (as their fingerprints do)."""
    return (cand.teir, tuple(cand.packs))


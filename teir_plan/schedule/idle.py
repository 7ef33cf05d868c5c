"""Small plans on the calling thread alone when the executor's worker threads sleep.

After a parallel region the executor's worker threads spin for a while, then sleep
(executor/threads.py); a region that starts after they slept must wake them first,
which costs more than the region itself for small plans: on a 2-core AMD EPYC (Zen 5,
a virtual machine), 20-30 us after a millisecond of other work, 50 us after 5 ms.  A
user's loop that does anything between its einsum calls meets sleeping threads on every
call: a 128^3 float32 product took 38-69 us a call on two threads there against 20 on
one (17 in a tight loop on two), and a 256 x 256 x 96 one 57-88 against 52-55.

So a plan records, when it is planned, what its steps are predicted to take on the
calling thread alone and with its threads awake (the cost model's own estimates at one
thread and at the plan's count); where alone is the faster once the wake cost
(``MachineParams.wake_seconds``, measured by the calibrations) is added to the parallel
run, a call that finds the threads idle for longer than they spin
(``MachineParams.spin_seconds``) runs the plan on one thread.  The same programs run
either way (every program runs on any number of threads, the same tiles in the same
order), so the choice is a matter of time alone; calls in a tight loop find the threads
awake and run in parallel as planned.

Other threads may hold the cores when a call starts: OpenBLAS' spin for about 0.1 s after
each of numpy's multi-threaded products (the library the GEMM tiles call too), so a
user's loop of ``a @ b`` and tp.einsum runs the executor's threads beside a spinning
one.  There (2 threads, float32, each call right after a 384^3 matmul) two threads
took 1.3 to 10 times a plan's time alone (a 320^2 product 1527 us median, on the core
left free 366), one thread about twice; two won only on a few small plans (256^2: 125
against 160 us; docs/decisions.md).  So a plan that is predicted to run for less than
BUSY_HORIZON_SECONDS, called after its threads went idle (the caller did something
else in between, such as numpy's product), asks the kernel how many cores other threads
leave free (executor/threads.free_cores, 2 us) and runs on that many when fewer than its
threads.  A small plan that runs alone when its threads sleep never asks, nor does a
call in a tight loop.  A longer plan outlasts such a spinner and runs as planned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from teir_plan.machine.params import MachineParams
from teir_plan.planner.cost import estimate
from teir_plan.schedule.steps import (
    CastStep,
    CopyStep,
    FillStep,
    NumpyStep,
    ReduceStep,
    Step,
    TEIRStep,
    ViewStep,
    step_seconds,
)

# Steps that run on the calling thread whatever the thread count.
_SERIAL_STEPS = (CastStep, CopyStep, FillStep, NumpyStep, ViewStep)
# Plans predicted shorter than this run on the cores other threads leave free (above):
# a fifth of OpenBLAS' spin after a call, so that the spinner outlasts the call.  Below
# BUSY_LEAST_SECONDS two threads beside the spinner were as fast or faster (256^2,
# predicted 88 us: 100-135 us against 160-197 on one thread, right after a 384^3
# matmul), or the faster of the two changed from run to run (512 x 32 x 32, predicted
# 138 us: 172-335 against 273-491 us in three runs, 838-939 against 381-467 in two).
BUSY_HORIZON_SECONDS = 0.02
BUSY_LEAST_SECONDS = 2e-4


@dataclass(frozen=True)
class SerialWhenIdle:
    """How many threads a call of a plan planned for ``threads`` runs on, when its worker
    threads have been idle longer than ``spin_seconds``: one where ``when_asleep``
    (``serial_seconds``, predicted on one thread, is below ``parallel_seconds`` on the
    plan's threads plus ``wake_seconds``); else, where ``when_busy`` (the plan is
    predicted within BUSY_LEAST_SECONDS and BUSY_HORIZON_SECONDS), as many as the
    cores left free by other threads.
    A call right after another runs on the plan's threads."""

    serial_seconds: float
    parallel_seconds: float
    wake_seconds: float
    spin_seconds: float
    threads: int = 2
    when_asleep: bool = True
    when_busy: bool = False

    def call_threads(self, idle_seconds: float,
                     free_cores: Callable[[float], int | None]) -> int:
        """The threads for a call that finds the worker threads idle for
        ``idle_seconds``, ``free_cores(spin_seconds)`` the cores other threads leave
        (executor/threads.free_cores; None: unknown).  A call right after another (a
        tight loop, the threads awake) does not ask: nothing else ran in between, and
        the other tasks a reading meets there (2 of 12 readings on a quiet host) cost
        3-12% in such loops.

        >>> rule = SerialWhenIdle(2e-3, 1e-3, 3e-5, 2e-4, 2, when_asleep=False,
        ...                       when_busy=True)
        >>> [rule.call_threads(1e-3, lambda spin: free) for free in (2, 1, 0, None)]
        [2, 1, 1, 2]
        >>> rule.call_threads(0.0, lambda spin: 1)
        2
        >>> small = SerialWhenIdle(2e-5, 1.5e-5, 3e-5, 2e-4, 2)
        >>> small.call_threads(1e-3, lambda spin: 2), small.call_threads(0.0, lambda spin: 1)
        (1, 2)
        """
        if idle_seconds <= self.spin_seconds:
            return self.threads
        if self.when_asleep:
            return 1
        if self.when_busy:
            free = free_cores(self.spin_seconds)
            if free is not None and free < self.threads:
                return max(free, 1)
        return self.threads

    def describe(self) -> str:
        idle = f"a call that finds the worker threads idle over {self.spin_seconds * 1e6:.0f} us"
        if self.when_asleep:
            return (f"{idle} (asleep) runs on the calling thread alone: predicted "
                    f"{self.serial_seconds * 1e6:.1f} us, against "
                    f"{self.parallel_seconds * 1e6:.1f} us on its threads plus "
                    f"{self.wake_seconds * 1e6:.1f} us to wake them")
        return (f"{idle} runs on the cores other threads leave free when they are fewer "
                f"than its {self.threads} threads (predicted "
                f"{self.parallel_seconds * 1e6:.1f} us on {self.threads} threads, "
                f"{self.serial_seconds * 1e6:.1f} on one)")


def _serial_seconds(step: Step, params: MachineParams) -> float | None:
    """``step`` predicted on one thread, or None where the model cannot say."""
    if isinstance(step, _SERIAL_STEPS):
        return step_seconds(step)
    if isinstance(step, ReduceStep):
        return step.reduction.serial_seconds or step.cost.seconds
    if type(step) is TEIRStep:  # (not a BlockedStep: its blocks are priced apart)
        cand = step.chosen
        if cand.contraction is None or cand.choice is None:
            return None
        if cand.cost.threads == 1:
            return cand.cost.seconds
        # Packs run as parallel Copy programs: on one thread, at most threads x as long.
        return estimate(cand.contraction, cand.choice, params, 1,
                        pack_seconds=cand.cost.pack_seconds * cand.cost.threads).seconds
    return None


def serial_when_idle(steps: Sequence[Step], params: MachineParams,
                     threads: int) -> SerialWhenIdle | None:
    """The rule for a plan of ``steps`` planned for ``threads`` threads, or None: the
    plan runs as planned on every call (one thread already, or the parallel run is the
    faster even with the wake cost and longer than BUSY_HORIZON_SECONDS, or a step the
    model cannot price on one thread)."""
    if threads < 2 or not any(_threads(s) > 1 for s in steps):
        return None
    serial = 0.0
    for step in steps:
        seconds = _serial_seconds(step, params)
        if seconds is None:
            return None
        serial += seconds
    parallel = sum(step_seconds(s) for s in steps)
    asleep = serial < parallel + params.wake_seconds
    busy = not asleep and BUSY_LEAST_SECONDS <= parallel < BUSY_HORIZON_SECONDS
    if not asleep and not busy:
        return None
    return SerialWhenIdle(serial, parallel, params.wake_seconds, params.spin_seconds,
                          threads, when_asleep=asleep, when_busy=busy)


def _threads(step: Step) -> int:
    if isinstance(step, TEIRStep):
        return step.chosen.cost.threads
    if isinstance(step, ReduceStep):
        return step.cost.threads
    return 1

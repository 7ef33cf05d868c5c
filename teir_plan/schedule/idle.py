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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from teir_plan.planner.cost import estimate
from teir_plan.planner.machine import MachineParams
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


@dataclass(frozen=True)
class SerialWhenIdle:
    """A plan runs on one thread when its worker threads have been idle longer than
    ``spin_seconds``: ``serial_seconds`` (predicted, one thread) is below
    ``parallel_seconds`` (predicted, the plan's threads) plus ``wake_seconds``."""

    serial_seconds: float
    parallel_seconds: float
    wake_seconds: float
    spin_seconds: float

    def describe(self) -> str:
        return (f"a call that finds the worker threads asleep (idle over "
                f"{self.spin_seconds * 1e6:.0f} us) runs on the calling thread alone: "
                f"predicted {self.serial_seconds * 1e6:.1f} us, against "
                f"{self.parallel_seconds * 1e6:.1f} us on its threads plus "
                f"{self.wake_seconds * 1e6:.1f} us to wake them")


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
    faster even with the wake cost, or a step the model cannot price on one thread)."""
    if threads < 2 or not any(_threads(s) > 1 for s in steps):
        return None
    serial = 0.0
    for step in steps:
        seconds = _serial_seconds(step, params)
        if seconds is None:
            return None
        serial += seconds
    parallel = sum(step_seconds(s) for s in steps)
    if serial >= parallel + params.wake_seconds:
        return None
    return SerialWhenIdle(serial, parallel, params.wake_seconds, params.spin_seconds)


def _threads(step: Step) -> int:
    if isinstance(step, TEIRStep):
        return step.chosen.cost.threads
    if isinstance(step, ReduceStep):
        return step.cost.threads
    return 1

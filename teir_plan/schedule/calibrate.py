"""``tp.calibrate()``: the full calibration (:mod:`teir_plan.calibration`), kept only if
it ranks the probe contractions no worse than the parameters in force
(:mod:`teir_plan.calibration.check`).  It lives here, where plans are made, because the
check plans and runs whole contractions with both parameter sets."""

from __future__ import annotations

import warnings

import numpy as np

from teir_plan.calibration.check import PROBES, ProbeTimes, RankingCheck, judge, robust_seconds
from teir_plan.calibration.full import measure_full
from teir_plan.calibration.timing import best_seconds
from teir_plan.errors import CalibrationWarning
from teir_plan.executor.threads import get_num_threads
from teir_plan.machine import store
from teir_plan.machine.defaults import default_params
from teir_plan.machine.params import MachineParams
from teir_plan.progress import working
from teir_plan.schedule.build import build_plan
from teir_plan.schedule.operands import OperandSpec

# Rounds of the two plans of a probe timed in turns (each the best of three calls): a
# busy spell then slows both, and robust_seconds drops the rounds it caught.
ROUNDS = 7

# The last check tp.calibrate() made (None: none yet, or it was skipped), for reports.
last_check: RankingCheck | None = None


def time_probes(old: MachineParams, new: MachineParams, rounds: int = ROUNDS
                ) -> tuple[ProbeTimes, ...]:
    """Each probe planned with ``old`` and with ``new``, both plans run in turns
    ``rounds`` times, each reading the best of three calls, the readings of each plan
    reduced by :func:`~teir_plan.calibration.check.robust_seconds` (about two seconds
    once the kernels are compiled)."""
    rng = np.random.default_rng(0)
    threads = get_num_threads()
    out = []
    for subscripts, shapes in PROBES:
        ops = [rng.random(s, dtype=np.float32) for s in shapes]
        specs = [OperandSpec.of(o) for o in ops]
        plans = [build_plan(subscripts, specs, out_spec=None, dtype=None, optimize=True,
                            epilogue=None, threads=threads, params=p) for p in (old, new)]
        for p in plans:
            p.execute(ops, None)  # compiled, its workspace allocated
        readings: list[list[float]] = [[], []]
        for _ in range(rounds):
            for j, p in enumerate(plans):
                readings[j].append(best_seconds(lambda p=p, ops=ops: p.execute(ops, None), 3))
        out.append(ProbeTimes(subscripts, robust_seconds(readings[0]),
                              robust_seconds(readings[1])))
    return tuple(out)


def calibrate(save: bool = True, check: bool = True) -> MachineParams:
    """Measure the cost model's parameters on this machine (15-40 seconds, plus about a
    second for the check) and use them; saved, they replace a first-use estimate.

    With ``check`` (the default) the new parameters are kept only if the plans they
    choose for a fixed set of probe contractions run no slower than those of the
    parameters in force (:mod:`teir_plan.calibration.check`); otherwise they are neither
    saved nor used, a :class:`~teir_plan.errors.CalibrationWarning` says why, and the
    parameters in force are returned.  ``teir_plan.schedule.calibrate.last_check`` holds
    the check's outcome.

    >>> import teir_plan as tp
    >>> params = tp.calibrate(save=False)  # doctest: +SKIP
    """
    global last_check
    before = store.current or store.params_without_measuring() or default_params()
    with working("tp.calibrate(): measuring this machine fully for the cost model",
                 "15-40 s"):
        new = measure_full()
    last_check = None
    if check:
        with working("tp.calibrate(): checking that the new parameters choose plans no "
                     "slower than those in force", "about 2 s"):
            last_check = judge(time_probes(before, new))
        if not last_check.accepted:
            store.set_machine_params(before)
            warnings.warn(
                f"teir_plan: tp.calibrate() measured parameters that choose slower plans "
                f"than those in force ({before.describe_source()}), so they are neither "
                f"saved nor used: {last_check.describe()}. A busy machine is the usual "
                f"cause: calibrate again when it is idle.",
                CalibrationWarning, stacklevel=store.caller_stacklevel())
            return before
    if save:
        store.save_params(new)
    store.set_machine_params(new)
    return new

"""The check that keeps a calibration from making plans worse.

A calibration on a noisy, shared machine can fit parameters that mislead the ranking: on
a 2-core AMD EPYC (Zen 3) the full calibration took an everyday set from 1.32x numpy
(first-use estimate) to 1.22x, and a tall Gram matrix from 1.39x to 0.64x.  So before new
parameters are saved and used, each of a fixed set of probe contractions is planned with
the parameters in force and with the new ones, both plans are timed in turns, and the new
parameters are kept only if the plans they choose run, over the probes, no slower than
the old ones' (the geometric mean of the ratios within a tolerance).  This module holds
the probes and the decision, which takes times and nothing else (so that it is tested
with made-up times); the timing is :func:`teir_plan.schedule.calibrate.time_probes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from teir_plan.errors import PlanError

# The probes: small float32 contractions (each a millisecond or so) of the kinds whose
# plans the parameters decide between BLAS tiles, the vector kernels, packing and
# parallel K: a GEMM, a tall Gram matrix (the Zen 3's worst case after calibrating), a
# weight gradient, attention's two products, a TCCG-like permuted contraction, a
# matrix-vector product and a sum.
PROBES: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = (
    ("ij,jk->ik", ((192, 192), (192, 192))),
    ("ki,kj->ij", ((8192, 48), (8192, 48))),
    ("bi,bo->io", ((2048, 96), (2048, 128))),
    ("bhqd,bhkd->bhqk", ((2, 4, 96, 32), (2, 4, 96, 32))),
    ("bhqk,bhkd->bhqd", ((2, 4, 96, 96), (2, 4, 96, 32))),
    ("abcd,ea->ebcd", ((48, 24, 20, 16), (40, 48))),
    ("ij,j->i", ((1024, 768), (768,))),
    ("ijk->ik", ((96, 128, 64),)),
)
# The new parameters may not make the probes' plans slower by more than this (geometric
# mean of new over old): on a 2-core AMD EPYC shared with other work, the same plans
# timed in turns read 0.97x (single probes 0.85-1.17x).
TOLERANCE = 0.05


@dataclass(frozen=True)
class ProbeTimes:
    """One probe's plans, timed: the one the parameters in force choose and the one the
    new parameters choose (the same plan when they agree), in seconds."""

    subscripts: str
    old_seconds: float
    new_seconds: float

    def __post_init__(self) -> None:
        for name in ("old_seconds", "new_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise PlanError(f"ProbeTimes {self.subscripts}: {name} must be a positive "
                                f"number of seconds, got {value!r}")


@dataclass(frozen=True)
class RankingCheck:
    """The probes' times and what they decide."""

    probes: tuple[ProbeTimes, ...]
    tolerance: float = TOLERANCE

    @property
    def ratio(self) -> float:
        """The geometric mean over the probes of new seconds over old (below 1: the new
        parameters choose faster plans)."""
        return math.exp(sum(math.log(p.new_seconds / p.old_seconds) for p in self.probes)
                        / len(self.probes))

    @property
    def accepted(self) -> bool:
        """Whether the new parameters may be saved and used."""
        return self.ratio <= 1 + self.tolerance

    @property
    def worst(self) -> ProbeTimes:
        """The probe the new parameters slow down most."""
        return max(self.probes, key=lambda p: p.new_seconds / p.old_seconds)

    def describe(self) -> str:
        """A line for the report: the verdict, the mean ratio and the worst probe."""
        w = self.worst
        verdict = "kept" if self.accepted else "refused"
        return (f"{verdict}: the new parameters' plans ran {self.ratio:.3f}x the time of "
                f"the old ones' over {len(self.probes)} probe contractions (limit "
                f"{1 + self.tolerance:.2f}); worst {w.subscripts} "
                f"{w.new_seconds * 1e6:.0f} us against {w.old_seconds * 1e6:.0f} us")


def judge(probes: Sequence[ProbeTimes], tolerance: float = TOLERANCE) -> RankingCheck:
    """The check of ``probes`` (at least one).

    >>> same = [ProbeTimes("ij,jk->ik", 1e-3, 1e-3), ProbeTimes("ki,kj->ij", 2e-3, 2e-3)]
    >>> judge(same).accepted
    True
    >>> worse = [ProbeTimes("ij,jk->ik", 1e-3, 1e-3), ProbeTimes("ki,kj->ij", 1e-3, 2e-3)]
    >>> judge(worse).accepted, round(judge(worse).ratio, 3)
    (False, 1.414)
    """
    if not probes:
        raise PlanError("judge: no probe times to judge the new parameters by")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise PlanError(f"judge: tolerance must be a finite number >= 0, got {tolerance!r}")
    return RankingCheck(tuple(probes), tolerance)


def robust_seconds(readings: Sequence[float], spread: float = 0.5) -> float:
    """The median of the readings of one thing, after those more than ``spread`` above
    the fastest are dropped as outliers (a busy spell of a shared machine: timing only
    ever reads slow, never fast, by more than the clock's jitter).

    >>> robust_seconds([1.0, 1.1, 0.9, 5.0, 1.05])
    1.025
    """
    if not readings:
        raise PlanError("robust_seconds: no readings")
    low = min(readings)
    kept = sorted(r for r in readings if r <= low * (1 + spread))
    mid = len(kept) // 2
    return kept[mid] if len(kept) % 2 else (kept[mid - 1] + kept[mid]) / 2

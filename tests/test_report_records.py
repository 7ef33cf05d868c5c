"""The explain report renders what planning recorded: building it plans nothing."""

from __future__ import annotations

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.schedule import build
from teir_plan.schedule.alternatives import FreeLayout


def test_the_report_of_a_fixed_layout_plans_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # efbad,cf->abcde into C order: order='K' would write cebad, predicted faster.
    ext = {"a": 24, "b": 18, "c": 12, "d": 18, "e": 24, "f": 18}
    shapes = [tuple(ext[c] for c in "efbad"), tuple(ext[c] for c in "cf")]
    free = tp.plan("efbad,cf->abcde", *shapes, dtype=np.float32)
    fixed = tp.plan("efbad,cf->abcde", *shapes, dtype=np.float32, order="C")
    record = fixed.info.free_layout
    assert isinstance(record, FreeLayout)
    # The record is what planning order='K' finds, without planning it again.
    assert record.seconds == pytest.approx(free.predicted_seconds, rel=1e-12)
    assert record.memory_order == next(lay.memory_order
                                       for lay in free.info.result_layouts if lay.chosen)

    def no_planning(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report planned")

    monkeypatch.setattr(build, "build_plan", no_planning)
    monkeypatch.setattr(build, "_build", no_planning)
    notes = [n for n in fixed.explain().frontend if "layout is fixed" in n]
    assert len(notes) == 1 and f"memory order {record.memory_order}" in notes[0]


def test_a_free_layout_plan_records_none() -> None:
    p = tp.plan("ij,jk->ik", (64, 48), (48, 32), dtype=np.float32)
    assert p.info.free_layout is None
    # A view under order='K' (a pure permutation): nothing to compare with.
    q = tp.plan("ij->ji", (64, 48), dtype=np.float32, order="C")
    assert q.info.free_layout is None

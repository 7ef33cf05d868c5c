"""gc_pause: the collector is off inside, and the caller's state comes back however the
block ends."""

import gc

import pytest

import teir_plan as tp
from teir_plan.gc_pause import gc_paused


@pytest.fixture
def restore_gc():
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_state_restored_after_block_and_exception(restore_gc, enabled):
    gc.enable() if enabled else gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled() is enabled


def test_nested_pause_leaves_outer_in_charge(restore_gc):
    gc.enable()
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_failed_plan_restores_gc(restore_gc):
    gc.enable()
    with pytest.raises(tp.PlanError):
        tp.plan("ij,jk->ik", (2, 3), (4, 5), order="Q")
    assert gc.isenabled()

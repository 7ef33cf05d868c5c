"""A damaged machine cache (``machine.json``) never breaks a call: every field is typed
and bounded on load, and anything unreadable or implausible is ignored with one warning
naming the file, then rebuilt (measured again, or the ISA-derived defaults)."""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.calibration import QuickMeasurements
from teir_plan.calibration import quick as measure
from teir_plan.errors import CalibrationWarning
from teir_plan.machine import MachineParams, machine_key, set_machine_params, store

FAKE = QuickMeasurements(gemm_flops_f32=94e9, gemm_flops_f64=47e9,
                         dram_bytes_per_second=30e9, copy_bytes_per_second=12e9,
                         call_seconds=3e-6, l2_bytes=1 << 20)


def _entry(**changes: object) -> dict:
    """A calibrated cache entry with ``changes`` written over its fields."""
    entry = asdict(MachineParams.reference())
    entry.update(source="calibrated", calibrated=True)
    entry.update(changes)
    return entry


NAN, INF = float("nan"), float("inf")
# Each a cache's whole text, or a function of this machine's key giving its JSON.
DAMAGED = {
    "a list": "[]",
    "null": "null",
    "a number": "3",
    "a string": '"machine"',
    "truncated JSON": '{"AMD": {"gemm_flops_f32": 1',
    "not UTF-8": b"\xff\xfe\x00{",
    "an entry that is a number": lambda key: {key: 3},
    "an entry that is a list": lambda key: {key: [1, 2]},
    "an entry that is null": lambda key: {key: None},
    "a rate as a string": lambda key: {key: _entry(gemm_flops_f32="188e9")},
    "a zero rate": lambda key: {key: _entry(gemm_flops_f32=0)},
    "a negative rate": lambda key: {key: _entry(dram_bytes_per_second=-1e9)},
    "a NaN rate": lambda key: {key: _entry(vec_flops_f32=NAN)},
    "an infinite rate": lambda key: {key: _entry(llc_bytes_per_second=INF)},
    "a zero copy rate": lambda key: {key: _entry(copy_bytes_per_second=0.0)},
    "a negative time": lambda key: {key: _entry(call_seconds=-1e-6)},
    "a NaN time": lambda key: {key: _entry(wake_seconds=NAN)},
    "cache bytes of zero": lambda key: {key: _entry(l2_bytes=0)},
    "cache bytes as a string": lambda key: {key: _entry(llc_bytes="32M")},
    "a table too short": lambda key: {key: _entry(gemm_efficiency=[0.5] * 10)},
    "a table with a zero": lambda key: {key: _entry(
        gemm_efficiency=[0.5] * 863 + [0.0])},
    "a table with a NaN": lambda key: {key: _entry(gemm_efficiency=[NAN] * 864)},
    "a table that is a number": lambda key: {key: _entry(gemm_efficiency=0.5)},
    "an unknown source": lambda key: {key: _entry(source="measured")},
    "K steps of NaN": lambda key: {key: _entry(vec_k_steps=NAN)},
}


@pytest.fixture
def cache(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """An empty cache folder, no parameters in force (restored afterwards)."""
    saved = tp.machine_params()
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TEIR_PLAN_MACHINE", raising=False)
    set_machine_params(None)
    yield tmp_path / "machine.json"
    set_machine_params(saved)


def _write(path, form) -> None:  # type: ignore[no-untyped-def]
    if callable(form):
        path.write_text(json.dumps(form(machine_key())))
    elif isinstance(form, bytes):
        path.write_bytes(form)
    else:
        path.write_text(form)


def _check_einsum() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((30, 20)).astype(np.float32)
    np.testing.assert_allclose(tp.einsum("ij,jk->ik", a, b),
                               np.einsum("ij,jk->ik", a.astype(np.float64), b), rtol=1e-4,
                               atol=1e-4)
    x = rng.standard_normal((6, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(tp.einsum("abc->ca", x),
                               np.einsum("abc->ca", x.astype(np.float64)), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_cache_is_ignored_with_one_warning(cache, monkeypatch, name) -> None:
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "0")  # rebuilt as the ISA defaults
    _write(cache, DAMAGED[name])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_einsum()
    ours = [w for w in caught if issubclass(w.category, CalibrationWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert str(cache) in str(ours[0].message)
    assert tp.machine_params().source == "isa"


@pytest.mark.parametrize("name", ["a list", "a zero rate", "an entry that is null"])
def test_a_damaged_cache_is_measured_again_and_rewritten(cache, monkeypatch, name) -> None:
    monkeypatch.delenv("TEIR_PLAN_AUTOCALIBRATE")
    monkeypatch.setattr(measure, "measure_quick", lambda vector=True, dtype="float32": FAKE)
    _write(cache, DAMAGED[name])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _check_einsum()
    messages = [str(w.message) for w in caught if issubclass(w.category, CalibrationWarning)]
    assert len(messages) == 2 and "ignored" in messages[0] and "first-use" in messages[1]
    assert tp.machine_params().source == "first-use"
    # The file now holds this machine's measurement, which the next process loads.
    set_machine_params(None)
    assert store.load_params() == tp.machine_params()
    assert json.loads(cache.read_text())[machine_key()]["gemm_flops_f32"] == 94e9


def test_a_cache_entry_of_another_machine_is_not_read(cache, monkeypatch) -> None:
    """Only this machine's entry is checked: another's (say, an older version's) stays
    as it is, and this machine's measurement is added beside it."""
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "0")
    cache.write_text(json.dumps({"another CPU": {"gemm_flops_f32": "fast"}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check_einsum()
    assert tp.machine_params().source == "isa"

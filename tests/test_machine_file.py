"""Planning as another machine: ``TEIR_PLAN_MACHINE=path.json`` loads the machine
parameters from a file (the cache's form, or one record) in place of the cache and of
any measurement; a file that cannot be used is an error naming it and the field."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.calibration import quick as measure
from teir_plan.errors import MachineFileError
from teir_plan.machine import MachineParams, machine_key, set_machine_params

# The full calibration of a 2-core AMD EPYC (Zen 3, AVX2 + FMA, no AVX-512, numpy's
# OpenBLAS running its Haswell kernels), as tp.calibrate() cached it there.
ZEN3 = Path(__file__).parent / "data" / "zen3-avx2-calibrated.json"


@pytest.fixture
def planning_as(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """Set TEIR_PLAN_MACHINE to a path (no parameters in force, an empty cache, nothing
    measured); the parameters in force before are restored afterwards."""
    saved = tp.machine_params()
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "quick")

    def no_measuring(vector=True, dtype="float32"):  # type: ignore[no-untyped-def]
        raise AssertionError("measured, but TEIR_PLAN_MACHINE names the parameters")

    monkeypatch.setattr(measure, "measure_quick", no_measuring)

    def use(path: Path) -> None:
        monkeypatch.setenv("TEIR_PLAN_MACHINE", str(path))
        set_machine_params(None)

    yield use
    monkeypatch.delenv("TEIR_PLAN_MACHINE", raising=False)
    set_machine_params(saved)


def _einsum_matches(subscripts: str, *shapes: tuple[int, ...]) -> tp.Plan:
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = tp.einsum(subscripts, *ops)
    want = np.einsum(subscripts, *[o.astype(np.float64) for o in ops])
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * math.sqrt(
        max(1, np.prod(shapes[0]))))
    return tp.plan(subscripts, *ops)


def test_a_file_of_one_record_is_planned_with_and_named(planning_as, tmp_path) -> None:
    record = asdict(replace(MachineParams.reference(), gemm_flops_f32=61e9,
                            dram_bytes_per_second=9e9, source="calibrated",
                            calibrated=True, machine="a target machine"))
    path = tmp_path / "target.json"
    path.write_text(json.dumps(record))
    planning_as(path)
    p = tp.machine_params()
    assert (p.gemm_flops_f32, p.dram_bytes_per_second, p.loaded_from) == (61e9, 9e9,
                                                                          str(path))
    plan = _einsum_matches("ij,jk->ik", (96, 80), (80, 72))
    text = str(plan.explain())
    assert str(path) in text and "TEIR_PLAN_MACHINE" in text and "a target machine" in text
    assert not (tmp_path / "cache").exists()  # nothing measured, nothing cached


def test_the_zen3_calibration_in_the_cache_form_plans(planning_as) -> None:
    planning_as(ZEN3)
    p = tp.machine_params()
    cached = next(iter(json.loads(ZEN3.read_text()).values()))
    assert p.source == "calibrated" and p.gemm_flops_f32 == cached["gemm_flops_f32"]
    assert p.gemm_efficiency == tuple(cached["gemm_efficiency"])
    plan = _einsum_matches("abcd,ea->ebcd", (24, 16, 20, 12), (30, 24))
    assert str(ZEN3) in str(plan.explain())


def test_the_file_wins_over_the_cache_and_the_reference(planning_as, tmp_path,
                                                        monkeypatch) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    other = replace(MachineParams.reference(), gemm_flops_f32=77e9, source="calibrated",
                    calibrated=True)
    (cache / "machine.json").write_text(json.dumps({machine_key(): asdict(other)}))
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"gemm_flops_f32": 55e9}))
    planning_as(path)
    assert tp.machine_params().gemm_flops_f32 == 55e9
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "reference")
    set_machine_params(None)
    assert tp.machine_params().gemm_flops_f32 == 55e9
    monkeypatch.delenv("TEIR_PLAN_MACHINE")
    set_machine_params(None)
    assert tp.machine_params().gemm_flops_f32 == 188e9  # the reference again


def test_a_cache_of_several_machines_gives_this_machines_entry(planning_as,
                                                               tmp_path) -> None:
    mine = replace(MachineParams.reference(), gemm_flops_f32=66e9)
    path = tmp_path / "two.json"
    path.write_text(json.dumps({"another CPU / 4 threads": asdict(MachineParams()),
                                machine_key(): asdict(mine)}))
    planning_as(path)
    assert tp.machine_params().gemm_flops_f32 == 66e9
    path.write_text(json.dumps({"CPU one": asdict(mine), "CPU two": asdict(mine)}))
    set_machine_params(None)
    with pytest.raises(MachineFileError, match="2 machines.*CPU one"):
        tp.machine_params()


BAD_FILES = [
    ("[]", "JSON object"),
    ("null", "JSON object"),
    ("3", "JSON object"),
    ("{}", "empty"),
    ('{"gemm_flops_f32": ', "not valid JSON"),
    ('{"k": 3}', "k.*must be a JSON object"),
    ('{"gemm_flops_f32": "1e11"}', "'gemm_flops_f32' must be a number"),
    ('{"gemm_flops_f32": 0}', "'gemm_flops_f32' must be a finite number"),
    ('{"dram_bytes_per_second": -2e10}', "'dram_bytes_per_second' must be a finite"),
    ('{"vec_flops_f32": NaN}', "'vec_flops_f32' must be a finite"),
    ('{"copy_bytes_per_second": Infinity}', "'copy_bytes_per_second' must be a finite"),
    ('{"call_seconds": null}', "'call_seconds' must be a number, got null"),
    ('{"l2_bytes": 1.5}', "'l2_bytes' must be a whole number"),
    ('{"gemm_efficiency": [0.5, 0.5]}', "'gemm_efficiency' must have 864 entries"),
    ('{"gemm_efficiency": ' + json.dumps([0.5] * 863 + [0.0]) + "}",
     r"'gemm_efficiency\[863\]'"),
    ('{"source": "guessed"}', "'source' must be one of"),
    ('{"calibrated": "yes"}', "'calibrated' must be true or false"),
    ('{"vector_measured": 1}', "'vector_measured' must be true or false"),
]


@pytest.mark.parametrize("text,message", BAD_FILES)
def test_a_file_that_cannot_be_used_is_an_error_naming_it_and_the_field(
        planning_as, tmp_path, text, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    planning_as(path)
    a = np.ones((4, 5), np.float32)
    with pytest.raises(MachineFileError, match=message) as caught:
        tp.einsum("ij,jk->ik", a, a.T)
    assert str(path) in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_a_missing_file_is_an_error_naming_it(planning_as, tmp_path) -> None:
    path = tmp_path / "nowhere.json"
    planning_as(path)
    with pytest.raises(MachineFileError, match="cannot be read") as caught:
        tp.machine_params()
    assert str(path) in str(caught.value)

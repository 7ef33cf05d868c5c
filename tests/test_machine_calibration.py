"""Where the cost model's parameters come from: the reference parameters the test suite
plans against, defaults derived from the vector ISA, the first-use (quick) calibration
and its cache, and the explain report naming which of them ranked a plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from dataclasses import fields, replace

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.calibration import QuickMeasurements, params_from_quick
from teir_plan.calibration import quick as measure
from teir_plan.calibration import timing as cal_timing
from teir_plan.calibration import vector as cal_vector
from teir_plan.errors import CalibrationWarning, PlanError
from teir_plan.isa import VectorTarget
from teir_plan.machine import MachineParams, default_params, set_machine_params
from teir_plan.machine import defaults as machine_defaults
from teir_plan.machine import store as machine
from teir_plan.machine.tables import avx2_blas_gemm_efficiency, default_gemm_efficiency
from teir_plan.planner.gemm_rate import gemm_efficiency
from teir_plan.render.report import build_report
from teir_plan.schedule import calibrate as checked
from teir_plan.schedule import in_force
from teir_plan.tilekinds.vec import vec_efficiency, vec_strips

# Made-up measurements of a slower machine, injected in place of measure_quick so that
# the tests are fast and deterministic.
FAKE = QuickMeasurements(gemm_flops_f32=94e9, gemm_flops_f64=47e9,
                         dram_bytes_per_second=30e9, copy_bytes_per_second=12e9,
                         call_seconds=3e-6, l2_bytes=1 << 20)

AVX512 = VectorTarget("avx512", 64, 32, "sapphirerapids")
AVX2 = VectorTarget("avx2", 32, 16, "znver3")
NEON = VectorTarget("neon", 16, 32, "neoverse-n1")
NONE = VectorTarget("none", 0, 16, "core2")


@pytest.fixture
def fresh(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """An empty calibration cache and no parameters in force; those in force before are
    restored afterwards (other tests of this worker plan against them)."""
    saved = tp.machine_params()
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    set_machine_params(None)
    yield tmp_path
    set_machine_params(saved)


def _no_measuring(vector: bool = True, dtype: str = "float32") -> QuickMeasurements:
    raise AssertionError("measured, but no measurement was expected")


def test_the_direct_blas_peak_computes_the_product_on_the_executors_gemm(monkeypatch) -> None:
    """The first-use peaks call the GEMM the tiles call, without the executor: a call
    whose product came out wrong would fall back to the executor's peak_flops."""
    def executor_peak(*args):  # type: ignore[no-untyped-def]
        raise AssertionError("the direct GEMM call gave a wrong product")

    monkeypatch.setattr(cal_timing, "peak_flops", executor_peak)
    rng = np.random.default_rng(1)
    for dtype in ("float32", "float64"):
        assert 1e8 < cal_timing.blas_peak_flops(dtype, rng, 1) < 1e14


def test_the_first_use_estimate_measures_the_vector_kernel_with_the_first_vector_plan(
        fresh, monkeypatch) -> None:
    """The first call measures what needs no loop walker; the vector kernel is measured
    (and the plan made again) by the first plan of a float32 call that runs on it, not
    by a BLAS-only or a float64 one.  Measurements injected: nothing timed."""
    monkeypatch.delenv("TEIR_PLAN_AUTOCALIBRATE")
    asked = []

    def quick(vector: bool = True, dtype: str = "float32") -> QuickMeasurements:
        asked.append((vector, dtype))
        return replace(FAKE, vector_measured=False)

    monkeypatch.setattr(measure, "measure_quick", quick)
    monkeypatch.setattr(measure, "vector_tile_seconds", lambda rng: 1e-6)
    monkeypatch.setattr(measure, "measure_vector_kernel",
                        lambda rng, tile, spent: cal_vector.VectorKernel(150e9, 3.0, 2e-8, 1e-9))
    rng = np.random.default_rng(2)
    blas_only = [rng.random((400, 300)), rng.random((300, 200))]  # float64: never measures
    with pytest.warns(CalibrationWarning):
        np.testing.assert_allclose(tp.einsum("ij,jk->ik", *blas_only), np.dot(*blas_only))
    first = machine.current
    # (its call overhead read on the BLAS runner of the first call's dtype)
    assert asked == [(False, "float64")] and first is not None and not first.vector_measured
    a, b = (rng.random((64, 64)).astype(np.float32) for _ in range(2))
    plan = tp.plan("ij,jk->ik", a, b)  # planned again, with the vector kernel measured
    assert in_force.owes_vector_measurement(first, plan), "no longer a vector plan"
    assert plan.steps[0].chosen.lowered.kind.vector  # (the rule agrees with lowering)
    now = machine.current
    assert now is not None and now.vector_measured and now.vec_flops_f32 == 150e9
    assert (now.vec_k_steps, now.gemm_flops_f32) == (3.0, first.gemm_flops_f32)
    assert not in_force.owes_vector_measurement(now, plan)
    np.testing.assert_allclose(plan(a, b), a.astype(np.float64) @ b, rtol=1e-5)
    cached = json.loads((fresh / "machine.json").read_text())[machine.machine_key()]
    assert cached["vector_measured"] and cached["vec_flops_f32"] == 150e9
    assert len(asked) == 1


@pytest.mark.parametrize(("dtype", "real"), [
    (np.float64, "float64"), (np.complex128, "float64"), (np.float32, "float32"),
    (np.complex64, "float32"), (np.float16, "float32")])
def test_the_first_use_measurement_compiles_the_first_calls_blas_runner(
        fresh, monkeypatch, dtype, real) -> None:
    monkeypatch.delenv("TEIR_PLAN_AUTOCALIBRATE")
    asked = []

    def quick(vector: bool = True, dtype: str = "float32") -> QuickMeasurements:
        asked.append(dtype)
        return FAKE

    monkeypatch.setattr(measure, "measure_quick", quick)
    a = np.ones((3, 3), dtype)
    with pytest.warns(CalibrationWarning):
        tp.einsum("ij,jk,kl->il", a, a, a)  # (three operands: the direct key's path)
    assert asked == [real]


def test_the_suite_plans_against_the_reference_parameters(fresh, monkeypatch) -> None:
    monkeypatch.setattr(measure, "measure_quick", _no_measuring)
    p = tp.machine_params()
    assert p.source == "reference" and not p.calibrated
    # The reference Xeon's documented values (docs/cost-model.md), not this machine's.
    assert (p.gemm_flops_f32, p.gemm_flops_f64, p.vec_flops_f32) == (188e9, 89e9, 185e9)
    assert (p.dram_bytes_per_second, p.l2_bytes) == (20e9, 2 * 1024 * 1024)
    assert not any(fresh.iterdir())  # nothing measured, nothing cached


def test_reference_ignores_a_cached_calibration(fresh, monkeypatch) -> None:
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "quick")
    monkeypatch.setattr(measure, "measure_quick", lambda vector=True, dtype="float32": FAKE)
    with pytest.warns(CalibrationWarning):
        assert tp.machine_params().gemm_flops_f32 == 94e9
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "reference")
    set_machine_params(None)
    assert tp.machine_params().gemm_flops_f32 == 188e9


def test_first_use_measures_caches_and_warns_once(fresh, monkeypatch) -> None:
    monkeypatch.delenv("TEIR_PLAN_AUTOCALIBRATE")  # the default for users: quick
    monkeypatch.setattr(measure, "measure_quick", lambda vector=True, dtype="float32": FAKE)
    with pytest.warns(CalibrationWarning) as caught:
        p = tp.machine_params()
    message = str(caught[0].message)
    assert str(fresh / "machine.json") in message and "tp.calibrate()" in message
    assert caught[0].filename == __file__  # the caller's line, not teir_plan's
    assert p.source == "first-use" and not p.calibrated and p.measured_at
    assert (p.gemm_flops_f32, p.dram_bytes_per_second, p.call_seconds) == (94e9, 30e9, 3e-6)
    # Used for planning at once, and by the next process from the cache, without
    # measuring or warning again.
    a = np.ones((64, 64), np.float32)
    assert tp.plan("ij,jk->ik", a, a).info.machine_params.startswith(
        "first-use estimate")
    monkeypatch.setattr(measure, "measure_quick", _no_measuring)
    set_machine_params(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tp.machine_params() == p


def test_first_use_is_not_run_when_disabled(fresh, monkeypatch) -> None:
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "0")
    monkeypatch.setattr(measure, "measure_quick", _no_measuring)
    p = tp.machine_params()
    assert p.source == "isa" and not any(fresh.iterdir())


def test_autocalibrate_1_runs_the_full_calibration(fresh, monkeypatch) -> None:
    full = replace(MachineParams.reference(), gemm_flops_f32=123e9, calibrated=True,
                   source="calibrated")
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "1")
    monkeypatch.setattr(measure, "measure_quick", _no_measuring)
    monkeypatch.setattr(checked, "calibrate", lambda: full)
    assert tp.machine_params() is full


def test_a_bad_autocalibrate_value_is_refused(fresh, monkeypatch) -> None:
    monkeypatch.setenv("TEIR_PLAN_AUTOCALIBRATE", "yes please")
    with pytest.raises(PlanError, match="TEIR_PLAN_AUTOCALIBRATE"):
        tp.machine_params()


def test_quick_calibration_measures_complete_sane_parameters(fresh) -> None:
    """The real measurement (no timing asserted): every rate positive, the efficiency
    table complete, cached under this machine's key and loaded back as measured."""
    with pytest.warns(CalibrationWarning):
        p = measure.quick_calibrate()
    for f in fields(MachineParams):
        value = getattr(p, f.name)
        if f.name == "handoff_seconds" and len(os.sched_getaffinity(0)) < 2:
            assert value == 0  # one CPU: nothing is handed between cores
        elif f.name == "vec_k_steps":  # (0: the kernel as fast at K 36 as at K 192)
            assert 0 <= value <= cal_vector.MAX_K_STEPS
        elif f.name in ("vec_tile_seconds", "vec_strip_seconds"):  # (0: lost in noise)
            assert 0 <= value < 1e-5, f.name
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            # (A wake cost lost in a busy host's noise falls back to the reference's.)
            assert value > 0, f.name
    assert len(p.gemm_efficiency) == 4 * 6**3
    assert 1e9 < p.gemm_flops_f32 < 1e13 and 1e9 < p.dram_bytes_per_second < 1e13
    assert p.source == "first-use" and p.measured_at
    cached = json.loads((fresh / "machine.json").read_text())
    assert list(cached) == [machine.machine_key()]
    set_machine_params(None)
    assert machine.load_params() == p


def test_the_cache_key_names_the_isa_and_the_threads(monkeypatch) -> None:
    monkeypatch.setattr("teir_plan.isa.target", lambda: AVX2)
    saved = tp.get_num_threads()
    try:
        tp.set_num_threads(1)
        one = machine.machine_key()
        tp.set_num_threads(2)
        two = machine.machine_key()
    finally:
        tp.set_num_threads(saved)
    # The vector target's own key (its format is teir_plan.isa's), whose CPU and ISA
    # names are these.
    assert AVX2.key in one and "znver3" in one and "avx2" in one
    assert one.endswith("/ 1 threads") and two.endswith("/ 2 threads")
    monkeypatch.setattr("teir_plan.isa.target", lambda: AVX512)
    tp.set_num_threads(1)
    try:
        wide = machine.machine_key()
    finally:
        tp.set_num_threads(saved)
    assert "sapphirerapids" in wide and "avx512" in wide and "avx2" not in wide


def test_the_cache_key_names_the_blas_kernels(monkeypatch) -> None:
    # Rates measured with OpenBLAS' Haswell kernels do not hold for its SkylakeX ones
    # (OPENBLAS_CORETYPE chooses them): each set of kernels has a calibration of its own.
    monkeypatch.setattr("teir_plan.blaslib.blas_kernels", lambda: "numpy OpenBLAS Haswell")
    narrow = machine.machine_key()
    monkeypatch.setattr("teir_plan.blaslib.blas_kernels", lambda: "numpy OpenBLAS SkylakeX")
    wide = machine.machine_key()
    assert "Haswell" in narrow and "SkylakeX" in wide and narrow != wide


def test_the_blas_kernels_are_the_ones_numpy_runs() -> None:
    # Against threadpoolctl's report for numpy's OpenBLAS, where the tiles call it.
    from threadpoolctl import threadpool_info

    from teir_plan.blaslib import blas_kernels, uses_numpy_openblas

    name = blas_kernels()
    if not uses_numpy_openblas():
        assert name == "scipy BLAS"
        return
    archs = [lib.get("architecture") for lib in threadpool_info()
             if lib.get("internal_api") == "openblas" and "numpy" in str(lib.get("filepath"))]
    assert archs and name == f"numpy OpenBLAS {archs[0]}"


def test_a_full_calibration_replaces_a_first_use_estimate(fresh) -> None:
    first = params_from_quick(FAKE)
    full = replace(first, gemm_flops_f32=150e9, calibrated=True, source="calibrated")
    assert machine.save_params(first) and machine.load_params() == first
    assert machine.save_params(full) and machine.load_params() == full
    # A first-use estimate saved later (another process that measured meanwhile) does
    # not replace the full calibration.
    assert not machine.save_params(first) and machine.load_params() == full


def test_a_calibration_cached_before_sources_is_a_full_one(fresh) -> None:
    (fresh / "machine.json").write_text(json.dumps(
        {machine.machine_key(): {"gemm_flops_f32": 100e9, "calibrated": True}}))
    loaded = machine.load_params()
    assert loaded is not None and loaded.source == "calibrated"
    assert loaded.gemm_flops_f32 == 100e9


def test_a_first_use_estimate_cached_in_an_earlier_form_is_measured_again(fresh) -> None:
    """An estimate cached before its efficiency table followed BLAS' kernel width is not
    used (the next planning call measures one); a full calibration of that time is."""
    first = params_from_quick(FAKE)
    assert machine.save_params(first) and machine.load_params() == first
    data = json.loads((fresh / "machine.json").read_text())
    entry = data[machine.machine_key()]
    assert entry["first_use_form"] == machine.FIRST_USE_FORM
    del entry["first_use_form"]
    (fresh / "machine.json").write_text(json.dumps(data))
    assert machine.load_params() is None
    entry.update(calibrated=True, source="calibrated")
    (fresh / "machine.json").write_text(json.dumps(data))
    loaded = machine.load_params()
    assert loaded is not None and loaded.source == "calibrated"


def test_quick_parameters_scale_what_they_do_not_measure() -> None:
    p = params_from_quick(FAKE, machine="m", measured_at="t")
    # Measured fields as measured.
    assert (p.gemm_flops_f32, p.gemm_flops_f64, p.copy_bytes_per_second) == (94e9, 47e9, 12e9)
    assert p.l2_bytes == 1 << 20
    # The last-level cache as Linux reports it, else the reference's.
    assert p.llc_bytes == MachineParams.reference().llc_bytes
    assert params_from_quick(replace(FAKE, llc_bytes=8 << 20)).llc_bytes == 8 << 20
    # The vector kernel at the reference's 185/188 of the BLAS peak: half the reference's
    # peak measured, half its rate; float64 by its own ratio 47/89.
    assert p.vec_flops_f32 == pytest.approx(92.5e9)
    assert p.vec_flops_f64 == pytest.approx(92e9 * 47 / 89)
    # LLC and packs by the in-cache copy rate: 12 of the reference's 24 GB/s.
    assert p.llc_bytes_per_second == pytest.approx(30e9)
    assert p.pack_bytes_per_second == pytest.approx(3e9)
    # Fractions of peak, unmeasured: the reference's table.
    assert p.gemm_efficiency == MachineParams().gemm_efficiency
    assert p.loop_flops == 1.5e9 and p.parallel_seconds == 6e-6


def test_a_narrower_blas_does_not_scale_the_vector_kernel_down() -> None:
    # BLAS at half the reference's peak with 32-byte kernels on a CPU whose vector kernel
    # runs 64-byte vectors (OpenBLAS' Haswell kernels on Zen 5): the vector kernel at
    # 185/188 of twice that peak, 185 GFLOP/s.
    wide = replace(FAKE, kernel_vector_bytes=64, blas_vector_bytes=32)
    assert params_from_quick(wide).vec_flops_f32 == pytest.approx(185e9)
    assert params_from_quick(wide).vec_flops_f64 == pytest.approx(2 * 92e9 * 47 / 89)
    # Same widths, an unknown BLAS, or a kernel narrower than BLAS: BLAS' peak alone.
    for kernel, blas in ((64, 64), (64, None), (32, 64)):
        q = replace(FAKE, kernel_vector_bytes=kernel, blas_vector_bytes=blas)
        assert params_from_quick(q).vec_flops_f32 == pytest.approx(92.5e9)


def test_a_measured_vector_rate_is_taken_as_measured() -> None:
    # The first-use measurement of the vector kernel (any BLAS width): its float32 rate as
    # measured, float64 at the reference's ratio to it.
    for blas in (32, 64, None):
        q = replace(FAKE, kernel_vector_bytes=64, blas_vector_bytes=blas, vec_flops_f32=150e9)
        p = params_from_quick(q)
        assert p.vec_flops_f32 == pytest.approx(150e9)
        assert p.vec_flops_f64 == pytest.approx(150e9 * 92 / 185)


@pytest.mark.parametrize("steps", [0.0, 1.0, 2.5, 8.0, 15.0])
def test_the_rate_and_k_steps_are_those_that_rate_every_tile_as_measured(steps) -> None:
    # Every tile timed at a rate R * K / (K + steps), its set-up on top.
    rate, fixed = 250e9, 15e-9
    m, n, _ = cal_vector.VEC_TILE

    def spent(k: int) -> float:
        return 2 * m * n * k / (rate * k / (k + steps)) + fixed

    got_rate, got_steps = cal_vector.vector_fit({k: spent(k) for k in
                                                 cal_vector.VEC_K_POINTS}, fixed)
    assert got_steps == pytest.approx(steps, abs=1e-6)
    assert got_rate == pytest.approx(rate)
    # (The calibration tile is whole micro-tiles and lines: its efficiency is K's share.)
    k = cal_vector.VEC_TILE[2]
    assert got_rate * vec_efficiency(m, n, k, 4, got_steps) == pytest.approx(
        2 * m * n * k / (spent(k) - fixed))


def test_the_k_steps_fit_is_steadier_than_two_tiles() -> None:
    """Readings with the upward noise of a shared machine (the least of three, each up
    to a few % over): the five-point line's K steps spread less than those read from the
    two tiles of K 36 and 192 alone, and stay near the truth."""
    rng = np.random.default_rng(1)
    rate, fixed, steps = 130e9, 60e-9, 3.0
    m, n, _ = cal_vector.VEC_TILE
    five, two = [], []
    for _ in range(300):
        noisy = {k: (fixed + 2 * m * n * (k + steps) / rate)
                 * (1 + rng.exponential(0.02, 3).min()) for k in cal_vector.VEC_K_POINTS}
        five.append(cal_vector.vector_fit(noisy, fixed)[1])
        two.append(cal_vector.vector_fit({k: noisy[k] for k in (36, 192)}, fixed)[1])
    assert np.std(five) < 0.8 * np.std(two)
    assert abs(np.median(five) - steps) < 0.3


def test_the_vector_kernels_set_up_is_read_per_tile_and_per_strip(monkeypatch) -> None:
    """Tiles timed as the set-up (per tile, per strip) plus a cost per row: the fit
    returns that set-up, the walker's bookkeeping taken off the part per tile; a noisy
    reading below the line's floor gives 0, not a negative cost."""
    book, per_tile, per_strip = 15e-9, 40e-9, 6e-9

    def timed(rng, repeats=5, tile=cal_vector.VEC_TILE):  # type: ignore[no-untyped-def]
        length, rows, k = tile
        return (book + per_tile + per_strip * vec_strips(length, 4)
                + rows * length * k * 2 / 250e9)

    monkeypatch.setattr(cal_vector, "vector_tile_seconds", timed)
    got = cal_vector.measure_vector_overheads(np.random.default_rng(0), book)
    assert got == pytest.approx((per_tile, per_strip))
    assert cal_vector.vector_overheads((10e-9, 5e-9), (2, 9), book) == (0.0, 0.0)


def test_the_vector_kernels_set_up_is_in_its_price() -> None:
    """A vector tile's price is its flops at the kernel's rate plus its set-up."""
    from teir_plan.tilekinds.kind import GemmTile, PriceArgs
    from teir_plan.tilekinds.vec import KIND, vec_axis, vec_overhead_seconds

    tile = GemmTile(432, 24, 36, 1, (1, 432), (1, 36), (1, 432), 4)
    axis = vec_axis(*tile)
    if not axis:
        pytest.skip("no vector kernel at this width")
    ref = MachineParams.reference()
    measured = replace(ref, vec_tile_seconds=40e-9, vec_strip_seconds=6e-9)
    assert KIND.price is not None

    def price(p: MachineParams) -> float:
        return KIND.price(tile, axis, PriceArgs(p, np.dtype(np.float32), 2 * 432 * 24 * 36,
                                                False, None)).seconds

    assert price(measured) - price(ref) == pytest.approx(
        vec_overhead_seconds(432, 4, 40e-9, 6e-9))
    assert vec_overhead_seconds(432, 4, 40e-9, 6e-9) > 40e-9


def test_k_steps_out_of_range_are_clamped() -> None:
    m, n, _ = cal_vector.VEC_TILE
    c = 2 * m * n / 200e9
    short_faster = {k: c * k for k in cal_vector.VEC_K_POINTS}  # below the set-up
    assert cal_vector.vector_fit(short_faster, 1e-6)[1] == 0.0
    flat = {k: 1e-6 for k in cal_vector.VEC_K_POINTS}  # no slope: noise
    assert cal_vector.vector_fit(flat, 0.0)[1] == cal_vector.MAX_K_STEPS
    steep = {k: c * (k + 100) for k in cal_vector.VEC_K_POINTS}
    assert cal_vector.vector_fit(steep, 0.0)[1] == cal_vector.MAX_K_STEPS


def test_first_use_takes_the_efficiency_table_of_blas_kernels_width() -> None:
    # BLAS' fractions of peak are its kernels': a BLAS of 32-byte kernels (OpenBLAS'
    # Haswell kernels, also what it runs on Zen 5) gets the table measured with them, not
    # the reference's 64-byte one; an unknown BLAS is taken to run the kernels' width.
    for kernel, blas, table in ((32, 32, avx2_blas_gemm_efficiency()),
                                (64, 32, avx2_blas_gemm_efficiency()),
                                (32, None, avx2_blas_gemm_efficiency()),
                                (16, None, avx2_blas_gemm_efficiency()),
                                (64, 64, default_gemm_efficiency()),
                                (64, None, default_gemm_efficiency()),
                                (0, None, default_gemm_efficiency())):
        q = replace(FAKE, kernel_vector_bytes=kernel, blas_vector_bytes=blas)
        assert params_from_quick(q).gemm_efficiency == table, (kernel, blas)


def test_isa_defaults_take_the_efficiency_table_of_blas_width() -> None:
    assert default_params(AVX2, threads=2).gemm_efficiency == avx2_blas_gemm_efficiency()
    assert default_params(NEON, threads=2).gemm_efficiency == avx2_blas_gemm_efficiency()
    assert default_params(AVX512, threads=2).gemm_efficiency == default_gemm_efficiency()
    assert default_params(AVX2, threads=2, blas_target=AVX512).gemm_efficiency == (
        default_gemm_efficiency())


def test_a_32_byte_blas_rates_long_short_k_calls_above_short_strided_ones() -> None:
    # Tucker's last step (abc,ai,bj,ck->ijk, 32 -> 96) on OpenBLAS' Haswell kernels, one
    # core: 18 calls of 96 x 512 x 32 ran in 508-527 us, 288 calls of 96 x 32 x 32 into
    # a strided C in 578-642.  The reference's table (64-byte kernels) orders them the
    # other way, 0.73 against 0.88 of the peak.
    avx2 = params_from_quick(replace(FAKE, kernel_vector_bytes=32, blas_vector_bytes=32))
    assert gemm_efficiency(avx2, 96, 512, 32) > gemm_efficiency(avx2, 96, 32, 32)
    ref = MachineParams.reference()
    assert gemm_efficiency(ref, 96, 512, 32) < gemm_efficiency(ref, 96, 32, 32)


def test_an_avx2_host_plans_tuckers_last_step_on_few_blas_calls(tmp_path) -> None:
    # Planned for an AVX2 host (numba's haswell target, BLAS at AVX2 width: the defaults
    # derived from the ISA), the intermediate written i j c: the step runs on a few calls
    # whose N is long, not on 512 calls of N 18 into a strided out.  In a subprocess: the
    # vector target is read once per process.  Planning only (nothing compiled).
    code = (
        "import numpy as np, teir_plan as tp\n"
        "rng = np.random.default_rng(0)\n"
        "x = np.ascontiguousarray(rng.standard_normal((96, 96, 32))).transpose(0, 2, 1)\n"
        "ck = rng.standard_normal((32, 96))\n"
        "c = tp.plan('icj,ck->ijk', x, ck, order='C').main_step.chosen\n"
        "print(tp.machine_params().source, c.cost.tile_calls)\n")
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="",
               TEIR_PLAN_AUTOCALIBRATE="0", TEIR_PLAN_CACHE_DIR=str(tmp_path))
    env.pop("TEIR_PLAN_VECTOR_BYTES", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    assert out[0] == "isa"
    assert int(out[1]) <= 96


def test_blas_vector_width_from_openblas_core_name(monkeypatch) -> None:
    import threadpoolctl

    import teir_plan.executor.blas as blas

    libs = [{"internal_api": "openblas", "filepath": "/x/scipy.libs/libscipy_openblas.so",
             "architecture": "SkylakeX"},
            {"internal_api": "openblas", "filepath": "/x/numpy.libs/libscipy_openblas64_.so",
             "architecture": "Haswell"}]
    monkeypatch.setattr(threadpoolctl, "threadpool_info", lambda: libs)
    monkeypatch.setattr(blas, "gemm_address", lambda dtype: (0, 8))  # numpy's, ILP64
    assert cal_timing.blas_vector_bytes() == 32
    monkeypatch.setattr(blas, "gemm_address", lambda dtype: (0, 4))  # scipy's
    assert cal_timing.blas_vector_bytes() == 64
    libs[0]["architecture"] = "SomeFutureCore"
    assert cal_timing.blas_vector_bytes() is None


def test_isa_defaults_differ_by_isa() -> None:
    # 2 FMA pipes x lanes x 2 flops x 2.9375 GHz (188 GFLOP/s for 16 float32 lanes).
    rates = {t.name: default_params(t, threads=2, l2_bytes=1 << 20) for t in
             (AVX512, AVX2, NEON, NONE)}
    assert rates["avx512"].gemm_flops_f32 == pytest.approx(188e9)
    assert rates["avx2"].gemm_flops_f32 == pytest.approx(94e9)
    assert rates["neon"].gemm_flops_f32 == pytest.approx(47e9)
    assert rates["none"].gemm_flops_f32 == pytest.approx(23.5e9)  # SSE mul + add
    # float64: half the lanes, at the reference's 89 / 94 of that.
    assert rates["avx2"].gemm_flops_f64 == pytest.approx(44.5e9)
    assert rates["avx2"].vec_flops_f32 == pytest.approx(92.5e9)
    for p in rates.values():
        assert p.source == "isa" and p.l2_bytes == 1 << 20
        assert p.dram_bytes_per_second == pytest.approx(20e9)  # 2 cores, as the reference
    assert "avx2" in rates["avx2"].machine


def test_isa_defaults_rate_blas_at_the_cpus_width_and_the_kernels_at_theirs() -> None:
    # TEIR_PLAN_VECTOR_BYTES=32 on an AVX-512 CPU: the vector kernels run AVX2, BLAS does
    # not.
    p = default_params(AVX2, threads=2, l2_bytes=1 << 20, blas_target=AVX512)
    assert p.gemm_flops_f32 == pytest.approx(188e9)
    assert p.vec_flops_f32 == pytest.approx(92.5e9)


def test_isa_defaults_scale_bandwidth_with_the_threads() -> None:
    assert default_params(AVX2, threads=8).dram_bytes_per_second == pytest.approx(80e9)
    assert default_params(AVX2, threads=64).llc_bytes_per_second == pytest.approx(480e9)
    with pytest.raises(PlanError):
        default_params(AVX2, threads=0)


def test_explain_names_the_parameters_the_plan_was_ranked_with(fresh) -> None:
    shapes = ((64, 48), (48, 32))
    text = tp.explain("ij,jk->ik", *shapes, dtype="float32").text(rich=False)
    assert "ranked with reference parameters" in text
    estimate = replace(MachineParams.reference(), gemm_flops_f32=90e9, source="first-use",
                       measured_at="2026-01-02 03:04 UTC", machine="Some CPU / avx2 / 2")
    set_machine_params(estimate)
    plan = tp.plan("ij,jk->ik", *shapes, dtype="float32")
    # The report renders what planning recorded: parameters changed after planning do
    # not change what it says.
    set_machine_params(replace(estimate, source="calibrated", calibrated=True))
    report = build_report(plan)
    assert ("ranked with first-use estimate measured at 2026-01-02 03:04 UTC for "
            "Some CPU / avx2 / 2") in report.text(rich=False)
    assert report.to_dict()["machine_params"].startswith("first-use estimate")
    assert "first-use estimate" in report.markdown()


def test_the_hosts_caches_size_the_default_parameters() -> None:
    """The caches' sizes are read from the host (sysfs), the reference's where Linux does
    not say: a target that is not the host's keeps the reference's last-level cache."""
    ref = MachineParams.reference()
    host = default_params()
    assert host.l2_bytes == (machine_defaults.host_l2_bytes() or ref.l2_bytes)
    assert host.llc_bytes == (machine_defaults.host_llc_bytes() or ref.llc_bytes)
    assert default_params(AVX2, threads=2).llc_bytes == ref.llc_bytes


def test_dram_rate_is_the_cores_aggregate() -> None:
    """The DRAM rate is measured with the threads the plans share it on: at least two
    (one thread's plans get cost.memory_seconds' share of it), at most the CPUs this
    process may use; the copy in parts gives a finite, positive rate."""
    from teir_plan.calibration.timing import bandwidth_threads, dram_rate

    cpus = len(os.sched_getaffinity(0))
    assert bandwidth_threads(1) == min(2, cpus)
    assert bandwidth_threads(2) == min(2, cpus)
    assert bandwidth_threads(10_000) == cpus
    for threads in (1, 2, 3):
        rate = dram_rate(4, 1, threads)
        assert 1e8 < rate < 1e13

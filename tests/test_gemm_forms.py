"""BLAS tiles are priced by their operand form (transA, transB), which calibration
measures apart: OpenBLAS runs one tile shape at up to twice the rate in one form as
in another."""

from __future__ import annotations

import itertools

import pytest

from teir_plan.calibration import calibration_program
from teir_plan.errors import CalibrationWarning, PlanError
from teir_plan.executor.lower import lower
from teir_plan.machine import GEMM_FORMS, GEMM_GRID, MachineParams
from teir_plan.machine.tables import default_gemm_efficiency
from teir_plan.planner.cost import tile_seconds
from teir_plan.planner.gemm_rate import gemm_efficiency
from teir_plan.planner.search import prim_options, variants
from teir_plan.tilekinds import table as K
from teir_plan.tilekinds.blas import BlasPlan, blas_form, blas_plan
from tests.test_search import _contraction


@pytest.mark.parametrize("form", range(len(GEMM_FORMS)))
def test_calibration_times_each_form(form: int) -> None:
    """The program calibration times for a form runs BLAS in that form, unswapped, and
    the cost model names the executor's call by the same form."""
    low = lower(calibration_program(64, 24, 192, "float32", 3, form), vector_kernel=False)
    t = low.tile
    assert t[K.T_SWAP] == 0
    assert (t[K.T_TRANSA], t[K.T_TRANSB]) == tuple(
        ord(GEMM_FORMS[form][i]) for i in (0, 1))
    called = BlasPlan(swap=False, transa=int(t[K.T_TRANSA]), lda=int(t[K.T_LDA]),
                      transb=int(t[K.T_TRANSB]), ldb=int(t[K.T_LDB]), ldc=64)
    assert blas_form(called) == form


def test_forms_of_swapped_and_packed_calls() -> None:
    """A swapped call's form is that of BLAS' own operands (B^T, A^T); an operand BLAS
    cannot address is packed into the N form."""
    m, n, k = 96, 200, 64
    # ji,jk->ik into a row-major out: BLAS computes out^T = B^T A^T, its A = in1 (k x n,
    # unit stride along n: N) and its B = in0^T (unit stride along m: T).
    swapped = blas_plan(m, n, k, (1, m), (n, 1), (n, 1))
    assert swapped is not None and swapped.swap
    assert (chr(swapped.transa), chr(swapped.transb)) == ("N", "T")
    assert blas_form(swapped) == GEMM_FORMS.index("NT")
    packed = blas_plan(m, n, k, (2 * k, 2), (1, k), (1, m))  # A strided both ways
    assert packed is not None and packed.transa == 0 and chr(packed.transb) == "N"
    assert blas_form(packed) == GEMM_FORMS.index("NN")


def test_machine_params_complete_or_refuse_a_table() -> None:
    size = len(GEMM_GRID) ** 3
    assert len(MachineParams(gemm_efficiency=(0.5,) * size).gemm_efficiency) == 4 * size
    with pytest.raises(PlanError, match="gemm_efficiency"):
        MachineParams(gemm_efficiency=(0.5,) * 100)


def test_default_tables_cover_every_form() -> None:
    g = len(GEMM_GRID)
    assert len(default_gemm_efficiency()) == len(GEMM_FORMS) * g**3
    assert all(0 < v <= 1 for v in default_gemm_efficiency())


def _scaled(form: int, factor: float) -> MachineParams:
    """Default parameters with one form's table scaled by ``factor``."""
    size = len(GEMM_GRID) ** 3
    table = list(default_gemm_efficiency())
    for i in range(form * size, (form + 1) * size):
        table[i] *= factor
    return MachineParams(gemm_efficiency=tuple(table))


def test_efficiency_reads_the_forms_table() -> None:
    for form, (m, n, k) in itertools.product(range(len(GEMM_FORMS)),
                                             [(64, 128, 64), (24, 24, 24), (700, 30, 5000)]):
        base = gemm_efficiency(MachineParams(), m, n, k, form)
        assert gemm_efficiency(_scaled(form, 0.5), m, n, k, form) == pytest.approx(base / 2)
        for other in set(range(len(GEMM_FORMS))) - {form}:
            assert gemm_efficiency(_scaled(other, 0.5), m, n, k, form) == base


# Operands whose BLAS tiles come in each form: transposed in0 (bhqd,bhkd->bhqk, out
# unit-stride along k: BLAS computes out^T; at sizes whose whole tiles are too large for
# the packed vector kernel, which takes 128 x 128 x 64 ones), and plain matrix products.
FORM_CASES = [
    ("bhqd,bhkd->bhqk", "b=2,h=3,q=256,k=256,d=128"),
    ("ij,jk->ik", "i=96,j=64,k=200"),
    ("ji,jk->ik", "i=96,j=64,k=200"),
    ("ij,kj->ik", "i=96,j=64,k=200"),
    ("ji,kj->ik", "i=96,j=64,k=200"),
]


def _blas_tiles(case: tuple[str, str]):  # type: ignore[no-untyped-def]
    """(contraction, prim option, form) of every BLAS-priced tile among the candidates."""
    base = MachineParams()
    for v, _ in variants(_contraction(case[0], case[1], 1), base, 1):
        for opt in prim_options(v, base, 1):
            if opt.tile.kind != "blas":
                continue  # not a BLAS tile
            assert opt.call is not None
            yield v, opt, blas_form(opt.call)


@pytest.mark.parametrize("case", FORM_CASES, ids=[c[0] for c in FORM_CASES])
def test_blas_tiles_are_priced_in_their_form(case: tuple[str, str]) -> None:
    """A BLAS tile's cost changes with its own form's table and with no other."""
    tiles = list(_blas_tiles(case))
    assert tiles, "no BLAS tile among the candidates"
    for v, opt, form in tiles:
        args = (v, *opt.prim, opt.call)
        cost = tile_seconds(*args, MachineParams()).seconds
        # Halving the form's rate costs a real tile at least a fifth more; a tiny one
        # (the packed-tile splits offer some) is mostly call and packing time.
        tile = tile_seconds(*args, MachineParams())
        assert tile_seconds(*args, _scaled(form, 0.5)).seconds > cost * (
            1.2 if tile.flops >= 2**16 else 1.0)
        for other in set(range(len(GEMM_FORMS))) - {form}:
            assert tile_seconds(*args, _scaled(other, 0.5)).seconds == cost


def test_the_cases_cover_every_form() -> None:
    seen = {form for case in FORM_CASES for _, _, form in _blas_tiles(case)}
    assert seen == set(range(len(GEMM_FORMS)))


def test_a_calibration_cached_without_forms_keeps_its_nn_table(tmp_path, monkeypatch) -> None:
    """A cache entry of 216 N,N entries (written before forms were measured) loads: its
    N,N table as measured, the other forms scaled by the defaults' ratios."""
    import json

    from teir_plan.machine import store as machine

    size = len(GEMM_GRID) ** 3
    nn = [0.5] * size
    monkeypatch.setenv("TEIR_PLAN_CACHE_DIR", str(tmp_path))
    (tmp_path / "machine.json").write_text(json.dumps(
        {machine.machine_key(): {"gemm_efficiency": nn, "calibrated": True}}))
    loaded = machine.load_params()
    assert loaded is not None and loaded.calibrated
    table = loaded.gemm_efficiency
    assert len(table) == len(GEMM_FORMS) * size and list(table[:size]) == nn
    d = default_gemm_efficiency()
    for form in range(1, len(GEMM_FORMS)):
        for i in (0, 77, size - 1):
            j = form * size + i
            assert table[j] == pytest.approx(min(1.0, 0.5 * d[j] / d[i]))
    (tmp_path / "machine.json").write_text(json.dumps(
        {machine.machine_key(): {"gemm_efficiency": [0.5] * 100}}))
    with pytest.warns(CalibrationWarning, match="'gemm_efficiency' must have 864"):
        assert machine.load_params() is None  # another grid: not usable, and said so


def test_the_floors_efficiency_bounds_every_form_and_orientation() -> None:
    from teir_plan.planner.gemm_rate import best_gemm_efficiency

    p = MachineParams()
    for m, n, k in itertools.product([1, 8, 30, 64, 100, 700, 5000], repeat=3):
        best = best_gemm_efficiency(p, m, n, k)
        for form in range(len(GEMM_FORMS)):
            assert best >= gemm_efficiency(p, m, n, k, form) * (1 - 1e-12)
            assert best >= gemm_efficiency(p, n, m, k, form) * (1 - 1e-12)

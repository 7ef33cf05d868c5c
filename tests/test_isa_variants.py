"""Every vector-kernel variant this host can execute, checked against numpy.

The kernels are generated for one vector target per process (teir_plan.isa: 64-byte
vectors with AVX-512, 32 with AVX2, 16 with NEON, none without an FMA vector ISA).  The
rest of the suite runs the host's widest; here the kernel tests run again in a
subprocess for each narrower width the host can execute, so that an AVX-512 machine
also checks what AVX2 and NEON machines run, and an AVX2 machine the 16-byte variant
and BLAS-only machines.  ``make test`` runs a representative of each kernel (its
programs against numpy and its tile property), which compiles each width's kernels once;
the whole modules at every width are ``slow`` (``make fuzz``, and ``make test-widths``,
which CI runs): at two widths they took 5.5 of the 2-core AVX2 machine's 20 minutes.
The 32-byte variant is compiled for an AVX2 CPU (haswell), so that it gets AVX2's 16
vector registers, not AVX-512's 32.  Each subprocess checks its
own results against numpy in float64, as the modules do on the host's width.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from teir_plan.isa import VectorTarget, _narrowed, target, variant_widths, widest_target

ROOT = Path(__file__).resolve().parent.parent
# The modules that test the vector kernels' tiles against numpy.
KERNEL_TESTS = ["tests/test_microkernel.py", "tests/test_transposed_kernel.py",
                "tests/test_packed_vector_tiles.py", "tests/test_row_tiles.py"]
# Without vector kernels: every GEMM tile on BLAS or loops.
BLAS_ONLY_TESTS = ["tests/test_einsum.py", "tests/test_gemm_forms.py"]
# make test's representatives: each vector kernel's tile property or programs against
# numpy (the vector kernel's programs in both dtypes took 57 s of the 2-core AVX2
# machine at 16 bytes; its tile property covers the kernel); without vector kernels,
# GEMM-like einsum cases in float32 and the GEMM forms' prices (the reductions' and
# copies' kernels, which no width changes, compiled again took a minute more).
KERNEL_REPRESENTATIVES = [
    "tests/test_microkernel.py::test_the_kernel_computes_its_tile_and_nothing_else",
    "tests/test_transposed_kernel.py::test_programs_on_the_kernel_match_numpy",
    "tests/test_packed_vector_tiles.py::test_packed_vector_tiles_match_numpy",
    # (a row tile and a dot tile on one thread: the module's other 34 cases vary the
    # threads and layouts, which no vector width changes)
    "tests/test_row_tiles.py::test_einsum_through_row_and_dot_tiles"
    "[1 thread-plain-ij,ij->ij-shapes0-row]",
    "tests/test_row_tiles.py::test_einsum_through_row_and_dot_tiles"
    "[1 thread-plain-i,i->-shapes2-dot]",
]
BLAS_ONLY_REPRESENTATIVES = [
    f"tests/test_einsum.py::test_cases_match_numpy[{case}-float32]"
    for case in ("trus,pqtu->pqrs", "efbad,cf->abcde", "ij,jk,kl->il", "ab,bc,cd,de->ae")
] + ["tests/test_gemm_forms.py"]

WIDEST = widest_target()
OTHER_WIDTHS = [w for w in variant_widths(WIDEST) if w != target().vector_bytes]


def _env(width: int) -> dict[str, str]:
    env = dict(os.environ, TEIR_PLAN_VECTOR_BYTES=str(width))
    if width == 32 and WIDEST.name == "avx512" and "NUMBA_CPU_NAME" not in os.environ:
        env.update(NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES="")
    return env


def _run_at(width: int, files: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         *files],
        cwd=ROOT, env=_env(width), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"vector width {width}: the kernel tests failed\n{proc.stdout[-4000:]}"
        f"\n{proc.stderr[-2000:]}")
    assert " passed" in proc.stdout


@pytest.mark.parametrize("width", OTHER_WIDTHS)
def test_each_kernel_at_every_width_the_host_executes(width: int) -> None:
    _run_at(width, KERNEL_REPRESENTATIVES if width else BLAS_ONLY_REPRESENTATIVES)


@pytest.mark.slow
@pytest.mark.parametrize("width", OTHER_WIDTHS)
def test_kernel_modules_at_every_width_the_host_executes(width: int) -> None:
    _run_at(width, KERNEL_TESTS if width else BLAS_ONLY_TESTS)


def test_the_subprocess_runs_the_width_it_was_given() -> None:
    # The environment each variant runs under selects that variant (and nothing else).
    for width in OTHER_WIDTHS:
        code = "from teir_plan.isa import target; print(target().vector_bytes)"
        out = subprocess.run([sys.executable, "-c", code], env=_env(width), cwd=ROOT,
                             capture_output=True, text=True, timeout=60, check=True)
        assert int(out.stdout.strip()) == width


def test_shapes_fit_the_register_file() -> None:
    # Accumulators, the vectors loaded per K step and one broadcast fit in registers.
    for t in (VectorTarget("avx512", 64, 32, "x"), VectorTarget("avx2", 32, 16, "x"),
              VectorTarget("neon", 16, 32, "x"), VectorTarget("sse", 16, 16, "x")):
        assert t.rows * t.vectors + t.vectors + 1 <= t.registers
        assert t.wide_rows * (t.vectors + 1) + t.vectors + 2 <= t.registers
        assert t.wide_rows >= 2
    assert (VectorTarget("avx2", 32, 16, "x").rows, VectorTarget("avx2", 32, 16, "x").vectors
            ) == (6, 2)


def test_narrowing() -> None:
    avx512 = VectorTarget("avx512", 64, 32, "cpu")
    assert variant_widths(avx512) == (64, 32, 16, 0)
    assert _narrowed(avx512, 32) == VectorTarget("avx2", 32, 16, "cpu")
    assert _narrowed(avx512, 16).registers == 32
    assert not _narrowed(avx512, 0).enabled
    avx2 = VectorTarget("avx2", 32, 16, "cpu")
    assert variant_widths(avx2) == (32, 16, 0)
    from teir_plan.errors import PlanError

    with pytest.raises(PlanError, match="TEIR_PLAN_VECTOR_BYTES=64"):
        _narrowed(avx2, 64)
    with pytest.raises(PlanError):
        _narrowed(avx2, 24)

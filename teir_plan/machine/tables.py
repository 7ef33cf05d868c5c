"""BLAS' measured efficiency tables: the grid they are read on, and the two tables the
defaults use (package data, ``teir_plan/machine/data/``, read once on first use).

A table holds BLAS' fraction of its large-tile peak on each tile shape of the grid in
each operand form, call included: entry ((form * G + i_m) * G + i_n) * G + i_k for
G = len(GEMM_GRID) (see planner/gemm_rate.py, which reads it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from importlib import resources

from teir_plan.errors import PlanError

# Tile extents (per axis) at which calibration measures BLAS on one core.  A product
# of per-axis saturation curves missed by 1.6x on tiles with one short axis
# (384 x 24 x 384 ran at 57% of peak, the fit said 92%), so the model reads a table.
GEMM_GRID = (8, 24, 64, 192, 512, 4096)
# Tiles of more flops than this are not measured (seconds each); they take the value
# of the same tile with its 4096s cut to 512, where BLAS is near its peak anyway.
GRID_MAX_FLOPS = 4e9
# BLAS' operand forms (transA, transB), each a table of its own: OpenBLAS runs the same
# tile at very different rates by form.  Measured on one core, 9 interleaved rounds:
# 64 x 128 x 64 at 190 GFLOP/s N,N, 0.57 of that T,N, 0.89 N,T, 0.72 T,T; 512 x 24 x 24
# T,N at 0.51; but 192^3 and 512 x 512 x 64 at 0.91-1.01 in every form.  One table (N,N)
# rated bhqd,bhkd->bhqk's T,N tiles 1.7x too fast, and the plan ran 1.4x slower than
# packing an operand for the vector kernel would have.
GEMM_FORMS = ("NN", "TN", "NT", "TT")  # index = (transA == 'T') + 2 * (transB == 'T')
TABLE_SIZE = len(GEMM_FORMS) * len(GEMM_GRID) ** 3


def _read_table(name: str) -> tuple[float, ...]:
    """A table of package data, checked against the grid and forms it is indexed by (a
    table written for another grid would misprice every BLAS tile silently)."""
    text = resources.files("teir_plan.machine").joinpath("data").joinpath(name).read_text()
    doc = json.loads(text)
    if tuple(doc["grid"]) != GEMM_GRID or tuple(doc["forms"]) != GEMM_FORMS:
        raise PlanError(f"teir_plan/machine/data/{name}: grid {doc['grid']} and forms "
                        f"{doc['forms']} differ from GEMM_GRID and GEMM_FORMS")
    expected = [(f, m, n) for f in GEMM_FORMS for m in GEMM_GRID for n in GEMM_GRID]
    rows = doc["rows"]
    if [(r["form"], r["m"], r["n"]) for r in rows] != expected or any(
            len(r["by_k"]) != len(GEMM_GRID) for r in rows):
        raise PlanError(f"teir_plan/machine/data/{name}: rows not in the grid's order")
    return tuple(float(v) for r in rows for v in r["by_k"])


@cache
def default_gemm_efficiency() -> tuple[float, ...]:
    """The reference machine's table (2-core Xeon, AVX-512, numpy's OpenBLAS 0.3.31): each
    entry the median of three calibrations, as are MachineParams' other measured
    defaults."""
    return _read_table("gemm-efficiency-reference.json")


@cache
def avx2_blas_gemm_efficiency() -> tuple[float, ...]:
    """The same table measured with BLAS kernels of 32-byte vectors (numpy's OpenBLAS
    0.3.31 running its Haswell kernels, on a 2-core AMD EPYC, Zen 5, with teir_plan's
    kernels at AVX2 width too): the median of three calibrations.  The fractions of peak
    are the BLAS kernels' own: against the reference's, small tiles with a short N run at
    less of the peak (96 x 32 x 32 N,N 0.67 against 0.88) and long calls with a short K
    at more (96 x 9216 x 32 0.85 against 0.58; docs/decisions.md)."""
    return _read_table("gemm-efficiency-avx2-blas.json")


def blas_efficiency_table(blas_vector_bytes: int | None) -> tuple[float, ...]:
    """The measured efficiency table that fits a BLAS whose GEMM kernels use vectors of
    ``blas_vector_bytes`` (None or 0: not known): the one measured with 32-byte kernels
    for kernels of 32 bytes or fewer (16-byte kernels are not measured: the nearer table),
    else the reference's (64-byte kernels).  Fractions of peak carry over between
    machines whose BLAS runs kernels of one width, not between widths: narrower kernels
    spend more cycles on each flop, so a call's fixed costs weigh less."""
    if blas_vector_bytes and blas_vector_bytes <= 32:
        return avx2_blas_gemm_efficiency()
    return default_gemm_efficiency()


def with_default_forms(nn: Sequence[float]) -> tuple[float, ...]:
    """A full table from an N,N table alone (a calibration cached by a version that
    measured no other form): each other form is N,N times the defaults' ratio of that form
    to N,N, capped at 1, so the machine's own N,N measurements still count."""
    size = len(GEMM_GRID) ** 3
    d = default_gemm_efficiency()
    return tuple(nn) + tuple(min(1.0, v * d[form * size + i] / d[i])
                             for form in range(1, len(GEMM_FORMS)) for i, v in enumerate(nn))

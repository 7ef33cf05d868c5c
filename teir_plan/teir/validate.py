"""The rules of TEIR (spec section 10.1 and the primitive shapes of teir-notes.md).

Each rule raises :class:`TEIRError` with a message that names the field, the
axis index where there is one, and the rule.  The checks are pure functions of
the program; checks that involve arrays (dtype, bounds, overlap) live in
:mod:`teir_plan.executor.checks`.
"""

from __future__ import annotations

import math

import numpy as np

from teir_plan.errors import TEIRError
from teir_plan.teir.enums import DimType, Prim
from teir_plan.teir.records import BINARY_MAIN, TEIR, UNARY_MAIN

# Exact injectivity checks enumerate at most this many addresses.
_MAX_ENUMERATED_ADDRESSES = 1 << 21

# tp.execute runs a program of at most this many iterations (the product of its
# dim_sizes: multiply-adds of a binary program, elements moved by a unary one) per element
# it can address, and at least MIN_ITERATION_CEILING in all, unless the caller raises the
# ceiling (``max_iterations=``).  A program of real work stays far below it (a GEMM of n^3
# multiply-adds over 3 n^2 elements does n / 3 per element); what passes it is a program
# whose axes revisit the same few elements (a K axis of 2^40 steps of stride 0 passed
# every bound check and ran for hours).  2^32 iterations take a few seconds.
ITERATIONS_PER_ELEMENT = 1 << 16
MIN_ITERATION_CEILING = 1 << 32


def validate(teir: TEIR) -> None:
    _check_operation_type(teir)
    _check_data_type(teir)
    _check_lengths(teir)
    _check_sizes(teir)
    _check_roles(teir)
    _check_participation(teir)
    # Any axis may be parallel.  A parallel K axis is split across the workers, each
    # summing its share of the K range into a private copy of the output, and the
    # copies are added into the output at the end (docs/teir.md, "Parallel K axes"),
    # so no two workers write one address.  What would race is a parallel axis whose
    # iterations write one output address: on a C, M or N axis, an output stride that
    # maps two output elements to one address (_check_output_injective), or an output
    # that overlaps an input (the executor's checks); a K axis cannot move the output
    # (_check_participation).
    _check_prim_shape(teir)
    _check_output_injective(teir)


def iteration_ceiling(teir: TEIR) -> int:
    """The iterations tp.execute runs ``teir`` to by default: ITERATIONS_PER_ELEMENT per
    element its strides can address (per tensor, the product of the sizes of the axes
    along which it moves), and at least MIN_ITERATION_CEILING."""
    s = teir.schedule
    addressed = sum(math.prod(n for n, st in zip(s.dim_sizes, row) if st != 0)
                    for row in s.strides)
    return max(MIN_ITERATION_CEILING, ITERATIONS_PER_ELEMENT * addressed)


def check_iterations(teir: TEIR, max_iterations: int | None = None) -> None:
    """Refuse a program that runs more than ``max_iterations`` iterations (the product of
    its dim_sizes; default :func:`iteration_ceiling`).  Call after :func:`validate`."""
    if max_iterations is None:
        limit = iteration_ceiling(teir)
        why = (f"the default ceiling of {limit} ({ITERATIONS_PER_ELEMENT} per element the "
               f"strides address, at least {MIN_ITERATION_CEILING}); pass max_iterations= "
               f"to tp.execute to raise it")
    else:
        limit, why = max_iterations, f"max_iterations={max_iterations}"
    total = math.prod(teir.schedule.dim_sizes)
    if total > limit:
        raise TEIRError(f"dim_sizes: the program runs {total} iterations (the product of "
                        f"dim_sizes {list(teir.schedule.dim_sizes)}), more than {why}")


def _check_operation_type(teir: TEIR) -> None:
    p = teir.primitives
    if p.prim_main in UNARY_MAIN:
        if p.prim_first is not Prim.NONE:
            raise TEIRError(
                f"prim_first: unary operations (prim_main={p.prim_main}) require none, "
                f"got {p.prim_first}"
            )
        if p.prim_last is not Prim.NONE:
            raise TEIRError(
                f"prim_last: unary operations (prim_main={p.prim_main}) require none, "
                f"got {p.prim_last}"
            )
    elif p.prim_main in BINARY_MAIN:
        if p.prim_first not in (Prim.NONE, Prim.ZERO):
            raise TEIRError(
                f"prim_first: binary contractions allow none or zero, got {p.prim_first}"
            )
        if p.prim_last not in (Prim.NONE, Prim.RELU):
            raise TEIRError(f"prim_last: binary contractions allow none or relu, got {p.prim_last}")
    else:
        raise TEIRError(
            f"prim_main: must be copy or relu (unary) or gemm or brgemm (binary), "
            f"got {p.prim_main}"
        )


def _check_data_type(teir: TEIR) -> None:
    """ReLU is max(x, 0): complex numbers have no order, so a complex program has none
    (numpy.maximum's lexicographic order on complex values is no activation)."""
    p = teir.primitives
    if not p.data_type.is_complex:
        return
    for field in ("prim_main", "prim_last"):
        if getattr(p, field) is Prim.RELU:
            raise TEIRError(
                f"{field}: relu is not defined for data_type={p.data_type} (complex numbers "
                f"have no order); use none"
            )


def _check_lengths(teir: TEIR) -> None:
    s = teir.schedule
    d = s.num_dims
    if len(s.exec_types) != d:
        raise TEIRError(
            f"exec_types: length {len(s.exec_types)} differs from dim_types' length {d}"
        )
    if len(s.dim_sizes) != d:
        raise TEIRError(f"dim_sizes: length {len(s.dim_sizes)} differs from dim_types' length {d}")
    t = teir.num_tensors
    kind = "unary" if teir.is_unary else "binary"
    if len(s.strides) != t:
        raise TEIRError(
            f"strides: a {kind} operation has T={t} tensors {teir.tensor_names}, "
            f"but strides has {len(s.strides)} rows"
        )
    for j, row in enumerate(s.strides):
        if len(row) != d:
            raise TEIRError(
                f"strides[{j}] ({teir.tensor_names[j]}): length {len(row)} differs from "
                f"the number of axes D={d}"
            )


def _check_sizes(teir: TEIR) -> None:
    for i, n in enumerate(teir.schedule.dim_sizes):
        if n <= 0:
            raise TEIRError(f"dim_sizes[{i}]: sizes must be positive, got {n}")


def _check_roles(teir: TEIR) -> None:
    if teir.is_unary:
        for i, t in enumerate(teir.schedule.dim_types):
            if t is not DimType.C:
                raise TEIRError(f"dim_types[{i}]: unary operations allow only c axes, got {t}")


def _check_participation(teir: TEIR) -> None:
    s = teir.schedule
    t = teir.num_tensors
    for i, role in enumerate(s.dim_types):
        for j in range(t):
            if not role.participates(j, t) and s.strides[j][i] != 0:
                raise TEIRError(
                    f"strides[{j}][{i}]: tensor {teir.tensor_names[j]} does not take part in "
                    f"axis {i} (role {role}), so its stride must be 0, got {s.strides[j][i]}"
                )


def _check_prim_shape(teir: TEIR) -> None:
    s = teir.schedule
    main = teir.primitives.prim_main
    prim = s.prim_axes()
    if main in UNARY_MAIN:
        if len(prim) > 2:
            raise TEIRError(
                f"exec_types[{prim[2]}]: {main} consumes at most two prim axes, "
                f"got {len(prim)} (axes {list(prim)})"
            )
        return
    counts = {DimType.M: 0, DimType.N: 0, DimType.K: 0}
    limit = {DimType.M: 1, DimType.N: 1, DimType.K: 2 if main is Prim.BRGEMM else 1}
    for i in prim:
        role = s.dim_types[i]
        if role is DimType.C:
            raise TEIRError(
                f"exec_types[{i}]: {main} cannot consume a c axis as prim; "
                f"make axis {i} seq or parallel"
            )
        counts[role] += 1
        if counts[role] > limit[role]:
            raise TEIRError(
                f"exec_types[{i}]: {main} consumes at most {limit[role]} {role} prim "
                f"axis{'es' if limit[role] > 1 else ''}; axis {i} is one too many"
            )
    if main is Prim.BRGEMM and counts[DimType.K] == 0:
        raise TEIRError(
            "exec_types: brgemm needs a k prim axis as its batch-reduce axis; none is prim"
        )


def _check_output_injective(teir: TEIR) -> None:
    s = teir.schedule
    out = teir.num_tensors - 1
    axes = [
        i
        for i, role in enumerate(s.dim_types)
        if role is not DimType.K and s.dim_sizes[i] > 1
    ]
    for i in axes:
        if s.strides[out][i] == 0:
            raise TEIRError(
                f"strides[{out}][{i}]: output stride 0 on axis {i} of size {s.dim_sizes[i]} "
                f"maps different output elements to one address"
            )
    sizes = [s.dim_sizes[i] for i in axes]
    strides = [s.strides[out][i] for i in axes]
    verdict = strided_map_is_injective(sizes, strides)
    if verdict is False:
        raise TEIRError(
            f"strides[{out}]: the output strides {list(s.strides[out])} map two different "
            f"output elements to one address"
        )
    if verdict is None:
        raise TEIRError(
            f"strides[{out}]: cannot prove that the output strides {list(s.strides[out])} "
            f"give every output element its own address (too many elements to check)"
        )


def strided_map_is_injective(sizes: list[int], strides: list[int]) -> bool | None:
    """Whether (i_0, ..., i_n) -> sum i_k * strides[k] is one-to-one on the box ``sizes``.

    True/False when decided, None when the box is too large to enumerate and the
    fast nested-strides test does not apply.
    """
    pairs = sorted((abs(st), n) for n, st in zip(sizes, strides) if n > 1)
    if any(st == 0 for st, _ in pairs):
        return False
    span = 0
    for st, n in pairs:
        if st <= span:
            break
        span += (n - 1) * st
    else:
        return True  # every stride steps over everything smaller: a nested layout
    total = 1
    for _, n in pairs:
        total *= n
    if total > _MAX_ENUMERATED_ADDRESSES:
        return None
    addresses = np.zeros(1, dtype=np.int64)
    for st, n in pairs:
        addresses = (addresses[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).ravel()
    return bool(np.unique(addresses).size == addresses.size)

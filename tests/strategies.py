"""Reusable hypothesis strategies: TEIR programs with the arrays they run on, and
einsum problems.  ``TEIR_PLAN_FUZZ=1`` raises example counts for ``make fuzz``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import teir_plan as tp

FUZZ = os.environ.get("TEIR_PLAN_FUZZ") == "1"


def fuzz_settings(default: int = 60, fuzz: int = 20_000) -> settings:
    return settings(
        max_examples=fuzz if FUZZ else default,
        deadline=None,
        derandomize=not FUZZ,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


ROLE_TENSORS = {"c": (0, 1, 2), "m": (0, 2), "n": (1, 2), "k": (0, 1)}


@dataclass
class ProgramCase:
    """A valid program, the flat base buffers behind each tensor, and numpy views of them
    whose strides are exactly the program's."""

    teir: tp.TEIR
    bases: list[np.ndarray]  # float64 flat buffers
    origins: list[int]  # index of each view's first element in its base
    views: list[np.ndarray]  # what tp.execute receives (program dtype)
    typed: list[np.ndarray]  # the program-dtype buffers the views look into


def _view(base: np.ndarray, origin: int, sizes: list[int], strides: list[int]) -> np.ndarray:
    isz = base.itemsize
    return np.lib.stride_tricks.as_strided(
        base[origin:], shape=tuple(sizes), strides=tuple(s * isz for s in strides)
    )


@st.composite
def program_cases(draw: st.DrawFn, binary: bool | None = None, max_dims: int = 5) -> ProgramCase:
    is_binary = draw(st.booleans()) if binary is None else binary
    d = draw(st.integers(0 if is_binary else 1, max_dims))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    roles = [draw(st.sampled_from("cmnk")) if is_binary else "c" for _ in range(d)]
    sizes = [draw(st.integers(1, 5)) for _ in range(d)]
    # Exec types: prim within the primitive's shape, K never parallel.
    execs = []
    counts = {"m": 0, "n": 0, "k": 0, "c": 0}
    main = draw(st.sampled_from(["gemm", "brgemm"] if is_binary else ["copy", "relu"]))
    limit = {"m": 1, "n": 1, "k": 2 if main == "brgemm" else 1, "c": 0} if is_binary else None
    nprim = 0
    for r in roles:
        want = draw(st.sampled_from(["seq", "parallel", "prim"]))
        if want == "prim":
            ok = (counts[r] < limit[r]) if limit else nprim < 2
            if not ok:
                want = "seq"
        if want == "parallel" and r == "k":
            want = "seq"
        if want == "prim":
            counts[r] += 1
            nprim += 1
        execs.append(want)
    if main == "brgemm" and counts["k"] == 0:
        main = "gemm"
    ntens = 3 if is_binary else 2
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    strides, bases, origins, views, typed = [], [], [], [], []
    for j in range(ntens):
        is_out = j == ntens - 1
        takes = [i for i in range(d) if not is_binary or j in ROLE_TENSORS[roles[i]]]
        real = [i for i in takes if is_out or sizes[i] == 1 or draw(st.integers(0, 6)) != 0]
        order = draw(st.permutations(real))
        row = [0] * d
        acc = 1
        flips = 0
        for i in reversed(order):
            step = acc
            if draw(st.booleans()) and draw(st.booleans()):
                row[i] = -step
                flips += (sizes[i] - 1) * step
            else:
                row[i] = step
            acc *= sizes[i]
        pad = draw(st.integers(0, 2))
        base = rng.standard_normal(acc + pad)
        strides.append(row)
        origin = flips
        bases.append(base)
        origins.append(origin)
        typed.append(base.astype(dtype))
        views.append(_view(typed[-1], origin, sizes, row))
    first = draw(st.sampled_from(["none", "zero"])) if is_binary else "none"
    last = draw(st.sampled_from(["none", "relu"])) if is_binary else "none"
    teir = tp.TEIR.from_fields(
        data_type=dtype, prim_first=first, prim_main=main, prim_last=last,
        dim_types=roles, exec_types=execs, dim_sizes=sizes, strides=strides,
    )
    return ProgramCase(teir, bases, origins, views, typed)

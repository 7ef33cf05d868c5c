"""numpy.einsum's calling convention, beyond the subscripts string.

Three things a caller of ``numpy.einsum`` may pass that are not an expression and arrays:

* the interleaved form ``einsum(op0, sublist0, op1, sublist1, ..., [sublist_out])``, whose
  sublists name axes by non-negative integers (and ``Ellipsis``), turned here into an
  ordinary subscripts string with numpy's own mapping (0-25 -> ``A``-``Z``, 26-51 ->
  ``a``-``z``, so that an implicit output is ordered as numpy orders it) and, beyond
  numpy's 52, opt_einsum's symbols (``opt_einsum.get_symbol``: 52 -> ``À``, ...);
* ``optimize``: ``True`` (search the pairwise path, rank schedules with the cost model),
  ``False`` (numpy's: no path search, the operands contracted left to right, each step
  still ranked by the cost model), teir_plan's ``"autotune"`` (also time the top
  candidates) and ``"plain"`` (a plain valid schedule, no ranking), and numpy's and
  opt_einsum's path options (``"greedy"``, ``"optimal"``, any opt_einsum
  strategy name, ``(strategy, memory_limit)``, an explicit path such as
  ``["einsum_path", (0, 1), (0, 1)]``, an opt_einsum ``PathOptimizer`` such as
  ``opt_einsum.RandomGreedy()`` or cotengra's ``HyperOptimizer``, or a cotengra
  ``ContractionTree``, whose ``get_path()`` is taken), which choose the pairwise order
  of an expression of three or more operands; each pairwise step is then planned by the
  cost model as with ``True``;
* ``casting``: numpy's rule (default ``"safe"``) for casting operands to ``dtype=`` and the
  result into ``out``.

>>> from teir_plan.frontend.convention import from_interleaved, normalize_optimize
>>> sub, ops = from_interleaved(("x", [0, 1], "y", [1, 2], [0, 2]))
>>> sub, ops
('AB,BC->AC', ['x', 'y'])
>>> normalize_optimize(["einsum_path", (0, 1), (0, 1)]).path
((0, 1), (0, 1))
"""

from __future__ import annotations

import math
import numbers
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, cast

import numpy as np
import opt_einsum as oe
from opt_einsum import get_symbol
from opt_einsum.paths import _PATH_OPTIONS

from teir_plan.errors import DTypeError, EinsumError, OptionTypeError, PlanError
from teir_plan.teir.enums import is_half

Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]
CASTINGS: tuple[Casting, ...] = ("no", "equiv", "safe", "same_kind", "unsafe")

# opt_einsum's named path strategies (numpy's "greedy" and "optimal" among them).
PATH_STRATEGIES = tuple(sorted(_PATH_OPTIONS))

# The largest interleaved label: get_symbol(n) is chr(n + 2048) from n = 55296 on, and
# chr() ends at U+10FFFF.
MAX_LABEL = 0x10FFFF - 2048


def _letter(label: object, where: str) -> str:
    if label is Ellipsis:
        return "..."
    if isinstance(label, bool) or not isinstance(label, numbers.Integral):
        raise EinsumError(
            f"{where}: sublist entries must be non-negative integers or Ellipsis, "
            f"got {label!r}")
    n = int(label)
    if n < 0:
        raise EinsumError(f"{where}: sublist entry {n} is negative")
    if n > MAX_LABEL:
        raise EinsumError(f"{where}: sublist entry {n} is beyond the largest label, "
                          f"{MAX_LABEL} (labels from 52 on are opt_einsum's symbols, "
                          f"one Unicode character each)")
    if n >= 52:  # opt_einsum's symbols never collide with numpy's 52 letters
        symbol = get_symbol(n)
        if symbol.isspace():
            raise EinsumError(f"{where}: sublist entry {n} stands for a space character "
                              f"(opt_einsum.get_symbol({n}) = {symbol!r}), which an "
                              f"expression cannot hold; use another label")
        return symbol
    return chr(ord("A") + n) if n < 26 else chr(ord("a") + n - 26)


def _term(sublist: object, where: str) -> str:
    if isinstance(sublist, (str, bytes)) or not isinstance(sublist, Sequence):
        raise EinsumError(f"{where}: expected a list of axis labels, got "
                          f"{type(sublist).__name__}")
    return "".join(_letter(x, where) for x in sublist)


def from_interleaved(args: Sequence[object]) -> tuple[str, list[object]]:
    """``(op0, sublist0, op1, sublist1, ..., [sublist_out])`` as a subscripts string and
    the operands, as numpy.einsum reads its interleaved form."""
    if len(args) < 2 or any(isinstance(s, (str, bytes)) or not isinstance(s, Sequence)
                            for s in args[1::2]):
        raise EinsumError(
            f"subscripts: expected a string, or operands interleaved with sublists of "
            f"integer axis labels (op0, sublist0, op1, sublist1, ...); got "
            f"{', '.join(type(a).__name__ for a in args[:4])}{', ...' if len(args) > 4 else ''}")
    operands = list(args[0::2][: len(args) // 2])
    terms = [_term(s, f"operand {i}'s sublist") for i, s in enumerate(args[1::2])]
    sub = ",".join(terms)
    if len(args) % 2:
        sub += "->" + _term(args[-1], "output sublist")
    return sub, operands


@dataclass(frozen=True)
class Optimize:
    """What ``optimize=`` asks for, in one hashable value (part of the plan cache key).

    ``search``: rank candidate schedules with the cost model (False: the plain schedule,
    ``optimize="plain"``); ``autotune``: also time the top candidates on real arrays;
    ``path``: how an expression of three or more operands is split into pairwise steps,
    an opt_einsum strategy name, path optimizer object or an explicit path, or False
    (numpy's ``optimize=False``: left to right); ``memory_limit``: the largest
    intermediate the strategy may make, in elements (None: no limit)."""

    search: bool = True
    autotune: bool = False
    path: str | tuple[tuple[int, ...], ...] | oe.paths.PathOptimizer | Literal[False] = "auto"
    memory_limit: int | None = None


def normalize_optimize(value: object) -> Optimize:
    """``optimize=`` as an :class:`Optimize`; a clear error naming the value otherwise."""
    if isinstance(value, Optimize):
        return value
    if value is True:
        return Optimize()
    if value is False:
        return Optimize(path=False)
    if isinstance(value, str):
        if value == "autotune":
            return Optimize(autotune=True)
        if value == "plain":
            return Optimize(search=False)
        if value in PATH_STRATEGIES:
            return Optimize(path=value)
        raise PlanError(_optimize_message(value))
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        # numpy's (strategy, memory limit in elements)
        strategy, limit = value
        if strategy not in PATH_STRATEGIES:
            raise PlanError(_optimize_message(value))
        return Optimize(path=strategy, memory_limit=_memory_limit(limit, value))
    if isinstance(value, (list, tuple)):
        steps = list(value)
        if steps and steps[0] == "einsum_path":
            steps = steps[1:]  # numpy.einsum_path's form
        path = []
        for i, step in enumerate(steps):
            if (not isinstance(step, (tuple, list)) or not step or any(
                    isinstance(x, bool) or not isinstance(x, numbers.Integral) for x in step)):
                raise OptionTypeError(f"optimize: path step {i} must be a tuple of operand "
                                      f"positions, got {step!r}")
            path.append(tuple(int(x) for x in step))
        if not path:
            raise PlanError("optimize: an explicit path needs at least one step")
        return Optimize(path=tuple(path))
    if isinstance(value, oe.paths.PathOptimizer):
        # opt_einsum's path optimizers (RandomGreedy, DynamicProgramming, ...) and
        # cotengra's HyperOptimizer, which subclasses them: asked for the path when the
        # shapes are known (planner/tree.py); the plan cache keys on the object itself,
        # so a reused optimizer's plans are reused too.
        return Optimize(path=value)
    get_path = getattr(value, "get_path", None)
    if callable(get_path):
        # A cotengra ContractionTree (or anything that gives its path in opt_einsum's
        # format): its path, which then is checked as an explicit one.
        return normalize_optimize(["einsum_path", *map(tuple, get_path())])
    raise OptionTypeError(_optimize_message(value))


def _memory_limit(limit: object, value: object) -> int | None:
    """The memory limit of ``optimize=(strategy, limit)`` in whole elements; None for
    +inf (no limit, as opt_einsum reads it)."""
    if isinstance(limit, bool) or not isinstance(limit, numbers.Real):
        raise OptionTypeError(f"optimize: the memory limit in {value!r} must be a number of "
                              f"elements, got {type(limit).__name__}")
    if isinstance(limit, numbers.Integral):
        n = int(limit)
    else:
        f = float(limit)
        if math.isnan(f):
            raise PlanError(f"optimize: the memory limit in {value!r} is NaN; give a "
                            f"positive number of elements")
        if f == math.inf:
            return None
        n = math.floor(f) if f > 0 else -1
    if n < 1:
        raise PlanError(f"optimize: the memory limit in {value!r} must be a positive number "
                        f"of elements (at least 1)")
    return n


def _optimize_message(value: object) -> str:
    return (f"optimize: expected True, False, 'autotune', 'plain', a path strategy "
            f"({', '.join(repr(s) for s in PATH_STRATEGIES)}), (strategy, memory_limit), "
            f"an opt_einsum PathOptimizer (or cotengra HyperOptimizer) or an explicit path "
            f"such as ['einsum_path', (0, 1)], got {value!r}")


def check_path(path: tuple[tuple[int, ...], ...], num_operands: int) -> None:
    """An explicit path must contract the operands down to one, each step naming
    distinct positions in the list of operands left at that point (numpy's rule)."""
    left = num_operands
    for i, step in enumerate(path):
        if len(set(step)) != len(step) or any(not 0 <= x < left for x in step):
            raise PlanError(f"optimize: path step {i} {step} names positions outside the "
                            f"{left} operand(s) left at that point, or one twice")
        left -= len(step) - 1
    if left != 1:
        raise PlanError(f"optimize: the path {list(path)} leaves {left} operands for "
                        f"{num_operands} given, not one")


def pairwise(path: tuple[tuple[int, ...], ...], num_operands: int
             ) -> tuple[tuple[int, ...], ...]:
    """The same contractions as a path of steps of at most two operands: a step naming
    three or more contracts them left to right (each result goes to the end of the list of
    operands left, as in opt_einsum's paths).

    >>> pairwise(((0, 1, 2),), 3)
    ((0, 1), (1, 0))
    """
    out: list[tuple[int, ...]] = []
    left = list(range(num_operands))  # the ids of the operands left, in list order
    fresh = num_operands
    for step in path:
        ids = [left[p] for p in step]
        while len(ids) > 2:
            first, second = left.index(ids[0]), left.index(ids[1])
            out.append((first, second))
            left = [x for x in left if x not in ids[:2]] + [fresh]
            ids = [fresh, *ids[2:]]
            fresh += 1
        out.append(tuple(left.index(x) for x in ids))
        left = [x for x in left if x not in ids] + [fresh]
        fresh += 1
    return tuple(out)


def result_dtype(dtypes: Sequence[np.dtype], dtype: object, casting: Casting = "safe",
                 out: np.dtype | None = None) -> np.dtype:
    """numpy's computation type: ``dtype=``, else the result type of the operands and of
    ``out``'s dtype (numpy.einsum's iterator takes the common type of all its operands,
    out among them: float32 operands into a float64 out are multiplied and summed in
    float64, 1e-13 from the exact sums where float32 sums widened after are 1e-5 off).
    Every operand must cast to it under ``casting`` (with 'no' or 'equiv', mixed dtypes
    are an error, as in numpy), and it must hold numbers (an object dtype= is numpy's
    too)."""
    if dtype is None:
        want = np.result_type(*dtypes, *([] if out is None else [out]))
    else:
        try:
            want = np.dtype(dtype)  # type: ignore[call-overload]
        except TypeError:
            raise DTypeError(f"dtype: {dtype!r} is not a numpy dtype") from None
        if want.kind in "MmSUV" and not is_half(want):  # (ml_dtypes' bfloat16 is a "V")
            raise DTypeError(f"dtype: {want} is not numeric; einsum computes numbers")
    for i, d in enumerate(dtypes):
        if not np.can_cast(d, want, casting):
            target = (f"dtype={want}" if dtype is not None else
                      f"the result type {want}" if out is None or want != out else
                      f"out's dtype {want}")
            raise DTypeError(
                f"operand {i}: cannot cast {d} to {target} under numpy's {casting!r} rule")
    return want


# numpy.einsum's indices: it takes no others.
NUMPY_LETTERS = string.ascii_letters


def numpy_subscripts(subscripts: str) -> str | None:
    """Explicit ``subscripts`` (``->``, no ``...``) with each index renamed to one of
    numpy's 52 letters, in order of first appearance (teir_plan's indices go beyond them:
    Greek letters, opt_einsum's symbols); None when there are more than 52 indices.

    >>> numpy_subscripts("αβ,βγ->αγ")
    'ab,bc->ac'
    """
    names: dict[str, str] = {}
    out = []
    for ch in subscripts:
        if ch in ",->":
            out.append(ch)
            continue
        if ch not in names:
            if len(names) == len(NUMPY_LETTERS):
                return None
            names[ch] = NUMPY_LETTERS[len(names)]
        out.append(names[ch])
    return "".join(out)


def check_numpy_indices(inputs: Sequence[str], output: str, extents: Mapping[str, int],
                        dtype: np.dtype) -> None:
    """An expression of more than 52 indices runs on numpy (integers, bool, float16) as
    opt_einsum's pairwise steps, each renamed to numpy's letters: refused when one of
    them alone has more than 52 indices, which numpy.einsum cannot name."""
    if len(set("".join(inputs))) <= len(NUMPY_LETTERS):
        return
    shapes = [tuple(extents[c] for c in t) for t in inputs]
    _, info = oe.contract_path(",".join(inputs) + "->" + output, *shapes, shapes=True)
    for i, step in enumerate(info.contraction_list):
        ins, out = step[2].split("->")
        n = len(set(ins.replace(",", "")) | set(out))
        if n > len(NUMPY_LETTERS):
            raise EinsumError(
                f"subscripts: {dtype} einsums are computed by numpy.einsum, which names at "
                f"most 52 indices; pairwise step {i} ({step[2]}) has {n}")


def check_casting(casting: object) -> Casting:
    if not isinstance(casting, str) or casting not in CASTINGS:
        raise PlanError(f"casting: expected one of {', '.join(map(repr, CASTINGS))}, "
                        f"got {casting!r}")
    return cast(Casting, casting)

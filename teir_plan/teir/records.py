"""The two TEIR records and the program that pairs them (spec section 10.2).

Records are frozen and hashable: a program is a value that can be compared,
cached, printed and serialized.  Construction only normalizes types (enum names
to enums, sequences to tuples); the rules of section 10.1 are checked by
:meth:`TEIR.validate`, which :func:`teir_plan.execute` also calls.

>>> import teir_plan as tp
>>> prog = tp.TEIR(
...     tp.Primitives("float32", "none", "copy", "none"),
...     tp.Schedule(["c", "c"], ["prim", "prim"], [2, 3], [[3, 1], [1, 2]]),
... )
>>> prog.validate()
>>> prog.schedule.num_dims, prog.num_tensors
(2, 2)
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from teir_plan.errors import TEIRError
from teir_plan.teir.enums import DataType, DimType, ExecType, Prim

UNARY_MAIN = (Prim.COPY, Prim.RELU)
BINARY_MAIN = (Prim.GEMM, Prim.BRGEMM)
TENSOR_NAMES = {2: ("in0", "out"), 3: ("in0", "in1", "out")}


# Sizes and strides are 64-bit in the executor: a value outside int64 is refused here
# rather than overflowing when the program is lowered.
INT64_MAX = 2**63 - 1


def _as_int(value: Any, field: str) -> int:
    if isinstance(value, bool):
        raise TEIRError(f"{field}: expected an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TEIRError(f"{field}: expected an integer, got {value!r}") from None
    if not -INT64_MAX <= v <= INT64_MAX:
        raise TEIRError(f"{field}: {v} would overflow the executor's 64-bit offsets")
    return v


def _as_seq(value: Any, field: str) -> Sequence[Any]:
    # Bytes, a mapping or a set is not a list of values (list() of them would give
    # integers, keys, or an arbitrary order).  A string is one letter per axis ("mnk").
    if isinstance(value, (bytes, bytearray, dict, set, frozenset)):
        raise TEIRError(f"{field}: expected a list, got {type(value).__name__} {value!r}"[:200])
    if isinstance(value, str) or not isinstance(value, Sequence):
        try:
            return list(value)  # numpy arrays, generators
        except TypeError:
            raise TEIRError(f"{field}: expected a sequence, got {value!r}") from None
    return value


@dataclass(frozen=True)
class Primitives:
    """TEIR-Primitives: the data type and the three primitives (table 10.2.2)."""

    data_type: DataType
    prim_first: Prim
    prim_main: Prim
    prim_last: Prim

    def __init__(
        self,
        data_type: DataType | str,
        prim_first: Prim | str,
        prim_main: Prim | str,
        prim_last: Prim | str,
    ) -> None:
        object.__setattr__(self, "data_type", DataType.coerce(data_type, "data_type"))
        object.__setattr__(self, "prim_first", Prim.coerce(prim_first, "prim_first"))
        object.__setattr__(self, "prim_main", Prim.coerce(prim_main, "prim_main"))
        object.__setattr__(self, "prim_last", Prim.coerce(prim_last, "prim_last"))

    @property
    def is_unary(self) -> bool:
        return self.prim_main in UNARY_MAIN

    @property
    def num_tensors(self) -> int:
        """T: 2 for unary operations, 3 for binary contractions (and for an invalid main)."""
        return 2 if self.is_unary else 3


@dataclass(frozen=True)
class Schedule:
    """TEIR-Schedule: per-axis roles, execution types, sizes and per-tensor strides
    (table 10.2.1).  ``strides[j][i]`` is tensor j's stride along axis i, in elements."""

    dim_types: tuple[DimType, ...]
    exec_types: tuple[ExecType, ...]
    dim_sizes: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]

    def __init__(
        self,
        dim_types: Sequence[DimType | str],
        exec_types: Sequence[ExecType | str],
        dim_sizes: Sequence[int],
        strides: Sequence[Sequence[int]],
    ) -> None:
        # Members and plain ints in range are taken as they are, the field's name for an
        # error formed only for the others: the planner builds hundreds of schedules a
        # plan from values it made itself.
        dts = tuple(
            v if v.__class__ is DimType else DimType.coerce(v, f"dim_types[{i}]")
            for i, v in enumerate(_as_seq(dim_types, "dim_types"))
        )
        ets = tuple(
            v if v.__class__ is ExecType else ExecType.coerce(v, f"exec_types[{i}]")
            for i, v in enumerate(_as_seq(exec_types, "exec_types"))
        )
        sizes = tuple(
            v if v.__class__ is int and -INT64_MAX <= v <= INT64_MAX
            else _as_int(v, f"dim_sizes[{i}]")
            for i, v in enumerate(_as_seq(dim_sizes, "dim_sizes"))
        )
        rows = tuple(
            tuple(v if v.__class__ is int and -INT64_MAX <= v <= INT64_MAX
                  else _as_int(v, f"strides[{j}][{i}]")
                  for i, v in enumerate(_as_seq(row, f"strides[{j}]")))
            for j, row in enumerate(_as_seq(strides, "strides"))
        )
        object.__setattr__(self, "dim_types", dts)
        object.__setattr__(self, "exec_types", ets)
        object.__setattr__(self, "dim_sizes", sizes)
        object.__setattr__(self, "strides", rows)

    @property
    def num_dims(self) -> int:
        """D, the number of axes (the length of dim_types)."""
        return len(self.dim_types)

    def loop_axes(self) -> tuple[int, ...]:
        """Axes traversed by loops, outermost first (every axis whose exec type is not prim)."""
        return tuple(i for i, e in enumerate(self.exec_types) if e is not ExecType.PRIM)

    def prim_axes(self) -> tuple[int, ...]:
        """Axes consumed inside the primitive, in schedule order."""
        return tuple(i for i, e in enumerate(self.exec_types) if e is ExecType.PRIM)


@dataclass(frozen=True)
class TEIR:
    """A TEIR program: what runs on each tile, and how the tiles are walked."""

    primitives: Primitives
    schedule: Schedule

    def __post_init__(self) -> None:
        if not isinstance(self.primitives, Primitives):
            raise TEIRError(f"primitives: expected tp.Primitives, got {type(self.primitives)}")
        if not isinstance(self.schedule, Schedule):
            raise TEIRError(f"schedule: expected tp.Schedule, got {type(self.schedule)}")

    @classmethod
    def from_fields(
        cls,
        *,
        data_type: DataType | str,
        prim_first: Prim | str,
        prim_main: Prim | str,
        prim_last: Prim | str,
        dim_types: Sequence[DimType | str],
        exec_types: Sequence[ExecType | str],
        dim_sizes: Sequence[int],
        strides: Sequence[Sequence[int]],
    ) -> TEIR:
        """Build a program from the eight fields of the two records."""
        return cls(
            Primitives(data_type, prim_first, prim_main, prim_last),
            Schedule(dim_types, exec_types, dim_sizes, strides),
        )

    @property
    def num_tensors(self) -> int:
        return self.primitives.num_tensors

    @property
    def is_unary(self) -> bool:
        return self.primitives.is_unary

    @property
    def tensor_names(self) -> tuple[str, ...]:
        return TENSOR_NAMES[self.num_tensors]

    def validate(self) -> None:
        """Raise :class:`teir_plan.TEIRError` for the first broken rule; return None if valid."""
        from teir_plan.teir.validate import validate

        validate(self)

    def with_exec_types(self, exec_types: Sequence[ExecType | str]) -> TEIR:
        """A copy with other execution types (the schedule is a value: transform, don't mutate)."""
        s = self.schedule
        return TEIR(self.primitives, Schedule(s.dim_types, exec_types, s.dim_sizes, s.strides))

    def to_json(self, indent: int | None = 2) -> str:
        from teir_plan.teir.serialize import to_json

        return to_json(self, indent=indent)

    def to_etops_json(self, indent: int | None = 2) -> str:
        from teir_plan.teir.serialize import to_etops_json

        return to_etops_json(self, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> TEIR:
        from teir_plan.teir.serialize import from_json

        return from_json(text)

    def format(self, names: Sequence[str] | None = None) -> str:
        """The schedule table as the spec prints it, with optional axis names."""
        from teir_plan.teir.text import format_teir

        return format_teir(self, names)

    def __str__(self) -> str:
        return self.format()

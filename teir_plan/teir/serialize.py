"""JSON forms of a TEIR program: teir_plan's own and einsum_ir's ``etops``.

Ours uses the spec's field names, one object, strides as T rows of D integers::

    {"format": "teir", "version": 1, "data_type": "float32", "prim_first": "zero",
     "prim_main": "brgemm", "prim_last": "none", "dim_types": ["n", ...],
     "exec_types": ["parallel", ...], "dim_sizes": [...], "strides": [[...], [...], [...]]}

etops' ``TensorOperationConfig.to_json`` writes the same field names but nests
strides once more, ``[level][tensor][dim]`` (level 0 is the layout, further
levels describe packing), and spells parallel ``shared`` (or ``sfc`` for its
space-filling-curve walk over parallel M and N axes).  :func:`from_json` reads
both; :func:`to_etops_json` writes what ``etops.TensorOperationConfig.from_json``
loads.
"""

from __future__ import annotations

import json
from typing import Any

from teir_plan.errors import TEIRError
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR, Primitives, Schedule

FORMAT_NAME = "teir"
FORMAT_VERSION = 1
_FIELDS = (
    "data_type",
    "prim_first",
    "prim_main",
    "prim_last",
    "dim_types",
    "exec_types",
    "dim_sizes",
    "strides",
)


def to_dict(teir: TEIR) -> dict[str, Any]:
    p, s = teir.primitives, teir.schedule
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "data_type": str(p.data_type),
        "prim_first": str(p.prim_first),
        "prim_main": str(p.prim_main),
        "prim_last": str(p.prim_last),
        "dim_types": [str(t) for t in s.dim_types],
        "exec_types": [str(e) for e in s.exec_types],
        "dim_sizes": list(s.dim_sizes),
        "strides": [list(row) for row in s.strides],
    }


def to_json(teir: TEIR, indent: int | None = 2) -> str:
    return json.dumps(to_dict(teir), indent=indent)


def to_etops_json(teir: TEIR, indent: int | None = 2) -> str:
    """JSON for ``etops.TensorOperationConfig.from_json`` (backend ``tpp``)."""
    teir.validate()
    p, s = teir.primitives, teir.schedule
    if p.prim_main is Prim.RELU:
        raise TEIRError("prim_main: etops has no unary relu; only copy can be exported")
    for i, (role, ex, n) in enumerate(zip(s.dim_types, s.exec_types, s.dim_sizes)):
        if role is DimType.K and ex is ExecType.PARALLEL and n > 1:
            raise TEIRError(
                f"exec_types[{i}]: etops has no parallel k axis (teir_plan splits it into "
                f"private partial sums, which etops' shared axes do not); make axis {i} "
                f"seq or prim to export"
            )
    if p.data_type.is_complex:
        raise TEIRError(
            f"data_type: etops has no interleaved complex type, so a {p.data_type} program "
            f"cannot be exported to it (teir_plan's own JSON, to_json, keeps it)"
        )
    if p.data_type.is_half:
        raise TEIRError(
            f"data_type: etops has no 16-bit float type, so a {p.data_type} program cannot "
            f"be exported to it (teir_plan's own JSON, to_json, keeps it; the same "
            f"schedule with data_type float32 exports)"
        )
    data = {
        "data_type": str(p.data_type),
        "prim_first": str(p.prim_first),
        "prim_main": str(p.prim_main),
        "prim_last": str(p.prim_last),
        "dim_types": [str(t) for t in s.dim_types],
        "exec_types": ["shared" if e is ExecType.PARALLEL else str(e) for e in s.exec_types],
        "dim_sizes": list(s.dim_sizes),
        "strides": [[list(row) for row in s.strides]],
        "backend": "tpp",
    }
    return json.dumps(data, indent=indent)


def from_dict(data: Any) -> TEIR:
    if not isinstance(data, dict):
        raise TEIRError(f"TEIR JSON: expected an object, got {type(data).__name__}")
    if "primitives" in data and "schedule" in data:  # nested form: the two records
        for part in ("primitives", "schedule"):
            if not isinstance(data[part], dict):
                raise TEIRError(f"{part}: expected an object, got {type(data[part]).__name__}")
        data = {**{k: v for k, v in data.items() if k in ("format", "version")},
                **data["primitives"], **data["schedule"]}
    fmt = data.get("format", FORMAT_NAME)
    if fmt != FORMAT_NAME:
        raise TEIRError(f"format: expected {FORMAT_NAME!r}, got {fmt!r}")
    version = data.get("version", FORMAT_VERSION)
    if type(version) is not int or version != FORMAT_VERSION:
        raise TEIRError(f"version: this library reads version {FORMAT_VERSION}, got {version!r}")
    missing = [f for f in _FIELDS if f not in data]
    if missing:
        raise TEIRError(f"TEIR JSON: missing field(s) {', '.join(missing)}")
    strides = _layout_strides(data["strides"])
    return TEIR(
        Primitives(data["data_type"], data["prim_first"], data["prim_main"], data["prim_last"]),
        Schedule(data["dim_types"], data["exec_types"], data["dim_sizes"], strides),
    )


def _layout_strides(strides: Any) -> Any:
    """Strides as T x D; etops' [level][tensor][dim] form is reduced to its layout level."""
    if not isinstance(strides, list) or not strides:
        raise TEIRError("strides: expected a non-empty list of per-tensor rows")
    nested = [isinstance(r, list) and bool(r) and isinstance(r[0], list) for r in strides]
    if any(nested) and not all(nested):
        raise TEIRError("strides: mixes [tensor][dim] rows with etops' [level][tensor][dim] "
                        "levels; use one form")
    if not all(nested):
        return strides
    layout, *extra = strides
    for level, rows in enumerate(extra, start=1):
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise TEIRError(f"strides[{level}]: expected a list of per-tensor rows")
        if any(any(v != 0 for v in row) for row in rows):
            raise TEIRError(
                f"strides[{level}]: this etops program packs operands (stride level {level}); "
                f"teir_plan runs layout-level programs only. Export it from etops before "
                f"optimization, or let tp.einsum choose packing itself"
            )
    return layout


def from_json(text: str | bytes) -> TEIR:
    """Read a program from our JSON or from etops' ``TensorOperationConfig.to_json``."""
    if not isinstance(text, (str, bytes, bytearray)):
        raise TEIRError(f"TEIR JSON: expected a str or bytes, got {type(text).__name__}")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError,
        # an integer of too many digits; nesting too deep for the parser
        raise TEIRError(f"TEIR JSON: not valid JSON ({type(exc).__name__}: "
                        f"{str(exc)[:200]})") from None
    return from_dict(data)

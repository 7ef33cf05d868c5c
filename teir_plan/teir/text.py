"""The schedule table as the spec prints it (section 10.3): one column per axis."""

from __future__ import annotations

from collections.abc import Sequence

from teir_plan.errors import TEIRError
from teir_plan.teir.records import TEIR


def format_teir(teir: TEIR, names: Sequence[str] | None = None) -> str:
    """Rows dim_sizes, dim_types, exec_types, strides[in0], [in1], [out]; primitives below.

    >>> import teir_plan as tp
    >>> prog = tp.TEIR(tp.Primitives("float32", "none", "copy", "none"),
    ...                tp.Schedule(["c", "c"], ["seq", "prim"], [2, 3], [[3, 1], [1, 2]]))
    >>> print(prog)
    Dimension ID | 0   | 1
    dim_sizes    | 2   | 3
    dim_types    | c   | c
    exec_types   | seq | prim
    strides[in0] | 3   | 1
    strides[out] | 1   | 2
    primitives: data_type=float32 prim_first=none prim_main=copy prim_last=none
    """
    s, p = teir.schedule, teir.primitives
    d = s.num_dims
    ids = axis_names(names, d, "format") if names is not None else [str(i) for i in range(d)]
    rows: list[list[str]] = [["Dimension ID", *ids]]
    rows.append(["dim_sizes", *(str(n) for n in s.dim_sizes)])
    rows.append(["dim_types", *(str(t) for t in s.dim_types)])
    rows.append(["exec_types", *(str(e) for e in s.exec_types)])
    tensor_names = teir.tensor_names if len(s.strides) == teir.num_tensors else None
    for j, row in enumerate(s.strides):
        label = tensor_names[j] if tensor_names else str(j)
        rows.append([f"strides[{label}]", *(str(v) for v in row)])
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    widths = [max(len(r[c]) for r in rows) for c in range(width)]
    lines = [
        " | ".join(cell.ljust(widths[c]) for c, cell in enumerate(r)).rstrip() for r in rows
    ]
    lines.append(
        f"primitives: data_type={p.data_type} prim_first={p.prim_first} "
        f"prim_main={p.prim_main} prim_last={p.prim_last}"
    )
    return "\n".join(lines)


def axis_names(names: Sequence[object], num_dims: int, where: str) -> list[str]:
    """``names`` as a list of one string per axis (a string: one letter per axis), or a
    TEIRError saying what is wrong."""
    if isinstance(names, bytes) or not isinstance(names, Sequence):
        raise TEIRError(f"{where}: names: expected a list of {num_dims} strings, got {names!r}")
    out = list(names)
    if len(out) != num_dims:
        raise TEIRError(f"{where}: names: {len(out)} names for {num_dims} axes")
    strs = [n for n in out if isinstance(n, str)]
    if len(strs) != len(out):
        bad = next(n for n in out if not isinstance(n, str))
        raise TEIRError(f"{where}: names: expected strings, got {bad!r}")
    return strs

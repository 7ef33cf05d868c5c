"""A TEIR program as pseudocode in the style of spec section 10.3.

A pure function of the program and (optional) axis names, so it explains
hand-written programs as well as planned ones; without names, axis ``i`` is
called ``i0``, ``i1``, ...

Tensors are indexed the way the spec writes them: each tensor's own dimensions
(the axes it takes part in, largest stride first), a loop axis by its name, a
prim axis by ``0`` (the tile starts at the origin of that axis), trailing prim
axes left out (the spec writes 10.3.7's ``B = in1[p][0]``; the same address is
``in1[p]`` here, by the one rule that also gives all its other tile references).
Spec example 10.3.7 (|p|=4, |r|=3, |t|=2, |s|=|q|=|u|=8):

>>> import teir_plan as tp
>>> P, R, T, S, Q, U = 4, 3, 2, 8, 8, 8
>>> prog = tp.TEIR.from_fields(
...     data_type="float32", prim_first="none", prim_main="brgemm", prim_last="none",
...     dim_types=["n", "m", "k", "m", "n", "k"],
...     exec_types=["parallel", "parallel", "prim", "prim", "prim", "prim"],
...     dim_sizes=[P, R, T, S, Q, U],
...     strides=[[0, U * S, R * U * S, 1, 0, S], [Q * T * U, 0, U, 0, T * U, 1],
...              [Q * R * S, S, 0, 1, R * S, 0]])
>>> print(pseudocode(prog, "prtsqu"))
#pragma omp parallel for collapse(2)
for p in |p|                # |p| = 4
  for r in |r|              # |r| = 3
    BRGEMM( A = in0[0][r],
            B = in1[p],
            C = out[p][0][r],
            m = 8,          # |s|
            n = 8,          # |q|
            k = 8,          # |u|
            ldA = 8,
            ldB = 16,
            ldC = 24,
            brSize = 2,     # |t|
            brStrA = 192,
            brStrB = 8 )
"""

from __future__ import annotations

from collections.abc import Sequence

from teir_plan.teir.axes import NO_AXIS, extent_at, prim_axes_by_role
from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.parallel_k import PartialLayout, parallel_k_axes, split
from teir_plan.teir.records import TEIR
from teir_plan.teir.text import axis_names

_COMMENT_COL = 28  # trailing "# ..." comments start at this column when the line allows


def default_names(teir: TEIR) -> list[str]:
    return [f"i{i}" for i in range(teir.schedule.num_dims)]


def loop_order(teir: TEIR) -> list[int]:
    """Loop axes outermost first, as the executor runs them: parallel axes (collapsed into
    one parallel loop) outside, then the seq axes in schedule order."""
    s = teir.schedule
    loops = list(s.loop_axes())
    par = [i for i in loops if s.exec_types[i] is ExecType.PARALLEL]
    return par + [i for i in loops if s.exec_types[i] is ExecType.SEQ]


def tensor_dims(teir: TEIR, j: int) -> list[int]:
    """Tensor ``j``'s own dimensions, outermost first: the axes along which it has a
    nonzero stride, by decreasing |stride| (ties: larger extent, then axis order)."""
    s = teir.schedule
    axes = [i for i in range(s.num_dims) if s.strides[j][i] != 0]
    return sorted(axes, key=lambda i: (-abs(s.strides[j][i]), -s.dim_sizes[i], i))


def tile_ref(teir: TEIR, j: int, names: Sequence[str], loops: Sequence[int] | None = None) -> str:
    """``in0[t][r]``: tensor j's dims, a loop axis by name, a prim axis as 0, trailing
    prim axes dropped (``in0[0]`` when no loop moves the tile)."""
    loops = loop_order(teir) if loops is None else loops
    tensor = ("in0", "out")[j] if teir.is_unary else ("in0", "in1", "out")[j]
    idx = [names[i] if i in loops else "0" for i in tensor_dims(teir, j)]
    while idx and idx[-1] == "0":
        idx.pop()
    return tensor + ("".join(f"[{x}]" for x in idx) if idx else "[0]")


def prim_arguments(teir: TEIR) -> dict[str, int]:
    """The primitive's size and leading-dimension arguments (teir-notes.md, 'Primitive
    shapes'): Copy/ReLU m, n, ldI, ldO; GEMM m, n, k, ldA, ldB, ldC; BRGEMM also brSize,
    brStrA, brStrB.  A missing prim axis is an extent of 1 (its ld is then the smallest
    legal one)."""
    s = teir.schedule
    ax = prim_axes_by_role(teir)

    def size(a: int) -> int:
        return extent_at(s.dim_sizes, a)

    def ld(j: int, a: int, smallest: int) -> int:
        # A leading dimension, not a stride: without its axis, the smallest legal one.
        return s.strides[j][a] if a != NO_AXIS else smallest

    if teir.is_unary:
        return {"m": size(ax.m), "n": size(ax.n), "ldI": ld(0, ax.n, size(ax.m)),
                "ldO": ld(1, ax.m, 1) if ax.n != NO_AXIS else size(ax.m)}
    args = {"m": size(ax.m), "n": size(ax.n), "k": size(ax.k),
            "ldA": ld(0, ax.k, size(ax.m)), "ldB": ld(1, ax.n, size(ax.k)),
            "ldC": ld(2, ax.n, size(ax.m))}
    if ax.br != NO_AXIS:
        args.update(brSize=size(ax.br), brStrA=s.strides[0][ax.br],
                    brStrB=s.strides[1][ax.br])
    return args


def _layout_notes(teir: TEIR, names: Sequence[str]) -> dict[str, str]:
    """Comments for the ld arguments whose tile is not in the spec's column-major form
    (teir-notes.md: Copy's in and GEMM's A, C unit stride along m; Copy's out unit
    stride along n; B unit stride along k).  The ld value then only gives one stride."""
    s = teir.schedule
    ax = prim_axes_by_role(teir)
    if teir.is_unary:
        checks = [("ldI", 0, "in", ax.m, ax.n), ("ldO", 1, "out", ax.n, ax.m)]
    else:
        checks = [("ldA", 0, "A", ax.m, ax.k), ("ldB", 1, "B", ax.k, ax.n),
                  ("ldC", 2, "C", ax.m, ax.n)]
    notes = {}
    for key, j, what, unit, other in checks:
        if unit == NO_AXIS or s.dim_sizes[unit] == 1 or abs(s.strides[j][unit]) == 1:
            continue
        how = "transposed tile" if other != NO_AXIS and abs(s.strides[j][other]) == 1 \
            else "strided tile"
        notes[key] = (f"{what}: stride {s.strides[j][unit]} along |{names[unit]}|, not 1 "
                      f"({how})")
    return notes


def _line(text: str, comment: str = "") -> str:
    if not comment:
        return text
    return f"{text.ljust(_COMMENT_COL - 1)} # {comment}" if len(text) < _COMMENT_COL - 1 \
        else f"{text}  # {comment}"


def _call(pad: str, name: str, refs: list[tuple[str, str]],
          args: list[tuple[str, int, str]]) -> list[str]:
    """``NAME( A = in0[..],\\n      m = 8,  # |s| ... )`` one argument a line, as the spec."""
    items = [(f"{k} = {v}", "") for k, v in refs] + [(f"{k} = {v}", c) for k, v, c in args]
    ind = pad + " " * (len(name) + 2)
    out = []
    for n, (text, comment) in enumerate(items):
        head = f"{pad}{name}( " if n == 0 else ind
        tail = " )" if n == len(items) - 1 else ","
        out.append(_line(head + text + tail, comment))
    return out


def _when(teir: TEIR, names: Sequence[str], loops: Sequence[int], last: bool) -> str:
    """The condition under which an output tile is accessed for the first (last) time:
    every K loop outside the primitive at its first (last) iteration."""
    s = teir.schedule
    ks = [i for i in loops if s.dim_types[i] is DimType.K and s.dim_sizes[i] > 1]
    return " and ".join(f"{names[i]} == {s.dim_sizes[i] - 1 if last else 0}" for i in ks)


def pseudocode(teir: TEIR, names: Sequence[str] | None = None) -> str:
    """Spec-style pseudocode (section 10.3) of ``teir``: the loops outermost first with
    ``#pragma omp parallel for collapse(n)`` over the parallel axes, the first-access
    primitive where it fires, the main primitive call with its m, n, k, ld*, brSize,
    brStr* arguments (or, with no prim axes, the scalar statement the spec writes), and
    the last-access primitive."""
    teir.validate()  # (the loops and calls below assume a program of the spec's shape)
    s = teir.schedule
    names = (axis_names(names, s.num_dims, "pseudocode") if names is not None
             else default_names(teir))
    layout = split(teir)
    if layout is not None:
        return _parallel_k(teir, layout, names)
    return "\n".join(_lines(teir, names))


def _parallel_k(teir: TEIR, layout: PartialLayout, names: Sequence[str]) -> str:
    """A program with parallel K axes (teir/parallel_k.py): the workers' loops into their
    private blocks ``part[w]``, then the blocks' sum into out, Zero and ReLU there."""
    ks = " ".join(names[i] for i in parallel_k_axes(teir))
    block = layout.block
    shared = block.with_exec_types(
        [ExecType.PARALLEL if i < layout.npar else e
         for i, e in enumerate(block.schedule.exec_types)])
    lines = [f"// parallel k: {ks}; worker w sums its share of the parallel loop into its own",
             "// block part[w], a dense copy of out zeroed first, then the blocks are added up",
             "part[w] = 0"]
    lines += _lines(shared, [names[i] for i in layout.order], out_name="part[w]")
    p = teir.primitives
    op = "=" if p.prim_first is Prim.ZERO else "+="
    lines.append(_line(f"out {op} part[0] + part[1] + ... + part[W-1]",
                       "after the loop, element by element, in worker order"))
    if p.prim_last is Prim.RELU:
        lines.append(_line("out = max(out, 0)", "ReLU once, after the full sum"))
    return "\n".join(lines)


def _lines(teir: TEIR, names: Sequence[str], out_name: str = "out") -> list[str]:
    """:func:`pseudocode`'s lines for a program (``out_name``: what its output is called)."""
    s, p = teir.schedule, teir.primitives
    order = loop_order(teir)
    par = [i for i in order if s.exec_types[i] is ExecType.PARALLEL]
    lines: list[str] = []
    listed = list(s.loop_axes())
    if listed != order:
        lines.append(f"// the schedule lists the loops {' '.join(names[i] for i in listed)}; "
                     f"parallel loops run outermost")
    if par:
        lines.append(f"#pragma omp parallel for collapse({len(par)})")
    for depth, i in enumerate(order):
        lines.append(_line("  " * depth + f"for {names[i]} in |{names[i]}|",
                           f"|{names[i]}| = {s.dim_sizes[i]}"))
    pad = "  " * len(order)
    ref = [tile_ref(teir, j, names, order) for j in range(teir.num_tensors)]
    ref[-1] = out_name + ref[-1].removeprefix("out")
    scalar = not s.prim_axes()
    if teir.is_unary:
        if scalar:
            rhs = ref[0] if p.prim_main is Prim.COPY else f"max({ref[0]}, 0)"
            lines.append(f"{pad}{ref[1]} = {rhs}")
        else:
            a = prim_arguments(teir)
            ax = prim_axes_by_role(teir)
            notes = _layout_notes(teir, names)
            lines += _call(pad, "Copy" if p.prim_main is Prim.COPY else "ReLU",
                           [("in", ref[0]), ("out", ref[1])],
                           [("m", a["m"], _extent(ax.m, names)),
                            ("n", a["n"], _extent(ax.n, names)),
                            ("ldI", a["ldI"], notes.get("ldI", "")),
                            ("ldO", a["ldO"], notes.get("ldO", ""))])
        return lines
    first, last = _when(teir, names, order, False), _when(teir, names, order, True)
    if p.prim_first is Prim.ZERO:
        zero = f"{ref[2]} = 0" if scalar else f"Zero( C = {ref[2]} )"
        if first:
            lines += [f"{pad}if {first}:", f"{pad}  {zero}"]
        else:
            lines.append(_line(f"{pad}{zero}", "each output tile is visited once"))
    if scalar:
        lines.append(f"{pad}{ref[2]} += {ref[0]} * {ref[1]}")
    else:
        a = prim_arguments(teir)
        ax = prim_axes_by_role(teir)
        notes = _layout_notes(teir, names)
        args = [("m", a["m"], _extent(ax.m, names)), ("n", a["n"], _extent(ax.n, names)),
                ("k", a["k"], _extent(ax.k, names)),
                *[(ld, a[ld], notes.get(ld, "")) for ld in ("ldA", "ldB", "ldC")]]
        if "brSize" in a:
            args += [("brSize", a["brSize"], _extent(ax.br, names)),
                     ("brStrA", a["brStrA"], ""), ("brStrB", a["brStrB"], "")]
        name = "BRGEMM" if p.prim_main is Prim.BRGEMM else "GEMM"
        lines += _call(pad, name, [("A", ref[0]), ("B", ref[1]), ("C", ref[2])], args)
    if p.prim_last is Prim.RELU:
        relu = f"{ref[2]} = max({ref[2]}, 0)" if scalar else f"ReLU( C = {ref[2]} )"
        if last:
            lines += [f"{pad}if {last}:", f"{pad}  {relu}"]
        else:
            lines.append(_line(f"{pad}{relu}", "each output tile is visited once"))
    return lines


def _extent(axis: int, names: Sequence[str]) -> str:
    return f"|{names[axis]}|" if axis != NO_AXIS else "no axis: extent 1"

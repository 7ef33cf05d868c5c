"""A TEIR program as pseudocode in the style of spec section 10.3.

A pure function of the program (and optional axis names), so it explains
hand-written programs as well as planned ones.

>>> import teir_plan as tp
>>> prog = tp.TEIR.from_fields(
...     data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
...     dim_types=["n", "m", "k"], exec_types=["parallel", "prim", "prim"], dim_sizes=[4, 8, 6],
...     strides=[[0, 1, 8], [6, 0, 1], [8, 1, 0]])
>>> print(pseudocode(prog, ["q", "s", "u"]))
#pragma omp parallel for collapse(1)
for q in |q| (4)
  GEMM( A = in0[0],
        B = in1[q*6],
        C = out[q*8],
        m = 8, n = 1, k = 6,
        ldA = 8, ldB = 6, ldC = 8 )
"""

from __future__ import annotations

from collections.abc import Sequence

from teir_plan.teir.enums import DimType, ExecType, Prim
from teir_plan.teir.records import TEIR


def _offset(tensor: str, loops: Sequence[int], names: Sequence[str], strides: Sequence[int]) -> str:
    terms = [f"{names[i]}*{strides[i]}" if strides[i] != 1 else names[i]
             for i in loops if strides[i] != 0]
    return f"{tensor}[{' + '.join(terms) if terms else '0'}]"


def prim_arguments(teir: TEIR) -> dict[str, int]:
    """The primitive's size and leading-dimension arguments (teir-notes.md, 'Primitive
    shapes'): m, n, k, ld*, and brSize, brStrA, brStrB for BRGEMM."""
    s, p = teir.schedule, teir.primitives
    prim = s.prim_axes()

    def size(ax: int | None) -> int:
        return s.dim_sizes[ax] if ax is not None else 1

    def st(j: int, ax: int | None, default: int) -> int:
        return s.strides[j][ax] if ax is not None else default

    if teir.is_unary:
        a0 = prim[0] if prim else None
        a1 = prim[1] if len(prim) > 1 else None
        return {"m": size(a0), "n": size(a1), "ldI": st(0, a1, size(a0)),
                "ldO": st(1, a0, 1) if a1 is not None else size(a0)}
    m_ax = next((i for i in prim if s.dim_types[i] is DimType.M), None)
    n_ax = next((i for i in prim if s.dim_types[i] is DimType.N), None)
    ks = [i for i in prim if s.dim_types[i] is DimType.K]
    br_ax = ks.pop(0) if p.prim_main is Prim.BRGEMM else None
    k_ax = ks[0] if ks else None
    args = {"m": size(m_ax), "n": size(n_ax), "k": size(k_ax),
            "ldA": st(0, k_ax, size(m_ax)), "ldB": st(1, n_ax, size(k_ax)),
            "ldC": st(2, n_ax, size(m_ax))}
    if br_ax is not None:
        args.update(brSize=size(br_ax), brStrA=s.strides[0][br_ax], brStrB=s.strides[1][br_ax])
    return args


def pseudocode(teir: TEIR, names: Sequence[str] | None = None) -> str:
    s, p = teir.schedule, teir.primitives
    names = list(names) if names is not None else [f"i{i}" for i in range(s.num_dims)]
    loops = list(s.loop_axes())
    par = [i for i in loops if s.exec_types[i] is ExecType.PARALLEL]
    seq = [i for i in loops if s.exec_types[i] is ExecType.SEQ]
    lines: list[str] = []
    if par:
        lines.append(f"#pragma omp parallel for collapse({len(par)})")
    order = par + seq  # the executor runs parallel axes outermost
    for depth, i in enumerate(order):
        lines.append("  " * depth + f"for {names[i]} in |{names[i]}| ({s.dim_sizes[i]})")
    pad = "  " * len(order)
    args = prim_arguments(teir)
    k_loops = [i for i in order if s.dim_types[i] is DimType.K and s.dim_sizes[i] > 1]
    first = " and ".join(f"{names[i]} == 0" for i in k_loops)
    last = " and ".join(f"{names[i]} == {s.dim_sizes[i] - 1}" for i in k_loops)
    if teir.is_unary:
        call = "Copy" if p.prim_main is Prim.COPY else "ReLU"
        lines.append(f"{pad}{call}( in = {_offset('in0', order, names, s.strides[0])},")
        out_off = _offset("out", order, names, s.strides[1])
        lines.append(f"{pad}{' ' * (len(call) + 2)}out = {out_off},")
        lines.append(f"{pad}{' ' * (len(call) + 2)}m = {args['m']}, n = {args['n']}, "
                     f"ldI = {args['ldI']}, ldO = {args['ldO']} )")
        return "\n".join(lines)
    c_off = _offset("out", order, names, s.strides[2])
    if p.prim_first is Prim.ZERO:
        lines.append(f"{pad}if {first}: Zero( C = {c_off} )" if first
                     else f"{pad}Zero( C = {c_off} )   # every tile's first access")
    call = "BRGEMM" if p.prim_main is Prim.BRGEMM else "GEMM"
    ind = pad + " " * (len(call) + 2)
    lines.append(f"{pad}{call}( A = {_offset('in0', order, names, s.strides[0])},")
    lines.append(f"{ind}B = {_offset('in1', order, names, s.strides[1])},")
    lines.append(f"{ind}C = {c_off},")
    lines.append(f"{ind}m = {args['m']}, n = {args['n']}, k = {args['k']},")
    tail = f"{ind}ldA = {args['ldA']}, ldB = {args['ldB']}, ldC = {args['ldC']}"
    if call == "BRGEMM":
        lines.append(tail + ",")
        tail = (f"{ind}brSize = {args['brSize']}, brStrA = {args['brStrA']}, "
                f"brStrB = {args['brStrB']}")
    lines.append(tail + " )")
    if p.prim_last is Prim.RELU:
        lines.append(f"{pad}if {last}: ReLU( C = {c_off} )" if last
                     else f"{pad}ReLU( C = {c_off} )   # every tile's last access")
    return "\n".join(lines)

"""Tiles as a picture, in the manner of the spec's Fig. 10.3.1.

Each tensor is a grid of tiles: loop axes index the tiles, prim axes span each
tile's interior.  Grids are aligned by role: M runs down the rows of in0 and
out, N across the columns of in1 and out, and K joins the columns of in0 to
the rows of in1.  C (batch) loops are stated in the title.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from teir_plan.errors import PlanError
from teir_plan.teir.enums import DimType, ExecType
from teir_plan.teir.records import TEIR


def tile_figure(teir: TEIR, names: Sequence[str] | None = None, title: str = ""):  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise PlanError(
            "figure: matplotlib is not installed; install it with "
            "`pip install 'teir_plan[plot]'` (or `pip install matplotlib`)"
        ) from None
    s = teir.schedule
    names = list(names) if names is not None else [str(i) for i in range(s.num_dims)]

    def group(role: DimType, prim: bool) -> list[int]:
        return [i for i, (t, e) in enumerate(zip(s.dim_types, s.exec_types))
                if t is role and (e is ExecType.PRIM) == prim]

    def count(axes: list[int]) -> int:
        return math.prod(s.dim_sizes[i] for i in axes) if axes else 1

    def label(axes: list[int]) -> str:
        return " ".join(names[i] for i in axes) or "-"

    if teir.is_unary:
        raise PlanError("figure: tile figures are drawn for binary contractions")
    m_loop, n_loop, k_loop = (group(r, False) for r in (DimType.M, DimType.N, DimType.K))
    m_prim, n_prim, k_prim = (group(r, True) for r in (DimType.M, DimType.N, DimType.K))
    c_loop = group(DimType.C, False)
    tm, tn, tk = count(m_loop), count(n_loop), count(k_loop)
    # Tile interiors drawn with side proportional to log extent, so tiny and huge both show.
    hm = 1 + math.log2(count(m_prim))
    wn = 1 + math.log2(count(n_prim))
    wk = 1 + math.log2(count(k_prim))
    cap = 12  # draw at most this many tiles along a side
    fig, ax = plt.subplots(figsize=(9, 7))
    gap = 3.0
    # Layout: in1 above out (shared N columns), in0 left of out (shared M rows).
    ox, oy = min(tk, cap) * wk + gap, 0.0
    grids = {
        "in0": (0.0, oy, min(tk, cap), min(tm, cap), wk, hm, "#9ecae1", k_loop, m_loop,
                k_prim, m_prim),
        "in1": (ox, min(tm, cap) * hm + gap, min(tn, cap), min(tk, cap), wn, wk, "#a1d99b",
                n_loop, k_loop, n_prim, k_prim),
        "out": (ox, oy, min(tn, cap), min(tm, cap), wn, hm, "#fdae6b", n_loop, m_loop,
                n_prim, m_prim),
    }
    par = {names[i] for i, e in enumerate(s.exec_types) if e is ExecType.PARALLEL}
    for name, (x0, y0, cols, rows, w, h, color, col_ax, row_ax, col_p, row_p) in grids.items():
        for r in range(rows):
            for c in range(cols):
                ax.add_patch(Rectangle((x0 + c * w, y0 + r * h), w, h, facecolor=color,
                                       edgecolor="black", linewidth=0.8))
        top = name == "in1"  # in1's captions go above it, clear of out's title
        ax.text(x0 + cols * w / 2, y0 + rows * h + (1.2 if top else 0.3), name, ha="center",
                va="bottom", fontsize=12, weight="bold")
        ax.text(x0 + cols * w / 2, y0 + rows * h + 0.3 if top else y0 - 0.3,
                f"tiles along: {label(col_ax)}  |  tile: {label(col_p)}", ha="center",
                va="bottom" if top else "top", fontsize=8)
        left = name == "in0"
        ax.text(x0 - 0.3 if left else x0 + cols * w + 0.3, y0 + rows * h / 2,
                f"tiles along: {label(row_ax)}  |  tile: {label(row_p)}",
                ha="right" if left else "left", va="center", rotation=90, fontsize=8)
    ax.set_xlim(-2, ox + min(tn, cap) * wn + 3)
    ax.set_ylim(-2, min(tm, cap) * hm + gap + min(tk, cap) * wk + 3)
    ax.set_aspect("equal")
    ax.axis("off")
    extra = f"  batch loops: {label(c_loop)}" if c_loop else ""
    pars = f"  parallel: {' '.join(sorted(par))}" if par else ""
    ax.set_title(f"{title}  ({teir.primitives.prim_main.name}){extra}{pars}\n"
                 f"M rows of in0/out, N columns of in1/out, K joins in0 columns to in1 rows",
                 fontsize=10)
    return fig

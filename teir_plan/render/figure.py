"""Tiles as a picture, in the manner of the spec's Fig. 10.3.1.

Each tensor is a grid of tiles: loop axes index the tiles, prim axes span each
tile's interior.  Grids are aligned by role, as in the spec's figure: M runs
down the rows of in0 and out, N across the columns of in1 and out, and K joins
the columns of in0 to the rows of in1.  Tile index values are written along the
grids' edges (row 0 at the top); a BRGEMM's batch-reduce axis is drawn as
dashed slices inside the in0 and in1 tiles.  C (batch) loops and parallel axes
are named in the title.  Tile interiors are drawn with sides growing with the
logarithm of their extent, so tiny and huge tiles both show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from teir_plan.errors import PlanError
from teir_plan.teir.axes import NO_AXIS, prim_axes_by_role
from teir_plan.teir.enums import DimType, ExecType
from teir_plan.teir.records import TEIR

_CAP = 12  # at most this many tiles drawn along a side
_COLORS = {"in0": "#9ecae1", "in1": "#a1d99b", "out": "#fdae6b"}


def _import_pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline."
                                                    "backend_inline"):
            matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise PlanError(
            "figure: matplotlib is not installed; install it with "
            "`pip install 'teir_plan[plot]'` (or `pip install matplotlib`)"
        ) from None
    return plt, Rectangle


def tile_figure(teir: TEIR, names: Sequence[str] | None = None, title: str = ""):  # type: ignore[no-untyped-def]
    """A matplotlib figure of a binary TEIR program's tiles (see the module docstring)."""
    if teir.is_unary:
        raise PlanError("figure: tile figures are drawn for binary contractions "
                        "(GEMM/BRGEMM), not for Copy/ReLU programs")
    plt, Rectangle = _import_pyplot()
    s = teir.schedule
    names = list(names) if names is not None else [f"i{i}" for i in range(s.num_dims)]
    loops_all = list(s.loop_axes())
    par = [names[i] for i, e in enumerate(s.exec_types) if e is ExecType.PARALLEL]

    def group(role: DimType, prim: bool) -> list[int]:
        if prim:
            return [i for i in s.prim_axes() if s.dim_types[i] is role]
        return [i for i in loops_all if s.dim_types[i] is role]

    def count(axes: list[int]) -> int:
        return math.prod(s.dim_sizes[i] for i in axes) if axes else 1

    def label(axes: list[int]) -> str:
        return " ".join(names[i] + ("*" if names[i] in par else "") for i in axes) or "-"

    loop = {r: group(r, False) for r in (DimType.M, DimType.N, DimType.K)}
    prim = {r: group(r, True) for r in (DimType.M, DimType.N, DimType.K)}
    c_loop = group(DimType.C, False)
    br_ax = prim_axes_by_role(teir).br
    tiles = {r: count(loop[r]) for r in loop}
    shown = {r: min(tiles[r], _CAP) for r in loop}

    def side(role: DimType) -> float:
        return 1.0 + math.log2(count(prim[role]))

    hm, wn, wk = side(DimType.M), side(DimType.N), side(DimType.K)
    gap = 2.6
    # in0 left of out (shared M rows), in1 above out (shared N columns).
    ox = shown[DimType.K] * wk + gap
    oy = 0.0
    top_of_out = shown[DimType.M] * hm
    # name: x0, y0, cols role, rows role, tile w, tile h
    grids = {
        "in0": (0.0, oy, DimType.K, DimType.M, wk, hm),
        "in1": (ox, top_of_out + gap, DimType.N, DimType.K, wn, wk),
        "out": (ox, oy, DimType.N, DimType.M, wn, hm),
    }
    width = ox + shown[DimType.N] * wn
    height = top_of_out + gap + shown[DimType.K] * wk
    scale = 7.5 / max(width, height)
    fig, ax = plt.subplots(figsize=(max(5.0, width * scale + 2.5), max(4.5, height * scale + 2)))

    def index_text(role: DimType, t: int) -> str:
        axes = loop[role]
        if not axes:
            return ""
        vals = []
        for i in reversed(axes):
            vals.append(t % s.dim_sizes[i])
            t //= s.dim_sizes[i]
        vals.reverse()
        if len(axes) == 1:
            return f"{names[axes[0]]}={vals[0]}"
        return ",".join(map(str, vals))

    fs_tick = 7 if max(shown.values()) <= 8 else 5.5
    for name, (x0, y0, col_role, row_role, w, h) in grids.items():
        cols, rows = shown[col_role], shown[row_role]
        for r in range(rows):
            for c in range(cols):
                x, y = x0 + c * w, y0 + (rows - 1 - r) * h
                ax.add_patch(Rectangle((x, y), w, h, facecolor=_COLORS[name],
                                       edgecolor="black", linewidth=0.9))
                # the batch-reduce axis of a BRGEMM: dashed slices inside the K extent
                if br_ax != NO_AXIS and DimType.K in (col_role, row_role) and name != "out":
                    nb = s.dim_sizes[br_ax]
                    for b in range(1, min(nb, 16)):
                        if col_role is DimType.K:
                            xx = x + w * b / nb
                            ax.plot([xx, xx], [y, y + h], ls="--", lw=0.6, color="#555")
                        else:
                            yy = y + h * b / nb
                            ax.plot([x, x + w], [yy, yy], ls="--", lw=0.6, color="#555")
        # interior of the first tile: its prim axes and extents
        int_r, int_c = prim[row_role], prim[col_role]
        inner = (f"{label(int_r)} x {label(int_c)}\n"
                 f"{count(int_r)} x {count(int_c)}")
        ax.text(x0 + w / 2, y0 + (rows - 0.5) * h, inner, ha="center", va="center",
                fontsize=7 if min(w, h) > 2.5 else 5.5, color="#333",
                bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1.5})
        # tile indices: along the top edge (in1: above; in0/out: below) and the side
        for c in range(cols if name != "in1" else 0):  # in1 shares out's columns
            t = index_text(col_role, c)
            if t:
                ax.text(x0 + (c + 0.5) * w, y0 - 0.15, t, ha="center", va="top",
                        fontsize=fs_tick, rotation=0 if w > 1.6 else 90)
        for r in range(rows):
            t = index_text(row_role, r)
            if t:
                xt = x0 - 0.15 if name != "out" else x0 + cols * w + 0.15
                ax.text(xt, y0 + (rows - 0.5 - r) * h, t, ha="right" if name != "out"
                        else "left", va="center", fontsize=fs_tick)
        more = []
        if tiles[col_role] > cols:
            more.append(f"{cols} of {tiles[col_role]} tile columns drawn")
            ax.text(x0 + cols * w + 0.2, y0 + rows * h / 2, "…", fontsize=16, va="center")
        if tiles[row_role] > rows:
            more.append(f"{rows} of {tiles[row_role]} tile rows drawn")
        head = f"{name}"
        ax.text(x0 + cols * w / 2, y0 + rows * h + 1.05, head, ha="center", va="bottom",
                fontsize=12, weight="bold")
        sub = (f"tile rows: {label(loop[row_role]).replace('-', 'one')} ({row_role.name})   "
               f"tile columns: {label(loop[col_role]).replace('-', 'one')} ({col_role.name})")
        ax.text(x0 + cols * w / 2, y0 + rows * h + 0.25, sub + ("\n" + "; ".join(more)
                                                             if more else ""),
                ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-2.2, width + 2.2)
    ax.set_ylim(-1.6, height + 2.6)
    ax.set_aspect("equal")
    ax.axis("off")
    lines = [f"{title}  ({teir.primitives.prim_main.name})".strip()]
    extra = []
    if c_loop:
        extra.append(f"batch (C) loops around everything: {label(c_loop)}")
    if par:
        extra.append(f"* parallel: {' '.join(par)}")
    if br_ax != NO_AXIS:
        extra.append(f"dashed: the batch-reduce axis {names[br_ax]} (brSize "
                     f"{s.dim_sizes[br_ax]})")
    if extra:
        lines.append("   ".join(extra))
    lines.append("M: rows of in0 and out   N: columns of in1 and out   "
                 "K: columns of in0 = rows of in1")
    ax.set_title("\n".join(lines), fontsize=9)
    fig.tight_layout()
    return fig

"""Explaining a tree plan: the intermediates' layouts, what they saved, the peak memory,
and the tree drawn.

A plan of three or more operands records how its intermediates' layouts were chosen
(``plan.info.tree_layouts``, see :mod:`teir_plan.schedule.tree_plan`).
:func:`tree_lines` turns that into the lines the explain report prints under the
contraction tree: per step, the memory order it writes, opt_einsum's order, its predicted
time (and of it, the wait for lines of its inputs other cores wrote) and the operands its
program packs (transposes) first, each beside what opt_einsum's orders would cost; then
the peak scratch memory.  :func:`draw_tree` draws the tree with
networkx and matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from teir_plan.errors import PlanError

if TYPE_CHECKING:  # the report renders a plan it is given: no import back
    from teir_plan.schedule.plan import Plan


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**16 else f"{n} B"


def layout_rows(plan: Plan) -> list[list[str]]:
    """The per-step table (a header row first); empty for a plan that is not a tree."""
    layouts = plan.info.tree_layouts
    if layouts is None or not layouts.steps:
        return []
    rows = [["step", "contracts", "writes (memory order)", "opt_einsum's order",
             "predicted us", "of it other cores' lines", "with opt_einsum's orders",
             "packs", "transposes avoided"]]
    for k, s in enumerate(layouts.steps):
        rows.append([str(k), s.subscripts, s.order if s.order is not None else "the result",
                     s.term, f"{s.seconds * 1e6:.1f}", f"{s.handoff * 1e6:.1f}",
                     f"{s.default_seconds * 1e6:.1f}", str(s.packs),
                     str(max(0, s.default_packs - s.packs))])
    return rows


def tree_lines(plan: Plan) -> tuple[str, ...]:
    """Lines for the report: the layout table, the tree's prediction against opt_einsum's
    orders, and the peak scratch memory (every plan with temporaries)."""
    lines: list[str] = []
    rows = layout_rows(plan)
    if rows:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines.append("")
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        layouts = plan.info.tree_layouts
        assert layouts is not None  # the rows are its steps
        lines.append(f"layouts chosen across the tree: predicted "
                     f"{layouts.predicted * 1e6:.1f} us, against "
                     f"{layouts.predicted_default * 1e6:.1f} us in opt_einsum's orders")
    m = plan.memory
    if m.slot_bytes:
        temps = sum(1 for s in m.slot_of if s >= 0)
        slots = sum(m.slot_bytes)
        lines.append(f"peak scratch memory {_mib(m.peak_bytes)}: {temps} temporaries in "
                     f"{len(m.slot_bytes)} buffers shared by lifetime ({_mib(slots)}; "
                     f"{_mib(m.naive_bytes)} if each had its own), and the largest step's "
                     f"packed operands ({_mib(m.peak_bytes - slots)})")
    return tuple(lines)


def with_layouts(tree: tuple[str, ...], plan: Plan) -> tuple[str, ...]:
    """The report's contraction tree ``tree`` (its lines), followed by
    :func:`tree_lines` when there is a tree."""
    return tree + tree_lines(plan) if tree else tree


def draw_tree(plan: Plan, ax: Any = None) -> Any:
    """The contraction tree drawn with networkx and matplotlib: the operands at the
    leaves, each step labelled with its number, the memory order it writes and its
    predicted time.  Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    import networkx as nx

    layouts = plan.info.tree_layouts
    if layouts is None or layouts.tree is None:
        raise PlanError("draw_tree: the plan is not a tree of three or more operands")
    tree = layouts.tree
    g = tree.graph
    account = {s.node: s for s in layouts.steps}
    labels = {}
    for n in tree.nodes:
        if n.is_leaf:
            labels[n.node] = f"operand {n.node}\n{n.term}"
        else:
            s = account.get(n.node)
            k = n.node - tree.num_operands
            order = n.term if s is None or s.order is None else s.order
            timing = "" if s is None else f"\n{s.seconds * 1e6:.0f} us"
            labels[n.node] = f"step {k}\n{order}{timing}"
    # A tidy layout: leaves left to right in depth-first order, a step above the middle
    # of its inputs, one row per depth (no crossing edges).
    depth = {tree.root: 0}
    for n in reversed(tree.nodes):
        for c in n.children:
            depth[c] = depth[n.node] + 1
    x: dict[int, float] = {}
    leaves: list[int] = []

    def place(v: int) -> float:
        kids = tree.nodes[v].children
        if not kids:
            leaves.append(v)
        x[v] = float(len(leaves)) if not kids else sum(place(c) for c in kids) / len(kids)
        return x[v]

    place(tree.root)
    pos = {v: (x[v], -float(depth[v])) for v in g.nodes}
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(6, 1.3 * tree.num_operands), 5))
    else:
        fig = ax.figure
    colors = ["#dde8f5" if g.nodes[v]["leaf"] else "#f5e3c8" for v in g.nodes]
    nx.draw_networkx(g, pos, ax=ax, labels=labels, node_color=colors, node_size=2200,
                     font_size=7, arrows=True, node_shape="s")
    ax.set_title(f"{plan.subscripts}: predicted {layouts.predicted * 1e6:.0f} us "
                 f"({layouts.predicted_default * 1e6:.0f} in opt_einsum's orders)",
                 fontsize=8)
    ax.set_axis_off()
    return fig

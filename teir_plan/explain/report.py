"""``tp.Report``: the chosen plan, its cost account, and the alternatives, in four formats.

>>> import teir_plan as tp
>>> r = tp.explain("ij,jk->ik", (64, 48), (48, 32), dtype="float32")
>>> "GEMM(" in str(r)
True
"""

from __future__ import annotations

import base64
import html as html_lib
import io
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.explain.pseudocode import pseudocode
from teir_plan.plan.plan import Plan
from teir_plan.plan.steps import Candidate, TEIRStep
from teir_plan.planner.cost import Cost
from teir_plan.teir.enums import ExecType


@dataclass(frozen=True)
class StepInfo:
    index: int
    kind: str
    description: str
    subscripts: str = ""
    table: str = ""
    code: str = ""
    packs: tuple[str, ...] = ()
    teir_json: dict | None = None
    cost: dict | None = None


@dataclass(frozen=True)
class AltInfo:
    rank: int
    predicted_seconds: float
    changes: tuple[str, ...]
    measured_seconds: float | None = None
    teir_json: dict | None = None


@dataclass
class Report:
    """What a plan runs and why.  ``str()``, ``markdown()``, ``html()``, ``to_dict()``,
    ``figure()``."""

    expression: str
    shape: tuple[int, ...]
    dtype: str
    indices: list[dict[str, Any]]
    steps: list[StepInfo]
    cost: dict[str, Any] | None
    alternatives: list[AltInfo]
    tree: list[str]
    measured_seconds: float | None = None
    _plan: Plan | None = field(default=None, repr=False)

    # ---- formats ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable: the chosen TEIR as to_json gives it, alternatives, costs."""
        data = {
            "expression": self.expression,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "indices": self.indices,
            "steps": [asdict(s) for s in self.steps],
            "cost": self.cost,
            "measured_seconds": self.measured_seconds,
            "alternatives": [asdict(a) for a in self.alternatives],
            "contraction_tree": self.tree,
        }
        return json.loads(json.dumps(data))  # JSON-native values (lists, not tuples)

    def _sections(self) -> list[tuple[str, str, list[list[str]] | None]]:
        """(title, preformatted text, table rows) in display order."""
        out: list[tuple[str, str, list[list[str]] | None]] = []
        rows = [["index", "role", "extent", "stride in0", "stride in1", "stride out"]]
        rows += [[i["name"], i["role"], str(i["extent"]), *map(str, i["strides"])]
                 for i in self.indices]
        out.append((f"{self.expression}  ->  {self.shape} {self.dtype}", "", rows))
        if len(self.tree) > 1:
            out.append(("Contraction tree", "\n".join(self.tree), None))
        for s in self.steps:
            text = s.description
            if s.packs:
                text += "\n" + "\n".join(f"  first: {p}" for p in s.packs)
            if s.table:
                text += "\n\n" + s.table + "\n\n" + s.code
            out.append((f"Step {s.index}: {s.kind}", text, None))
        if self.cost:
            c = self.cost
            rows = [["quantity", "value"],
                    ["flops", f"{c['flops']:,}"],
                    ["bytes from DRAM", f"{c['dram_bytes']:,.0f}"],
                    ["bytes from last-level cache", f"{c['llc_bytes']:,.0f}"],
                    ["tile calls", f"{c['tile_calls']:,}"],
                    ["flops per tile", f"{c['tile_flops']:,}"],
                    ["predicted seconds", f"{c['seconds']:.3e}"],
                    ["predicted GFLOP/s", f"{c['gflops']:.1f}"],
                    ["bound", c["bound"]],
                    ["threads", str(c["threads"])],
                    ["parallel iterations", str(c["parallel_iterations"])],
                    ["parallel efficiency", f"{c['parallel_efficiency']:.2f}"],
                    ["packing seconds", f"{c['pack_seconds']:.3e}"]]
            if self.measured_seconds is not None:
                rows.append(["measured seconds", f"{self.measured_seconds:.3e}"])
                rows.append(["measured GFLOP/s",
                             f"{c['flops'] / self.measured_seconds / 1e9:.1f}"])
            out.append(("Cost model (main step)", "", rows))
        if self.alternatives:
            rows = [["rank", "predicted s", "measured s", "what changes vs the chosen"]]
            for a in self.alternatives:
                rows.append([str(a.rank), f"{a.predicted_seconds:.3e}",
                             f"{a.measured_seconds:.3e}" if a.measured_seconds else "-",
                             "; ".join(a.changes) or "(the chosen schedule)"])
            out.append(("Alternatives considered", "", rows))
        return out

    def __str__(self) -> str:
        parts = []
        for title, text, rows in self._sections():
            parts.append(f"== {title} ==")
            if text:
                parts.append(text)
            if rows:
                parts.append(_plain_table(rows))
            parts.append("")
        return "\n".join(parts)

    def print(self) -> None:
        """Print with rich tables when rich is installed and stdout is a terminal."""
        try:
            import sys

            from rich.console import Console
            from rich.table import Table

            if not sys.stdout.isatty():
                raise ImportError
        except ImportError:
            print(str(self))
            return
        console = Console()
        for title, text, rows in self._sections():
            console.rule(title)
            if text:
                console.print(text, markup=False, highlight=False)
            if rows:
                table = Table(*rows[0])
                for r in rows[1:]:
                    table.add_row(*r)
                console.print(table)

    def markdown(self) -> str:
        parts = []
        for title, text, rows in self._sections():
            parts.append(f"## {title}\n")
            if text:
                parts.append(f"```\n{text}\n```\n")
            if rows:
                parts.append(_md_table(rows) + "\n")
        return "\n".join(parts)

    def html(self, figure: bool = True) -> str:
        """One self-contained HTML page (the tile figure inlined when matplotlib is installed)."""
        esc = html_lib.escape
        body = []
        for title, text, rows in self._sections():
            body.append(f"<h2>{esc(title)}</h2>")
            if text:
                body.append(f"<pre>{esc(text)}</pre>")
            if rows:
                head = "".join(f"<th>{esc(c)}</th>" for c in rows[0])
                trs = "".join(
                    "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows[1:]
                )
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
        if figure:
            try:
                fig = self.figure()
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
                png = base64.b64encode(buf.getvalue()).decode()
                body.append(f'<h2>Tiles</h2><img alt="tiles" src="data:image/png;base64,{png}">')
            except PlanError:
                pass
        style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
                 "pre{background:#f4f4f4;padding:.8em;overflow-x:auto}"
                 "table{border-collapse:collapse;margin:.5em 0}"
                 "td,th{border:1px solid #bbb;padding:.25em .6em;text-align:left}"
                 "th{background:#eee}")
        return (f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
                f"<title>teir_plan: {esc(self.expression)}</title><style>{style}</style></head>"
                f"<body><h1>teir_plan schedule report</h1>{''.join(body)}</body></html>")

    def figure(self):  # type: ignore[no-untyped-def]
        """A matplotlib figure of the main step's tiles (spec Fig. 10.3.1 style)."""
        from teir_plan.explain.figure import tile_figure

        step = self._plan.main_step if self._plan is not None else None
        if step is None:
            raise PlanError("figure: this plan runs no TEIR contraction to draw")
        return tile_figure(step.teir, step.chosen.names, title=self.expression)


def _plain_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _cost_dict(cost: Cost) -> dict[str, Any]:
    d = asdict(cost)
    d["bound"] = cost.bound
    d["gflops"] = cost.gflops
    return d


def changes(chosen: Candidate, alt: Candidate) -> list[str]:
    """What ``alt`` does differently from ``chosen``, in the user's index letters (fused
    axes are compared letter by letter; a split outer axis is named ``x^``)."""
    def letters(names: list[str]) -> set[str]:
        return {ch for n in names for ch in n.rstrip("^")}

    def parts(c: Candidate) -> tuple[list[str], set[str], set[str], str, set[int]]:
        s = c.teir.schedule
        loops = [c.names[i] for i in s.loop_axes()]
        prim = letters([c.names[i] for i in s.prim_axes()])
        par = letters([c.names[i] for i, e in enumerate(s.exec_types)
                       if e is ExecType.PARALLEL])
        return loops, prim, par, str(c.teir.primitives.prim_main), {p.tensor for p in c.packs}

    def join(xs: set[str]) -> str:
        return ", ".join(sorted(xs))

    l0, p0, q0, m0, k0 = parts(chosen)
    l1, p1, q1, m1, k1 = parts(alt)
    out = []
    if p1 - p0:
        out.append(f"{join(p1 - p0)} moved into the primitive")
    if p0 - p1:
        out.append(f"{join(p0 - p1)} moved out of the primitive")
    if q1 - q0:
        out.append(f"{join(q1 - q0)} now parallel")
    if q0 - q1:
        out.append(f"{join(q0 - q1)} no longer parallel")
    if m0 != m1:
        out.append(f"{m1.upper()} instead of {m0.upper()}")
    names = ("in0", "in1")
    out += [f"packs {names[t]}" for t in sorted(k1 - k0)]
    out += [f"does not pack {names[t]}" for t in sorted(k0 - k1)]
    for n in alt.names:
        if n.endswith("^"):
            inner = alt.teir.schedule.dim_sizes[list(alt.names).index(n[:-1])]
            outer = alt.teir.schedule.dim_sizes[list(alt.names).index(n)]
            out.append(f"{n[:-1]} split {outer} x {inner}")
    if not out and l0 != l1:
        out.append(f"loop order {' '.join(l1)} instead of {' '.join(l0)}")
    return out


def build_report(plan: Plan, measure: bool = False, top: int = 5) -> Report:
    from teir_plan.planner.autotune import time_plan

    step = plan.main_step
    indices: list[dict[str, Any]] = []
    original = _original_contraction(plan)
    if original is not None or (step is not None and step.chosen.contraction is not None):
        shown = original if original is not None else step.chosen.contraction  # type: ignore[union-attr]  # noqa: E501
        assert shown is not None
        for ax in shown.axes:
            indices.append({"name": ax.name, "role": str(ax.role).upper(),
                            "extent": ax.extent, "strides": list(ax.strides)})
    elif step is not None:  # a copy: roles are all C
        s = step.teir.schedule
        for i, n in enumerate(step.chosen.names):
            indices.append({"name": n, "role": "C", "extent": s.dim_sizes[i],
                            "strides": [s.strides[0][i], 0, s.strides[1][i]]})
    infos = []
    for i, st in enumerate(plan.steps):
        if isinstance(st, TEIRStep):
            infos.append(StepInfo(
                i, st.role, st.describe(packs=False), st.subscripts,
                st.teir.format(st.chosen.names),
                pseudocode(st.teir, st.chosen.names), tuple(p.describe() for p in st.chosen.packs),
                json.loads(st.teir.to_json()), _cost_dict(st.chosen.cost)))
        else:
            infos.append(StepInfo(i, st.kind, st.describe()))
    arrays = None
    measured = None
    if measure:
        rng = np.random.default_rng(0)
        from teir_plan.api import _random_like

        arrays = [_random_like(s, rng) for s in plan.operands]
        measured = time_plan(plan, arrays)
    alts = []
    if step is not None:
        for r, alt in enumerate(step.alternatives[:top]):
            m = None
            if measure and arrays is not None:
                m = time_plan(plan.with_candidate(alt), arrays)
            alts.append(AltInfo(r, alt.cost.seconds, tuple(changes(step.chosen, alt)), m,
                                json.loads(alt.teir.to_json())))
    tree = [f"{st.subscripts}  ->  buffer {st.dst}" for st in plan.steps
            if isinstance(st, TEIRStep)]
    for b_i, spec in enumerate(plan.buffers):
        if spec.kind == "temp":
            tree.append(f"buffer {len(plan.operands) + 1 + b_i}: {spec.name} {spec.shape}")
    return Report(
        expression=plan.subscripts, shape=plan.shape, dtype=str(plan.dtype), indices=indices,
        steps=infos, cost=_cost_dict(step.chosen.cost) if step is not None else None,
        alternatives=alts, tree=tree, measured_seconds=measured, _plan=plan,
    )


def _original_contraction(plan: Plan):  # type: ignore[no-untyped-def]
    """The contraction as the user wrote it (before fusing), for two-operand plans."""
    from teir_plan.frontend.contraction import describe
    from teir_plan.plan.build import layout_from

    step = plan.main_step
    if step is None or len(plan.operands) != 2 or step.inputs != (0, 1):
        return None
    ext = plan.expression.extent_map
    terms = plan.expression.inputs
    lays = [layout_from(t, s, ext) for t, s in zip(terms, plan.operands)]
    return describe(lays[0], lays[1], layout_from(plan.expression.output, plan.out_spec, ext))


def explain(subscripts: str, *operands: object, measure: bool = False, top: int = 5,
            **options: Any) -> Report:
    """Plan ``subscripts`` for arrays or shapes (as :func:`tp.plan`) and explain it."""
    from teir_plan.api import plan

    return build_report(plan(subscripts, *operands, **options), measure=measure, top=top)

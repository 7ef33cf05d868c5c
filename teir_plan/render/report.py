"""``tp.Report``: the chosen plan, its cost account, and the alternatives, in four formats.

A report is data (the fields below, fixed when it is built); the formats render
from it: ``str(report)`` / ``report.print()`` for a terminal (rich tables when
rich is installed and the output is a terminal, plain text otherwise),
``report.markdown()``, ``report.html()`` (one self-contained page),
``report.to_dict()`` (JSON-serializable) and ``report.figure()`` (matplotlib).

>>> import teir_plan as tp
>>> r = tp.explain("ij,jk->ik", (64, 48), (48, 32), dtype="float32")
>>> "GEMM(" in r.text(rich=False)
True
"""

from __future__ import annotations

import base64
import html as html_lib
import io
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.planner.cost import Cost
from teir_plan.render.notes import (
    changes,
    executor_note,
    frontend_notes,
    original_contraction,
    step_tree,
)
from teir_plan.render.pseudocode import pseudocode
from teir_plan.render.tree import with_layouts
from teir_plan.schedule.steps import (
    ReduceStep,
    TEIRStep,
)

if TYPE_CHECKING:  # the plan builds this report (Plan.explain): no import back
    from teir_plan.schedule.plan import Plan


@dataclass(frozen=True)
class StepInfo:
    """One step of the plan.  TEIR steps carry their program three ways: the spec's
    table, pseudocode, and ``to_json``."""

    index: int
    kind: str
    description: str
    subscripts: str = ""
    table: str = ""
    code: str = ""
    packs: tuple[str, ...] = ()
    teir_json: dict | None = None
    cost: dict | None = None
    names: tuple[str, ...] = ()
    table_rows: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class AltInfo:
    """A ranked candidate of the main step (rank 0 is the chosen one)."""

    rank: int
    predicted_seconds: float
    changes: tuple[str, ...]
    measured_seconds: float | None = None
    teir_json: dict | None = None
    names: tuple[str, ...] = ()
    cost: dict | None = None


Rows = list[list[str]]
Block = tuple[str, Any]


@dataclass(frozen=True)
class Report:
    """What a plan runs and why.  Formats: ``str()``, :meth:`print`, :meth:`markdown`,
    :meth:`html`, :meth:`to_dict`, :meth:`figure`."""

    expression: str
    shape: tuple[int, ...]
    dtype: str
    indices: tuple[dict[str, Any], ...]
    indices_of: str  # the subscripts the index table describes (the main step's)
    frontend: tuple[str, ...]
    steps: tuple[StepInfo, ...]
    cost: dict[str, Any] | None
    predicted_seconds: float
    total_flops: int
    alternatives: tuple[AltInfo, ...]
    tree: tuple[str, ...]  # the contraction tree, one line each (empty for one step)
    measured_seconds: float | None = None
    # The machine parameters planning ranked the candidates with (what the plan recorded;
    # "" for a plan that ran no cost model, such as a view).
    machine_params: str = ""
    # When a call runs on one thread instead (the plan's SerialWhenIdle; "" for never).
    idle: str = ""
    # How the contender its calls run was chosen (schedule/trials.py).
    choice: str = ""
    _plan: Plan | None = field(default=None, repr=False, compare=False)

    # ---- data ---------------------------------------------------------------
    @property
    def teir_json(self) -> dict | None:
        """The chosen TEIR program of the main step, as ``TEIR.to_json`` gives it."""
        main = [s for s in self.steps if s.teir_json is not None]
        return main[-1].teir_json if main else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable: the chosen TEIR as ``to_json`` gives it, every step, the
        cost account, the alternatives (with their programs) and the contraction tree."""
        data = {
            "expression": self.expression,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "teir": self.teir_json,
            "indices_of": self.indices_of,
            "indices": list(self.indices),
            "frontend": list(self.frontend),
            "steps": [asdict(s) for s in self.steps],
            "cost": self.cost,
            "predicted_seconds": self.predicted_seconds,
            "measured_seconds": self.measured_seconds,
            "flops": self.total_flops,
            "alternatives": [asdict(a) for a in self.alternatives],
            "contraction_tree": list(self.tree),
            "machine_params": self.machine_params,
            "idle": self.idle,
            "choice": self.choice,
        }
        return json.loads(json.dumps(data))  # JSON-native values (lists, not tuples)

    # ---- the content, once, for every format ----------------------------------
    def _sections(self) -> list[tuple[str, list[Block]]]:
        """(title, blocks) in display order; a block is ("text", str), ("code", str),
        ("list", [str]) or ("table", rows with a header row)."""
        out: list[tuple[str, list[Block]]] = []
        rows: Rows = [["index", "role", "extent", "stride in0", "stride in1", "stride out"]]
        rows += [[i["name"], i["role"], str(i["extent"]), *map(str, i["strides"])]
                 for i in self.indices]
        head = f"{self.expression}  ->  {self.shape} {self.dtype}"
        blocks: list[Block] = []
        if self.indices_of != self.expression:
            blocks.append(("text", f"indices of the main step {self.indices_of}"))
        if self.machine_params:
            blocks.append(("text", f"ranked with {self.machine_params}"))
        if self.idle:
            blocks.append(("text", self.idle))
        if self.choice:
            blocks.append(("text", f"calls run {self.choice}"))
        if self.indices:
            blocks.append(("table", rows))
        out.append((head, blocks))
        if self.tree:
            out.append(("Contraction tree", [("code", "\n".join(self.tree))]))
        if self.frontend:
            out.append(("Frontend", [("list", list(self.frontend))]))
        if not self.steps:
            out.append(("Steps", [("text", "none: the output has no elements, so nothing "
                                           "runs")]))
        for s in self.steps:
            blocks = [("text", s.description)]  # packing is listed under Frontend
            if s.table_rows:
                blocks.append(("table", [list(r) for r in s.table_rows]))
                p = s.teir_json or {}
                blocks.append(("text", "TEIR-Primitives: " + ", ".join(
                    f"{k} = {p.get(k)}" for k in ("data_type", "prim_first", "prim_main",
                                                  "prim_last"))))
            if s.code:
                blocks.append(("code", s.code))
            out.append((f"Step {s.index}: {s.kind}", blocks))
        if self.cost:
            out.append(("Cost model (main step)", [("table", self._cost_rows())]))
        if self.alternatives:
            rows = [["rank", "predicted s", "measured s", "what changes vs the chosen"]]
            for a in self.alternatives:
                rows.append([str(a.rank) + (" (chosen)" if a.rank == 0 else ""),
                             f"{a.predicted_seconds:.3e}",
                             f"{a.measured_seconds:.3e}" if a.measured_seconds else "-",
                             "; ".join(a.changes) or ("-" if a.rank == 0 else
                                                       "(same axes and policies)")])
            out.append(("Alternatives considered (main step)", [("table", rows)]))
        return out

    def _cost_rows(self) -> Rows:
        c = self.cost
        assert c is not None
        rows = [["quantity", "value"],
                ["flops", f"{c['flops']:,}"],
                ["bytes moved from DRAM", f"{c['dram_bytes']:,.0f}"],
                ["bytes moved from last-level cache", f"{c['llc_bytes']:,.0f}"],
                ["tile calls", f"{c['tile_calls']:,}"],
                ["flops per tile", f"{c['tile_flops']:,}"],
                ["compute seconds", f"{c['compute_seconds']:.3e}"],
                ["memory seconds", f"{c['memory_seconds']:.3e}"],
                ["compute and memory not overlapped, seconds",
                 f"{c['unoverlapped_seconds']:.3e}"],
                ["call overhead seconds", f"{c['overhead_seconds']:.3e}"],
                ["packing seconds", f"{c['pack_seconds']:.3e}"],
                ["predicted seconds", f"{c['seconds']:.3e}"],
                ["predicted GFLOP/s", f"{c['gflops']:.1f}"],
                ["bound", c["bound"]],
                ["threads", str(c["threads"])],
                ["parallel iterations", str(c["parallel_iterations"])],
                ["parallel efficiency", f"{c['parallel_efficiency']:.2f}"]]
        if len([s for s in self.steps if s.cost]) > 1:
            rows.append(["predicted seconds, all steps", f"{self.predicted_seconds:.3e}"])
        if self.measured_seconds is not None:
            rows.append(["measured seconds, whole plan", f"{self.measured_seconds:.3e}"])
            rows.append(["measured GFLOP/s, whole plan",
                         f"{self.total_flops / self.measured_seconds / 1e9:.1f}"])
        return rows

    # ---- formats ----------------------------------------------------------------
    def text(self, rich: bool | None = None, width: int | None = None) -> str:
        """The terminal form.  ``rich=None``: rich tables when rich is installed and
        stdout is a terminal; ``False``: plain text; ``True``: rich (with colours)."""
        if rich is None:
            rich = _terminal_supports_rich()
        if rich:
            try:
                return self._rich_text(width)
            except ImportError:
                pass
        parts = []
        for title, blocks in self._sections():
            parts.append(f"== {title} ==")
            parts.append("\n\n".join(_block_text(kind, body) for kind, body in blocks))
            parts.append("")
        return "\n".join(parts)

    def __str__(self) -> str:
        return self.text()

    def print(self, file: Any = None) -> None:
        """Print the terminal form (rich when rich is installed and ``file`` is a tty)."""
        f = file if file is not None else sys.stdout
        print(self.text(rich=_terminal_supports_rich(f)), file=f)

    def _renderables(self) -> list[Any]:
        from rich.rule import Rule
        from rich.syntax import Syntax
        from rich.table import Table
        from rich.text import Text

        items: list[Any] = []
        for n, (title, blocks) in enumerate(self._sections()):
            if n:
                items.append(Text(""))
            items.append(Rule(Text(title, style="bold"), style="cyan"))
            for b, (kind, body) in enumerate(blocks):
                if b:
                    items.append(Text(""))
                if kind == "table":  # cells as Text: "strides[in0]" is not rich markup
                    table = Table(header_style="bold cyan")
                    for c in body[0]:
                        table.add_column(Text(c))
                    for r in body[1:]:
                        table.add_row(*(Text(c) for c in r))
                    items.append(table)
                elif kind == "code":
                    items.append(Syntax(body, "python", theme="ansi_dark",
                                        background_color="default"))
                else:
                    items.append(Text(_block_text(kind, body)))
        return items

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield from self._renderables()

    def _rich_text(self, width: int | None) -> str:
        from rich.console import Console

        w = width or _terminal_width()
        console = Console(width=w, force_terminal=True, color_system="standard",
                          file=io.StringIO())
        with console.capture() as cap:
            for item in self._renderables():
                console.print(item)
        return cap.get().rstrip("\n")

    def markdown(self) -> str:
        parts = [f"# teir_plan schedule report: `{self.expression}`\n"]
        for title, blocks in self._sections():
            parts.append(f"## {title}\n")
            for kind, body in blocks:
                if kind == "table":
                    parts.append(_md_table(body) + "\n")
                elif kind == "code":
                    parts.append(f"```\n{body}\n```\n")
                elif kind == "list":
                    parts.append("\n".join(f"- {x}" for x in body) + "\n")
                else:
                    parts.append(body + "\n")
        return "\n".join(parts)

    def _repr_markdown_(self) -> str:
        return self.markdown()

    def html(self, figure: bool = True) -> str:
        """One self-contained HTML page: no scripts, no external resources; the tile
        figure is inlined as a PNG when matplotlib is installed."""
        esc = html_lib.escape
        body = []
        for title, blocks in self._sections():
            body.append(f"<h2>{esc(title)}</h2>")
            for kind, b in blocks:
                if kind == "table":
                    head = "".join(f"<th>{esc(c)}</th>" for c in b[0])
                    trs = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>"
                                  for r in b[1:])
                    body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody>"
                                f"</table>")
                elif kind == "code":
                    body.append(f"<pre>{esc(b)}</pre>")
                elif kind == "list":
                    body.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in b) + "</ul>")
                else:
                    body.append("".join(f"<p>{esc(x)}</p>" for x in b.splitlines()))
        if figure:
            try:
                fig = self.figure()
            except PlanError:
                fig = None
            if fig is not None:
                import matplotlib.pyplot as plt

                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
                plt.close(fig)
                png = base64.b64encode(buf.getvalue()).decode()
                body.append("<h2>Tiles of the main step</h2>"
                            f'<img alt="tile figure" src="data:image/png;base64,{png}">')
        style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:75em;color:#222}"
                 "h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;"
                 "padding-bottom:.2em;margin-top:1.6em}"
                 "pre{background:#f6f6f6;padding:.8em;overflow-x:auto;font-size:.9em}"
                 "table{border-collapse:collapse;margin:.5em 0;font-size:.92em}"
                 "td,th{border:1px solid #bbb;padding:.25em .6em;text-align:left;"
                 "vertical-align:top}th{background:#eee;white-space:nowrap}"
                 "td:not(:last-child){white-space:nowrap}img{max-width:min(100%,760px)}")
        return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
                f"<title>teir_plan: {esc(self.expression)}</title><style>{style}</style></head>"
                f"<body><h1>teir_plan schedule report: <code>{esc(self.expression)}</code></h1>"
                f"{''.join(body)}</body></html>")

    def _repr_html_(self) -> str:
        return self.html()

    def figure(self):  # type: ignore[no-untyped-def]
        """A matplotlib figure of the main step's tiles, in the manner of the spec's
        Fig. 10.3.1.  Needs matplotlib (``pip install 'teir_plan[plot]'``)."""
        from teir_plan.render.figure import tile_figure

        step = self._plan.main_step if self._plan is not None else None
        if step is None:
            raise PlanError("figure: this plan runs no TEIR program to draw")
        return tile_figure(step.teir, step.chosen.names, title=step.subscripts)


# ---- helpers ---------------------------------------------------------------------

def _terminal_supports_rich(f: Any = None) -> bool:
    f = f if f is not None else sys.stdout
    if os.environ.get("TERM") == "dumb" or os.environ.get("NO_COLOR"):
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):
        return False


def _terminal_width() -> int:
    try:
        return max(80, os.get_terminal_size().columns)
    except OSError:
        return 120


def _block_text(kind: str, body: Any) -> str:
    if kind == "table":
        return _plain_table(body)
    if kind == "list":
        return "\n".join(f"- {x}" for x in body)
    return str(body)


def _teir_rows(teir: Any, names: Sequence[str]) -> Rows:
    """The spec's TEIR-Schedule table (as TEIR.format prints it) as table rows."""
    s = teir.schedule
    rows = [["Dimension ID", *names],
            ["dim_sizes", *map(str, s.dim_sizes)],
            ["dim_types", *(str(t) for t in s.dim_types)],
            ["exec_types", *(str(e) for e in s.exec_types)]]
    tensors = ("in0", "out") if teir.is_unary else ("in0", "in1", "out")
    rows += [[f"strides[{t}]", *map(str, s.strides[j])] for j, t in enumerate(tensors)]
    return rows


def _plain_table(rows: Rows) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(rows: Rows) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _cost_dict(cost: Cost) -> dict[str, Any]:
    d = asdict(cost)
    d["bound"] = cost.bound
    d["gflops"] = cost.gflops
    return d


def choice_note(plan: Plan) -> str:
    """How the contender the plan's calls run was chosen: by the model, by trials still
    under way, or by trials done (in this process or an earlier one)."""
    if plan.choice is not None:
        return plan.choice.describe()
    trials = plan.trials
    if trials is not None and trials.expand is not None:
        return ("the model's choice; from its second call, trials time it against its "
                "runner-up candidates and numpy.einsum")
    if trials is not None:
        timed = sum(1 for c in trials.contenders if c.times or c.dropped)
        return (f"the model's choice while trials time it against "
                f"{len(trials.contenders) - 1} alternatives ({timed} of "
                f"{len(trials.contenders)} timed after {trials.calls} calls)")
    return ""  # no trials: the model's choice, as every line above says


def build_report(plan: Plan, measure: bool = False, top: int = 5) -> Report:
    """The report of ``plan``; ``measure`` times the plan and its ``top`` alternatives
    on random data of the operands' layouts."""
    from teir_plan.planner.autotune import time_in_turns

    step = plan.main_step
    indices: list[dict[str, Any]] = []
    indices_of = step.subscripts if step is not None else plan.subscripts
    original = original_contraction(plan)
    contraction = original if original is not None else (
        step.chosen.contraction if step is not None else None)
    if original is not None:
        indices_of = plan.subscripts
    if contraction is not None:
        for ax in contraction.axes:
            indices.append({"name": ax.name, "role": str(ax.role).upper(),
                            "extent": ax.extent, "strides": list(ax.strides)})
    elif step is not None:  # a permutation: every axis is C, tensors in0 and out
        s = step.teir.schedule
        for i, n in enumerate(step.chosen.names):
            indices.append({"name": n, "role": "C", "extent": s.dim_sizes[i],
                            "strides": [s.strides[0][i], "-", s.strides[1][i]]})
    infos = []
    total_flops = 0
    for i, st in enumerate(plan.steps):
        if isinstance(st, TEIRStep):
            total_flops += st.chosen.cost.flops
            infos.append(StepInfo(
                i, st.role, st.describe(packs=False) + "\n" + executor_note(st.teir),
                st.subscripts,
                st.teir.format(st.chosen.names),
                pseudocode(st.teir, st.chosen.names), tuple(p.describe() for p in st.chosen.packs),
                json.loads(st.teir.to_json()), _cost_dict(st.chosen.cost),
                tuple(st.chosen.names),
                tuple(tuple(r) for r in _teir_rows(st.teir, st.chosen.names))))
        elif isinstance(st, ReduceStep):
            total_flops += st.cost.flops
            infos.append(StepInfo(i, st.kind, st.describe(), st.subscripts,
                                  cost=_cost_dict(st.cost)))
        else:
            infos.append(StepInfo(i, st.kind, st.describe()))
    top_alts = step.alternatives[:top] if step is not None else ()
    measured = None
    alt_times: list[float | None] = [None] * len(top_alts)
    if measure:
        rng = np.random.default_rng(0)
        arrays = [s.random(rng) for s in plan.operands]
        # The plan and its alternatives timed in turns; the plan's own candidate (rank
        # 0, unless the plan was autotuned to another) is not timed twice.
        others = [r for r, alt in enumerate(top_alts)
                  if not (r == 0 and step is not None and alt == step.chosen)]
        timed = time_in_turns([plan, *(plan.with_candidate(top_alts[r]) for r in others)],
                              arrays, repeats=5)
        measured = timed[0]
        alt_times = [measured] * len(top_alts)
        for r, seconds in zip(others, timed[1:]):
            alt_times[r] = seconds
    alts = []
    if step is not None:
        for r, alt in enumerate(top_alts):
            alts.append(AltInfo(r, alt.cost.seconds, tuple(changes(step.chosen, alt)),
                                alt_times[r], json.loads(alt.teir.to_json()), tuple(alt.names),
                                _cost_dict(alt.cost)))
    return Report(
        expression=plan.subscripts, shape=tuple(plan.shape), dtype=str(plan.dtype),
        indices=tuple(indices), indices_of=indices_of, frontend=tuple(frontend_notes(plan)),
        steps=tuple(infos), cost=_cost_dict(step.chosen.cost) if step is not None else next(
            (_cost_dict(st.cost) for st in plan.steps if isinstance(st, ReduceStep)), None),
        predicted_seconds=plan.predicted_seconds, total_flops=total_flops,
        alternatives=tuple(alts), tree=with_layouts(step_tree(plan), plan),
        measured_seconds=measured,
        machine_params=plan.info.machine_params,
        idle=plan.idle.describe() if plan.idle is not None else "", choice=choice_note(plan),
        _plan=plan,
    )

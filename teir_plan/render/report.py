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
from typing import Any

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.planner.cost import Cost
from teir_plan.render.pseudocode import pseudocode
from teir_plan.schedule.plan import Plan
from teir_plan.schedule.steps import (
    BlockedStep,
    Candidate,
    CastStep,
    CopyStep,
    NumpyStep,
    ReduceStep,
    TEIRStep,
)
from teir_plan.teir.enums import ExecType, Prim


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


def executor_note(teir: Any) -> str:
    """How the executor runs each tile of a GEMM/BRGEMM program: the vector kernel
    (executor/microkernel.py) for long, thin tiles along a shared unit stride, a BLAS
    ``?gemm`` call (with its transpose flags and leading dimensions, executor/lower.py)
    or, for tiles too small for a call to pay off or not addressable by BLAS, jitted
    strided loops."""
    from teir_plan.executor import table
    from teir_plan.executor.lower import lower
    from teir_plan.isa import target
    from teir_plan.render.pseudocode import prim_axes_by_role
    from teir_plan.tiles import GEMM_NAMES, SMALL_TILE_FLOPS, blas_plan, vector_kernel_dtype

    if teir.is_unary:
        low = lower(teir)
        if teir.primitives.prim_main is Prim.RELU:
            return "executor: each tile by a jitted strided loop"
        if low.copy_runs is not None:
            return ("executor: the block of each parallel iteration gathered a run of out at "
                    "a time in cache (out's rows are too short to stream alone), each run "
                    "written to memory whole with non-temporal stores")
        how = ("executor: each tile copied by jitted loops, transposed a 64-byte line by a "
               "line in registers where the input's unit stride is not out's")
        if low.dtype != teir.primitives.data_type.numpy:
            how += f" (each {teir.primitives.data_type} element moved as one {low.dtype})"
        elif not vector_kernel_dtype(low.dtype):
            how = f"executor: each tile copied by jitted loops, one {low.dtype} at a time"
        if low.tile[table.T_STREAM]:
            how += ", whole lines written to memory with non-temporal stores"
            if low.tile[table.T_SCRATCH]:
                how += (" (a tile whose rows follow one another in out is assembled in a "
                        "buffer first when out starts inside a line)")
        return how
    s = teir.schedule
    ax = prim_axes_by_role(teir)

    def size(a: int | None) -> int:
        return s.dim_sizes[a] if a is not None else 1

    def st(j: int, a: int | None) -> int:
        return s.strides[j][a] if a is not None else 0

    m, n, k = size(ax["m"]), size(ax["n"]), size(ax["k"])
    a_st = (st(0, ax["m"]), st(0, ax["k"]))
    b_st = (st(1, ax["k"]), st(1, ax["n"]))
    c_st = (st(2, ax["m"]), st(2, ax["n"]))
    tile = lower(teir).tile  # the executor's own decision
    if tile[table.T_MODE] == table.MODE_VEC:
        vec = 2 if tile[table.T_SWAP] else 1
        along, rows = ("m", n) if vec == 1 else ("n", m)
        streamed = (", written to memory with non-temporal stores (out is written once and "
                    "too large for the cache to keep)") if tile[table.T_STREAM] else ""
        streamed += f"; kernels generated for {target().describe()}"
        if tile[table.T_VEC_T]:
            return (f"executor: each tile runs the transposed vector kernel: "
                    f"{along}={m if vec == 1 else n} along the unit stride of "
                    f"{'in0' if vec == 1 else 'in1'}, {rows} rows of outer products along the "
                    f"unit stride of out, k={k}, accumulated in registers and transposed "
                    f"there (no packing){streamed}")
        if tile[table.T_VEC_P]:
            return (f"executor: each tile first transposes {'in0' if vec == 1 else 'in1'}'s "
                    f"k={k} x {along}={m if vec == 1 else n} block (unit stride along k) "
                    f"into the worker's buffer, in registers, then runs the vector kernel "
                    f"on it: {rows} rows of outer products along the unit stride of out, "
                    f"accumulated in registers (no whole-operand packing){streamed}")
        return (f"executor: each tile runs the vector kernel: {along}={m if vec == 1 else n} "
                f"along the unit stride of {'in0' if vec == 1 else 'in1'} and out, "
                f"{rows} rows of outer products, k={k}, accumulated in registers "
                f"(no packing){streamed}")
    if tile[table.T_MODE] == table.MODE_DOT:
        count, side = (n, "column") if tile[table.T_SWAP] else (m, "row")
        what = "one dot product" if count == 1 else f"{count} dot products (one per output {side})"
        return (f"executor: each tile runs as {what}, k={k} along the unit stride of both "
                f"operands, in a vectorized jitted loop (no BLAS call)")
    if tile[table.T_MODE] == table.MODE_ROW:
        loop = ("innermost parallel loop (its iterations walked in runs)"
                if tile[table.T_ROW_PAR] else f"innermost loop ({tile[table.T_M]} elements)")
        does = ("sums the products into one output element" if tile[table.T_C_M] == 0
                else "writes the elementwise products")
        return (f"executor: the scalar tiles run as rows: the program's {loop} is taken into "
                f"one vectorized jitted loop that {does}")
    bp = blas_plan(m, n, k, a_st, b_st, c_st)
    if bp is None or m * n * k < SMALL_TILE_FLOPS:
        why = "too few multiply-adds per tile for a BLAS call" if bp is not None else \
            "extents beyond BLAS' 32-bit integers"
        return f"executor: each tile runs as jitted strided loops ({why})"
    name = GEMM_NAMES[str(teir.primitives.data_type)]
    mm, nn = (n, m) if bp.swap else (m, n)
    ta, tb = chr(bp.transa) if bp.transa else "packed", chr(bp.transb) if bp.transb else "packed"
    call = (f"{name}(transA={ta}, transB={tb}, m={mm}, n={nn}, k={k}, lda={bp.lda}, "
            f"ldb={bp.ldb}, ldc={bp.ldc or 'scratch'})")
    per = f", {size(ax['br'])} times (once per batch-reduce member)" if ax["br"] is not None \
        else ""
    swap = " (as C^T = B^T A^T: out is unit-stride along N)" if bp.swap else ""
    return f"executor: each tile runs BLAS {call}{swap}{per}"


def _cost_dict(cost: Cost) -> dict[str, Any]:
    d = asdict(cost)
    d["bound"] = cost.bound
    d["gflops"] = cost.gflops
    return d


# ---- what an alternative changes -------------------------------------------------------

def _letters(names: list[str]) -> set[str]:
    return {ch for n in names for ch in n.rstrip("^")}


def _join(xs: Any) -> str:
    return ", ".join(sorted(xs))


def changes(chosen: Candidate, alt: Candidate) -> list[str]:
    """What ``alt`` does differently from ``chosen``, in the user's index letters.

    Axis names come from ``Candidate.names``: fused axes concatenate their letters
    (``pq``), the outer part of a split axis ends with ``^`` (``pq^``)."""
    def parts(c: Candidate) -> dict[str, Any]:
        s = c.teir.schedule
        names = list(c.names)
        return {
            "loops": [names[i] for i in s.loop_axes()],
            "prim": _letters([names[i] for i in s.prim_axes()]),
            "par": {names[i] for i, e in enumerate(s.exec_types) if e is ExecType.PARALLEL},
            "main": str(c.teir.primitives.prim_main).upper(),
            "packs": {p.tensor for p in c.packs},
            "fused": {n.rstrip("^") for n in names if len(n.rstrip("^")) > 1},
            "splits": {n[:-1]: (s.dim_sizes[i], s.dim_sizes[names.index(n[:-1])])
                       for i, n in enumerate(names) if n.endswith("^") and n[:-1] in names},
        }

    a, b = parts(chosen), parts(alt)
    out = []
    if b["prim"] - a["prim"]:
        out.append(f"{_join(b['prim'] - a['prim'])} moved into the primitive")
    if a["prim"] - b["prim"]:
        out.append(f"{_join(a['prim'] - b['prim'])} moved out of the primitive")
    if a["main"] != b["main"]:
        out.append(f"{b['main']} instead of {a['main']}")
    if b["fused"] - a["fused"]:
        out.append(f"fuses {_join(b['fused'] - a['fused'])}")
    if a["fused"] - b["fused"]:
        out.append(f"does not fuse {_join(a['fused'] - b['fused'])}")
    for n, (outer, inner) in sorted(b["splits"].items()):
        if a["splits"].get(n) != (outer, inner):
            out.append(f"{n} split {outer} x {inner}")
    for n in sorted(set(a["splits"]) - set(b["splits"])):
        out.append(f"{n} not split")
    if b["par"] - a["par"]:
        out.append(f"{_join(b['par'] - a['par'])} now parallel")
    if a["par"] - b["par"]:
        out.append(f"{_join(a['par'] - b['par'])} no longer parallel")
    names = ("in0", "in1")
    out += [f"packs {names[t]} first" for t in sorted(b["packs"] - a["packs"])]
    out += [f"does not pack {names[t]}" for t in sorted(a["packs"] - b["packs"])]
    common = [n for n in b["loops"] if n in a["loops"]]
    added = [n for n in b["loops"] if n not in a["loops"]]
    if common != [n for n in a["loops"] if n in b["loops"]] or (
            a["loops"] != b["loops"] and ((added and len(b["loops"]) > 1) or not out)):
        out.append(f"loop order {' '.join(b['loops']) or '(none)'}"
                   + (f" (was {' '.join(a['loops'])})" if a["loops"] else ""))
    if not out and alt.teir != chosen.teir:
        s0, s1 = chosen.teir.schedule, alt.teir.schedule
        if s0.strides != s1.strides:
            out.append("same axes, different strides (a different tensor layout)")
        elif s0.dim_sizes != s1.dim_sizes:
            out.append("same axes, different tile sizes")
    return out


# ---- building the report -----------------------------------------------------------------

def _frontend_notes(plan: Plan) -> list[str]:
    """What the frontend does before (and around) the TEIR programs: casts, diagonal
    views, broadcasts, pre-reductions, extent-1 indices, packing, numpy fallbacks."""
    expr = plan.expression
    ext = expr.extent_map
    notes: list[str] = []
    for i, (term, spec) in enumerate(zip(expr.inputs, plan.operands)):
        for ch in dict.fromkeys(term):
            if term.count(ch) > 1:
                notes.append(f"operand {i} '{term}': diagonal view over the repeated index "
                             f"{ch} (one axis whose stride is the sum of the repeated dims' "
                             f"strides; nothing is copied)")
        for ch, n in zip(term, spec.shape):
            if n == 1 and ext.get(ch, 1) > 1:
                notes.append(f"operand {i} '{term}': index {ch} has extent 1 here and "
                             f"{ext[ch]} elsewhere: broadcast with stride 0")
    ones = sorted(ch for ch, n in ext.items() if n == 1)
    if ones:
        notes.append(f"index {_join(ones)} of extent 1 dropped from the TEIR programs "
                     f"(it selects one element everywhere)")
    layouts = plan.options.get("result_layouts", ())
    if len(layouts) > 1:
        chosen = next(lay for lay in layouts if lay[2])
        # A layout whose search found nothing under the best so far carries that
        # ceiling (a lower bound on its cost) instead of a prediction.
        others = "; ".join(
            f"{lay[0]} above {lay[1] * 1e6:.1f} us (its search stopped there)" if lay[3]
            else f"{lay[0]} {lay[1] * 1e6:.1f} us" for lay in layouts if not lay[2])
        view = ("row-major" if chosen[0] == expr.output else
                f"a permuted view of a buffer in {chosen[0]} order")
        notes.append(f"result layout (order={plan.options.get('order')!r}): {view}, "
                     f"predicted {chosen[1] * 1e6:.1f} us; also costed: {others}")
    staged = any(b.axis_order is not None for b in plan.buffers)
    for k, st in enumerate(plan.steps):
        if isinstance(st, CastStep):
            notes.append(f"step {k}: {st.describe()} before the contraction")
        elif isinstance(st, (NumpyStep, CopyStep)):
            notes.append(f"step {k}: {st.describe()}")
        elif isinstance(st, BlockedStep) and st.blocking is not None:
            bl = st.blocking
            loops = ", ".join(f"{name} {n}" for name, n, *_ in bl.outer)
            copy = ", ".join(f"{name} {n} (stride {so} in out, {ss} in the stage)"
                             for name, n, ss, so in bl.block)
            notes.append(
                f"step {k}: out's layout would make the contraction transpose an operand, "
                f"so it runs in {bl.blocks} blocks (loops {loops}, split over the threads); "
                f"each block's TEIR program below writes a stage of "
                f"{bl.stage_elements * bl.inner.dtype.itemsize / 1024:.0f} KiB in cache "
                f"(its out strides are the stage's), then one copy with non-temporal "
                f"stores moves the block into out: {copy}")
        elif isinstance(st, ReduceStep):
            ins, out = st.subscripts.split("->")
            pre = ("a pre-reduction: indices summed in one operand only are summed "
                   "before the contraction; " if st.dst != len(plan.operands) else "")
            notes.append(f"step {k}: {pre}the sum over "
                         f"{_join(sorted(set(ins) - set(out) - {','}))} runs on the "
                         f"reduction kernels (one pass over the operand, no TEIR "
                         f"program): {st.reduction.describe()}")
        elif isinstance(st, TEIRStep):
            ins, out = st.subscripts.split("->")
            terms = ins.split(",")
            if st.role == "permute" and staged:
                notes.append(f"step {k}: out's layout would make the contraction transpose "
                             f"an operand, so the result is staged in memory order {ins} "
                             f"and permuted into out's order {out} (one copy of the result)")
            elif st.role == "reduce":
                pre = ("a pre-reduction: indices summed in one operand only are summed "
                       "before the contraction; " if st.dst != len(plan.operands) else "")
                notes.append(f"step {k}: {pre}the sum over "
                             f"{_join(set(terms[0]) - set(out))} runs as a contraction "
                             f"with an added constant in1 of ones (stride 0 on every "
                             f"axis)")
            for p in st.chosen.packs:
                notes.append(f"step {k}: {p.describe()} before the TEIR program runs")
    free = _free_layout_note(plan)
    if free:
        notes.append(free)
    return notes


def _free_layout_note(plan: Plan) -> str | None:
    """For a plan whose result layout was fixed (``out=``, or ``order`` other than 'K'):
    the layout the planner would choose itself, when it is predicted faster by more
    than the planner's own layout margin, and how to get it.  None otherwise."""
    from teir_plan.api import _get_plan
    from teir_plan.schedule.build import LAYOUT_MARGIN

    opt = plan.options.get("optimize")
    if (plan.options.get("result_layouts") or plan.view is not None
            or plan.main_step is None or not opt):
        return None
    if getattr(opt, "autotune", False):
        opt = True  # rank by the model: no timing inside a report
    try:
        free = _get_plan(plan.subscripts, plan.operands, None, plan.options.get("dtype"),
                         opt, plan.options.get("epilogue"), None, "K",
                         plan.options.get("casting", "safe"))
    except ValueError:  # TypeError and ValueError are the library's errors
        return None
    layouts = free.options.get("result_layouts", ())
    chosen = next((lay for lay in layouts if lay[2]), None)
    fixed, own = plan.predicted_seconds, free.predicted_seconds
    if chosen is None or own <= 0 or fixed <= own * LAYOUT_MARGIN:
        return None
    out_order = "".join(sorted(plan.expression.output,
                               key=lambda ch: -abs(plan.out_spec.strides[
                                   plan.expression.output.index(ch)])))
    return (f"the result's layout is fixed here (memory order {out_order}): predicted "
            f"{fixed * 1e6:.1f} us in all; in the layout the planner would choose itself "
            f"(memory order {chosen[0]}) {own * 1e6:.1f} us, {fixed / own:.2f}x faster. "
            f"To get it, call without out= and with order='K' (the result is then a "
            f"permuted view), or pass an out= of that layout (plan.empty_out() of a plan "
            f"made without out=)")


def _tree(plan: Plan) -> tuple[str, ...]:
    """The steps as a tree, output at the root: every buffer with its shape."""
    n_ops = len(plan.operands)
    out_id = n_ops
    producer: dict[int, tuple[int, Any]] = {}
    for k, st in enumerate(plan.steps):
        dst = getattr(st, "dst", None)
        if dst is not None:
            producer[dst] = (k, st)
    if sum(isinstance(s, (TEIRStep, NumpyStep, ReduceStep)) for s in plan.steps) < 2:
        return ()
    terms = plan.expression.inputs

    def label(b: int) -> str:
        if b < n_ops:
            return f"operand {b} '{terms[b]}' {plan.operands[b].shape}"
        if b == out_id:
            return f"out '{plan.expression.output}' {plan.shape}"
        spec = plan.buffers[b - n_ops - 1]
        return f"{spec.name} {spec.shape}"

    lines: list[str] = []

    def walk(b: int, prefix: str, last: bool, root: bool, seen: frozenset[int]) -> None:
        conn = "" if root else ("└── " if last else "├── ")
        made = producer.get(b)
        how = ""
        kids: list[int] = []
        if made is not None and b not in seen:
            k, st = made
            if isinstance(st, (TEIRStep, NumpyStep, ReduceStep)):
                how = f"  <- step {k}: {st.subscripts}"
                kids = list(st.inputs)
            elif isinstance(st, (CastStep, CopyStep)):
                how = f"  <- step {k}: {st.kind}"
                kids = [st.src]
        lines.append(prefix + conn + label(b) + how)
        child_prefix = prefix + ("" if root else ("    " if last else "│   "))
        for n, c in enumerate(kids):
            walk(c, child_prefix, n == len(kids) - 1, False, seen | {b})

    walk(out_id, "", True, True, frozenset())
    return tuple(lines)


def build_report(plan: Plan, measure: bool = False, top: int = 5) -> Report:
    """The report of ``plan``; ``measure`` times the plan and its ``top`` alternatives
    on random data of the operands' layouts."""
    from teir_plan.planner.autotune import time_in_turns

    step = plan.main_step
    indices: list[dict[str, Any]] = []
    indices_of = step.subscripts if step is not None else plan.subscripts
    original = _original_contraction(plan)
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
        from teir_plan.api import _random_like

        rng = np.random.default_rng(0)
        arrays = [_random_like(s, rng) for s in plan.operands]
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
        indices=tuple(indices), indices_of=indices_of, frontend=tuple(_frontend_notes(plan)),
        steps=tuple(infos), cost=_cost_dict(step.chosen.cost) if step is not None else next(
            (_cost_dict(st.cost) for st in plan.steps if isinstance(st, ReduceStep)), None),
        predicted_seconds=plan.predicted_seconds, total_flops=total_flops,
        alternatives=tuple(alts), tree=_tree(plan), measured_seconds=measured,
        machine_params=str(plan.options.get("machine_params", "")), _plan=plan,
    )


def _original_contraction(plan: Plan):  # type: ignore[no-untyped-def]
    """The contraction as the user wrote it (before fusing), for two-operand plans."""
    from teir_plan.frontend.contraction import describe
    from teir_plan.schedule.build import layout_from

    step = plan.main_step
    if step is None or len(plan.operands) != 2 or step.inputs != (0, 1):
        return None
    ext = plan.expression.extent_map
    terms = plan.expression.inputs
    lays = [layout_from(t, s, ext) for t, s in zip(terms, plan.operands)]
    return describe(lays[0], lays[1], layout_from(plan.expression.output, plan.out_spec, ext))


def explain(subscripts: str, *operands: object, measure: bool = False, top: int = 5,
            **options: Any) -> Report:
    """Plan ``subscripts`` for arrays or shapes (as :func:`tp.plan`, same options) and
    return its :class:`Report`; ``measure=True`` also times the plan and its ``top``
    alternatives on random data.

    >>> import teir_plan as tp
    >>> r = tp.explain("trus,pqtu->pqrs", (2, 3, 8, 8), (4, 6, 2, 8))
    >>> [i["role"] for i in r.indices]
    ['N', 'N', 'M', 'M', 'K', 'K']
    """
    from teir_plan.api import plan

    return build_report(plan(subscripts, *operands, **options), measure=measure, top=top)

"""The explain report: spec-style pseudocode, the report's content and formats, the
tile figure, and the HTML page in a real browser.

Expected values come from the spec (section 10.3 and teir-notes.md 'Primitive
shapes'), computed from the example sizes, never from the code under test.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.planner.cost import Cost
from teir_plan.render.notes import changes
from teir_plan.render.pseudocode import prim_arguments, pseudocode
from teir_plan.schedule.steps import Candidate
from tests import spec_examples as ex

P, Q, R, S, T, U = ex.P, ex.Q, ex.R, ex.S, ex.T, ex.U
NAMES = list("prtsqu")  # the axis order of spec examples 10.3.6 and 10.3.7


# ---- pseudocode ----------------------------------------------------------------------------

def _structure(code: str) -> list[tuple[int, str]]:
    """(indent, statement) for each line, comments stripped."""
    out = []
    for line in code.splitlines():
        text = line.split("#", 1)[0].rstrip() if not line.startswith("#pragma") else line
        if text.strip():
            out.append((len(text) - len(text.lstrip()), text.strip()))
    return out


def _call_args(code: str, name: str) -> dict[str, str]:
    """The ``key = value`` arguments of the primitive call ``name( ... )``."""
    start = code.index(f"{name}(")
    body = re.sub(r"#[^\n]*", "", code[start + len(name) + 1:])
    body = body[:body.index(")")]
    return {k.strip(): v.strip() for k, v in
            (item.split("=", 1) for item in body.replace("\n", " ").split(","))}


def test_pseudocode_10_3_6_loops_p_r_t_with_gemm_inside():
    prog, *_ = ex.gemm_contraction()
    code = pseudocode(prog, NAMES)
    lines = _structure(code)
    assert "#pragma" not in code
    loops = [(ind, st) for ind, st in lines if st.startswith("for ")]
    assert [st for _, st in loops] == ["for p in |p|", "for r in |r|", "for t in |t|"]
    assert [ind for ind, _ in loops] == sorted({ind for ind, _ in loops})  # nested
    gemm = next(ind for ind, st in lines if st.startswith("GEMM("))
    assert gemm > loops[-1][0]  # inside the t loop
    args = _call_args(code, "GEMM")
    # spec 10.3.6: A = in0[t][r], B = in1[p][0][t], C = out[p][0][r], m = |s|, n = |q|,
    # k = |u|, ldA = |s|, ldB = |t| * |u|, ldC = |r| * |s|
    assert (args["A"], args["B"], args["C"]) == ("in0[t][r]", "in1[p][0][t]", "out[p][0][r]")
    assert {k: int(args[k]) for k in ("m", "n", "k", "ldA", "ldB", "ldC")} == {
        "m": S, "n": Q, "k": U, "ldA": S, "ldB": T * U, "ldC": R * S}
    # Zero fires on an output tile's first access: the first iteration of the K loop t
    zero = [i for i, (_, st) in enumerate(lines) if st.startswith("Zero(")]
    assert len(zero) == 1 and lines[zero[0] - 1][1] == "if t == 0:"


def test_pseudocode_10_3_7_parallel_collapse_2_with_brgemm_inside():
    prog, *_ = ex.brgemm_contraction()
    code = pseudocode(prog, NAMES)
    lines = _structure(code)
    assert lines[0] == (0, "#pragma omp parallel for collapse(2)")
    assert [st for _, st in lines[1:3]] == ["for p in |p|", "for r in |r|"]
    assert not any(st.startswith("for t") for _, st in lines)  # t is inside the BRGEMM
    args = _call_args(code, "BRGEMM")
    assert (args["A"], args["C"]) == ("in0[0][r]", "out[p][0][r]")
    assert args["B"] in ("in1[p]", "in1[p][0]")  # same address; the spec writes in1[p][0]
    assert {k: int(v) for k, v in args.items() if k not in "ABC"} == {
        "m": S, "n": Q, "k": U, "ldA": S, "ldB": T * U, "ldC": R * S,
        "brSize": T, "brStrA": R * U * S, "brStrB": U}
    # no K loop outside the primitive: every output tile is visited once, Zero unconditional
    assert not any(st.startswith("if ") for _, st in lines)


def test_pseudocode_10_3_2_tiled_copy():
    prog, *_ = ex.tiled_permutation()
    code = pseudocode(prog, list("acdb"))
    assert [st for _, st in _structure(code)][:2] == ["for a in |a|", "for c in |c|"]
    args = _call_args(code, "Copy")
    # spec 10.3.2: in0[a][0][c], out[c][0][a], m = |d|, n = |b|, ldI = |c||d|, ldO = |a||b|
    assert (args["in"], args["out"]) == ("in0[a][0][c]", "out[c][0][a]")
    assert {k: int(args[k]) for k in ("m", "n", "ldI", "ldO")} == {
        "m": ex.D, "n": ex.B, "ldI": ex.C * ex.D, "ldO": ex.A * ex.B}
    assert prim_arguments(prog) == {"m": ex.D, "n": ex.B, "ldI": ex.C * ex.D,
                                    "ldO": ex.A * ex.B}


@pytest.mark.parametrize("build,names,statement", [
    (ex.scalar_permutation, "abcd", "out[c][d][a][b] = in0[a][b][c][d]"),  # 10.3.1
    (ex.scalar_batched_gemm, "abcd", "out[d][b][c] += in0[d][b][a] * in1[d][a][c]"),  # 10.3.3
    (ex.scalar_batched_gemm_reordered, "bcda",
     "out[d][b][c] += in0[d][b][a] * in1[d][a][c]"),  # 10.3.4
    (ex.scalar_contraction, "pqrstu",
     "out[p][q][r][s] += in0[t][r][u][s] * in1[p][q][t][u]"),  # 10.3.5
])
def test_scalar_examples_print_the_spec_statement(build, names, statement):
    prog, *_ = build()
    lines = _structure(pseudocode(prog, list(names)))
    assert [st for _, st in lines[:-1]] == [f"for {n} in |{n}|" for n in names]
    assert lines[-1][1] == statement


def test_pseudocode_default_names_and_relu():
    prog = tp.TEIR.from_fields(
        data_type="float64", prim_first="zero", prim_main="gemm", prim_last="relu",
        dim_types=["k", "m", "n", "k"], exec_types=["seq", "prim", "prim", "prim"],
        dim_sizes=[3, 4, 5, 6], strides=[[24, 1, 0, 4], [30, 0, 6, 1], [0, 1, 4, 0]])
    code = pseudocode(prog)
    lines = [st for _, st in _structure(code)]
    assert lines[0] == "for i0 in |i0|"
    assert lines[lines.index("if i0 == 2:") + 1] == "ReLU( C = out[0] )"  # last access
    assert lines[lines.index("if i0 == 0:") + 1] == "Zero( C = out[0] )"
    with pytest.raises(ValueError):
        pseudocode(prog, ["a", "b"])


# ---- what an alternative changes ------------------------------------------------------------

_COST = Cost(1.0, 1.0, 0.0, 0.0, 1, 0.0, 0.0, 1, 1, 1, 1.0, 1, 0)


def test_changes_between_the_spec_schedules():
    gemm = Candidate(ex.gemm_contraction()[0], tuple(NAMES), _COST)
    brgemm = Candidate(ex.brgemm_contraction()[0], tuple(NAMES), _COST)
    forward = changes(gemm, brgemm)
    assert "t moved into the primitive" in forward
    assert "BRGEMM instead of GEMM" in forward
    assert "p, r now parallel" in forward
    assert len(forward) == 3  # nothing else differs
    backward = changes(brgemm, gemm)
    assert "t moved out of the primitive" in backward and "p, r no longer parallel" in backward
    assert changes(gemm, gemm) == []
    # 10.3.6 with p split 2 x 2 (outer p^ first)
    base = ex.gemm_contraction()[0].schedule
    st = [[2 * row[0], *row] for row in base.strides]
    split = tp.TEIR.from_fields(
        data_type="float32", prim_first="zero", prim_main="gemm", prim_last="none",
        dim_types=["n", "n", "m", "k", "m", "n", "k"],
        exec_types=["seq"] * 4 + ["prim"] * 3, dim_sizes=[2, 2, R, T, S, Q, U], strides=st)
    assert P == 4
    got = changes(gemm, Candidate(split, ("p^", *NAMES), _COST))
    assert got == ["p split 2 x 2", "loop order p^ p r t (was p r t)"]


# ---- the report -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def report():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((T, R, 16, 16)).astype(np.float32)  # t r u s
    b = rng.standard_normal((P, Q, T, 16)).astype(np.float32)  # p q t u
    return tp.explain("trus,pqtu->pqrs", a, b, measure=True, top=3)


def test_report_indices_roles_extents_strides(report):
    s, u = 16, 16
    want = {  # spec's worked example: role, extent, strides in (in0, in1, out)
        "p": ("N", P, [0, Q * T * u, Q * R * s]), "q": ("N", Q, [0, T * u, R * s]),
        "r": ("M", R, [u * s, 0, s]), "s": ("M", s, [1, 0, 1]),
        "t": ("K", T, [R * u * s, u, 0]), "u": ("K", u, [s, 1, 0]),
    }
    got = {i["name"]: (i["role"], i["extent"], i["strides"]) for i in report.indices}
    assert got == want


def test_report_content_and_measurements(report):
    text = report.text(rich=False)
    for needle in ("Cost model", "Alternatives considered", "predicted GFLOP/s", "bound",
                   "parallel efficiency", "bytes moved from DRAM", "measured seconds"):
        assert needle in text
    assert "\x1b[" not in text
    assert report.measured_seconds is not None and report.measured_seconds > 0
    assert all(a.measured_seconds and a.measured_seconds > 0 for a in report.alternatives)
    assert report.cost is not None and report.cost["flops"] == 2 * P * Q * R * T * 16 * 16
    assert report.cost["bound"] in ("compute", "memory", "overhead")
    seconds = [a.predicted_seconds for a in report.alternatives]
    assert seconds == sorted(seconds)
    assert report.alternatives[0].changes == ()
    assert all(a.changes for a in report.alternatives[1:])
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.expression = "x"  # type: ignore[misc]


def test_to_dict_round_trips_through_json(report):
    d = report.to_dict()
    again = json.loads(json.dumps(d))
    assert again == d
    chosen = tp.TEIR.from_json(json.dumps(d["teir"]))
    assert chosen == report._plan.teir
    for alt in d["alternatives"]:
        tp.TEIR.from_json(json.dumps(alt["teir_json"])).validate()
    assert d["cost"]["seconds"] == pytest.approx(report._plan.main_step.chosen.cost.seconds)


def test_markdown_and_plan_explain(report):
    md = report.markdown()
    assert md.count("```") % 2 == 0 and md.count("```") >= 2
    assert "| index | role | extent |" in md and "## Cost model" in md
    r2 = report._plan.explain(top=2)
    assert isinstance(r2, tp.Report) and len(r2.alternatives) == 2


def test_rich_text_when_asked():
    pytest.importorskip("rich")
    r = tp.explain("ij,jk->ik", (32, 16), (16, 8))
    styled = r.text(rich=True, width=120)
    assert "\x1b[" in styled and "GEMM(" in styled
    assert "\x1b[" not in str(r)  # pytest's stdout is not a terminal: plain text


def test_frontend_notes():
    r = tp.explain("iij,jkx->ik", (5, 5, 6), (6, 7, 3))
    notes = "\n".join(r.frontend)
    assert "diagonal view over the repeated index i" in notes
    assert "a pre-reduction" in notes and "the sum over x" in notes
    steps = [s.describe() for s in tp.plan("iij,jkx->ik", (5, 5, 6), (6, 7, 3)).steps]
    assert steps[0].startswith("reduce jkx->jk") and steps[1].startswith("contract iij,jk->ik")
    r = tp.explain("ij,jk->ik", np.ones((4, 5), np.float32), np.ones((5, 3), np.float64))
    assert any("cast operand 0" in n for n in r.frontend)
    r = tp.explain("ij->i", (6, 7))
    assert any("runs on the reduction kernels" in n for n in r.frontend)
    r = tp.explain("ij->i", (6, 7), epilogue="relu")  # ReLU last: a TEIR program
    assert any("ones" in n for n in r.frontend)


def test_contraction_tree_of_three_operands():
    r = tp.explain("ij,jk,kl->il", (5, 6), (6, 7), (7, 8))
    lines = list(r.tree)
    assert lines[0].startswith("out 'il' (5, 8)")
    for i, (term, shape) in enumerate([("ij", (5, 6)), ("jk", (6, 7)), ("kl", (7, 8))]):
        assert sum(f"operand {i} '{term}' {shape}" in ln for ln in lines) == 1
    inter = [ln for ln in lines if "intermediate" in ln]
    assert len(inter) == 1
    # whichever pair opt_einsum contracts first, the intermediate's shape follows from it
    assert re.search(r"intermediate (ik|ki) \((5, 7|7, 5)\)|intermediate (jl|lj) "
                     r"\((6, 8|8, 6)\)", inter[0])
    assert len(r.steps) == 2 and "Contraction tree" in r.text(rich=False)


# ---- figure -------------------------------------------------------------------------------------

def test_figure_grids_follow_fig_10_3_1(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.patches import Rectangle

    from teir_plan.render.figure import tile_figure

    fig = tile_figure(ex.gemm_contraction()[0], NAMES)
    ax = fig.axes[0]
    tiles = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(tiles) == T * R + T * P + R * P  # in0: t x r, in1: t x p, out: r x p
    texts = {t.get_text() for t in ax.texts}
    assert {"in0", "in1", "out"} <= texts
    assert {f"r={i}" for i in range(R)} <= texts and {f"p={i}" for i in range(P)} <= texts
    assert {f"t={i}" for i in range(T)} <= texts
    # M rows shared by in0 and out: the r labels sit at the same heights on both grids
    ys = sorted({round(t.get_position()[1], 6) for t in ax.texts if t.get_text() == "r=1"})
    assert len(ys) == 1
    path = tmp_path / "tiles.png"
    fig.savefig(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_without_matplotlib_says_how_to_install(monkeypatch):
    r = tp.explain("ij,jk->ik", (8, 4), (4, 6))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(tp.PlanError, match="pip install"):
        r.figure()
    page = r.html()  # the page still renders, without the figure
    assert page.startswith("<!DOCTYPE html>") and "data:image/png" not in page


# ---- HTML in a browser -----------------------------------------------------------------------

def test_html_is_one_self_contained_file_a_browser_renders(tmp_path):
    page = tp.explain("trus,pqtu->pqrs", (T, R, 8, 8), (P, Q, T, 8)).html()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    f = tmp_path / "report.html"
    f.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", f.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "trus,pqtu-&gt;pqrs" in dom and dom.count("<table>") >= 3 and "GEMM(" in dom
    subprocess.run([*base, f"--screenshot={shot}", "--window-size=1000,1400", f.as_uri()],
                   capture_output=True, timeout=120, check=True)
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 1400 and pixels.shape[1] == 1000
    assert float(pixels[..., :3].std()) > 0.05  # not a blank page


@pytest.mark.parametrize(
    ("expr", "shapes", "kind", "words"),
    [
        ("ij,j->i", [(512, 512), (512,)], "dot", "dot products (one per output row)"),
        ("j,ji->i", [(512,), (512, 512)], None, None),
        ("i,i->", [(4096,), (4096,)], "dot", "one dot product"),
        ("ij,ij->ij", [(256, 256), (256, 256)], "row", "writes the elementwise products"),
        ("ij,jk->ik", [(256, 256), (256, 256)], None, None),
        ("bda,dc->abc", [(64, 64, 96), (64, 24)], "vec", "vector kernel"),
    ],
)
def test_the_executor_note_names_the_kernel_the_lowering_chose(
    expr: str, shapes: list[tuple[int, ...]], kind: str | None, words: str | None
) -> None:
    # The note is the explain report's account of the executor: it must agree with the
    # executor's own decision (lower), whichever tile kind that is.
    from teir_plan.executor.lower import lower
    from teir_plan.render.notes import executor_note

    p = tp.plan(expr, *shapes)
    if p.teir is None:  # it runs on the reduction kernels; with ReLU last it cannot
        assert [s.kind for s in p.steps] == ["reduce"]
        p = tp.plan(expr, *shapes, epilogue="relu")
    assert p.teir is not None
    note = executor_note(p.teir)
    low = lower(p.teir).kind.name
    if kind is not None:
        assert low == kind
        assert words in note
    says_blas = "BLAS" in note and "no BLAS call" not in note
    assert says_blas == (low == "blas")
    assert ("dot product" in note) == (low == "dot")
    assert ("vector kernel" in note) == (low in ("vec", "vec_t", "vec_p"))
    assert ("as rows" in note) == (low == "row")


def test_a_fixed_result_layout_names_the_faster_layout_the_planner_would_choose() -> None:
    # efbad,cf->abcde into a C-order out: the planner's own layout (cebad) is predicted
    # faster; the report says by how much and how to get it.  Into an out of that
    # layout, or without a fixed layout, it says nothing of the kind.
    ext = {"a": 24, "b": 18, "c": 12, "d": 18, "e": 24, "f": 18}
    a = np.ones([ext[c] for c in "efbad"], np.float32)
    b = np.ones([ext[c] for c in "cf"], np.float32)
    free = tp.plan("efbad,cf->abcde", a, b)
    for fixed in (tp.plan("efbad,cf->abcde", a, b, out=np.empty((24, 18, 12, 18, 24),
                                                                   np.float32)),
                  tp.plan("efbad,cf->abcde", a, b, order="C")):
        notes = [n for n in fixed.explain().frontend if "layout is fixed" in n]
        assert len(notes) == 1, fixed.explain().frontend
        assert f"{free.predicted_seconds * 1e6:.1f} us" in notes[0]
        assert f"{fixed.predicted_seconds * 1e6:.1f} us" in notes[0]
        assert "memory order abcde" in notes[0] and "order='K'" in notes[0]
        assert free.predicted_seconds * 1.1 < fixed.predicted_seconds
    own = free.empty_out()
    same = tp.plan("efbad,cf->abcde", a, b, out=own)
    assert not [n for n in same.explain().frontend if "layout is fixed" in n]
    assert not [n for n in free.explain().frontend if "layout is fixed" in n]


@pytest.mark.parametrize("expr,shapes", [
    ("trus,pqtu->pqrs", [(2, 3, 8, 8), (4, 6, 2, 8)]),       # BRGEMM tiles under loops
    ("trus,pqtu->pqrs", [(8, 24, 48, 48), (8, 48, 8, 48)]),  # the README's: a pack, one call
    ("bij,bjk->bik", [(64, 32, 32), (64, 32, 32)]),
])
def test_describe_program_reads_the_programs_records(expr, shapes):
    """The words under the README's first example (generated by describe_program) say
    what the printed table says: the primitive, each prim axis's role, each loop's kind,
    the packs and the first primitive."""
    from teir_plan.render.notes import describe_program
    from teir_plan.teir.enums import ExecType

    plan = tp.plan(expr, *shapes, dtype=np.float32)
    cand = plan.main_step.chosen
    text = describe_program(cand)
    s, p = cand.teir.schedule, cand.teir.primitives
    assert f"one {p.prim_main.name} call" in text
    assert ("per tile" in text) == any(e is not ExecType.PRIM for e in s.exec_types)
    for name, role, how in zip(cand.names, s.dim_types, s.exec_types):
        word = f"`{name.rstrip('^')}`"
        assert word in text
        if how is ExecType.PRIM and f"{word} its batch-reduce axis" not in text:
            assert re.search(rf"{role.name} = [^.:]*{re.escape(word)}", text), (word, text)
        elif how is ExecType.PARALLEL:
            assert f"{word} is split across the threads" in text
        elif how is ExecType.SEQ:
            assert f"{word} is a sequential loop" in text
    for pack in cand.packs:
        assert f"`in{pack.tensor}` is first copied into a contiguous buffer ordered " \
               f"`{' '.join(pack.names)}`" in text
    assert ("zeroed on first access" in text) == (p.prim_first is tp.Prim.ZERO)
    # The public accessor the README prints the program with.
    assert plan.format_teir() == cand.teir.format(list(cand.names))


def test_format_teir_of_a_plan_without_a_teir_step():
    assert tp.plan("ijk->kji", (4, 5, 6)).format_teir() is None

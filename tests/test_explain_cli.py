"""The explain report, its pseudocode, and the teir-plan command line."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.cli import reference_execute
from teir_plan.explain.pseudocode import prim_arguments, pseudocode
from tests import spec_examples as ex

NAMES = list("prtsqu")


def test_pseudocode_of_example_10_3_6():
    prog, *_ = ex.gemm_contraction()
    lines = pseudocode(prog, NAMES).splitlines()
    assert [ln.strip().split(" in ")[0] for ln in lines[:3]] == ["for p", "for r", "for t"]
    assert "#pragma" not in lines[0]
    assert lines[4].strip().startswith("GEMM(")
    code = "\n".join(lines)
    # teir-notes: m=|s|, n=|q|, k=|u|, ldA=|s|, ldB=|t||u|, ldC=|r||s|
    assert f"m = {ex.S}, n = {ex.Q}, k = {ex.U}" in code
    assert f"ldA = {ex.S}, ldB = {ex.T * ex.U}, ldC = {ex.R * ex.S}" in code
    assert "if t == 0: Zero(" in code


def test_pseudocode_of_example_10_3_7():
    prog, *_ = ex.brgemm_contraction()
    code = pseudocode(prog, NAMES)
    lines = code.splitlines()
    assert lines[0] == "#pragma omp parallel for collapse(2)"
    assert [ln.strip().split(" in ")[0] for ln in lines[1:3]] == ["for p", "for r"]
    assert "for t" not in code and "BRGEMM(" in code
    args = prim_arguments(prog)
    assert args == {"m": ex.S, "n": ex.Q, "k": ex.U, "ldA": ex.S, "ldB": ex.T * ex.U,
                    "ldC": ex.R * ex.S, "brSize": ex.T, "brStrA": ex.R * ex.U * ex.S,
                    "brStrB": ex.U}
    assert f"brSize = {ex.T}, brStrA = {ex.R * ex.U * ex.S}, brStrB = {ex.U}" in code


def test_copy_pseudocode_matches_10_3_2():
    prog, *_ = ex.tiled_permutation()
    args = prim_arguments(prog)
    # m = |d|, n = |b|, ldI = |c||d|, ldO = |a||b|
    assert args == {"m": ex.D, "n": ex.B, "ldI": ex.C * ex.D, "ldO": ex.A * ex.B}
    assert "Copy(" in pseudocode(prog, list("acdb"))


def test_report_formats_and_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    b = rng.standard_normal((4, 6, 2, 8)).astype(np.float32)
    r = tp.explain("trus,pqtu->pqrs", a, b, measure=True, top=3)
    text = str(r)
    assert "Cost model" in text and "Alternatives considered" in text
    assert r.measured_seconds is not None and r.measured_seconds > 0
    d = json.loads(json.dumps(r.to_dict()))
    assert d == r.to_dict()
    chosen = tp.TEIR.from_json(json.dumps(d["steps"][-1]["teir_json"]))
    assert chosen == tp.plan("trus,pqtu->pqrs", a, b).teir
    assert len(d["alternatives"]) >= 2 and d["alternatives"][0]["changes"] == []
    assert all(alt["changes"] for alt in d["alternatives"][1:])
    md = r.markdown()
    assert md.count("## ") >= 4 and "| index |" in md
    page = r.html()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "data:image/png;base64," in page  # self-contained: the figure is inlined


def test_multi_operand_report_has_tree():
    r = tp.explain("ij,jk,kl->il", (5, 6), (6, 7), (7, 8))
    assert len([t for t in r.tree if "->" in t]) == 2
    assert any("intermediate" in t for t in r.tree)


def test_figure_draws_three_grids(tmp_path):
    pytest.importorskip("matplotlib")
    r = tp.explain("trus,pqtu->pqrs", (2, 3, 8, 8), (4, 6, 2, 8), optimize=False)
    fig = r.figure()
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert {"in0", "in1", "out"} <= labels
    path = tmp_path / "tiles.png"
    fig.savefig(path)
    assert path.stat().st_size > 1000


def test_html_renders_in_chromium(tmp_path):
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed")
    page = tmp_path / "report.html"
    page.write_text(tp.explain("ij,jk->ik", (64, 32), (32, 48)).html())
    shot = tmp_path / "shot.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1200,1600", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )
    assert shot.stat().st_size > 5000


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teir_plan", *args], capture_output=True,
                          text=True, timeout=300)


def test_cli_end_to_end(tmp_path):
    r = _cli("explain", "trus,pqtu->pqrs", "--sizes", "p=4,q=8,r=3,s=8,t=2,u=8",
             "--format", "json", "--figure", str(tmp_path / "t.png"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["expression"] == "trus,pqtu->pqrs"
    assert (tmp_path / "t.png").exists()
    r = _cli("run", "ij,jk->ik", "--sizes", "i=32,j=16,k=8", "--dtype", "float64")
    assert r.returncode == 0, r.stderr
    assert "GFLOP/s" in r.stdout and "(ok)" in r.stdout
    prog, *_ = ex.brgemm_contraction()
    f = tmp_path / "p.json"
    f.write_text(prog.to_etops_json())
    r = _cli("validate", str(f))
    assert r.returncode == 0 and "valid" in r.stdout
    r = _cli("execute", str(f))
    assert r.returncode == 0 and "(ok)" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args,needle", [
    (["explain", "ij,jk->i%k", "--sizes", "i=2,j=3,k=4"], "invalid character"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3"], "no extent for index k"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3,k=4,z=5"], "not in the expression"),
    (["run", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--dtype", "int8"], "--dtype"),
    (["validate", "/nonexistent/p.json"], "cannot read"),
    (["frobnicate"], "invalid choice"),
])
def test_cli_errors_exit_2(args, needle):
    r = _cli(*args)
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_reference_is_independent():
    """The CLI's numpy reference agrees with the executor on the spec examples."""
    for build in ex.ALL:
        prog, expr, shapes, out_shape = build("float64")
        rng = np.random.default_rng(0)
        ins = [rng.standard_normal(s) for s in shapes]
        out = np.zeros(out_shape)
        ref_out = out.copy()
        reference_execute(prog, [*ins, ref_out])
        np.testing.assert_allclose(ref_out, np.einsum(expr, *ins), atol=1e-12)

"""The ``teir-plan`` command line, end to end in subprocesses: every subcommand, its
outputs, and its error paths (one line on stderr, no traceback; exit status 1 for an
invalid program, 2 for bad usage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import teir_plan as tp
from teir_plan.cli import reference_execute
from tests import spec_examples as ex

SPEC_SIZES = "p=8,q=48,r=24,s=48,t=8,u=48"  # the example command


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teir_plan", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


def test_explain_json_and_figure(tmp_path):
    r = _cli("explain", "trus,pqtu->pqrs", "--sizes", SPEC_SIZES, "--format", "json",
             "--figure", str(tmp_path / "tiles.png"))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # Shapes plan as float64 by default, as tp.plan's do.
    assert d["expression"] == "trus,pqtu->pqrs" and d["dtype"] == "float64"
    assert d["shape"] == [8, 48, 24, 48]
    assert [i["role"] for i in d["indices"]] == ["N", "N", "M", "M", "K", "K"]
    prog = tp.TEIR.from_json(json.dumps(d["teir"]))
    prog.validate()
    assert prog.primitives.prim_main in (tp.Prim.GEMM, tp.Prim.BRGEMM)
    assert (tmp_path / "tiles.png").read_bytes()[:4] == b"\x89PNG"


def test_explain_html_in_a_subprocess():
    r = _cli("explain", "trus,pqtu->pqrs", "--sizes", "p=4,q=8,r=3,s=8,t=2,u=8",
             "--format", "html", "--dtype", "float64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>")


@pytest.mark.parametrize("fmt,check", [
    ("text", lambda out: "== trus,pqtu->pqrs" in out and "GEMM(" in out),
    ("markdown", lambda out: out.startswith("# teir_plan") and "| index | role |" in out),
])
def test_explain_text_and_markdown(capsys, fmt, check):
    from teir_plan.cli import main

    assert main(["explain", "trus,pqtu->pqrs", "--sizes", "p=4,q=8,r=3,s=8,t=2,u=8",
                 "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert check(out)
    assert "\x1b[" not in out  # not a terminal: plain text


def test_explain_measure_to_file(tmp_path, capsys):
    from teir_plan.cli import main

    out = tmp_path / "report.md"
    assert main(["explain", "ij,jk->ik", "--sizes", "i=64,j=32,k=48", "--measure",
                 "--format", "markdown", "-o", str(out)]) == 0
    assert "measured seconds" in out.read_text()
    assert "report written to" in capsys.readouterr().err


def test_run_checks_against_numpy():
    r = _cli("run", "trus,pqtu->pqrs", "--sizes", "p=4,q=8,r=3,s=8,t=2,u=8")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("GFLOP/s") == 2 and "(ok)" in r.stdout and "numpy.einsum" in r.stdout


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_run_and_explain_take_complex_dtypes(dtype):
    r = _cli("run", "ab,bc->ac", "--sizes", "a=6,b=5,c=7", "--dtype", dtype)
    assert r.returncode == 0, r.stderr
    assert "(ok)" in r.stdout and "vs complex128 numpy" in r.stdout
    r = _cli("explain", "ab,bc->ac", "--sizes", "a=6,b=5,c=7", "--dtype", dtype)
    assert r.returncode == 0, r.stderr
    assert f"data_type = {dtype}" in r.stdout


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_run_and_explain_take_16_bit_dtypes(dtype):
    """16-bit operands, summed in float32 and rounded once: held to half a unit in the
    last place of the result's scale against float64 (a wrong sum exits 1)."""
    r = _cli("run", "abc,cd->abd", "--sizes", "a=30,b=20,c=40,d=50", "--dtype", dtype)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"  {dtype}\n" in r.stdout and "(ok)" in r.stdout and "vs float64 numpy" in r.stdout
    r = _cli("explain", "ij->i", "--sizes", "i=300,j=200", "--dtype", dtype)
    assert r.returncode == 0, r.stderr
    assert f"{dtype} read in place, summed in float32" in r.stdout


def test_validate_etops_json(tmp_path):
    prog, *_ = ex.brgemm_contraction("float64")
    f = tmp_path / "program.json"
    f.write_text(prog.to_etops_json())
    r = _cli("validate", str(f))
    assert r.returncode == 0 and r.stdout.strip().endswith("valid"), r.stderr


@pytest.mark.parametrize("build,flavour", [(ex.gemm_contraction, "to_json"),
                                           (ex.brgemm_contraction, "to_etops_json"),
                                           (ex.tiled_permutation, "to_json")])
def test_execute_spec_programs(tmp_path, build, flavour):
    prog, *_ = build("float64")
    f = tmp_path / "program.json"
    f.write_text(getattr(prog, flavour)())
    r = _cli("execute", str(f))
    assert r.returncode == 0 and "(ok)" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_execute_complex_programs(tmp_path, dtype):
    for build in (ex.gemm_contraction, ex.tiled_permutation):
        prog, *_ = build(dtype)
        f = tmp_path / "program.json"
        f.write_text(prog.to_json())
        r = _cli("execute", str(f))
        assert r.returncode == 0 and "(ok)" in r.stdout, r.stdout + r.stderr
        assert f"data_type={dtype}" in r.stdout


def test_the_reference_keeps_imaginary_parts():
    for build in ex.ALL:
        prog, expr, shapes, out_shape = build("complex128")
        rng = np.random.default_rng(0)
        ins = [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in shapes]
        out = np.zeros(out_shape, np.complex128)
        reference_execute(prog, [*ins, out])
        np.testing.assert_allclose(out, np.einsum(expr, *ins), atol=1e-12)


def test_reference_is_independent_of_the_executor():
    """The CLI's reference (numpy.einsum over strided views) agrees with numpy.einsum on
    the arrays of every spec example, without running the executor."""
    for build in ex.ALL:
        prog, expr, shapes, out_shape = build("float64")
        rng = np.random.default_rng(0)
        ins = [rng.standard_normal(s) for s in shapes]
        out = np.zeros(out_shape)
        reference_execute(prog, [*ins, out])
        np.testing.assert_allclose(out, np.einsum(expr, *ins), atol=1e-12)


def test_execute_detects_a_wrong_result(tmp_path, monkeypatch):
    """A reference that disagrees makes ``execute`` fail: the check can fail."""
    from teir_plan import cli

    prog, *_ = ex.gemm_contraction("float64")
    f = tmp_path / "p.json"
    f.write_text(prog.to_json())

    def wrong(prog, arrays):  # type: ignore[no-untyped-def]
        arrays[-1][...] = 0.0

    monkeypatch.setattr(cli, "reference_execute", wrong)
    assert cli.main(["execute", str(f)]) == 1


@pytest.mark.parametrize("how", [
    "--quick",
    # The full calibration: tested in-process (test_concurrency, test_calibration_check);
    # through the command line it took 30-250 s of the suite on the 2-core AVX2 machine.
    pytest.param("", marks=pytest.mark.slow),
])
def test_calibrate_without_saving(tmp_path, how):
    env = {**os.environ, "TEIR_PLAN_CACHE_DIR": str(tmp_path)}
    r = _cli("calibrate", "--no-save", *([how] if how else []), env=env)
    assert r.returncode == 0, r.stderr
    assert "source" in r.stdout and not any(tmp_path.iterdir())
    assert ("first-use" if how else "calibrated") in r.stdout.split("source", 1)[1]


def _bad_program(tmp_path: Path) -> str:
    prog, *_ = ex.gemm_contraction()
    d = json.loads(prog.to_json())
    d["strides"][0][0] = 5  # in0 does not take part in the N axis p: must be 0 (10.1)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    return str(f)


BAD = [
    (["explain", "ij,jk->i%k", "--sizes", "i=2,j=3,k=4"], "invalid character"),
    (["explain", "ij,jk->ikl", "--sizes", "i=2,j=3,k=4,l=2"], "'l' does not appear"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3"], "no extent for index k"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3,k=4,z=5"], "not in the expression"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=x,k=4"], "not an integer"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3,k=-4"], "negative"),
    (["explain", "ij,jk->ik"], "--sizes"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--format", "xml"], "invalid choice"),
    (["run", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--dtype", "int8"], "--dtype"),
    (["validate", "/nonexistent/p.json"], "cannot read"),
    (["execute", "/"], "cannot read"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
    (["run", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--optimize", "fastest"], "optimize"),
    (["run", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--threads", "0"], "set_num_threads"),
    (["explain", "ij,jk->ik", "--sizes", "i=2,j=3,k=4", "--order", "Z"], "invalid choice"),
]
IN_SUBPROCESS = {0, 2, 8, 10, 13}  # the rest run in-process: same code, less start-up time


def _fix_paths(tmp_path: Path, args: list[str]) -> list[str]:
    if args[-1:] == ["BAD"]:
        prog, *_ = ex.gemm_contraction()
        d = json.loads(prog.to_json())
        d["strides"][0][0] = 5  # in0 does not take part in the N axis p: must be 0 (10.1)
        (tmp_path / "bad.json").write_text(json.dumps(d))
        return [args[0], str(tmp_path / "bad.json")]
    if args[-1:] == ["NOTJSON"]:
        (tmp_path / "x.json").write_text("{not json")
        return [args[0], str(tmp_path / "x.json")]
    return args


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_arguments_exit_2_with_one_line(tmp_path, capsys, case):
    from teir_plan.cli import main

    args, needle = BAD[case]
    args = _fix_paths(tmp_path, args)
    if case in IN_SUBPROCESS:
        r = _cli(*args)
        code, err = r.returncode, r.stderr
    else:
        code = main(args)
        err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("teir-plan: error:")
    assert needle in lines[0]


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("teir-plan")
    if not exe.exists():
        pytest.skip("teir-plan console script not installed in this environment")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "explain" in r.stdout and "execute" in r.stdout


def test_demo_runs(tmp_path):
    r = subprocess.run([sys.executable, "-m", "teir_plan.demo"], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "BRGEMM" in r.stdout and "numpy.einsum" in r.stdout
    assert r.stdout.count("(ok)") == 1 and ": ok)" in r.stdout and "WRONG" not in r.stdout
    for name in ("demo-tiles.png", "demo-tiles-10.3.6.png", "demo-tiles-10.3.7.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_execute_a_program_whose_output_has_no_free_axis(tmp_path):
    """A dot product (only a K axis): the reference writes a 0-d view of out."""
    prog = tp.TEIR.from_fields(data_type="float32", prim_first="zero", prim_main="gemm",
                               prim_last="none", dim_types=["k"], exec_types=["prim"],
                               dim_sizes=[8], strides=[[1], [1], [0]])
    f = tmp_path / "dot.json"
    f.write_text(prog.to_json())
    r = _cli("execute", str(f))
    assert r.returncode == 0 and "(ok)" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args,words", [
    (["run", "ij,jk->ik", "--sizes", "i=100000000000,j=100000,k=4"], ["--sizes", "GiB"]),
    (["run", "ij,jk->ik", "--sizes", "i=1_0,j=2,k=2"], ["--sizes", "not an integer"]),
])
def test_bad_files_and_sizes_are_one_line_errors(tmp_path, args, words):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    r = _cli(*[str(bad) if a == "BADFILE" else a for a in args])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr


def test_the_package_reports_its_version() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', text, re.M)
    assert match is not None and tp.__version__ == match.group(1)


def _gemm_json() -> str:
    prog, *_ = ex.gemm_contraction("float64")
    return prog.to_json()


@pytest.mark.parametrize("what", ["rule", "not json", "not utf-8"])
@pytest.mark.parametrize("command", ["validate", "execute"])
def test_an_invalid_program_exits_1_with_one_line(tmp_path, what, command):
    """An invalid program is not bad usage: status 1, one line naming what is wrong."""
    d = json.loads(_gemm_json())
    d["strides"][0][0] = 5  # in0 does not take part in the N axis p: must be 0 (10.1)
    data = {"rule": json.dumps(d).encode(), "not json": b"{not json",
            "not utf-8": b"\xff\xfe{"}[what]
    f = tmp_path / "p.json"
    f.write_bytes(data)
    r = _cli(command, str(f))
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("teir-plan: error:"), r.stderr
    assert {"rule": "stride", "not json": "JSON", "not utf-8": "JSON"}[what] in lines[0]


def test_a_program_from_standard_input():
    r = subprocess.run([sys.executable, "-m", "teir_plan", "validate", "-"], input=_gemm_json(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("valid"), r.stderr
    r = subprocess.run([sys.executable, "-m", "teir_plan", "execute", "-"], input=_gemm_json(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "(ok)" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "teir_plan", "validate", "-"], input="[1, 2]",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr


def test_version():
    r = _cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"teir-plan {tp.__version__}", r.stderr


def test_every_argument_has_help():
    import argparse

    from teir_plan.cli import parser

    def actions(p: argparse.ArgumentParser):  # type: ignore[no-untyped-def]
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, q in a.choices.items():
                    yield from ((f"{name} {b.dest}", b) for _, b in actions(q))
            else:
                yield a.dest, a

    seen = dict(actions(parser()))
    assert {"explain expr", "run dtype", "run optimize", "explain threads", "explain order",
            "validate program", "calibrate verbose", "version"} <= set(seen)
    missing = [d for d, a in seen.items() if not a.help or a.help == argparse.SUPPRESS]
    assert missing == [], missing


def test_run_and_explain_take_the_plan_options(capsys):
    """--optimize/--threads/--order reach tp.plan: the report names the layout asked for,
    and a three-operand run with a path strategy and one thread still agrees with numpy."""
    from teir_plan import cli
    from teir_plan.executor import get_num_threads, set_num_threads

    before = get_num_threads()
    try:
        assert cli.main(["explain", "ij,jk->ik", "--sizes", "i=64,j=48,k=80", "--order",
                         "F", "--threads", "1", "--format", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        # F order: out's unit stride is along i (64): numpy's F-ordered result.
        sizes, out_strides = d["teir"]["dim_sizes"], d["teir"]["strides"][-1]
        assert [n for n, st in zip(sizes, out_strides) if st == 1] == [64], d["teir"]
        assert cli.main(["explain", "ij,jk->ik", "--sizes", "i=64,j=48,k=80", "--order",
                         "C", "--format", "json"]) == 0
        d = json.loads(capsys.readouterr().out)  # C order: along k (80)
        sizes, out_strides = d["teir"]["dim_sizes"], d["teir"]["strides"][-1]
        assert [n for n, st in zip(sizes, out_strides) if st == 1] == [80], d["teir"]
        assert get_num_threads() == 1
        assert cli.main(["run", "ij,jk,kl->il", "--sizes", "i=8,j=9,k=10,l=11",
                         "--optimize", "greedy", "--order", "C", "--threads", "1"]) == 0
        assert "(ok)" in capsys.readouterr().out
        assert cli.main(["run", "ij,jk->ik", "--sizes", "i=8,j=9,k=10",
                         "--optimize", "false", "--dtype", "float32"]) == 0
        assert "(ok)" in capsys.readouterr().out
    finally:
        set_num_threads(before)


def test_calibrate_prints_a_summary_and_the_tables_only_when_verbose(capsys, monkeypatch):
    from teir_plan import cli
    from teir_plan.machine import MachineParams

    params = MachineParams.reference()
    monkeypatch.setattr(tp, "calibrate", lambda save=True: params)
    assert cli.main(["calibrate", "--no-save"]) == 0
    short = capsys.readouterr().out
    table = len(params.gemm_efficiency)
    assert f"gemm_efficiency          ({table} values; --verbose prints them)" in short
    assert max(len(line) for line in short.splitlines()) < 120
    assert cli.main(["calibrate", "--no-save", "--verbose"]) == 0
    full = capsys.readouterr().out
    assert str(params.gemm_efficiency) in full and len(full) > len(short)

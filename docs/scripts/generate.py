"""Generate the docs' derived content.

* docs/scripts/first-einsum.out: the real output of the getting-started example
  (docs/scripts/first_einsum.py), run with the cost model's reference parameters, and
  docs/scripts/first-einsum-explained.md: the words under it in README.md and
  getting-started.md, written from the same run's plan (its program's records, by
  ``teir_plan.render.notes.describe_program``), so that they describe what is printed.
* docs/performance.md: the benchmark results files benchmarks/results/*-latest.md and,
  for every other machine class (CPU, vector ISA, threads) with results in
  benchmarks/results/archive/, that class's newest file: one table per machine class.
* The GENERATED blocks of docs/cost-model.md and README.md, from the same files.

Two modes, so that testing never edits tracked files:

* ``generate.py`` (``make docs``) writes the files; commit them with the results or
  code change that caused them.
* ``generate.py --check`` (``make test``) writes nothing.  It fails when a page no
  longer matches the results files it is generated from (a pure function of files in
  the repository), and only warns when the example's output differs, because that
  output depends on the planner and the machine it runs on.

Nothing is invented: a results file that does not exist is reported as missing, with
the command that produces it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "benchmarks" / "results"

# (file stem, title, command that produces it, what it measures)
BENCHMARKS = [
    ("tccg", "TCCG contractions", ".venv/bin/python -m benchmarks.tccg",
     "The 24 binary contractions of the TCCG benchmark in float32: GFLOP/s of tp.einsum "
     "(`tp`: the result's layout chosen by the planner, as with numpy's default "
     "`order='K'`; `tp(out=)`: into a C-order `out`; `tp(C)`: the same C-order result "
     "allocated by tp, `order='C'`; `tp(out=own)`: into an `out` of the layout tp picks "
     "itself, `plan.empty_out()`) against numpy.einsum(optimize=True), opt_einsum, "
     "PyTorch, etops, TBLIS (`pytblis.einsum`) and JAX (`jax.jit` of `jnp.einsum`, compiled "
     "before timing), each when installed (runs before TBLIS and JAX were added have no "
     "column for them; the machine line names each peer's version and threads, and those "
     "not installed), all measured in the same run, with each case's roofline.  Every "
     "answer is checked against numpy.einsum in float64; a peer that raises or disagrees "
     "is marked `error` or `wrong` in its cell and left out of the case.  The two "
     "GEMM-like cases (one GEMM once adjacent indices fuse) are also timed as that GEMM "
     "through numpy.matmul on their own arrays, and at their m and k with the arrays in "
     "cache: a GEMM's rate depends on its shape, and a short k streamed from memory does "
     "not reach the rate of a large square product."),
    ("everyday", "Everyday einsums", ".venv/bin/python -m benchmarks.everyday",
     "Contractions users write outside the TCCG suite, in microseconds against "
     "numpy.einsum(optimize=True), opt_einsum, PyTorch, TBLIS and JAX (each when "
     "installed; runs before TBLIS and JAX were added have no column for them) in the same "
     "run: matrix products "
     "large and small, batched and attention-style products, matrix-vector, dot and "
     "elementwise products, a permutation and a diagonal (views of the operand in all three), "
     "and a three-operand chain.  Where tp is slower, this table says so."),
    ("reductions", "Reductions", ".venv/bin/python -m benchmarks.reductions",
     "One-operand sums and matrix-vector products with a long summed axis, 64-286 MiB "
     "read once, Gram matrices and a weight gradient over a long K, and mid-sized sums "
     "(1-16 MiB) summed again and again, against numpy.einsum(optimize=True), numpy's "
     "own sum or matmul and "
     "PyTorch (its einsum or its own sum/matmul, the faster; in a process of its own), "
     "with the machine's read bandwidth measured in the same run and the cost model's "
     "prediction for each."),
    ("mixed-numpy", "Alternating with numpy.matmul", ".venv/bin/python -m benchmarks.mixed",
     "tp.einsum in a loop that also calls numpy.matmul, each call timed alone and "
     "alternated, under three thread settings, each in its own process: as shipped (tp "
     "limits GNU OpenMP's spinning), GNU OpenMP's default spin, and as shipped with "
     "OpenBLAS' idle threads sleeping at once (`OPENBLAS_THREAD_TIMEOUT=4`, set before numpy "
     "is imported).  See [Troubleshooting](troubleshooting.md#performance-questions)."),
    ("mixed-numba", "Alternating with the user's own numba code",
     ".venv/bin/python -m benchmarks.mixed --peer numba",
     "tp.einsum in a loop that also runs the user's own numba parallel loop (a prange over "
     "16M float32), under the same settings as above: numba's workers, tp's own pool, spin "
     "after the user's loop, and the free-cores check must not take them for another "
     "library's (`cores unchecked`: the check off)."),
    ("gaps", "Calls between other work", ".venv/bin/python -m benchmarks.gaps",
     "Small einsums called after 0-5 ms of the caller's own work, when the executor's "
     "worker threads have gone to sleep: tp as shipped (a small plan then runs on one "
     "thread), tp with its threads always as planned, tp on one thread and "
     "numpy.einsum(optimize=True), median microseconds a call.  See "
     "[Troubleshooting](troubleshooting.md#performance-questions)."),
    ("prims", "Primitives", ".venv/bin/python -m benchmarks.prims",
     "The executor's building blocks against numpy: one large GEMM tile, a permutation, and "
     "the spec's GEMM (10.3.6) and BRGEMM (10.3.7) schedules."),
    ("overhead", "Overheads", ".venv/bin/python -m benchmarks.overhead",
     "Planning time, the per-call overhead of a cached plan on a tiny contraction, and the "
     "first call in a fresh process."),
    ("trees", "Einsum trees", ".venv/bin/python -m benchmarks.trees",
     "Expressions of three or more operands, every system given the same pairwise path: "
     "the Einsum Trees paper's trees (einsum_ir's artifact; TNLM, 7 TFLOP, only with "
     "`--all`), ML chains and einsum_benchmark's generated networks, against "
     "numpy.einsum(optimize=path), opt_einsum, opt_einsum with PyTorch, cotengra, TBLIS "
     "(cotengra with `implementation=\"pytblis\"`) and JAX (`jax.jit` of "
     "`jnp.einsum(optimize=path)`; runs before TBLIS and JAX were added have no column for "
     "them), each peer checked against the path in float64, and "
     "against tp itself with every intermediate in opt_einsum's order (the layouts chosen "
     "across the tree switched off; the two timed in turns).  Each of the two also "
     "chooses its result's layout: a C-order result is kept unless another is predicted "
     "10% faster (schedule/build.py, LAYOUT_MARGIN), so where the layouts chosen across "
     "the tree bring C order within that margin (SYN) tp writes C order while opt_einsum's "
     "orders return a permuted view, and the column compares the two layouts too.  Each "
     "system's time is its best over rounds that time every system back to back."),
    ("trees-overhead", "Tree plans: per-step overhead",
     ".venv/bin/python -m benchmarks.trees --overhead",
     "A cached tree plan's time per pairwise step on chains of 8 x 8 matrices, and the "
     "tiny binary call, against numpy.einsum and opt_einsum."),
    ("tccg-complex64", "TCCG contractions in complex64",
     ".venv/bin/python -m benchmarks.tccg --quick --dtype complex64 --no-calibrate "
     "--systems tp,numpy,opt_einsum,torch --cases 0-19,21-23 (23 of 24: the 7248^3 GEMM, "
     "and tp's out= variants, left out to fit the shared machine's memory and time)",
     "The TCCG contractions in complex64 (8 real flops per complex multiply-add) against "
     "numpy.einsum(optimize=True), opt_einsum and PyTorch (etops has no complex type), "
     "with numpy.matmul's complex rate on the same GEMMs."),
    ("tccg-complex128", "TCCG contractions in complex128",
     ".venv/bin/python -m benchmarks.tccg --quick --dtype complex128 --no-calibrate "
     "--systems tp,numpy,opt_einsum,torch --cases 12-19,21-23,2-11,0,1 (cases 12-19 "
     "measured: the out-of-memory killer stopped it at case 21, beside the other jobs)",
     "The same in complex128."),
    ("trees-circuits-complex64", "Quantum-circuit networks in complex64",
     ".venv/bin/python -m benchmarks.trees --circuits --dtype complex64 --rounds 3",
     "Brickwork circuits of unitary 2 x 2 and (2, 2, 2, 2) gates on a product state, "
     "10-16 qubits (the output state, or one amplitude), every system given opt_einsum's "
     "path, as the trees above."),
    ("trees-circuits-complex128", "Quantum-circuit networks in complex128",
     ".venv/bin/python -m benchmarks.trees --circuits --dtype complex128 --rounds 3",
     "The same in complex128."),
    ("dask", "Dask arrays: tp.einsum against dask.array.einsum",
     ".venv/bin/python -m benchmarks.dask",
     "TCCG-shaped and tree expressions on dask arrays chunked 2-8 ways, on a LocalCluster "
     "of worker processes (one thread each): tp.einsum (its own chunk choice, every block "
     "through teir_plan) against dask.array.einsum(optimize=True) on the same arrays, "
     "each on a cluster started for it, with each worker's peak memory: the kernel's "
     "high-water mark of its resident set over a run (reset as the run starts) above its "
     "idle resident set with the operands loaded, the median over the timed runs."),
    ("dask-memory", "Dask arrays: operands larger than a worker's memory",
     ".venv/bin/python -m benchmarks.dask --memory-test",
     "ik,kj->ij over 4 GiB of operands generated on workers limited to 1.5 GiB each, "
     "checked against a blocked numpy reference."),
    ("cost-accuracy", "Cost model accuracy", ".venv/bin/python -m benchmarks.cost_accuracy "
     "--calibrate", "Predicted against measured seconds for the 24 TCCG contractions; see "
     "[Cost model](cost-model.md)."),
]


def demote(markdown: str, levels: int = 1) -> str:
    """Headings one level down, so a results file nests under a page section."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown,
                  flags=re.M)


def body(markdown: str) -> str:
    """A results file without its own title line."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip()


# Runs the example, keeps what it prints, and describes the plan it made (its `plan`).
_EXAMPLE = """
import contextlib, io, json, runpy, sys
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    names = runpy.run_path(sys.argv[1], run_name="__main__")
from teir_plan.render.notes import describe_program
plan = names["plan"]
print(json.dumps({"output": printed.getvalue(),
                  "explained": describe_program(plan.main_step.chosen) + "\\n"}))
"""


def first_einsum() -> tuple[str, str]:
    """The example's output and the words that describe its plan."""
    # The reference parameters, as the test suite's: the README shows the same plan on
    # every machine, and the run neither measures this one nor reads its cache.
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TEIR_PLAN_CACHE_DIR": cache,
               "TEIR_PLAN_AUTOCALIBRATE": "reference"}
        out = subprocess.run([sys.executable, "-c", _EXAMPLE,
                              str(DOCS / "scripts" / "first_einsum.py")],
                             check=True, capture_output=True, text=True, env=env, cwd=ROOT)
    run = json.loads(out.stdout.strip().splitlines()[-1])
    return run["output"], run["explained"]


def performance_page() -> str:
    parts = [
        "# Performance",
        "",
        "<!-- Generated by docs/scripts/generate.py from benchmarks/results/*-latest.md; "
        "edit those scripts, not this page. -->",
        "",
        "Every number on this page is read from the results files in `benchmarks/results/`, "
        "written by the benchmark scripts in `benchmarks/`; `make docs` regenerates the page. "
        "Each file names the machine and the library versions it was measured with. "
        "`make bench` reruns the primitive, everyday, alternating and TCCG benchmarks.",
        "",
        "Which BLAS the peers ran: a machine line with `openblas kernels` names the kernels "
        "numpy's OpenBLAS (numpy, opt_einsum, cotengra and tp's own BLAS tiles) ran. On the "
        "AMD EPYC Zen 5 (AVX-512), results without it were measured with OpenBLAS held at "
        "its Haswell (AVX2) kernels by the host's `OPENBLAS_CORETYPE`, about half its rate "
        "there: their ratios against numpy and opt_einsum overstate what users of that CPU "
        "see (trees: 2.28x the best peer against those kernels, 1.84x against its AVX-512 "
        "ones with the same code; the trees section below has the latest run).",
        "",
    ]
    for stem, title, command, what in BENCHMARKS:
        parts += [f"## {title}", "", what, "", f"Reproduce: `{command}`", ""]
        runs = runs_by_class(stem)
        if not runs:
            parts += [f"No results yet: `benchmarks/results/{stem}-latest.md` does not exist.",
                      ""]
        for m, data, md in runs:
            if len(runs) > 1:  # one table per machine class, the latest run's first
                parts += [f"### {class_label(m)}", "",
                          f"Cost-model parameters: {params_label(m, data)}; from "
                          f"`{md.relative_to(ROOT)}`.", "",
                          demote(body(md.read_text()), 2), ""]
            else:
                parts += [demote(body(md.read_text()), 1), ""]
    parts += archived_runs()
    return "\n".join(parts)


def machine_class(m: dict) -> tuple[str, str, str]:
    """What makes results comparable: the CPU, the vector ISA the kernels were generated
    for (recorded since the first-use calibration; older files do not say) and the
    threads.  The CPU is told apart by the compile target's CPU name where the file
    records the vector target (``znver4-avx512-64b-32r``): two generations of one model
    name (an "AMD EPYC" Zen 4 and Zen 5) are two classes."""
    cpu = str(m.get("cpu", "unknown CPU"))
    target = m.get("vector target")
    if target:
        cpu = f"{cpu} ({str(target).rsplit('-', 3)[0]})"
    return (cpu, str(m.get("isa") or "ISA not recorded"), str(m.get("threads")))


def class_label(m: dict) -> str:
    cpu, isa, threads = machine_class(m)
    return f"{cpu}, {isa}, {threads} threads"


def params_label(m: dict, data: dict) -> str:
    """Which machine parameters the run's plans were ranked with: "calibrated",
    "first-use estimate", "ISA-derived defaults", "reference machine's" (results files
    since the first-use calibration say), "defaults" or "not recorded"."""
    source = m.get("params")
    if source:
        return {"calibrated": "calibrated", "first-use": "first-use estimate",
                "isa": "ISA-derived defaults",
                "reference": "reference machine's"}.get(source, str(source))
    params = data.get("params")
    calibrated = m.get("calibrated", params.get("calibrated") if isinstance(params, dict)
                       else None)
    if calibrated is None and "cost model" in m:
        calibrated = "calibrated" in str(m["cost model"])
    if calibrated is None:
        return "not recorded"
    return "calibrated" if calibrated else "defaults"


def runs_by_class(stem: str) -> list[tuple[dict, dict, Path]]:
    """(machine, data, markdown file) of the newest run of benchmark ``stem`` on each
    machine class: the latest results file first, then each other class's newest file
    in benchmarks/results/archive/, newest first."""
    latest = RESULTS / f"{stem}-latest.json"
    files = ([latest] if latest.exists() else []) + sorted(
        (RESULTS / "archive").glob(f"{stem}-[0-9]*.json"))
    newest: dict[tuple[str, str, str], tuple[dict, dict, Path]] = {}
    for path in files:
        md = path.with_suffix(".md")
        if not md.exists():
            continue
        data = json.loads(path.read_text())
        m = data["machine"]
        key = machine_class(m)
        if key not in newest or str(m.get("date", "")) > str(newest[key][0].get("date", "")):
            newest[key] = (m, data, md)
    first = []
    if latest.exists() and latest.with_suffix(".md").exists():
        key = machine_class(json.loads(latest.read_text())["machine"])
        first = [newest.pop(key)]
    return first + sorted(newest.values(), key=lambda r: str(r[0].get("date", "")),
                          reverse=True)


def archived_runs() -> list[str]:
    """A line per TCCG results file kept in benchmarks/results/archive/: earlier runs,
    on the latest run's kind of machine or others, with their headline numbers."""
    files = sorted((RESULTS / "archive").glob("tccg-*.json"))
    if not files:
        return []
    lines = ["## Earlier runs", "",
             "The machine a session runs on is not always the same kind: the results files of "
             "earlier TCCG runs, on this kind of machine or others, are kept in "
             "`benchmarks/results/archive/` (with the overhead, primitive and cost-model files "
             "of the same day and machine).", ""]
    for path in files:
        d = json.loads(path.read_text())
        m, s = d["machine"], d["summary"]
        lines.append(
            f"- `{path.relative_to(ROOT)}`: {m.get('date', '')} on {m.get('cpu', '')} "
            f"({m.get('threads')} threads), float32 GEMM {d['gemm_gflops']:.0f} GFLOP/s, copy "
            f"bandwidth {d['bandwidth_gbs']:.1f} GB/s; geomean tp/best peer "
            f"{s['geomean tp/best peer']:.2f}, tp at {s['geomean tp %roofline']:.1f} % of "
            f"roofline against {s['geomean best peer %roofline']:.1f} % for the best peer")
    return [*lines, ""]


def fill(path: Path, text: str, source: str, content: str) -> str:
    """``text`` (of ``path``) with the block between the GENERATED markers for ``source``
    replaced by ``content``."""
    begin = f"<!-- BEGIN GENERATED: {source} -->"
    end = "<!-- END GENERATED -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no '{begin}' block")
    return pattern.sub(lambda _: f"{begin}\n{content.strip()}\n{end}", text)


def cost_model_page() -> str:
    src = "benchmarks/results/cost-accuracy-latest.md"
    path = ROOT / src
    content = (demote(body(path.read_text()), 1) if path.exists() else
               "No results yet: run `.venv/bin/python -m benchmarks.cost_accuracy --calibrate`.")
    page = DOCS / "cost-model.md"
    return fill(page, page.read_text(), src, content)


def _geo(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _measured_on(data: dict) -> str:
    """Which machine a summary's numbers come from, and which parameters ranked its plans."""
    m = data["machine"]
    return (f"Measured {m.get('date', '')} on {class_label(m)}; cost-model parameters: "
            f"{params_label(m, data)}.")


def _tccg_summary(data: dict) -> str:
    """Per system: geomean GFLOP/s and % of roofline over the TCCG cases it ran."""
    systems = ["tp", "numpy", "opt_einsum", "torch", "etops", "tblis", "jax"]
    names = {"tp": "teir_plan", "numpy": "numpy.einsum", "opt_einsum": "opt_einsum",
             "torch": "torch.einsum", "etops": "etops", "tblis": "TBLIS (pytblis)",
             "jax": "JAX (jit)"}
    cases = data["cases"]
    present = [s for s in systems if any(s in c["gflops"] for c in cases)]
    rows = ["| TCCG, float32 | " + " | ".join(names[s] for s in present) + " |",
            "|---|" + "---|" * len(present)]

    def row(label: str, metric) -> str:  # type: ignore[no-untyped-def]
        vals = []
        for s in present:
            got = [metric(c, s) for c in cases if s in c["gflops"]]
            vals.append(f"{_geo(got):.1f}" if got else "-")
        return f"| {label} | " + " | ".join(vals) + " |"

    rows.append(row(f"geomean GFLOP/s ({len(cases)} cases)", lambda c, s: c["gflops"][s]))
    rows.append(row("geomean % of roofline",
                    lambda c, s: 100 * c["gflops"][s] / c["roofline_gflops"]))
    wins = sum(1 for c in cases if c.get("tp_vs_best_peer", 0) >= 1)
    return "\n".join(rows) + (
        f"\n\nteir_plan is at least as fast as every other system measured on {wins} of "
        f"{len(cases)} cases. {_measured_on(data)}")


def _prims_summary(data: dict) -> str:
    header = data["header"]
    col = {name: header.index(name) for name in ("benchmark", "teir_plan", "numpy", "unit")}
    rows = ["| primitive | teir_plan | numpy | unit |", "|---|---|---|---|"]
    for r in data["rows"]:
        rows.append(f"| {r[col['benchmark']]} | {r[col['teir_plan']]:.1f} | "
                    f"{r[col['numpy']]:.1f} | {r[col['unit']]} |")
    return "\n".join(rows) + f"\n\n{_measured_on(data)}"


def _everyday_summary(data: dict) -> str:
    """One line per everyday case: tp's time and the fastest other system's."""
    rows = ["| everyday einsum | teir_plan us | fastest other | its us |", "|---|---|---|---|"]
    for case in data["cases"]:
        secs = case["seconds"]
        peer = min((n for n in secs if n != "tp"), key=lambda n: secs[n])
        shapes = " ".join("x".join(map(str, s)) for s in case["shapes"])
        rows.append(f"| `{case['expr']}` {shapes} {case['dtype']} | {secs['tp'] * 1e6:.0f} | "
                    f"{peer} | {secs[peer] * 1e6:.0f} |")
    wins = sum(c["best_peer_over_tp"] >= 1.0 for c in data["cases"])
    # Each expression once, however many sizes of it another system won.
    slower = list(dict.fromkeys(f"`{c['expr']}`" for c in data["cases"]
                                if c["best_peer_over_tp"] < 1.0))
    return "\n".join(rows) + (
        f"\n\nOutside TCCG, teir_plan is the fastest on {wins} of {len(data['cases'])} "
        f"everyday cases in this run; another system is faster on {', '.join(slower)} "
        "(a single case moves 10-30 % between runs on this shared machine; a view, "
        "`ijk->kji` or `ii->i`, is a few microseconds in every system, so it ranks by "
        f"call overhead). {_measured_on(data)}")


def readme(example_output: str, explained: str) -> str:
    path = ROOT / "README.md"
    text = path.read_text()
    script = (DOCS / "scripts" / "first_einsum.py").read_text()
    if script not in text:
        raise SystemExit("README.md: its example differs from docs/scripts/first_einsum.py, "
                         "whose output it shows; make them the same")
    text = fill(path, text, "docs/scripts/first-einsum.out",
                f"```text\n{example_output.strip()}\n```")
    text = fill(path, text, "docs/scripts/first-einsum-explained.md", explained)
    parts = []
    machines: list[str] = []  # the machine classes the summaries come from
    for stem, summary in (("tccg", _tccg_summary), ("everyday", _everyday_summary),
                          ("prims", _prims_summary)):
        path = RESULTS / f"{stem}-latest.json"
        if path.exists():
            data = json.loads(path.read_text())
            parts.append(summary(data))
            machines.append(class_label(data["machine"]))
    if machines:
        classes = list(dict.fromkeys(machines))
        how = ("read them as that machine's" if len(classes) == 1 else
               "read each table as its own machine's")
        parts.insert(0, f"These numbers come from {' and '.join(classes)}: a plan's speed "
                     f"depends on the CPU, its vector ISA and the threads, so {how}. The "
                     "performance page keeps a table for each machine class with results.")
    return fill(path, text, "benchmarks/results", "\n\n".join(parts) or
                "No benchmark results yet: run `make bench`.")


OUTPUT = DOCS / "scripts" / "first-einsum.out"
EXPLAINED = DOCS / "scripts" / "first-einsum-explained.md"


def generate(example_output: str, explained: str) -> dict[Path, str]:
    """Every generated file's new text, given the example's output and its words."""
    return {
        DOCS / "performance.md": performance_page(),
        DOCS / "cost-model.md": cost_model_page(),
        ROOT / "README.md": readme(example_output, explained),
    }


def check() -> int:
    """Compare without writing: 1 if a generated page is stale, or if the example prints
    what is committed but its plan is described otherwise; else 0."""
    committed_output, committed_words = OUTPUT.read_text(), EXPLAINED.read_text()
    stale = [p for p, text in generate(committed_output, committed_words).items()
             if p.read_text() != text]
    for p in stale:
        print(f"docs: {p.relative_to(ROOT)} does not match benchmarks/results or the "
              "example's files; run `make docs` and commit the result", file=sys.stderr)
    output, words = first_einsum()
    if output != committed_output:
        print("docs: warning: docs/scripts/first_einsum.py now prints something other than "
              "docs/scripts/first-einsum.out (the planner or the machine differs); "
              "`make docs` refreshes it", file=sys.stderr)
    elif words != committed_words:
        print("docs: docs/scripts/first-einsum-explained.md does not describe the plan "
              "docs/scripts/first-einsum.out shows; run `make docs`", file=sys.stderr)
        return 1
    return 1 if stale else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; fail if a generated page is stale")
    if parser.parse_args().check:
        raise SystemExit(check())
    output, explained = first_einsum()
    OUTPUT.write_text(output)
    EXPLAINED.write_text(explained)
    for path, text in generate(output, explained).items():
        path.write_text(text)
    print("docs: generated performance.md, cost-model.md results, README blocks, "
          "first-einsum.out, first-einsum-explained.md")


if __name__ == "__main__":
    main()

"""docs/scripts/generate.py keeps one table per machine class (CPU, vector ISA, threads) and
says which machine and which cost-model parameters each table's numbers come from."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gen(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("generate", ROOT / "docs/scripts/generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    (tmp_path / "archive").mkdir()
    return module


def _run(path: Path, cpu: str, date: str, text: str, **machine: object) -> None:
    data = {"machine": {"cpu": cpu, "threads": 2, "date": date, **machine}}
    path.with_suffix(".json").write_text(json.dumps(data))
    path.with_suffix(".md").write_text(f"# Primitive benchmarks\n\n{text}\n")


def test_one_table_per_machine_class_newest_first(gen, tmp_path) -> None:
    r = tmp_path
    _run(r / "prims-latest", "Intel Xeon", "2026-11-26 03:00", "XEON-LATEST", isa="avx512",
         params="first-use")
    _run(r / "archive/prims-2026-11-20-intel-xeon", "Intel Xeon", "2026-11-20 10:00",
         "XEON-OLD", isa="avx512")
    _run(r / "archive/prims-2026-11-23-amd-epyc", "AMD EPYC", "2026-11-23 10:00", "EPYC-OLD",
         isa="avx2")
    _run(r / "archive/prims-2026-11-25-amd-epyc", "AMD EPYC", "2026-11-25 10:00", "EPYC-NEW",
         isa="avx2", params="calibrated")
    _run(r / "archive/prims-2026-11-24-amd-epyc", "AMD EPYC", "2026-11-24 10:00", "EPYC-2",
         threads=1)  # other threads, no ISA recorded: a class of its own
    page = gen.performance_page()
    section = page.split("## Primitives", 1)[1].split("\n## ", 1)[0]
    assert "XEON-OLD" not in section and "EPYC-OLD" not in section
    order = [section.index(t) for t in ("XEON-LATEST", "EPYC-NEW", "EPYC-2")]
    assert order == sorted(order)  # the latest file first, then the others newest first
    assert "### Intel Xeon, avx512, 2 threads" in section
    assert "### AMD EPYC, avx2, 2 threads" in section
    assert "### AMD EPYC, ISA not recorded, 1 threads" in section
    assert "Cost-model parameters: first-use estimate" in section
    assert "Cost-model parameters: calibrated" in section


def test_generations_of_one_cpu_name_are_classes_of_their_own(gen, tmp_path) -> None:
    r = tmp_path
    _run(r / "prims-latest", "AMD EPYC", "2026-12-07 16:00", "ZEN4", isa="avx512",
         **{"vector target": "znver4-avx512-64b-32r"})
    _run(r / "archive/prims-2026-11-27-amd-epyc", "AMD EPYC", "2026-11-27 10:00", "ZEN5",
         isa="avx512", **{"vector target": "znver5-avx512-64b-32r"})
    _run(r / "archive/prims-2026-11-28-intel", "Intel Xeon", "2026-11-28 10:00", "SKX",
         isa="avx512", **{"vector target": "skylake-avx512-avx512-64b-32r"})
    section = gen.performance_page().split("## Primitives", 1)[1].split("\n## ", 1)[0]
    assert "ZEN4" in section and "ZEN5" in section and "SKX" in section
    assert "### AMD EPYC (znver4), avx512, 2 threads" in section
    assert "### AMD EPYC (znver5), avx512, 2 threads" in section
    assert "### Intel Xeon (skylake-avx512), avx512, 2 threads" in section


def test_the_readme_summary_names_its_machine(gen) -> None:
    data = {"machine": {"cpu": "AMD EPYC", "isa": "avx2", "threads": 2,
                        "date": "2026-11-26 05:00", "params": "isa"},
            "header": ["benchmark", "teir_plan", "numpy", "unit"],
            "rows": [["GEMM tile", 90.0, 91.0, "GFLOP/s"]]}
    text = gen._prims_summary(data)
    assert text.endswith("Measured 2026-11-26 05:00 on AMD EPYC, avx2, 2 threads; "
                         "cost-model parameters: ISA-derived defaults.")
    old = {"machine": {"cpu": "Intel Xeon", "threads": 2, "date": "d",
                       "cost model": "calibrated in this run"}}
    assert gen.params_label(old["machine"], old) == "calibrated"
    assert gen.params_label({"cpu": "x"}, {}) == "not recorded"


def test_pages_with_site_directives_say_so_on_top() -> None:
    """A page with mkdocstrings' ``:::`` or the snippets' ``--8<--`` lines reads as those raw
    lines on GitHub's file view: it says, before the first of them, that it is built
    for the site and where to read it there."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "docs"
    pages = [p for p in root.rglob("*.md") if "scripts" not in p.parts]
    with_directives = 0
    for page in pages:
        text = page.read_text()
        lines = text.splitlines()
        first = next((i for i, line in enumerate(lines)
                      if line.startswith("::: ") or line.startswith("--8<--")), None)
        if first is None:
            continue
        with_directives += 1
        assert "built for the documentation site" in "\n".join(lines[:first]), page
    assert with_directives >= 8

"""No tracked file names a path of a development machine: a user's clone has none of them,
so a notebook, doc or script that falls back to one works only where it was written."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Spelled in pieces, so that this file does not match itself.
PATTERNS = ["/" + "work/", "/" + "root/", "/" + "home/", ".." + "/shared/"]
NEEDLE = re.compile("|".join(re.escape(p) for p in PATTERNS))
EXCLUDED = (".ci/",)  # CI's scripts run on the CI host, whose paths they may name


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             timeout=60, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an sdist): no list of tracked files")
    return [f for f in out.stdout.decode().split("\0") if f]


def test_no_tracked_file_names_a_machine_path() -> None:
    files = _tracked()
    assert "README.md" in files and "pyproject.toml" in files
    found = []
    for name in files:
        if name.startswith(EXCLUDED):
            continue
        path = ROOT / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if NEEDLE.search(line):
                found.append(f"{name}:{n}: {line.strip()[:120]}")
    assert found == [], "\n".join(found)


def test_the_search_finds_a_planted_path(tmp_path: Path) -> None:
    """The pattern matches what it is meant to (a test that could not fail proves nothing)."""
    for p in PATTERNS:
        assert NEEDLE.search(f'cases = Path("{p}bench/tccg24.txt")')
    assert not NEEDLE.search("benchmarks/tccg24.txt, ~/.cache/teir_plan, notebooks/")

"""Shared pytest configuration.

* ``slow`` tests are skipped unless ``TEIR_PLAN_FUZZ=1`` or a ``-m`` expression is
  given (``make fuzz`` passes ``-m "slow or not slow"``).
* Under ``TEIR_PLAN_FUZZ=1`` the session ends with the number of examples each
  counted property ran (``tests.strategies.counted``), summed over xdist workers.
* Tests plan against the fixed reference machine parameters
  (``MachineParams.reference()``), never against this machine's ISA-derived defaults, a
  first-use measurement or a calibration the user's machine has cached:
  ``TEIR_PLAN_AUTOCALIBRATE=reference`` (set before teir_plan is imported), and
  ``TEIR_PLAN_CACHE_DIR`` points at an empty directory of the session's own, so a test
  that checks the shape of a chosen plan means the same on every machine (and a test run
  never writes into the user's cache).  Tests of the calibration itself set the variable
  back with monkeypatch.
* Plans run on the threads they were planned for: a call never finds the worker threads
  asleep nor the cores busy (``schedule/idle.py`` would run a plan on fewer threads, as
  the other xdist worker holds a core, which the one-thread runs of the tests cover
  already, and the parallel runs would go untested): ``TEIR_PLAN_CHECK_CORES=0``, for
  the tests' own processes too.  tests/test_idle.py sets its own.
* Plans do not time themselves against their runner-ups (``TEIR_PLAN_SELF_CORRECT=0``):
  which contender a call runs is the model's choice, the same on every machine;
  tests/test_trials.py turns the trials on for its own plans.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections import Counter

import pytest

_CACHE_DIR = tempfile.mkdtemp(prefix="teir_plan-test-cache-")
os.environ["TEIR_PLAN_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
os.environ["TEIR_PLAN_AUTOCALIBRATE"] = "reference"
os.environ["TEIR_PLAN_CHECK_CORES"] = "0"
os.environ["TEIR_PLAN_SELF_CORRECT"] = "0"

FUZZ = os.environ.get("TEIR_PLAN_FUZZ") == "1"
_EXAMPLES: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _threads_awake(monkeypatch: pytest.MonkeyPatch) -> None:
    import teir_plan.schedule.plan as plan_module

    monkeypatch.setattr(plan_module, "idle_seconds", lambda: 0.0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FUZZ or config.getoption("markexpr", ""):
        return
    skip = pytest.mark.skip(reason="slow: runs under make fuzz (TEIR_PLAN_FUZZ=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.when != "call":
        return
    from tests.strategies import EXAMPLE_COUNTS

    fn = getattr(item, "function", None)
    key = f"{getattr(fn, '__module__', '')}::{getattr(item, 'originalname', item.name)}"
    n = EXAMPLE_COUNTS.pop(key, 0)
    if n:
        report.user_properties.append(("examples", n))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "examples":
            _EXAMPLES[report.nodeid.split("[")[0]] += int(value)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not FUZZ or not _EXAMPLES:
        return
    tr = terminalreporter
    tr.section("examples run per property (TEIR_PLAN_FUZZ=1)")
    for name, n in sorted(_EXAMPLES.items()):
        tr.write_line(f"{n:>9,}  {name}")
    tr.write_line(f"{sum(_EXAMPLES.values()):>9,}  total")


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request):  # type: ignore[no-untyped-def]
    """Run the test with teir_plan set to 1, then 2 threads; the setting is restored."""
    import teir_plan as tp

    n = tp.get_num_threads()
    tp.set_num_threads(request.param)
    yield request.param
    tp.set_num_threads(n)

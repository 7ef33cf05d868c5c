"""Where the machine parameters in force come from: ``TEIR_PLAN_AUTOCALIBRATE``, the
calibrations cached on disk and the parameters set for this process.

Calibrations are cached on disk (``$TEIR_PLAN_CACHE_DIR`` or ``~/.cache/teir_plan``),
keyed by the CPU model, the vector ISA, the BLAS kernels and the thread count; later
processes load them, and a full calibration replaces a first-use one.
``TEIR_PLAN_AUTOCALIBRATE``: unset (or ``quick``) measures on first use, ``0`` never
measures, ``1`` runs the full calibration on first use, ``reference`` plans against the
reference parameters and ignores the cache.  ``TEIR_PLAN_MACHINE=path.json`` overrides
all of these: the parameters are read from that file (the cache's form, or one record),
and neither the cache nor a measurement is used.  Measuring is not this layer's: it says when
a measurement is due (:func:`params_without_measuring` gives None), and the caller that
plans runs it (:mod:`teir_plan.calibration`).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from teir_plan.errors import CalibrationWarning, MachineFileError, PlanError
from teir_plan.forks import renew_after_fork
from teir_plan.machine.defaults import default_params
from teir_plan.machine.params import MachineParams
from teir_plan.machine.validate import checked_fields, params_from_file, read_json

_lock = threading.Lock()
# Held while a calibration measures: a second thread that plans meanwhile waits for its
# result rather than measuring the machine at the same time (and reading it half as fast).
_measuring = threading.Lock()
# The parameters in force (None: not yet chosen).  Read by the callers that keep plans
# made with them (api's plan cache compares it by identity); set only through
# set_machine_params.
current: MachineParams | None = None
renew_after_fork(sys.modules[__name__], "_lock", threading.Lock)
renew_after_fork(sys.modules[__name__], "_measuring", threading.Lock)


@contextmanager
def first_use_measurement() -> Iterator[MachineParams | None]:
    """Held while a first-use measurement runs (calibration.quick_calibrate): yields the
    parameters in force if another thread measured them while this one waited (then
    there is nothing to measure), else None."""
    with _measuring:
        with _lock:
            found = current
        yield found


AUTOCALIBRATE_MODES = {"": "quick", "quick": "quick", "0": "off", "1": "full",
                       "reference": "reference"}


def autocalibrate_mode() -> str:
    """``TEIR_PLAN_AUTOCALIBRATE`` read: "quick" (unset, the default), "off" (0), "full"
    (1) or "reference"."""
    value = os.environ.get("TEIR_PLAN_AUTOCALIBRATE", "").strip().lower()
    mode = AUTOCALIBRATE_MODES.get(value)
    if mode is None:
        raise PlanError(f"TEIR_PLAN_AUTOCALIBRATE must be unset, 'quick', 0, 1 or "
                        f"'reference', got {value!r}")
    return mode


def cache_dir() -> Path:
    return Path(os.environ.get("TEIR_PLAN_CACHE_DIR", Path.home() / ".cache" / "teir_plan"))


def _cpu_model() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def machine_key() -> str:
    """What a calibration is valid for: the CPU model, the vector ISA the kernels are
    generated for (its key names the compile target's CPU and vector shape: the same
    model under TEIR_PLAN_VECTOR_BYTES=32 runs other kernels), the BLAS kernels the
    GEMM tiles call (``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 CPU halves their rate:
    rates measured with one set of kernels mis-rank plans run on the other) and the
    thread count."""
    from teir_plan.blaslib import blas_kernels
    from teir_plan.executor.threads import get_num_threads
    from teir_plan.isa import target

    return (f"{_cpu_model()} / {target().key} / {blas_kernels()} / "
            f"{get_num_threads()} threads")


def cache_file() -> Path:
    return cache_dir() / "machine.json"


def machine_file() -> Path | None:
    """The file ``TEIR_PLAN_MACHINE`` names (planning as the machine whose parameters it
    holds), or None when it is unset or empty."""
    value = os.environ.get("TEIR_PLAN_MACHINE", "").strip()
    return Path(value).expanduser() if value else None


def params_without_measuring() -> MachineParams | None:
    """The parameters in force when none must be measured: the ones set, those of the
    file ``TEIR_PLAN_MACHINE`` names (:func:`~teir_plan.machine.validate.params_from_file`:
    a file that cannot be used raises MachineFileError), a cached calibration (full or
    first-use), the ISA-derived defaults or the reference, by
    ``TEIR_PLAN_AUTOCALIBRATE``; None when a first-use measurement is due (nothing
    cached, measuring on).  The measurement itself is the caller's
    (:func:`teir_plan.schedule.in_force.machine_params`, where plans are made): this
    layer times nothing."""
    global current
    found = current  # one reference read: no lock needed on the cached path
    if found is not None:
        return found
    named = machine_file()
    if named is not None:
        with _lock:
            if current is None:
                current = params_from_file(named, machine_key)
            return current
    mode = autocalibrate_mode()
    with _lock:
        if current is not None:
            return current
        if mode == "reference":
            current = MachineParams.reference()
            return current
        loaded = load_params()
        if loaded is not None:
            current = loaded
            return current
    if mode in ("full", "quick"):
        return None
    with _lock:
        if current is None:
            current = default_params()
        return current


# The form of a cached first-use estimate: 2 since its efficiency table is the one of
# BLAS' kernel width (blas_efficiency_table), 3 since it measures the idle threads' wake
# cost and spin time, 4 since its DRAM rate is the cores' aggregate
# (calibration.timing.bandwidth_threads), 5 since it measures the cross-core handoff
# latency (calibration.cores.handoff_latency) and the vector kernel's rate and K steps
# (calibration.vector.measure_vector_kernel), 6 since it measures the vector kernel's
# set-up per tile and per strip (calibration.vector.measure_vector_overheads).  An
# estimate cached in an earlier form is not used: the first planning call measures a new
# one (a second or so), as on a new machine, so that a user who planned before gets the
# same plans as a new one.  A full calibration measures its table and stays.
FIRST_USE_FORM = 6


def load_params() -> MachineParams | None:
    """This machine's parameters as cached (None: none cached, or an earlier form of a
    first-use estimate).  Every field is typed and bounded
    (:func:`~teir_plan.machine.validate.checked_fields`): a cache that cannot be read, is
    not of the cache's form, or holds an implausible value for this machine (a rate of
    zero or NaN, a string, a table of the wrong length) is ignored with one
    :class:`~teir_plan.errors.CalibrationWarning` naming the file, and None is returned:
    the caller rebuilds the parameters (measures them again, which saves over it, or
    takes the ISA-derived defaults).  A damaged cache must never turn into a foreign
    exception inside a user's einsum.  Other machines' entries are not read."""
    path = cache_file()
    if not path.exists():
        return None
    try:
        data = read_json(path)
        if not isinstance(data, dict):
            raise MachineFileError(f"{path}: must hold a JSON object (machine keys to "
                                   f"parameter records), got {type(data).__name__}"
                                   if data is not None else
                                   f"{path}: must hold a JSON object, got null")
        key = machine_key()
        entry = data.get(key)
        if entry is None and key not in data:
            return None
        known = checked_fields(entry, f"{path} [{key}]")
        if known["source"] == "first-use" and (
                not isinstance(entry, dict) or entry.get("first_use_form") != FIRST_USE_FORM):
            return None
        # An N,N table alone (calibrated before forms were measured) is completed by
        # MachineParams.
        return MachineParams(**known)  # type: ignore[arg-type]
    except (MachineFileError, PlanError) as e:
        warnings.warn(
            f"teir_plan: ignored the machine parameters cached in {path}: {e}. They are "
            f"rebuilt: measured again (TEIR_PLAN_AUTOCALIBRATE unset, quick or 1; the "
            f"measurement replaces them in the file) or derived from the vector ISA "
            f"(TEIR_PLAN_AUTOCALIBRATE=0).", CalibrationWarning, stacklevel=caller_stacklevel())
        return None


def save_params(params: MachineParams) -> bool:
    """Cache ``params`` under this machine's key (False when the cache cannot be
    written, or when a first-use estimate would replace a full calibration another
    process saved meanwhile)."""
    path = cache_file()
    key = machine_key()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict):  # a damaged cache (load_params warned): rebuilt
            data = {}
        old = data.get(key)
        if (params.source == "first-use" and isinstance(old, dict) and old.get("calibrated")
                and _usable(old, path)):
            return False
        data[key] = asdict(params)
        if params.source == "first-use":
            data[key]["first_use_form"] = FIRST_USE_FORM
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
        return True
    except OSError:
        return False  # a read-only home: calibration still applies to this process


def _usable(entry: object, path: Path) -> bool:
    """Whether a cached entry passes the checks load_params makes (a damaged full
    calibration is no reason to keep a new measurement out of the file)."""
    try:
        checked_fields(entry, str(path))
    except MachineFileError:
        return False
    return True


def set_machine_params(params: MachineParams | None) -> None:
    """Use ``params`` for planning (None: reload the cached calibration or defaults)."""
    global current
    with _lock:
        current = params


def caller_stacklevel() -> int:
    """The ``stacklevel`` that attributes a warning to the first frame outside teir_plan
    (the user's einsum or plan call, however deep the planning call that measured)."""
    package = str(Path(__file__).resolve().parents[1])
    frame, level = sys._getframe(1), 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
            package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level

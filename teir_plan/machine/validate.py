"""Machine parameters read from JSON, checked field by field: the cache
(``machine.json``) and a ``TEIR_PLAN_MACHINE`` file.

Every field of a record is typed and bounded before a :class:`MachineParams` is made of
it: a rate given as a string, zero, negative, NaN or infinite, a table of the wrong length
or a record of another JSON shape would otherwise surface as a TypeError or a
ZeroDivisionError deep in the cost model, in the middle of a user's einsum.  What is
wrong raises :class:`~teir_plan.errors.MachineFileError` naming the file and the field;
the store turns it into one warning for its cache (and measures again), while a file the
user named is an error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from teir_plan.errors import MachineFileError
from teir_plan.machine.params import SOURCES, MachineParams
from teir_plan.machine.tables import GEMM_FORMS, GEMM_GRID

# Rates (flops or bytes per second): positive and finite; the bound above is far beyond
# any core's (a wrong unit, not a fast machine).
RATE_FIELDS = ("gemm_flops_f32", "gemm_flops_f64", "loop_flops", "vec_flops_f32",
               "vec_flops_f64", "pack_bytes_per_second", "copy_bytes_per_second",
               "dram_bytes_per_second", "llc_bytes_per_second")
MAX_RATE = 1e15
# Times: zero or more (a set-up the calibration read as none, a handoff on one CPU),
# finite; spin_seconds is 1 s where threads never sleep, so the bound is above that.
SECONDS_FIELDS = ("vec_tile_seconds", "vec_strip_seconds", "tile_seconds", "call_seconds",
                  "parallel_seconds", "wake_seconds", "spin_seconds", "handoff_seconds")
MAX_SECONDS = 10.0
BYTES_FIELDS = ("l2_bytes", "llc_bytes")
MAX_CACHE_BYTES = 1 << 40
MAX_K_STEPS = 64.0  # vec_k_steps: the calibrations fit 0-16
TEXT_FIELDS = ("measured_at", "machine", "loaded_from")


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _number(where: str, name: str, value: object, low: float, high: float,
            above_low: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MachineFileError(f"{where}: field {name!r} must be a number, got "
                               f"{_kind(value)}" + ("" if value is None else f" {value!r}"))
    x = float(value)
    if not math.isfinite(x) or x < low or (above_low and x == low) or x > high:
        bound = f"({low:g}, {high:g}]" if above_low else f"[{low:g}, {high:g}]"
        raise MachineFileError(f"{where}: field {name!r} must be a finite number in "
                               f"{bound}, got {value!r}")
    return x


def _table(where: str, value: object) -> tuple[float, ...]:
    size = len(GEMM_GRID) ** 3
    if not isinstance(value, list):
        raise MachineFileError(f"{where}: field 'gemm_efficiency' must be a list of "
                               f"{len(GEMM_FORMS) * size} fractions, got {_kind(value)}")
    if len(value) not in (size, len(GEMM_FORMS) * size):
        raise MachineFileError(
            f"{where}: field 'gemm_efficiency' must have {len(GEMM_FORMS) * size} entries "
            f"({len(GEMM_FORMS)} forms x {size} tile shapes), or {size} (N,N alone), "
            f"got {len(value)}")
    return tuple(_number(where, f"gemm_efficiency[{i}]", v, 0.0, 1.0, True)
                 for i, v in enumerate(value))


def checked_fields(record: object, where: str) -> dict[str, object]:
    """The MachineParams fields of a JSON ``record``, each typed and bounded (fields the
    record lacks keep the reference's; keys that are no field are ignored); raises
    :class:`MachineFileError` naming ``where`` and the field."""
    if not isinstance(record, dict):
        raise MachineFileError(f"{where}: a parameters record must be a JSON object of "
                               f"MachineParams' fields, got {_kind(record)}")
    out: dict[str, object] = {}
    for f in fields(MachineParams):
        if f.name not in record:
            continue
        value = record[f.name]
        if f.name in RATE_FIELDS:
            out[f.name] = _number(where, f.name, value, 0.0, MAX_RATE, True)
        elif f.name in SECONDS_FIELDS:
            out[f.name] = _number(where, f.name, value, 0.0, MAX_SECONDS, False)
        elif f.name in BYTES_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    0 < value <= MAX_CACHE_BYTES):
                raise MachineFileError(f"{where}: field {f.name!r} must be a whole number "
                                       f"of bytes in [1, 2**40], got {value!r}")
            out[f.name] = value
        elif f.name == "vec_k_steps":
            out[f.name] = _number(where, f.name, value, 0.0, MAX_K_STEPS, False)
        elif f.name == "gemm_efficiency":
            out[f.name] = _table(where, value)
        elif f.name in ("calibrated", "vector_measured"):
            if not isinstance(value, bool):
                raise MachineFileError(f"{where}: field {f.name!r} must be true or "
                                       f"false, got {value!r}")
            out[f.name] = value
        elif f.name == "source":
            if value not in SOURCES:
                raise MachineFileError(f"{where}: field 'source' must be one of {SOURCES}, "
                                       f"got {value!r}")
            out[f.name] = value
        elif f.name in TEXT_FIELDS:
            if not isinstance(value, str):
                raise MachineFileError(f"{where}: field {f.name!r} must be a string, got "
                                       f"{_kind(value)}")
            out[f.name] = value
        else:  # a field added without a rule here: refused rather than trusted
            raise MachineFileError(f"{where}: field {f.name!r} has no check")
    if "source" not in out:  # cached before sources were recorded: a full run
        out["source"] = "calibrated" if out.get("calibrated") else "first-use"
    return out


def params_from_record(record: object, where: str) -> MachineParams:
    """A :class:`MachineParams` of a checked JSON ``record`` (see :func:`checked_fields`)."""
    return MachineParams(**checked_fields(record, where))  # type: ignore[arg-type]


def read_json(path: Path) -> object:
    """The JSON in ``path``; raises :class:`MachineFileError` naming it when it cannot be
    read or parsed."""
    try:
        text = path.read_text()
    except OSError as e:
        raise MachineFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise MachineFileError(f"{path}: is not UTF-8 text") from None
    try:
        return json.loads(text)
    except ValueError as e:
        raise MachineFileError(f"{path}: is not valid JSON ({e})") from None


def is_record(data: object) -> bool:
    """Whether ``data`` is one parameters record (its keys MachineParams' fields) rather
    than the cache's form (machine keys, each a record)."""
    names = {f.name for f in fields(MachineParams)}
    return isinstance(data, dict) and any(k in names for k in data)


def params_from_file(path: Path, key: Callable[[], str]) -> MachineParams:
    """The parameters ``TEIR_PLAN_MACHINE`` names: a file in the cache's form (its only
    entry, or this machine's, ``key()``, when it holds several) or holding one record (what
    ``dataclasses.asdict(tp.machine_params())`` gives, as JSON).  Any fault raises
    :class:`MachineFileError` naming the file and the field."""
    data = read_json(path)
    where = str(path)
    if is_record(data):
        record = data
    elif isinstance(data, dict) and data:
        if len(data) == 1:
            (only, record), = data.items()
            where = f"{path} [{only}]"
        elif (this := key()) in data:
            record, where = data[this], f"{path} [{this}]"
        else:
            raise MachineFileError(
                f"{path}: holds parameters of {len(data)} machines, none this one's "
                f"({this!r}): {sorted(data)}; keep one entry, or one record")
    else:
        raise MachineFileError(
            f"{path}: must hold a JSON object: one parameters record, or the cache's "
            f"form (machine key to record), got {_kind(data)}"
            + (" (empty)" if isinstance(data, dict) else ""))
    fields_ = checked_fields(record, where)
    fields_["loaded_from"] = str(path)
    return MachineParams(**fields_)  # type: ignore[arg-type]

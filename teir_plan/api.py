"""The public entry points: ``tp.einsum`` and ``tp.plan``, with a bounded plan cache.

Planning is cached by subscripts, operand shapes, strides and dtypes, the output
layout and the options; a cached call only checks its arrays and runs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from teir_plan.backends import backend_for
from teir_plan.errors import DTypeError, EinsumError, OperandTypeError
from teir_plan.executor.threads import get_num_threads
from teir_plan.forks import renew_after_fork
from teir_plan.frontend.convention import from_interleaved, normalize_optimize
from teir_plan.gc_pause import gc_paused
from teir_plan.machine import store as _machine
from teir_plan.planner.autotune import autotune, random_operands
from teir_plan.schedule import trials
from teir_plan.schedule.build import build_plan, c_strides
from teir_plan.schedule.in_force import (
    machine_params,
    owes_vector_measurement,
    with_vector_measured,
)
from teir_plan.schedule.operands import OperandSpec, addressable, as_operand
from teir_plan.schedule.plan import Plan

PLAN_CACHE_SIZE = 512
_ndarray = np.ndarray


class PlanCache:
    """A thread-safe LRU map from problem keys to plans."""

    def __init__(self, maxsize: int = PLAN_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Plan] = OrderedDict()
        self._lock = threading.Lock()
        self._params: object = None  # the machine parameters the plans were made with
        # The same plans found by the arrays' own attributes (see _direct_key), for
        # tp.einsum's default options: a repeated call skips building the problem's key.
        self._direct: OrderedDict[Hashable, Plan] = OrderedDict()
        # For a two-operand call with every default: (subscripts, each array's shape,
        # byte strides and dtype, the thread count) -> its plan's Plan.run2.  A plain
        # dict, emptied when full: its lookup is most of such a call (see einsum).
        self.pairs: dict[Hashable, Callable[[np.ndarray, np.ndarray], np.ndarray | None]] = {}
        # The same for one operand, without out= -> Plan.run1.
        self.singles: dict[Hashable, Callable[[np.ndarray], np.ndarray | None]] = {}
        # The same with out= (its shape, byte strides and dtype last) -> Plan.run2_out.
        self.pairs_out: dict[Hashable, Callable[[np.ndarray, np.ndarray, np.ndarray],
                                                np.ndarray | None]] = {}
        # The last pair and single found in those dicts, with the parameters they were
        # made with: a loop that repeats one call compares the arrays' attributes with
        # these instead of hashing a key of them (0.2 us of a 1.9 us call: tp.einsum at
        # numpy.einsum's time on a 3 x 4 x 5 by 5 x 6 product, Xeon).  A tuple, replaced
        # whole, so that a reader on another thread sees one call's values or another's.
        self.last_pair: tuple | None = None  # (subscripts, x's shape, strides, dtype,
        # y's, the thread count, the parameters, Plan.run2)
        self.last_single: tuple | None = None  # (subscripts, x's, threads, params, run1)
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Plan | None:
        with self._lock:
            plan = self._data.get(key)
            if plan is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return plan

    def put(self, key: Hashable, plan: Plan, params: object = None) -> Plan:
        """Keep ``plan`` (made with machine parameters ``params``, if given: a plan made
        with parameters replaced meanwhile is returned but not kept)."""
        with self._lock:
            if params is not None and params is not self._params:
                return plan
            old = self._data.get(key)
            if old is not None:  # another thread planned it first: keep one
                self._data.move_to_end(key)
                return old
            self._data[key] = plan
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
            return plan

    def get_direct(self, key: Hashable) -> Plan | None:
        """The plan kept under a direct key (counted as a hit), or None (not counted:
        the caller then looks the problem up by its full key)."""
        # Without the lock (a third of a cached tiny call's lookup): each of these
        # operations is atomic under the GIL, and an entry dropped between them by
        # another thread is only not moved.
        plan = self._direct.get(key)
        if plan is not None:
            try:  # noqa: SIM105 (contextlib.suppress costs more than the lookup)
                self._direct.move_to_end(key)
            except KeyError:
                pass
            self.hits += 1
        return plan

    def put_direct(self, key: Hashable, plan: Plan, params: object) -> None:
        with self._lock:
            if params is not self._params:
                return  # made with parameters replaced meanwhile
            self._direct[key] = plan
            while len(self._direct) > self.maxsize:
                self._direct.popitem(last=False)

    def put_single(self, key: Hashable, plan: Plan, params: object) -> None:
        with self._lock:
            if params is not self._params:
                return
            if len(self.singles) >= self.maxsize:
                self.singles.clear()
            self.singles[key] = plan.run1

    def put_pair(self, key: Hashable, plan: Plan, params: object, with_out: bool = False
                 ) -> None:
        with self._lock:
            if params is not self._params:
                return
            table: dict = self.pairs_out if with_out else self.pairs
            if len(table) >= self.maxsize:
                table.clear()
            table[key] = plan.run2_out if with_out else plan.run2

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._direct.clear()
            self.pairs.clear()
            self.pairs_out.clear()
            self.singles.clear()
            self.last_pair = self.last_single = None
            self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def made_with(self, params: object) -> None:
        """Drop every plan if ``params`` are not the machine parameters the cached plans
        were made with (after ``tp.calibrate()`` or ``set_machine_params``, a problem
        seen before is planned again with the new model)."""
        if self._params is params:
            return  # the usual case, without the lock (a reference compare)
        with self._lock:
            if self._params is not params:
                self._data.clear()
                self._direct.clear()
                self.pairs.clear()
                self.pairs_out.clear()
                self.singles.clear()
                self.last_pair = self.last_single = None
                self._params = params


plan_cache = PlanCache()
renew_after_fork(plan_cache, "_lock", threading.Lock)


def _spec_of(x: object, i: int, dtype: object) -> tuple[OperandSpec, np.ndarray | None]:
    """An operand given as an array (or array-like) or as a shape tuple."""
    if isinstance(x, tuple) and all(isinstance(n, (int, np.integer)) for n in x):
        shape = tuple(int(n) for n in x)
        if any(n < 0 for n in shape):
            raise EinsumError(f"operand {i}: negative extent in shape {shape}")
        try:
            dt = np.dtype(dtype) if dtype is not None else np.dtype(np.float64)  # type: ignore[call-overload]
        except TypeError:
            raise DTypeError(f"dtype: {dtype!r} is not a numpy dtype") from None
        return OperandSpec(shape, c_strides(shape), dt), None
    arr = as_operand(x, i)
    return OperandSpec.of(arr), arr


def _get_plan(subscripts: str, specs: Sequence[OperandSpec], out_spec: OperandSpec | None,
              dtype: object, optimize: object, epilogue: str | None,
              arrays: Sequence[np.ndarray] | None, order: str = "K",
              casting: object = "safe") -> Plan:
    threads = get_num_threads()
    # True and False are their own cache keys (the hot path); other values are
    # normalized first, so that a path given as a list is hashable.
    opt = optimize if optimize is True or optimize is False else normalize_optimize(optimize)
    if isinstance(order, str):
        order = order.upper()  # numpy accepts 'c', 'f', 'a', 'k' too
    if out_spec is not None and order in ("K", "C", "F", "A"):
        order = "K"  # out= fixes the layout; order only applies to a result tp allocates
    try:
        key = (subscripts, tuple(specs), out_spec, None if dtype is None else np.dtype(dtype),  # type: ignore[call-overload]
               opt, casting, epilogue, threads, order)
        hash(key)
    except TypeError:
        key = None  # unhashable options: build_plan will reject them with a clear message
    params = _machine.current or machine_params(_first_dtype(specs, dtype))
    plan_cache.made_with(params)
    if key is not None:
        plan = plan_cache.get(key)
        if plan is not None:
            return plan
    with gc_paused():
        plan = build_plan(subscripts, specs, out_spec=out_spec, dtype=dtype, optimize=opt,
                          epilogue=epilogue, threads=threads, params=params, order=order,
                          casting=casting)
    if owes_vector_measurement(params, plan):  # (a first-use estimate's second part)
        params = with_vector_measured(params)
        plan_cache.made_with(params)
        with gc_paused():
            plan = build_plan(subscripts, specs, out_spec=out_spec, dtype=dtype,
                              optimize=opt, epilogue=epilogue, threads=threads,
                              params=params, order=order, casting=casting)
    if normalize_optimize(opt).autotune and plan.main_step is not None:
        if arrays is None:
            arrays = random_operands(specs)
        plan = autotune(plan, arrays)
    elif key is not None and trials.enabled() and trials.eligible(plan):
        # Calls time it against its runner-ups and numpy (schedule/trials.py).
        trials.attach(plan, repr(key))
    if key is not None:
        plan = plan_cache.put(key, plan, params)
    return plan


def plan(subscripts: object, *operands: object, dtype: object = None,
         optimize: object = True, epilogue: str | None = None,
         out: np.ndarray | None = None, order: str = "K", casting: str = "safe") -> Plan:
    """Plan ``subscripts`` for operands given as arrays or shapes; call the plan to run it.

    Shapes plan for row-major operands of ``dtype`` (default float64).  ``out`` plans
    for writing that array's layout; otherwise ``order`` chooses the result's layout
    as in :func:`einsum`, and ``plan.empty_out()`` makes an array the plan can write.
    The other arguments, and the interleaved form, are :func:`einsum`'s.

    >>> import numpy as np, teir_plan as tp
    >>> p = tp.plan("trus,pqtu->pqrs", (8, 24, 48, 48), (8, 48, 8, 48), dtype=np.float32)
    >>> a, b = np.ones((8, 24, 48, 48), np.float32), np.ones((8, 48, 8, 48), np.float32)
    >>> p(a, b).shape
    (8, 48, 24, 48)
    >>> float(p(a, b)[0, 0, 0, 0])  # t and u summed: 8 * 48 ones
    384.0
    """
    subscripts, ops = _subscripts_and_operands(subscripts, operands)
    pairs = [_spec_of(x, i, dtype) for i, x in enumerate(ops)]
    specs = [p for p, _ in pairs]
    arrays = [a for _, a in pairs]
    out_spec = _out_spec(out)
    have_all = all(a is not None for a in arrays)
    return _get_plan(subscripts, specs, out_spec, dtype, optimize, epilogue,
                     arrays if have_all else None, order, casting)  # type: ignore[arg-type]


def _subscripts_and_operands(subscripts: object, operands: Sequence[object]
                             ) -> tuple[str, Sequence[object]]:
    """The string form as given, or numpy's interleaved form turned into it."""
    if isinstance(subscripts, str):
        return subscripts, operands
    return from_interleaved((subscripts, *operands))


def _out_spec(out: object) -> OperandSpec | None:
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise OperandTypeError(f"out: expected a numpy.ndarray, got {type(out).__name__}")
    if not addressable(out):  # written through a copy: plan for a C-order one
        return OperandSpec(out.shape, c_strides(out.shape), out.dtype)
    return OperandSpec.of(out)


def einsum(subscripts: object, *operands: object, out: np.ndarray | None = None,
           dtype: object = None, order: str = "K", casting: str = "safe",
           optimize: object = True, epilogue: str | None = None) -> np.ndarray:
    """numpy.einsum, planned as TEIR programs and run on the jitted executor.

    numpy's calling convention: a subscripts string and operands, or operands
    interleaved with sublists of integer axis labels, ``einsum(a, [0, 1], b, [1, 2],
    [0, 2])``; ``out``, ``dtype``, ``order`` and ``casting`` as numpy's.
    ``optimize``: True (path search and cost model), False (numpy's: no path search,
    three or more operands contracted left to right, each step still ranked by the cost
    model), "autotune" (also time the top candidates on these arrays; remembered for
    the same problem) or "plain" (a plain valid schedule, no ranking).  numpy's and
    opt_einsum's path options ("greedy", "optimal", any opt_einsum strategy,
    ``(strategy, memory_limit)``, an explicit path such as
    ``["einsum_path", (0, 1), (0, 1)]``, a ``PathOptimizer`` object) choose the order in
    which three or more operands are contracted pairwise; each pairwise step is ranked
    by the cost model.
    ``order``: the result's memory layout when ``out`` is not given, as numpy's:
    "C", "F", "A", or "K" (the default), with which the planner picks the fastest
    of C order and the layouts that follow the operands, so the result may be a
    transposed view, as numpy.einsum's often is.  ``np.ascontiguousarray`` or
    ``order="C"`` gives C order.
    ``epilogue="relu"`` applies ReLU to the result as TEIR's last-access primitive.
    Dask arrays among the operands give a dask array, each block planned and run by
    teir_plan (:func:`teir_plan.distributed.einsum`).

    >>> import numpy as np, teir_plan as tp
    >>> a = np.arange(6.0).reshape(2, 3)
    >>> tp.einsum("ij->ji", a).shape
    (3, 2)
    >>> tp.einsum(a, [0, 1], a, [2, 1], [0, 2]).tolist()  # a @ a.T, interleaved
    [[5.0, 14.0], [14.0, 50.0]]
    """
    if (len(operands) == 2 and optimize is True and dtype is None and epilogue is None
            and order == "K" and casting == "safe" and type(subscripts) is str):
        # The hot path of a repeated two-operand call: one dict lookup by the arrays'
        # own attributes, no key object built beyond it (docs/decisions.md).
        x, y = operands
        if type(x) is _ndarray and type(y) is _ndarray:
            cache = plan_cache
            if out is None:
                last = cache.last_pair
                if (last is not None and subscripts == last[0] and x.shape == last[1]
                        and x.strides == last[2] and x.dtype is last[3]
                        and y.shape == last[4] and y.strides == last[5]
                        and y.dtype is last[6] and get_num_threads() == last[7]
                        and _machine.current is last[8]):
                    r = last[9](x, y)
                    if r is not None:
                        cache.hits += 1
                        return r
                threads = get_num_threads()
                run2 = cache.pairs.get((subscripts, x.shape, x.strides, x.dtype, y.shape,
                                        y.strides, y.dtype, threads))
                params = cache._params
                if run2 is not None and _machine.current is params:
                    r = run2(x, y)
                    if r is not None:
                        cache.hits += 1
                        cache.last_pair = (subscripts, x.shape, x.strides, x.dtype, y.shape,
                                           y.strides, y.dtype, threads, params, run2)
                        return r
            elif type(out) is _ndarray:
                run2_out = cache.pairs_out.get((
                    subscripts, x.shape, x.strides, x.dtype, y.shape, y.strides, y.dtype,
                    get_num_threads(), out.shape, out.strides, out.dtype))
                if run2_out is not None and _machine.current is cache._params:
                    r = run2_out(x, y, out)
                    if r is not None:
                        cache.hits += 1
                        return r
    elif (len(operands) == 1 and out is None and optimize is True and dtype is None
          and epilogue is None and order == "K" and casting == "safe"
          and type(subscripts) is str):
        (x,) = operands  # the same for one operand (a transpose, a diagonal, a sum)
        if type(x) is _ndarray:
            cache = plan_cache
            last = cache.last_single
            if (last is not None and subscripts == last[0] and x.shape == last[1]
                    and x.strides == last[2] and x.dtype is last[3]
                    and get_num_threads() == last[4] and _machine.current is last[5]):
                r = last[6](x)
                if r is not None:
                    cache.hits += 1
                    return r
            threads = get_num_threads()
            run1 = cache.singles.get((subscripts, x.shape, x.strides, x.dtype, threads))
            params = cache._params
            if run1 is not None and _machine.current is params:
                r = run1(x)
                if r is not None:
                    cache.hits += 1
                    cache.last_single = (subscripts, x.shape, x.strides, x.dtype, threads,
                                         params, run1)
                    return r
    direct = None
    if (dtype is None and (optimize is True or optimize is False) and order == "K"
            and casting == "safe" and epilogue is None and isinstance(subscripts, str)):
        direct = _direct_key(subscripts, operands, out, optimize)
        if direct is not None:
            params = _machine.current or machine_params(_first_dtype(operands, dtype))
            plan_cache.made_with(params)
            p = plan_cache.get_direct(direct)
            if p is not None:
                return p.execute(operands, out)  # type: ignore[arg-type]
    # (after the direct lookup, which takes numpy arrays only: no cost on its path)
    backend = backend_for((subscripts, *operands))
    if backend is not None:  # dask arrays (teir_plan/backends.py)
        return backend(subscripts, *operands, out=out, dtype=dtype, order=order,  # type: ignore[return-value]
                       casting=casting, optimize=optimize, epilogue=epilogue)
    subscripts, ops = _subscripts_and_operands(subscripts, operands)
    arrays = [as_operand(x, i) for i, x in enumerate(ops)]
    specs = [OperandSpec.of(a) for a in arrays]
    out_spec = _out_spec(out)
    p = _get_plan(subscripts, specs, out_spec, dtype, optimize, epilogue, arrays, order,
                  casting)
    if direct is not None:
        plan_cache.put_direct(direct, p, params)
        if (len(arrays) == 2 and optimize is True
                and arrays[0] is ops[0] and arrays[1] is ops[1]):  # read in place
            x, y = arrays
            key = (subscripts, x.shape, x.strides, x.dtype, y.shape, y.strides, y.dtype,
                   get_num_threads())
            if out is None:
                plan_cache.put_pair(key, p, params)
            elif addressable(out):  # written directly, not through a copy
                plan_cache.put_pair(key + (out.shape, out.strides, out.dtype), p, params,
                                    with_out=True)
        elif len(arrays) == 1 and optimize is True and out is None and arrays[0] is ops[0]:
            x = arrays[0]
            plan_cache.put_single((subscripts, x.shape, x.strides, x.dtype,
                                   get_num_threads()), p, params)
    return p.execute(arrays, out)


def _first_dtype(operands: Sequence[object], dtype: object) -> np.dtype | None:
    """What a call computes in (numpy's promotion of its operands, or ``dtype``), read
    only when no machine parameters are in force yet; None if that is not clear."""
    try:
        if dtype is not None:
            return np.dtype(dtype)  # type: ignore[call-overload,no-any-return]
        return np.result_type(*(getattr(x, "dtype", np.float64) for x in operands))
    except (TypeError, ValueError):
        return None


def _direct_key(subscripts: str, operands: Sequence[object], out: object,
                optimize: bool) -> Hashable | None:
    """A key made of the arrays' own shapes, byte strides and dtypes (and out's), or None
    unless every operand (and out, if given) is a numpy array.  It determines the plan
    as the full key does, so equal direct keys share a plan; it is cheaper to build
    than the OperandSpecs, a large part of a small cached call (docs/decisions.md)."""
    if out is None:
        out_key: object = None
    elif type(out) is np.ndarray and _whole_elements(out):
        out_key = (out.shape, out.strides, out.dtype)
    else:
        return None
    key: list[object] = [subscripts, optimize, get_num_threads(), out_key]
    for x in operands:
        if type(x) is not np.ndarray or not _whole_elements(x):
            return None
        key.append((x.shape, x.strides, x.dtype))
    return tuple(key)


def _whole_elements(x: np.ndarray) -> bool:
    """numpy's aligned flag, where that means whole elements (float32, float64): an
    array that is not (see plan.addressable) takes the full path, which copies it."""
    return x.flags.aligned and x.dtype.alignment == x.itemsize

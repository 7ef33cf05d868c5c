"""teir_plan as a backend of opt_einsum and cotengra.

``opt_einsum.contract(..., backend="teir_plan")`` looks up ``tensordot``, ``transpose`` and
``einsum`` in the module ``teir_plan``; these are they (``tp.einsum`` is the library's own):
each pairwise step opt_einsum runs is then planned and executed by teir_plan.  Arrays are
numpy's throughout, so cotengra's array functions (``cotengra.array_contract(...,
backend="teir_plan")``, through autoray) find the same three.

>>> import numpy as np, opt_einsum as oe
>>> a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
>>> oe.contract("ij,jk,kl->il", a, b, c, backend="teir_plan")[0, 0]
np.float64(12.0)
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
from opt_einsum import get_symbol

from teir_plan.api import einsum
from teir_plan.errors import EinsumError


def _axes_pair(axes: object, nda: int, ndb: int) -> tuple[list[int], list[int]]:
    """numpy.tensordot's ``axes``: an integer (the last ``axes`` of ``a`` with the first of
    ``b``) or a pair of axis sequences (or single axes), negatives counted from the end."""
    if isinstance(axes, numbers.Integral) and not isinstance(axes, bool):
        n = int(axes)
        if not 0 <= n <= min(nda, ndb):
            raise EinsumError(f"axes: {n} axes to sum, but the operands have {nda} and "
                              f"{ndb} dimensions")
        return list(range(nda - n, nda)), list(range(n))
    if not isinstance(axes, Sequence) or len(axes) != 2:
        raise EinsumError(f"axes: expected an integer or a pair of axis lists, got {axes!r}")
    pair = []
    for which, (ax, nd) in enumerate(zip(axes, (nda, ndb))):
        seq = [ax] if isinstance(ax, numbers.Integral) else list(ax)
        out = []
        for x in seq:
            if isinstance(x, bool) or not isinstance(x, numbers.Integral) or \
                    not -nd <= int(x) < nd:
                raise EinsumError(f"axes[{which}]: {x!r} is not an axis of an operand of "
                                  f"{nd} dimensions")
            out.append(int(x) % nd)
        if len(set(out)) != len(out):
            raise EinsumError(f"axes[{which}]: an axis appears twice in {seq}")
        pair.append(out)
    if len(pair[0]) != len(pair[1]):
        raise EinsumError(f"axes: {len(pair[0])} axes of a against {len(pair[1])} of b")
    return pair[0], pair[1]


def _array(x: object) -> np.ndarray:
    """``x`` as numpy's, or as it is if it is a dask array (tp.einsum runs dask arrays
    block by block: see teir_plan/distributed/)."""
    return x if hasattr(x, "__dask_graph__") else np.asarray(x)  # type: ignore[return-value]


def tensordot(a: object, b: object, axes: object = 2) -> np.ndarray:
    """numpy.tensordot, computed by :func:`teir_plan.einsum`: the axes of ``a`` not summed,
    then those of ``b``, in their order."""
    x, y = _array(a), _array(b)
    sa, sb = _axes_pair(axes, x.ndim, y.ndim)
    ta = [get_symbol(i) for i in range(x.ndim)]
    tb = [get_symbol(x.ndim + i) for i in range(y.ndim)]
    for i, j in zip(sa, sb):
        tb[j] = ta[i]
    out = [c for i, c in enumerate(ta) if i not in sa] + [c for j, c in enumerate(tb)
                                                           if j not in sb]
    return einsum(f"{''.join(ta)},{''.join(tb)}->{''.join(out)}", x, y)


def transpose(a: object, axes: Sequence[int] | None = None) -> np.ndarray:
    """numpy.transpose: a view, nothing is copied (as numpy's)."""
    return np.transpose(_array(a), axes)

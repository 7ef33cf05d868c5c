"""Array backends: libraries whose arrays ``tp.einsum`` hands to a module of their own
(dask's go to :mod:`teir_plan.distributed`, which plans each block and runs it through
``tp.einsum`` on the workers).

``tp.einsum`` asks :func:`backend_for` about its operands and knows no backend by name:
the package registers them (``teir_plan/__init__.py``), above both the api and the
backends' modules, so that the api never imports a layer that imports it.  A backend is
recognised by an attribute its arrays carry, so that its library is never imported to
check; its module is imported on the first call that has such an array.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ArrayBackend:
    """Arrays that carry ``marker`` are contracted by ``module``'s ``function`` (called as
    ``function(subscripts, *operands, **keywords)``, as ``tp.einsum`` is)."""

    name: str
    marker: str
    module: str
    function: str = "einsum"


_BACKENDS: list[ArrayBackend] = []


def register_array_backend(backend: ArrayBackend) -> None:
    """Hand arrays carrying ``backend.marker`` to ``backend`` (a backend of the same name
    is replaced)."""
    _BACKENDS[:] = [b for b in _BACKENDS if b.name != backend.name] + [backend]


def backend_for(objects: Iterable[object]) -> Callable[..., object] | None:
    """The einsum of the first registered backend whose arrays are among ``objects``, or
    None (plain arrays: tp.einsum's own path)."""
    items = tuple(objects)
    for backend in _BACKENDS:
        if any(hasattr(x, backend.marker) for x in items):
            function: Callable[..., object] = getattr(
                importlib.import_module(backend.module), backend.function)
            return function
    return None

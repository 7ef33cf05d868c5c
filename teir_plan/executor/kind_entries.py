"""The tile kinds' jitted entry points, by kind name (teir_plan/tilekinds: each kind's
encoder asks for its own, so only the kinds a program uses are compiled)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from teir_plan.blaslib import gemm3m_address
from teir_plan.executor import microkernel, transposed_kernel
from teir_plan.executor.blas import gemm_address
from teir_plan.executor.walker import tile_entry_address


def _tile_entry(name: str) -> Callable[[np.dtype], int]:
    def address(dtype: np.dtype) -> int:
        return tile_entry_address(name, dtype)
    return address


ENTRY_POINTS: dict[str, Callable[[np.dtype], int]] = {
    "vec": microkernel.entry_address,
    "vec_t": transposed_kernel.entry_address,
    "vec_p": _tile_entry("vec_p"),
    "blas": _tile_entry("blas"),
    "copy": _tile_entry("copy"),
    "copy_elements": _tile_entry("copy_elements"),
}


class Entries:
    """The entry points compiled for one dtype (tilekinds.kind.Entries)."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype

    def address(self, name: str) -> int:
        return ENTRY_POINTS[name](self.dtype)

    def gemm(self, three_m: bool = False) -> tuple[int, int]:
        """(address, integer width) of ?gemm, or of ?gemm3m (numpy's OpenBLAS, 64-bit
        integers) when ``three_m`` and the library has it (blaslib.uses_gemm3m)."""
        if three_m and (addr := gemm3m_address(self.dtype)):
            return addr, 8
        return gemm_address(self.dtype)

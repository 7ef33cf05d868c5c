"""16-bit floats in the executor's kernels: read as their bits, widened in registers.

numba has no float16 arrays on the CPU ("NotImplementedError: float16", numba 0.68) and
no bfloat16 at all, so a kernel reads a 16-bit operand through an integer view of its
bits (:func:`bits_dtype`: int16 for float16, uint16 for bfloat16; the two integer types
tell the two formats apart at compile time) and turns each element into a float32 with
:func:`value`, which leaves float32 and float64 elements as they are: one kernel source
compiles for every element type, and its float32 and float64 code is unchanged.

The widening is exact for every bit pattern (checked over all 65,536 of each format):

* bfloat16 is float32's upper half: ``bits << 16`` reinterpreted as a float32;
* float16 is LLVM's ``fpext half to float`` where the compile target converts in
  hardware (x86's F16C, ``vcvtph2ps``, on every AVX2 CPU; ARMv8), and otherwise the same
  conversion in integer and float32 operations (LLVM would call compiler-rt's
  ``__extendhfsf2``, which numba's JIT does not link: the process crashed): the
  magnitude's bits shifted into float32's places and scaled by 2^112 (re-biasing the
  exponent; a subnormal comes out normalized, exactly), an infinity or NaN given
  float32's all-ones exponent, the sign put back.  Both vectorize.
"""

from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from teir_plan.isa import compile_target
from teir_plan.teir.enums import is_half

ACCUMULATOR = np.dtype(np.float32)  # what 16-bit elements are widened to and summed in
FLOAT16_BITS = np.dtype(np.int16)
BFLOAT16_BITS = np.dtype(np.uint16)


def bits_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel reads elements of ``dtype`` as: the integer view of a 16-bit
    float's bits, any other dtype itself."""
    dtype = np.dtype(dtype)
    if not is_half(dtype):
        return dtype
    return FLOAT16_BITS if dtype.kind == "f" else BFLOAT16_BITS


@functools.cache
def hardware_float16() -> bool:
    """Whether the compile target converts float16 to float32 in hardware (F16C on
    x86-64, every ARMv8)."""
    _, feats, arch = compile_target()
    return arch in ("aarch64", "arm64") or "f16c" in feats


def _float16_in_software(builder: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """float16 ``bits`` (an i16) as a float32, without F16C (see the module's text)."""
    i32, f32 = ir.IntType(32), ir.FloatType()
    h = builder.zext(bits, i32)
    magnitude = builder.shl(builder.and_(h, ir.Constant(i32, 0x7FFF)), ir.Constant(i32, 13))
    scaled = builder.fmul(builder.bitcast(magnitude, f32), ir.Constant(f32, 2.0**112))
    out = builder.bitcast(scaled, i32)
    special = builder.icmp_unsigned(">=", magnitude, ir.Constant(i32, 0x7C00 << 13))
    out = builder.select(special, builder.or_(out, ir.Constant(i32, 0xFF << 23)), out)
    sign = builder.shl(builder.and_(h, ir.Constant(i32, 0x8000)), ir.Constant(i32, 16))
    return builder.bitcast(builder.or_(out, sign), f32)


@intrinsic
def value(typingctx, v):  # type: ignore[no-untyped-def]
    """An element as the kernel computes with it: a float as it is; int16 (float16's
    bits) or uint16 (bfloat16's) widened to float32."""
    if isinstance(v, types.Float):
        def same(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return args[0]
        return v(v), same
    if v not in (types.int16, types.uint16):
        return None
    bfloat16 = v == types.uint16

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i32, f32 = ir.IntType(32), ir.FloatType()
        if bfloat16:
            wide = builder.shl(builder.zext(args[0], i32), ir.Constant(i32, 16))
            return builder.bitcast(wide, f32)
        if hardware_float16():
            return builder.fpext(builder.bitcast(args[0], ir.HalfType()), f32)
        return _float16_in_software(builder, args[0])

    return types.float32(v), codegen

"""Reusable hypothesis strategies: TEIR programs with the arrays they run on, and
einsum problems.  ``TEIR_PLAN_FUZZ=1`` raises example counts for ``make fuzz``."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import teir_plan as tp

FUZZ = os.environ.get("TEIR_PLAN_FUZZ") == "1"


def fuzz_settings(default: int = 60, fuzz: int = 20_000) -> settings:
    return settings(
        max_examples=fuzz if FUZZ else default,
        deadline=None,
        derandomize=not FUZZ,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


ROLE_TENSORS = {"c": (0, 1, 2), "m": (0, 2), "n": (1, 2), "k": (0, 1)}


@dataclass
class ProgramCase:
    """A valid program, the flat base buffers behind each tensor, and numpy views of them
    whose strides are exactly the program's."""

    teir: tp.TEIR
    bases: list[np.ndarray]  # float64 flat buffers
    origins: list[int]  # index of each view's first element in its base
    views: list[np.ndarray]  # what tp.execute receives (program dtype)
    typed: list[np.ndarray]  # the program-dtype buffers the views look into


def _view(base: np.ndarray, origin: int, sizes: list[int], strides: list[int]) -> np.ndarray:
    isz = base.itemsize
    return np.lib.stride_tricks.as_strided(
        base[origin:], shape=tuple(sizes), strides=tuple(s * isz for s in strides)
    )


@st.composite
def program_cases(draw: st.DrawFn, binary: bool | None = None, max_dims: int = 5,
                  parallel_k: bool = False) -> ProgramCase:
    """A random valid program and arrays for it; ``parallel_k``: every K loop axis drawn
    seq becomes parallel (K axes may be drawn parallel either way)."""
    is_binary = draw(st.booleans()) if binary is None else binary
    d = draw(st.integers(0 if is_binary else 1, max_dims))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    roles = [draw(st.sampled_from("cmnk")) if is_binary else "c" for _ in range(d)]
    sizes = [draw(st.integers(1, 5)) for _ in range(d)]
    # Exec types: prim within the primitive's shape; a parallel K axis sums into private
    # partial blocks (teir_plan/teir/parallel_k.py).
    execs = []
    counts = {"m": 0, "n": 0, "k": 0, "c": 0}
    main = draw(st.sampled_from(["gemm", "brgemm"] if is_binary else ["copy", "relu"]))
    limit = {"m": 1, "n": 1, "k": 2 if main == "brgemm" else 1, "c": 0} if is_binary else None
    nprim = 0
    for r in roles:
        want = draw(st.sampled_from(["seq", "parallel", "prim"]))
        if want == "prim":
            ok = (counts[r] < limit[r]) if limit else nprim < 2
            if not ok:
                want = "seq"
        if want == "seq" and r == "k" and parallel_k:
            want = "parallel"
        if want == "prim":
            counts[r] += 1
            nprim += 1
        execs.append(want)
    if main == "brgemm" and counts["k"] == 0:
        main = "gemm"
    ntens = 3 if is_binary else 2
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    strides, bases, origins, views, typed = [], [], [], [], []
    for j in range(ntens):
        is_out = j == ntens - 1
        takes = [i for i in range(d) if not is_binary or j in ROLE_TENSORS[roles[i]]]
        real = [i for i in takes if is_out or sizes[i] == 1 or draw(st.integers(0, 6)) != 0]
        order = draw(st.permutations(real))
        row = [0] * d
        acc = 1
        flips = 0
        for i in reversed(order):
            step = acc
            if draw(st.booleans()) and draw(st.booleans()):
                row[i] = -step
                flips += (sizes[i] - 1) * step
            else:
                row[i] = step
            acc *= sizes[i]
        pad = draw(st.integers(0, 2))
        base = rng.standard_normal(acc + pad)
        strides.append(row)
        origin = flips
        bases.append(base)
        origins.append(origin)
        typed.append(base.astype(dtype))
        views.append(_view(typed[-1], origin, sizes, row))
    first = draw(st.sampled_from(["none", "zero"])) if is_binary else "none"
    last = draw(st.sampled_from(["none", "relu"])) if is_binary else "none"
    teir = tp.TEIR.from_fields(
        data_type=dtype, prim_first=first, prim_main=main, prim_last=last,
        dim_types=roles, exec_types=execs, dim_sizes=sizes, strides=strides,
    )
    return ProgramCase(teir, bases, origins, views, typed)


# ===========================================================================
# einsum problems
#
# Random einsum expressions with the arrays they run on: one to four operands,
# implicit and explicit outputs, '...', repeated indices (diagonals), size-1
# broadcasting, extents 0, 1, 2 and odd primes, float32/float64 (and mixed), and
# operands in C or F order, transposed, sliced with steps, reversed (negative
# strides) or np.broadcast_to views.  A problem remembers how each operand was
# laid out, so it can make new arrays of exactly the same layouts (plan reuse).
# ===========================================================================

import functools  # noqa: E402
from collections import Counter  # noqa: E402

EINSUM_EXTENTS = (0, 1, 1, 2, 2, 3, 3, 3, 5, 5, 7)  # weighted: 0 rare
EINSUM_LETTERS = "abcdefijAB"
EINSUM_WORK_LIMIT = 20_000  # product of all extents: keeps numpy's reference loop cheap


@dataclass(frozen=True)
class OperandRecipe:
    """How one operand's memory is laid out (independent of its values)."""

    shape: tuple[int, ...]
    dtype: str
    perm: tuple[int, ...]  # memory order: axis perm[-1] varies fastest
    steps: tuple[int, ...]  # slicing step per axis (>= 1)
    flips: tuple[bool, ...]  # reversed axes (negative strides)
    broadcast: tuple[int, ...]  # axes made by np.broadcast_to (stride 0)
    as_list: bool = False  # passed as nested Python lists
    # "record": a field of a packed record array (byte strides not a whole number of
    # elements); "odd": memory starting one byte past an element boundary
    unaligned: str = ""

    @property
    def kind(self) -> str:
        if self.as_list:
            return "list"
        tags = []
        if self.broadcast:
            tags.append("broadcast")
        if any(s > 1 for s in self.steps):
            tags.append("strided")
        if any(self.flips):
            tags.append("reversed")
        if self.unaligned:
            tags.append(self.unaligned)
        n = len(self.perm)
        if self.perm == tuple(range(n)):
            tags.append("C")
        elif self.perm == tuple(reversed(range(n))):
            tags.append("F")
        else:
            tags.append("transposed")
        return "+".join(tags)

    def build(self, rng: np.random.Generator, fill: object = None) -> object:
        """An array of ``shape`` and ``dtype`` with this layout; values standard normal
        (or drawn by ``fill(rng, shape)`` when given)."""
        core = [1 if a in self.broadcast else n for a, n in enumerate(self.shape)]
        alloc = [n * s for n, s in zip(core, self.steps)]
        mem_shape = [alloc[a] for a in self.perm]
        if fill is not None:
            values = fill(rng, mem_shape)
        elif np.dtype(self.dtype).kind == "c":  # both parts non-zero
            values = rng.standard_normal(mem_shape) + 1j * rng.standard_normal(mem_shape)
        else:
            values = rng.standard_normal(mem_shape)
        base = np.asarray(values).astype(self.dtype)
        if self.unaligned == "record":
            rec = np.zeros(base.shape, [("x", base.dtype), ("pad", "u1")])
            rec["x"] = base
            base = rec["x"]
        elif self.unaligned == "odd":
            raw = np.zeros(base.nbytes + 1, np.uint8)[1:]
            base = raw.view(base.dtype).reshape(base.shape) if base.ndim else raw.view(
                base.dtype)[0:1].reshape(())
            base[...] = np.asarray(values).astype(self.dtype)
        inv = np.argsort(self.perm) if self.perm else ()
        x = base.transpose(tuple(int(i) for i in inv))
        sl = tuple(
            slice(None, None, -s) if f else slice(None, None, s)
            for s, f in zip(self.steps, self.flips)
        )
        if sl:
            x = x[sl]  # (indexing a 0-d array with () would give a scalar)
        assert x.shape == tuple(core), (x.shape, core)
        if self.broadcast:
            x = np.broadcast_to(x, self.shape)
        if self.as_list:
            return x.tolist()
        return x


@dataclass
class EinsumProblem:
    subscripts: str
    recipes: list[OperandRecipe]
    operands: list  # what tp.einsum receives (arrays, or nested lists)
    seed: int

    def arrays(self) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.operands]

    def fresh(self, seed: int) -> list:
        """New operands, same layouts, other values."""
        rng = np.random.default_rng(seed)
        return [r.build(rng) for r in self.recipes]

    def __repr__(self) -> str:
        ops = ", ".join(
            f"{r.dtype}{r.shape}[{r.kind}]" for r in self.recipes
        )
        return f"EinsumProblem({self.subscripts!r}, {ops}, seed={self.seed})"


@st.composite
def operand_recipes(
    draw: st.DrawFn, shape: tuple[int, ...], dtype: str, allow_broadcast: bool = True,
    allow_list: bool = False,
) -> OperandRecipe:
    nd = len(shape)
    order = draw(st.sampled_from(["C", "C", "F", "transposed"]))
    if order == "C":
        perm = tuple(range(nd))
    elif order == "F":
        perm = tuple(reversed(range(nd)))
    else:
        perm = tuple(draw(st.permutations(range(nd))))
    strided = nd > 0 and draw(st.integers(0, 3)) == 0
    steps = tuple(draw(st.sampled_from([1, 2, 3])) if strided else 1 for _ in range(nd))
    flipped = nd > 0 and draw(st.integers(0, 3)) == 0
    flips = tuple(bool(flipped and draw(st.booleans())) for _ in range(nd))
    broadcast: tuple[int, ...] = ()
    if allow_broadcast and nd > 0 and draw(st.integers(0, 5)) == 0:
        broadcast = tuple(a for a in range(nd) if shape[a] != 1 and draw(st.booleans()))
    as_list = allow_list and draw(st.integers(0, 15)) == 0
    unaligned = draw(st.sampled_from(["record", "odd"])) if draw(st.integers(0, 9)) == 0 else ""
    return OperandRecipe(tuple(shape), dtype, perm, steps, flips, broadcast, as_list,
                         unaligned)


def _spaced(draw: st.DrawFn, text: str) -> str:
    if draw(st.integers(0, 9)):
        return text
    if draw(st.booleans()):
        return f" {text} "
    # Spaces between indices and around ',' and '->' (numpy refuses them inside '->'
    # and '...', so those stay whole).
    tokens = text.replace("->", "\0").replace("...", "\1")
    spaced = " ".join(tokens)
    return spaced.replace("\0", "->").replace("\1", "...")


@st.composite
def einsum_problems(
    draw: st.DrawFn,
    min_operands: int = 1,
    max_operands: int = 4,
    dtypes: tuple[str, ...] = ("float32", "float64"),
    ellipsis: bool = True,
    max_dims: int = 4,
    layouts: bool = True,
    work_limit: int = EINSUM_WORK_LIMIT,
) -> EinsumProblem:
    """A random einsum problem (see the section comment)."""
    counts = [n for n in (1, 2, 2, 2, 3, 3, 4) if min_operands <= n <= max_operands]
    nops = draw(st.sampled_from(counts or [min_operands]))
    letters = draw(
        st.lists(st.sampled_from(EINSUM_LETTERS), min_size=1, max_size=6, unique=True)
    )
    ext: dict[str, int] = {}
    work = 1
    for c in letters:
        n = draw(st.sampled_from(EINSUM_EXTENTS))
        while n > 1 and work * n > work_limit:
            n -= 1
        ext[c] = n
        work *= max(n, 1)
    use_ell = ellipsis and draw(st.integers(0, 4)) == 0
    ell_shape: tuple[int, ...] = ()
    if use_ell:
        ell_shape = tuple(
            draw(st.sampled_from([1, 2, 3])) for _ in range(draw(st.integers(0, 2)))
        )
        for n in ell_shape:
            if work * n > work_limit:
                ell_shape = ()
                break
            work *= n

    mixed = len(dtypes) > 1 and draw(st.integers(0, 3)) == 0
    common = draw(st.sampled_from(dtypes))
    terms: list[str] = []
    shapes: list[tuple[int, ...]] = []
    has_ell = False
    for _ in range(nops):
        k = draw(st.integers(0, max_dims))
        term = [draw(st.sampled_from(letters)) for _ in range(k)]
        shape = []
        for c in term:
            n = ext[c]
            if term.count(c) == 1 and n != 1 and draw(st.integers(0, 7)) == 0:
                n = 1  # numpy broadcasts a size-1 dim against the index's extent
            shape.append(n)
        text = "".join(term)
        if use_ell and draw(st.booleans()):
            at = draw(st.integers(0, len(term)))
            nd = draw(st.integers(0, len(ell_shape)))
            eshape = [
                1 if draw(st.integers(0, 4)) == 0 else n
                for n in ell_shape[len(ell_shape) - nd:]
            ]
            text = text[:at] + "..." + text[at:]
            shape = shape[:at] + eshape + shape[at:]
            has_ell = True
        terms.append(text)
        shapes.append(tuple(shape))

    used: list[str] = []
    for t in terms:
        for c in t.replace("...", ""):
            if c not in used:
                used.append(c)
    if draw(st.integers(0, 2)) == 0:
        subscripts = ",".join(terms)  # implicit output
    else:
        out = [c for c in draw(st.permutations(used)) if draw(st.booleans())]
        out_text = "".join(out)
        if has_ell and draw(st.integers(0, 5)):
            at = draw(st.integers(0, len(out)))
            out_text = out_text[:at] + "..." + out_text[at:]
        subscripts = ",".join(terms) + "->" + out_text
    subscripts = _spaced(draw, subscripts)

    recipes = []
    for shape in shapes:
        dt = draw(st.sampled_from(dtypes)) if mixed else common
        if layouts:
            recipes.append(draw(operand_recipes(shape, dt, allow_list=True)))
        else:
            nd = len(shape)
            recipes.append(
                OperandRecipe(shape, dt, tuple(range(nd)), (1,) * nd, (False,) * nd, ())
            )
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    operands = [r.build(rng) for r in recipes]
    return EinsumProblem(subscripts, recipes, operands, seed)


def _wide(operands: list) -> np.dtype:
    """float64, or complex128 when an operand is complex."""
    complex_ = any(np.asarray(o).dtype.kind == "c" for o in operands)
    return np.dtype(np.complex128 if complex_ else np.float64)


def einsum_reference(subscripts: str, operands: list) -> np.ndarray:
    """numpy.einsum in float64, or complex128 when an operand is complex (operands cast
    to it)."""
    wide = _wide(operands)
    return np.einsum(subscripts, *[np.asarray(o, dtype=wide) for o in operands])


def einsum_tolerance(subscripts: str, operands: list, dtype: object) -> np.ndarray:
    """Elementwise error bound for a contraction computed in ``dtype``.

    The classic bound for a sum of K products of n factors is
    ``gamma_(K+n) * sum|products|``; we allow 8x that
    (``8 * eps * (K + n + 2) * einsum(|operands|)``) plus the smallest normal number
    times K, for underflow.  K (terms per output element) is einsum over ones, so
    diagonals and broadcasting are counted as numpy counts them.  Complex operands: the
    same bound on the modulus, |operand| for each operand and eps of the parts' type
    (complex64's is float32's), with n one more (a complex product rounds twice).
    """
    wide = _wide(operands)
    arrs = [np.asarray(o, dtype=wide) for o in operands]
    eps = float(np.finfo(dtype).eps)
    tiny = float(np.finfo(dtype).tiny)
    absref = np.einsum(subscripts, *[np.abs(a) for a in arrs])
    terms = np.einsum(subscripts, *[np.ones_like(a, dtype=np.float64) for a in arrs])
    k = float(np.max(terms, initial=1.0))
    n = len(arrs) + (1 if wide.kind == "c" else 0)
    return 8 * eps * (k + n + 2) * absref + tiny * (k + 1)


def assert_einsum_close(result: np.ndarray, subscripts: str, operands: list,
                        dtype: object, relu: bool = False) -> None:
    ref = einsum_reference(subscripts, operands)
    if relu:
        ref = np.maximum(ref, 0.0)
    assert result.shape == ref.shape, (result.shape, ref.shape)
    tol = einsum_tolerance(subscripts, operands, dtype)
    res = np.asarray(result)
    wide = np.complex128 if "c" in (ref.dtype.kind, res.dtype.kind) else np.float64
    err = np.abs(res.astype(wide) - ref)
    bad = ~(err <= tol)
    if bad.any():
        i = tuple(int(v[0]) for v in np.nonzero(np.atleast_1d(bad)))[: bad.ndim]
        raise AssertionError(
            f"{subscripts}: {int(bad.sum())} element(s) off; first at {i}: got "
            f"{result[i]!r}, numpy ({ref.dtype}) {ref[i]!r}, allowed error {tol[i]!r}"
        )


# Examples run per property (``make fuzz`` prints them: see tests/conftest.py).
EXAMPLE_COUNTS: Counter[str] = Counter()


def counted(fn):  # type: ignore[no-untyped-def]
    """Count the examples a property runs, under ``module::name``."""
    key = f"{fn.__module__}::{fn.__name__}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        EXAMPLE_COUNTS[key] += 1
        return fn(*args, **kwargs)

    return wrapper


def operand_layout_changed(x: np.ndarray) -> np.ndarray | None:
    """A copy of ``x`` with the same shape and dtype but other element strides (None if
    every layout of this shape is the same, e.g. at most one dim of extent > 1 that is
    not reversible)."""
    from teir_plan.schedule.operands import OperandSpec, as_operand

    if x.ndim == 0:
        return None
    want = OperandSpec.of(as_operand(x, 0))  # the layout a plan sees (a copy, if unaligned)
    # Copies (an unaligned x's own C order would be read through a copy of that layout).
    c, f = np.array(x, order="C"), np.array(x, order="F")
    tries = [c, f]
    for axis, n in enumerate(x.shape):
        if n > 1:
            tries.append(np.flip(c, axis))
            tries.append(np.flip(f, axis))
    for y in tries:
        if OperandSpec.of(y) != want:
            return y
    return None

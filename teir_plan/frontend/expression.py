"""Parsing an einsum expression against its operands' shapes.

numpy's grammar: explicit ``->`` or implicit output, ``...``, spaces; an index is a
letter (``a-z``, ``A-Z`` or any other Unicode letter) or any character from U+00C0 on,
which covers every symbol of opt_einsum's ``get_symbol(i)`` (``À``, ``Á``, ... from
``i = 52``, ``×`` among them), so that expressions of more than numpy's 52 letters parse
too.  ASCII digits and punctuation stay errors: in an expression they are typos.  Every
error names the operand or index at fault.  Ellipses are expanded by opt_einsum's parser
into otherwise unused symbols.

>>> from teir_plan.frontend.expression import parse
>>> e = parse("trus,pqtu->pqrs", [(2, 3, 4, 5), (6, 7, 2, 4)])
>>> e.inputs, e.output, e.extent("u")
(('trus', 'pqtu'), 'pqrs', 4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from opt_einsum import parser as oe_parser

from teir_plan.errors import EinsumError


@dataclass(frozen=True)
class Expression:
    """A parsed expression: one index string per operand (repeats allowed: diagonals),
    the output indices, and every index's extent after broadcasting."""

    inputs: tuple[str, ...]
    output: str
    extents: tuple[tuple[str, int], ...]

    def extent(self, index: str) -> int:
        return dict(self.extents)[index]

    @property
    def extent_map(self) -> dict[str, int]:
        return dict(self.extents)

    @property
    def subscripts(self) -> str:
        return ",".join(self.inputs) + "->" + self.output


# The most elements an operand or a result may have: its offsets are 64-bit integers.
MAX_ELEMENTS = (1 << 63) - 1

# opt_einsum.get_symbol(i) is chr(i + 140) from i = 52 on (chr(i + 2048) past the
# surrogates): every character from here on.
_FIRST_SYMBOL = 192


def is_index(ch: str) -> bool:
    """Whether the character ``ch`` may name an index."""
    return ch.isalpha() or (ord(ch) >= _FIRST_SYMBOL and not ch.isspace())


def _check_syntax(subscripts: str, num_operands: int) -> tuple[list[str], str | None]:
    if not isinstance(subscripts, str):
        raise EinsumError(f"subscripts: expected a string, got {type(subscripts).__name__}")
    text = subscripts.replace(" ", "")
    for ch in text:
        if ch not in ",.->" and not is_index(ch):
            raise EinsumError(
                f"subscripts: invalid character {ch!r} in {subscripts!r}; an index is a "
                f"letter or one of opt_einsum's symbols (opt_einsum.get_symbol)"
            )
    if text.count("->") > 1:
        raise EinsumError(f"subscripts: more than one '->' in {subscripts!r}")
    if "-" in text.replace("->", "") or ">" in text.replace("->", ""):
        raise EinsumError(f"subscripts: stray '-' or '>' in {subscripts!r}")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != num_operands:
        raise EinsumError(
            f"subscripts: {subscripts!r} names {len(terms)} operand(s), "
            f"but {num_operands} were given"
        )
    for i, term in enumerate([*terms, rhs] if arrow else terms):
        where = f"operand {i}" if i < len(terms) else "output"
        if "." in term and (term.count("...") != 1 or term.replace("...", "").count(".")):
            raise EinsumError(
                f"subscripts: {where} term {term!r}: '.' must appear only as one '...'"
            )
    return terms, (rhs if arrow else None)


def parse(subscripts: str, shapes: Sequence[Sequence[int]]) -> Expression:
    """Parse ``subscripts`` for operands of the given shapes."""
    terms, rhs = _check_syntax(subscripts, len(shapes))
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        letters = len(term.replace("...", ""))
        if "..." in term:
            if letters > len(shape):
                raise EinsumError(
                    f"operand {i}: term {term!r} names {letters} axes, but the operand "
                    f"has only {len(shape)} dimensions"
                )
        elif letters != len(shape):
            raise EinsumError(
                f"operand {i}: term {term!r} names {letters} axes, but the operand has "
                f"{len(shape)} dimensions (shape {tuple(shape)})"
            )
    if rhs is not None:
        seen: set[str] = set()
        for ch in rhs.replace("...", ""):
            if ch in seen:
                raise EinsumError(f"output: index {ch!r} appears more than once")
            seen.add(ch)
            if not any(ch in t for t in terms):
                raise EinsumError(f"output: index {ch!r} does not appear in any input")
        # ('...' in the output but in no input stands for no dimensions, as in numpy.)
        if "..." not in rhs:
            for i, (term, shape) in enumerate(zip(terms, shapes)):
                covered = len(shape) - len(term.replace("...", ""))
                if "..." in term and covered > 0:
                    raise EinsumError(
                        f"output: operand {i}'s '...' covers {covered} dimension(s), but the "
                        f"output {rhs!r} has no '...' to keep them (as numpy, einsum does not "
                        f"sum over '...')"
                    )
    try:
        text = subscripts.replace(" ", "")
        in_str, out_str, _ = oe_parser.parse_einsum_input(
            [text, *[tuple(s) for s in shapes]], shapes=True
        )
    except ValueError as exc:
        raise EinsumError(f"subscripts: {exc}") from None
    inputs = tuple(in_str.split(",")) if in_str else ("",)
    if len(shapes) == 0:
        raise EinsumError("operands: einsum needs at least one operand")
    inputs = inputs[: len(shapes)] if len(inputs) >= len(shapes) else inputs
    extents: dict[str, int] = {}
    for i, (term, shape) in enumerate(zip(inputs, shapes)):
        for ch, n in zip(term, shape):
            n = int(n)
            if n < 0:
                raise EinsumError(f"operand {i}: negative extent {n}")
            old = extents.get(ch)
            if old is None or old == 1:
                extents[ch] = n
            elif n != 1 and n != old:
                raise EinsumError(
                    f"operand {i}: index {ch!r} has extent {n} here but {old} elsewhere "
                    f"(extents must match or be 1)"
                )
        for ch in set(term):
            dims = [int(n) for c, n in zip(term, shape) if c == ch]
            if len(dims) > 1 and len(set(dims)) > 1:
                raise EinsumError(
                    f"operand {i}: repeated index {ch!r} (a diagonal) has unequal extents {dims}"
                )
    # An operand or result of more elements than 64-bit offsets address exists nowhere
    # (numpy refuses to make it): said here, for shapes given to tp.plan, before the
    # planner's own offset checks name a program's strides.
    for where, term in [*((f"operand {i}", t) for i, t in enumerate(inputs)),
                        ("output", out_str)]:
        size = math.prod(extents[ch] for ch in term)
        if size > MAX_ELEMENTS:
            raise EinsumError(f"{where}: {size} elements ({term!r}) overflow 64-bit "
                              f"offsets (at most 2**63 - 1 elements)")
    return Expression(inputs, out_str, tuple(sorted(extents.items())))

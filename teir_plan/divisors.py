"""Divisors of an extent, found in time bounded whatever the extent.

Planning splits axes only at exact divisors (a TEIR axis has one extent), and an extent
may be anything up to 2**63: scanning 1..n (or 1..sqrt(n)) one candidate at a time took
minutes on a prime extent of 2**31 - 1 and would not finish at all on 2**61 - 1.  Here an
extent is factored once by trial division up to ``TRIAL_LIMIT`` (at most ~33,000 steps),
its divisors are built from the factors, and every query reads that cached list.

A cofactor left after trial division is kept whole, as if it were prime: when it is a
product of two primes both above ``TRIAL_LIMIT`` its own divisors are not offered, which
only means fewer ways to split an axis of such an extent (the split targets are all far
below the limit).

>>> divisors(12)
(1, 2, 3, 4, 6, 12)
>>> divisors(2**31 - 1)
(1, 2147483647)
>>> largest_divisor(1000, 30, 60), smallest_divisor(1000, 30, 60), largest_divisor(97, 2, 96)
(50, 40, None)
"""

from __future__ import annotations

import bisect
from functools import lru_cache

# Trial division stops here: 2**16 steps of two at most, ~3 ms in Python, once an extent.
TRIAL_LIMIT = 1 << 16


@lru_cache(maxsize=4096)
def factor(n: int) -> tuple[tuple[int, int], ...]:
    """``n``'s factors as (factor, exponent) pairs, smallest first: primes up to
    TRIAL_LIMIT, then what is left (a prime, or a product of primes above the limit)."""
    if n < 1:
        raise ValueError(f"factor: {n} is not a positive integer")
    out = []
    d = 2
    while d <= TRIAL_LIMIT and d * d <= n:
        if n % d == 0:
            e = 0
            while n % d == 0:
                n //= d
                e += 1
            out.append((d, e))
        d += 1 if d == 2 else 2
    if n > 1:
        out.append((n, 1))
    return tuple(out)


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` (those :func:`factor` finds), ascending.  Fewer than
    ~110,000 for any n below 2**63."""
    out = [1]
    for p, e in factor(n):
        out = [d * p**k for d in out for k in range(e + 1)]
    return tuple(sorted(out))


def largest_divisor(n: int, least: int, most: int) -> int | None:
    """The largest divisor of ``n`` in [least, most], if any."""
    ds = divisors(n)
    i = bisect.bisect_right(ds, most)
    return ds[i - 1] if i and ds[i - 1] >= least else None


def smallest_divisor(n: int, least: int, most: int) -> int | None:
    """The smallest divisor of ``n`` in [least, most], if any."""
    ds = divisors(n)
    i = bisect.bisect_left(ds, least)
    return ds[i] if i < len(ds) and ds[i] <= most else None


def divisor_near(n: int, target: int) -> int | None:
    """The largest divisor of ``n`` in [target / 2, target], if any: an axis split into
    blocks of about ``target``.

    >>> divisor_near(1000, 48), divisor_near(97, 48)
    (40, None)
    """
    return largest_divisor(n, target // 2, target)


def divisors_between(n: int, least: int, most: int) -> tuple[int, ...]:
    """The divisors of ``n`` in [least, most], ascending."""
    ds = divisors(n)
    return ds[bisect.bisect_left(ds, least):bisect.bisect_right(ds, most)]

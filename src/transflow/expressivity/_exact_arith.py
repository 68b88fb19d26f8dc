"""Exact arithmetic shared by the exact evaluators (bottom module).

Dyadic rationals ``m·2^e`` (:class:`_Dyadic`) and scaled integer arrays ``(M, e)``
(``M·2^e`` with M an object array of Python ints) used by the exact evaluations of
:class:`HardmaxTransformer`, :class:`MaxoutTransformer` and the exact 1-D counter. Imports
no other module of the package.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


class _Dyadic:
    """An exact dyadic rational ``m·2^e`` (every float is one): +, −, × and comparisons
    without the gcd normalisations of :class:`fractions.Fraction` (several times faster);
    the frozen evaluations at t = 0, ±1, 2 and at dyadic guess points stay dyadic. Mixed
    with a non-dyadic Fraction, the result is a Fraction."""

    __slots__ = ("m", "e")

    def __init__(self, m: int, e: int):
        self.m, self.e = m, e

    @staticmethod
    def of(v):
        if type(v) is _Dyadic:
            return v
        if isinstance(v, int):
            return _Dyadic(v, 0)
        if isinstance(v, Fraction):
            d = v.denominator
            if d & (d - 1) == 0:
                return _Dyadic(v.numerator, -(d.bit_length() - 1))
        return None

    def frac(self) -> Fraction:
        return Fraction(self.m << self.e) if self.e >= 0 else Fraction(self.m, 1 << -self.e)

    def __float__(self) -> float:
        """The value with relative error ≤ 2⁻⁵² (±inf on overflow, 0 on underflow)."""
        m, e = self.m, self.e
        s = abs(m).bit_length() - 60
        if s > 0:
            m, e = m >> s, e + s
        try:
            return math.ldexp(float(m), e)
        except OverflowError:
            return math.inf if m > 0 else -math.inf

    def _co(self, o):
        return o if type(o) is _Dyadic else _Dyadic.of(o)

    def __add__(self, o):
        d = self._co(o)
        if d is None:
            return self.frac() + o if isinstance(o, Fraction) else NotImplemented
        if self.e <= d.e:
            return _Dyadic(self.m + (d.m << (d.e - self.e)), self.e)
        return _Dyadic((self.m << (self.e - d.e)) + d.m, d.e)

    __radd__ = __add__

    def __neg__(self):
        return _Dyadic(-self.m, self.e)

    def __sub__(self, o):
        return self + (-o)

    def __rsub__(self, o):
        return (-self) + o

    def __mul__(self, o):
        d = self._co(o)
        if d is None:
            return self.frac() * o if isinstance(o, Fraction) else NotImplemented
        return _Dyadic(self.m * d.m, self.e + d.e)

    __rmul__ = __mul__

    def _c(self, o) -> int:
        d = self._co(o)
        if d is None:
            f = self.frac()
            return (f > o) - (f < o)
        if self.e <= d.e:
            a, b = self.m, d.m << (d.e - self.e)
        else:
            a, b = self.m << (self.e - d.e), d.m
        return (a > b) - (a < b)

    def __lt__(self, o):
        return self._c(o) < 0

    def __le__(self, o):
        return self._c(o) <= 0

    def __gt__(self, o):
        return self._c(o) > 0

    def __ge__(self, o):
        return self._c(o) >= 0

    def __eq__(self, o):
        return self._c(o) == 0

    def __hash__(self):
        return hash(self.frac())

    def __bool__(self):
        return self.m != 0


def _scaled_int(a) -> tuple[np.ndarray, int]:
    """A float array as ``(M, e)``: an object array M of Python ints with ``a = M·2^e``
    exactly (every float is ``m·2^k``; e is the smallest exponent after removing the
    trailing zero bits of every mantissa)."""
    a = np.asarray(a, np.float64)
    mant, ex = np.frexp(a)
    ms = np.ldexp(mant, 53).astype(np.int64).reshape(-1)  # exact: |mant| < 1
    es = ex.astype(np.int64).reshape(-1) - 53
    pairs = []
    for mi, ei in zip(ms.tolist(), es.tolist()):
        if mi == 0:
            pairs.append((0, None))
            continue
        tz = (mi & -mi).bit_length() - 1
        pairs.append((mi >> tz, ei + tz))
    exps = [e for _, e in pairs if e is not None]
    e0 = min(exps) if exps else 0
    out = np.empty(len(pairs), dtype=object)
    for i, (mi, ei) in enumerate(pairs):
        out[i] = 0 if ei is None else mi << (ei - e0)
    return out.reshape(a.shape), e0


def _sadd(x, y):
    """``x + y`` of scaled integer arrays (broadcasting)."""
    (A, ea), (B, eb) = x, y
    if ea == eb:
        return A + B, ea
    if ea < eb:
        return A + B * (1 << (eb - ea)), ea
    return A * (1 << (ea - eb)) + B, eb


def _slin(X, W, b):
    """``X W + b`` of scaled integer arrays."""
    return _sadd((X[0].dot(W[0]), X[1] + W[1]), b)


def _scaled_input(x):
    """``((M, e), as_dyadic)`` for an input of dyadic rationals (Fractions with a
    power-of-two denominator, ints, or the counter's dyadic numbers), else None."""
    x = np.asarray(x, dtype=object).reshape(-1)
    pairs, as_dyadic = [], False
    for v in x:
        if type(v) is _Dyadic:
            pairs.append((v.m, v.e))
            as_dyadic = True
            continue
        if isinstance(v, int):
            v = Fraction(v)
        if not isinstance(v, Fraction):
            return None
        d = v.denominator
        if d & (d - 1):
            return None
        pairs.append((v.numerator, -(d.bit_length() - 1)))
    e0 = min((e for _, e in pairs), default=0)
    M = np.empty(len(pairs), dtype=object)
    for i, (mi, ei) in enumerate(pairs):
        M[i] = mi << (ei - e0)
    return (M, e0), as_dyadic


def _fraction_out(M, e):
    M = np.asarray(M, dtype=object)
    out = np.empty(M.shape, dtype=object)
    flat, src = out.reshape(-1), M.reshape(-1)
    for i, v in enumerate(src):
        flat[i] = Fraction(v << e) if e >= 0 else Fraction(v, 1 << -e)
    return out


def _dyadic_out(M, e):
    M = np.asarray(M, dtype=object)
    out = np.empty(M.shape, dtype=object)
    flat, src = out.reshape(-1), M.reshape(-1)
    for i, v in enumerate(src):
        flat[i] = _Dyadic(int(v), e)
    return out

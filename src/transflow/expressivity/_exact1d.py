"""Exact 1-D region counting for models whose frozen logits are quadratic (issue #14).

For a hardmax transformer whose attention queries and keys depend on x
(:class:`HardmaxTransformer`), the residual stream is affine in x once the activation
pattern is frozen, so every score is a quadratic polynomial of x, every ReLU
pre-activation is affine, and the output is affine. The activation pattern on a line
changes only at roots of winner-minus-competitor *gap* polynomials. This module walks from
``lo`` to ``hi`` in exact arithmetic:

1. **Gap polynomials.** For a pattern p the frozen model is evaluated exactly
   (:meth:`AbstractExactEval.exact_eval`, :class:`fractions.Fraction`) at
   t = 0, 1, −1; the logits are interpolated to ``a + b t + c t²`` and checked at t = 2
   (a fourth point: the degree ≤ 2 of the structure), the output to ``y₀ + y₁ t``.
2. **Exit.** On the current region p holds every gap > 0 (identically zero gaps are ties
   that the lowest-index rule settles once and for all). The region ends at the smallest
   *simple* root r > x of a gap (a double root touches zero and keeps the sign). Roots
   are exact :class:`QuadraticRoot` numbers: rationals, or ``(−B ± √(B²−4C))/2`` for an
   irreducible ``t² + Bt + C``, with a rational isolating interval refined with
   :func:`math.isqrt`. Two irrational roots are equal iff their monic minimal
   polynomials and branches are equal; otherwise intervals are refined until they
   separate, so the order of roots is exact however close they are.
3. **Next pattern.** The pattern right of r, ``p⁺(r)``, is computed layer by layer: at
   ``r + ε`` competitor j beats the current best iff the first non-zero of
   ``(d(r), d'(r), d''(r))`` of their difference d is positive (signs of elements of
   ``Q(√Δ)`` are exact: ``g(r) = αr + β`` after reducing by the minimal polynomial). A
   guess (the exact pattern at a rational point just right of r) is corrected layer by
   layer until every layer's winners are the ``r + ε`` winners of its frozen logits.

4. **Float filters** (rigorous, ``float_filter=True``): a competitor whose float value
   at r beats every other by more than an error bound (> 1000× the worst-case rounding)
   wins without exact arithmetic, and a gap that a float interval enclosure proves
   positive on ``[x, E]`` (E: the exit found so far) is skipped; everything else is exact.

Activation regions are the maximal open intervals of one pattern (a pattern that holds at
an isolated tie point only is not a region); linear regions merge neighbours whose affine
output maps are exactly equal. Such models are generally **discontinuous** at a switch
(the selected value row jumps): the certificate counts the jumps; pieces are still
counted.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from .._errors import check_number
from ._exact_arith import _Dyadic
from ._pwl import AbstractExactEval, AbstractPiecewiseLinear, lacks, safe_float

__all__ = ["QuadraticRoot", "exact_regions_1d"]

METHOD = "exact rational / quadratic-irrational arithmetic"


def _sgn(q) -> int:
    return (q > 0) - (q < 0)


def _F(v) -> Fraction:
    """A Fraction of an exact scalar (a :class:`_Dyadic`, a Fraction or an int)."""
    return v.frac() if type(v) is _Dyadic else v


def _is_square(q: Fraction) -> bool:
    n, d = q.numerator, q.denominator
    return n >= 0 and math.isqrt(n) ** 2 == n and math.isqrt(d) ** 2 == d


def _sqrt_q(q: Fraction) -> Fraction:
    n, d = q.numerator, q.denominator
    return Fraction(math.isqrt(n), math.isqrt(d))


def _rational(name: str, v) -> Fraction:
    """``v`` (an int, a Fraction or a finite float) as a Fraction, or one line naming it."""
    if type(v) is Fraction:  # the exact walk's own numbers: no cost on its hot path
        return v
    if isinstance(v, bool) or not isinstance(v, int | float | Fraction | np.integer | np.floating):
        raise TypeError(
            f"QuadraticRoot: `{name}` must be a rational number (int, Fraction or finite "
            f"float), got {type(v).__name__} {v!r:.40}; pass e.g. {name}=Fraction(1, 2)."
        )
    if isinstance(v, float | np.floating) and not math.isfinite(v):
        raise ValueError(
            f"QuadraticRoot: `{name}` must be a finite number, got {v!r}; pass e.g. "
            f"{name}=Fraction(1, 2)."
        )
    return Fraction(v)


class QuadraticRoot:
    """An exact real number of degree ≤ 2: a rational, or the root
    ``(−B + branch·√(B² − 4C)) / 2`` of ``t² + B t + C`` (irreducible over Q, branch ±1).

    Comparisons (``<``, ``==``, …) are exact: equal irrational roots have the same
    minimal polynomial and branch; otherwise the rational isolating intervals are refined
    (:func:`math.isqrt` at doubling precision) until they separate. ``float(r)`` is the
    nearest double; ``str(r)`` the closed form.

    Example:
        >>> from fractions import Fraction
        >>> from transflow.expressivity import QuadraticRoot
        >>> r = QuadraticRoot.irrational(Fraction(0), Fraction(-2), +1)   # √2
        >>> s = QuadraticRoot.rational(Fraction(1414213562373095, 10**15))
        >>> s < r, round(float(r), 12), str(r)
        (True, 1.414213562373, '(0 + √8)/2')
    """

    __slots__ = ("q", "B", "C", "branch", "_disc", "_k", "_lo", "_hi", "_approx")

    def __init__(self, q=None, B=None, C=None, branch=0):
        if q is not None:
            q = _rational("q", q)
        else:
            B, C = _rational("B", B), _rational("C", C)
            if branch not in (-1, 1) or isinstance(branch, bool):
                raise ValueError(
                    f"QuadraticRoot: `branch` must be +1 (the larger root) or -1, got {branch!r}."
                )
            if B * B - 4 * C < 0:
                raise ValueError(
                    f"QuadraticRoot: t² + ({B})t + ({C}) has no real root (`B`² < 4`C`); "
                    "pass B and C with B² >= 4C."
                )
        self.q, self.B, self.C, self.branch = q, B, C, branch
        self._approx = None
        if q is None:
            self._disc = B * B - 4 * C
            self._k = 64
            self._set_interval()

    @classmethod
    def rational(cls, q) -> QuadraticRoot:
        return cls(q=_rational("q", q))

    @classmethod
    def irrational(cls, B, C, branch: int) -> QuadraticRoot:
        """The root of ``t² + Bt + C`` on ``branch`` (+1: the larger); rational if the
        discriminant is a rational square."""
        B, C = _rational("B", B), _rational("C", C)
        check_number("branch", branch, "QuadraticRoot", integer=True, example="1")
        disc = B * B - 4 * C
        if disc < 0:
            raise ValueError(
                f"QuadraticRoot: t² + ({B})t + ({C}) has no real root (`B`² < 4`C`); "
                "pass B and C with B² >= 4C."
            )
        if _is_square(disc):
            return cls.rational((-B + branch * _sqrt_q(disc)) / 2)
        return cls(B=B, C=C, branch=1 if branch > 0 else -1)

    @property
    def is_rational(self) -> bool:
        return self.q is not None

    def _set_interval(self):
        n, d = self._disc.numerator, self._disc.denominator
        scale = 1 << self._k
        s = math.isqrt(n * d * scale * scale)  # floor(√(n d) 2^k); √Δ = √(nd)/d
        slo, shi = Fraction(s, scale * d), Fraction(s + 1, scale * d)
        if self.branch > 0:
            self._lo, self._hi = (-self.B + slo) / 2, (-self.B + shi) / 2
        else:
            self._lo, self._hi = (-self.B - shi) / 2, (-self.B - slo) / 2

    def refine(self):
        """Double the precision of the isolating interval (irrational roots)."""
        if self.q is None:
            self._k *= 2
            self._set_interval()

    def interval(self) -> tuple[Fraction, Fraction]:
        """``(lo, hi)`` with ``lo < r < hi`` (irrational) or ``lo = r = hi`` (rational)."""
        return (self.q, self.q) if self.q is not None else (self._lo, self._hi)

    def _cmp(self, other) -> int:
        if not isinstance(other, QuadraticRoot):
            other = QuadraticRoot.rational(other)
        if self.q is not None and other.q is not None:
            return _sgn(self.q - other.q)
        if (
            self.q is None
            and other.q is None
            and (self.B, self.C, self.branch) == (other.B, other.C, other.branch)
        ):
            return 0
        while True:
            a0, a1 = self.interval()
            b0, b1 = other.interval()
            if a1 <= b0:
                return -1
            if b1 <= a0:
                return 1
            self.refine()
            other.refine()

    def __lt__(self, o):
        return self._cmp(o) < 0

    def __le__(self, o):
        return self._cmp(o) <= 0

    def __gt__(self, o):
        return self._cmp(o) > 0

    def __ge__(self, o):
        return self._cmp(o) >= 0

    def __eq__(self, o):
        if not isinstance(o, QuadraticRoot | Fraction | int):
            return NotImplemented
        return self._cmp(o) == 0

    def __hash__(self):
        return hash((self.q, self.B, self.C, self.branch))

    def __float__(self) -> float:
        if self.q is not None:
            return float(self.q)
        while True:
            lo, hi = self._lo, self._hi
            if float(lo) == float(hi):
                return float((lo + hi) / 2)
            if (hi - lo) <= abs(lo + hi) * Fraction(1, 2**60):
                return float((lo + hi) / 2)
            self.refine()

    def __str__(self) -> str:
        if self.q is not None:
            return str(self.q)
        sign = "+" if self.branch > 0 else "−"
        return f"({-self.B} {sign} √{self._disc})/2"

    def __repr__(self) -> str:
        if self.q is not None:
            return f"QuadraticRoot.rational({self.q!r})"
        return (
            f"QuadraticRoot(root of t² + ({self.B})t + ({self.C}), branch={self.branch:+d}, "
            f"≈ {float(self):.17g})"
        )

    def approx(self) -> tuple[float, float]:
        """``(r̂, δ)``: a float r̂ with ``|r − r̂| ≤ δ`` (rigorous; for the float filters)."""
        if self._approx is None:
            if self.q is not None:
                rf = float(self.q)  # correctly rounded
                dr = abs(rf) * 2.0**-52 + 1e-300
            else:
                lo, hi = self._lo, self._hi
                rf = float((lo + hi) / 2)
                dr = float(hi - lo) * 1.001 + abs(rf) * 2.0**-52 + 1e-300
            self._approx = (rf, dr)
        return self._approx

    def rational_above(self, width: Fraction) -> Fraction:
        """A rational in ``(r, r + width]``."""
        if self.q is not None:
            return self.q + width
        while self._hi - self._lo > width:
            self.refine()
        return self._hi

    def sign_linear(self, alpha: Fraction, beta: Fraction) -> int:
        """The exact sign of ``α r + β``."""
        alpha, beta = _F(alpha), _F(beta)
        if self.q is not None:
            return _sgn(alpha * self.q + beta)
        if alpha == 0:
            return _sgn(beta)
        # r is irrational, -β/α rational: never equal
        return _sgn(alpha) * self._cmp(-beta / alpha)

    def lex_sign(self, a, b, c) -> int:
        """The sign of ``g(t) = a + bt + ct²`` on ``(r, r + ε)`` for small ε (0 iff g ≡ 0)."""
        a, b, c = _F(a), _F(b), _F(c)
        if self.q is not None:
            r = self.q
            v = a + r * (b + r * c)
            if v != 0:
                return _sgn(v)
            v = b + 2 * c * r
            if v != 0:
                return _sgn(v)
            return _sgn(c)
        # g(r) = (b − cB) r + (a − cC) with r² = −Br − C
        s = self.sign_linear(b - c * self.B, a - c * self.C)
        if s:
            return s
        s = self.sign_linear(2 * c, b)
        if s:
            return s
        return _sgn(c)

    def to_dict(self) -> dict:
        """JSON-friendly exact form: ``{"rational": "p/q"}`` or ``{"B", "C", "branch"}``."""
        if self.q is not None:
            return {"rational": str(self.q), "float": float(self)}
        return {"B": str(self.B), "C": str(self.C), "branch": self.branch, "float": float(self)}


def _exit_root(a, b, c, x: QuadraticRoot):
    """The first simple root > x of ``a + bt + ct²`` (positive right of x), or None."""
    if c == 0:
        if b == 0:
            return None
        r = QuadraticRoot.rational(-_F(a) / _F(b))
        return r if r > x else None
    disc = b * b - 4 * a * c
    if disc <= 0:  # no real root, or a double root (touches zero, keeps the sign)
        return None
    B, C = _F(b) / _F(c), _F(a) / _F(c)
    for branch in (-1, 1):
        r = QuadraticRoot.irrational(B, C, branch)
        if r > x:
            return r
    return None


def _maybe_dyadic(v):
    d = _Dyadic.of(v) if isinstance(v, Fraction | int) else None
    return v if d is None else d


_to_dyadic = np.frompyfunc(_maybe_dyadic, 1, 1)
_to_fraction = np.frompyfunc(lambda v: v.frac() if type(v) is _Dyadic else Fraction(v), 1, 1)


def _dyadic_tree(p):
    """The exact parameters with every dyadic Fraction replaced by a :class:`_Dyadic`."""
    if isinstance(p, np.ndarray) and p.dtype == object:
        return _to_dyadic(p).astype(object) if p.size else p
    if isinstance(p, tuple | list):
        return type(p)(_dyadic_tree(v) for v in p)
    return p


def _fr(a) -> np.ndarray:
    return np.asarray(_to_fraction(np.asarray(a, dtype=object)), dtype=object)


def _dyadic_above(q: Fraction, width: Fraction) -> Fraction:
    """A dyadic rational in ``(q, q + width]`` (width > 0)."""
    k = max(0, -(width.numerator.bit_length() - width.denominator.bit_length()) + 2)
    scale = 1 << k
    return Fraction(math.floor(q * scale) + 1, scale)


class _ExactModel:
    """Exact evaluations of a 1-D model: frozen polynomial logits and maps per pattern."""

    def __init__(self, f: AbstractPiecewiseLinear):
        self.f = f
        self.params = _dyadic_tree(f.exact_params())
        self.n_eval = 0
        self.cache: dict[bytes, tuple] = {}
        self.float_filter = True

    def eval(self, t: Fraction, pattern=None):
        """``(y, logits, pattern)`` at the rational t (dyadic arithmetic where possible;
        values come back as Fractions)."""
        self.n_eval += 1
        t = Fraction(t)
        x = np.array([_maybe_dyadic(t)], dtype=object)
        return self.f.exact_eval(self.params, x, pattern)

    def frozen(self, pat: np.ndarray):
        """Per layer ``(a, b, c)`` object arrays (G, K) of the quadratic logits, and the
        output map ``(y0, y1)`` (y = y0 + y1 t), of the model frozen to ``pat``."""
        key = pat.tobytes()
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        y0, L0, _ = self.eval(Fraction(0), pat)
        yp, Lp, _ = self.eval(Fraction(1), pat)
        ym, Lm, _ = self.eval(Fraction(-1), pat)
        y2, L2, _ = self.eval(Fraction(2), pat)
        polys = []
        half = _Dyadic(1, -1)
        for v0, vp, vm, v2 in zip(L0, Lp, Lm, L2):
            c = (vp + vm) * half - v0
            b = (vp - vm) * half
            if not np.all(v0 + 2 * b + 4 * c == v2):
                raise ValueError(
                    "exact 1-D counting: with the pattern frozen, a logit of this model is not "
                    "a polynomial of degree <= 2 in the input (checked at a fourth point); "
                    "only hardmax/ReLU models (affine stream, bilinear scores) are supported."
                )
            polys.append((v0, b, c))
        y1 = yp - y0
        if not np.all(y0 + 2 * y1 == y2) or not np.all(y0 - y1 == ym):
            raise ValueError(
                "exact 1-D counting: the frozen output of this model is not affine in the input."
            )
        polys_f = [tuple(_floats(v) for v in abc) for abc in polys]
        if not all(np.isfinite(v).all() for abc in polys_f for v in abc):
            polys_f = None  # beyond float64: decide everything exactly
        out = (polys, _fr(y0), _fr(y1), polys_f)
        self.cache[key] = out
        return out


_float_of = np.frompyfunc(safe_float, 1, 1)


def _floats(v) -> np.ndarray:
    with np.errstate(over="ignore"):  # beyond float64: ±inf (the float filter is then off)
        return np.asarray(_float_of(np.asarray(v, dtype=object)), dtype=np.float64)


# relative slack of the float filters: covers the conversions (≤ 2⁻⁵² each) and a few
# float operations (≤ 2⁻⁵³ each) by a factor of > 1000
_SLACK = 1e-12


def _lex_argmax(r: QuadraticRoot, a, b, c, abc_f=None) -> np.ndarray:
    """Winner per group (row) at ``r + ε`` (lowest index on identical competitors).

    Float filter (``abc_f``: float copies of a, b, c): a group whose float winner at r
    exceeds every competitor by more than a rigorous error bound has that winner on
    ``(r, r + ε)``; the other groups are decided exactly."""
    G, K = a.shape
    out = np.zeros(G, np.int64)
    todo = range(G)
    if abc_f is not None and K > 1:
        af, bf, cf = abc_f
        rf, dr = r.approx()
        with np.errstate(all="ignore"):
            v = af + rf * (bf + rf * cf)
            rad = abs(rf) + dr
            dv = (np.abs(bf) + 2 * np.abs(cf) * rad) * dr
            err = _SLACK * (np.abs(af) + np.abs(bf) * rad + np.abs(cf) * rad * rad + dv) + dv
            err = err + 1e-290
            lo, hi = v - err, v + err
            best = np.argmax(v, axis=1)
            lo_b = np.take_along_axis(lo, best[:, None], 1)[:, 0]
            hi_o = np.where(np.arange(K)[None, :] == best[:, None], -np.inf, hi).max(1)
            sure = np.isfinite(lo_b) & np.isfinite(hi_o) & (lo_b > hi_o)
        out[sure] = best[sure]
        todo = np.nonzero(~sure)[0]
    for g in todo:
        best = 0
        for j in range(1, K):
            if r.lex_sign(a[g, j] - a[g, best], b[g, j] - b[g, best], c[g, j] - c[g, best]) > 0:
                best = j
        out[g] = best
    return out


def _right_pattern(ex: _ExactModel, r: QuadraticRoot, guess: np.ndarray):
    """``p⁺(r)``: the pattern on ``(r, r + ε)``, by correcting ``guess`` layer by layer."""
    q = np.asarray(guess, np.int64).copy()
    for _ in range(q.size + 2):
        polys, y0, y1, polys_f = ex.frozen(q)
        off, fixed = 0, True
        for li, (a, b, c) in enumerate(polys):
            abc_f = None if polys_f is None else polys_f[li]
            G = a.shape[0]
            w = _lex_argmax(r, a, b, c, abc_f if ex.float_filter and abc_f is not None else None)
            if not np.array_equal(w, q[off : off + G]):
                q = q.copy()
                q[off : off + G] = w
                fixed = False
                break
            off += G
        if fixed:
            return q, polys, y0, y1, polys_f
    raise RuntimeError("exact 1-D counting: the right-limit pattern did not converge")


def _exit(polys, pat, x: QuadraticRoot, polys_f=None, end: QuadraticRoot | None = None):
    """The end of the region of ``pat`` right of x: the smallest simple root > x of its
    non-zero gaps (None: the region is unbounded to the right).

    Float filter (``polys_f`` and ``end`` given): the gap whose float root estimate comes
    first is solved exactly (the current exit E, or ``end``); every other gap that a
    rigorous float enclosure proves positive on ``[x, E]`` cannot end the region before
    E and is skipped; the rest are solved exactly."""
    if polys_f is None or end is None:
        gaps = _all_gaps(polys, pat)
        best = None
        for ga, gb, gc in gaps:
            r = _exit_root(ga, gb, gc, x)
            if r is not None and (best is None or r < best):
                best = r
        return best
    # float gap coefficients, their magnitudes (for the error bounds) and their ids
    ids, G_a, G_b, G_c, M_a, M_b, M_c = [], [], [], [], [], [], []
    off = 0
    for li, (af, bf, cf) in enumerate(polys_f):
        G, K = af.shape
        w = np.asarray(pat[off : off + G], np.int64)
        off += G
        rows = np.arange(G)
        for arr, gl, ml in ((af, G_a, M_a), (bf, G_b, M_b), (cf, G_c, M_c)):
            aw = arr[rows, w][:, None]
            gl.append((aw - arr).ravel())
            ml.append((np.abs(aw) + np.abs(arr)).ravel())
        comp = np.tile(np.arange(K), G)
        grp = np.repeat(rows, K)
        keep = comp != np.repeat(w, K)
        ids.append(np.stack([np.full(G * K, li), grp, np.repeat(w, K), comp], 1)[keep])
        for lst in (G_a, G_b, G_c, M_a, M_b, M_c):
            lst[-1] = lst[-1][keep]
    if not ids:
        return None
    ids = np.concatenate(ids)
    ga, gb, gc, ma, mb, mc = (np.concatenate(v) for v in (G_a, G_b, G_c, M_a, M_b, M_c))
    xf, dx = x.approx()

    def exact(i):
        li, g, w, j = (int(v) for v in ids[i])
        a, b, c = polys[li]
        da, db, dc = a[g, w] - a[g, j], b[g, w] - b[g, j], c[g, w] - c[g, j]
        if da == 0 and db == 0 and dc == 0:
            return None
        return _exit_root(da, db, dc, x)

    with np.errstate(all="ignore"):
        # ordering only: the first float root > x of every gap (inf: none)
        disc = gb * gb - 4 * ga * gc
        sq = np.sqrt(np.maximum(disc, 0))
        lin = -ga / gb
        q1 = (-gb - sq) / (2 * gc)
        q2 = (-gb + sq) / (2 * gc)
        lo_r, hi_r = np.minimum(q1, q2), np.maximum(q1, q2)
        est = np.where(
            gc == 0,
            np.where(lin > xf, lin, np.inf),
            np.where(
                disc > 0, np.where(lo_r > xf, lo_r, np.where(hi_r > xf, hi_r, np.inf)), np.inf
            ),
        )
        est = np.where(np.isnan(est), np.inf, est)
    done = np.zeros(ids.shape[0], bool)
    best = None
    first = int(np.argmin(est))
    if np.isfinite(est[first]):
        best = exact(first)
        done[first] = True
    E = end if best is None or best > end else best
    Ef, dE = E.approx()
    with np.errstate(all="ignore"):
        u, v = xf - dx, Ef + dE
        m = 0.5 * (u + v)
        h = max(v - m, m - u) * (1 + 1e-12) + 1e-300
        gm = ga + m * (gb + m * gc)
        gpm = gb + 2 * gc * m
        low = gm - np.abs(gpm) * h + np.minimum(gc, 0) * h * h
        rad = abs(m) + h
        err = _SLACK * (ma + mb * rad + mc * rad * rad) + 1e-290
        sure = np.isfinite(low) & np.isfinite(err) & (low - err > 0)
    for i in np.nonzero(~sure & ~done)[0]:
        r = exact(i)
        if r is not None and (best is None or r < best):
            best = r
    return best


def _all_gaps(polys, pat):
    out, off = [], 0
    for a, b, c in polys:
        G, K = a.shape
        for g in range(G):
            w = int(pat[off + g])
            for j in range(K):
                if j == w:
                    continue
                ga, gb, gc = a[g, w] - a[g, j], b[g, w] - b[g, j], c[g, w] - c[g, j]
                if ga == 0 and gb == 0 and gc == 0:
                    continue
                out.append((ga, gb, gc))
        off += G
    return out


def exact_regions_1d(
    f: AbstractPiecewiseLinear,
    lo,
    hi,
    *,
    max_regions: int = 100_000,
    float_filter: bool = True,
):
    """Exact, certified linear-region count of a 1-D model on ``[lo, hi]`` whose frozen
    logits are polynomials of degree ≤ 2 (hardmax attention with input-dependent queries
    and keys, ReLU FFNs; affine-logit models are a special case).

    :func:`count_linear_regions` calls this for 1-D models with ``affine_logits=False``
    (e.g. :class:`HardmaxTransformer`, or its :func:`restrict` to a line); it can also be
    called directly on an affine-logit model as an independent exact count. ``lo`` and
    ``hi`` are taken as the exact rationals of their float values. See the module
    docstring for the method. ``float_filter`` (default): decisions that a rigorous float
    error bound settles (a competitor clearly ahead, a gap provably positive up to the
    current exit) skip the exact arithmetic; ``False``: everything exact (the same result,
    slower).

    Returns:
        A :class:`RegionCount` with ``certified=True``; ``breakpoints`` as floats,
        ``certificate["exact_breakpoints"]``: the exact :class:`QuadraticRoot` values,
        ``certificate["exact_maps"]``: ``(slope, intercept)`` Fraction arrays per region,
        ``certificate["discontinuities"]``: the switches where f jumps.

    Example:
        >>> import jax
        >>> jax.config.update("jax_enable_x64", True)
        >>> from transflow.expressivity import zigzag_maxout, exact_regions_1d
        >>> r = exact_regions_1d(zigzag_maxout(2, 2), 0.0, 1.0)
        >>> r.linear, r.certified
        (9, True)
    """
    from ._region_count import RegionCount, _check_box, _check_model

    check_number("max_regions", max_regions, "exact_regions_1d", lower=0, integer=True)
    if f.in_dim != 1:
        raise ValueError(
            f"exact_regions_1d: `f` must have input dimension 1, got {f.in_dim}; restrict it "
            "to a line first: transflow.expressivity.restrict(f, origin, direction)."
        )
    _check_model(f)
    lo, hi = _check_box(f, lo, hi)  # finite float64 numbers, lo < hi
    lo_q, hi_q = Fraction(float(lo[0])), Fraction(float(hi[0]))
    t0 = time.perf_counter()
    if not isinstance(f, AbstractExactEval):
        raise TypeError(lacks(f, AbstractExactEval, "exact_regions_1d", "exact counting needs"))
    ex = _ExactModel(f)
    ex.float_filter = bool(float_filter)
    span = hi_q - lo_q
    tiny = span / (1 << 40)
    x = QuadraticRoot.rational(lo_q)
    guess = ex.eval(min(lo_q + tiny, hi_q))[2]
    pat, polys, y0, y1, polys_f = _right_pattern(ex, x, guess)
    bps: list[QuadraticRoot] = []
    maps = [(y1, y0)]
    pats = [pat]
    differ: list[bool] = []
    jumps: list[bool] = []
    end = QuadraticRoot.rational(hi_q)
    from ._budget import check_budget

    while True:
        check_budget("exact 1-D walk")
        if ex.float_filter:
            e = _exit(polys, pat, x, polys_f, end)
        else:
            e = _exit(polys, pat, x)
        if e is None or e >= end:
            break
        if len(pats) >= max_regions:
            raise RuntimeError(
                f"exact_regions_1d: more than max_regions={max_regions} regions on [lo, hi]; "
                "raise max_regions or count a smaller interval."
            )
        # a guess of the pattern right of e (corrected exactly by _right_pattern)
        guess = ex.eval(min(_dyadic_above(e.rational_above(tiny), tiny), hi_q))[2]
        q, polys, z0, z1, polys_f = _right_pattern(ex, e, guess)
        if np.array_equal(q, pat):  # cannot happen: a gap of pat turns negative at e
            raise RuntimeError("exact 1-D counting: no pattern change at a simple root")
        sl, il = maps[-1]
        differ.append(bool(np.any(sl != z1) or np.any(il != z0)))
        jumps.append(
            any(e.sign_linear(s1 - s2, i1 - i2) != 0 for s1, s2, i1, i2 in zip(sl, z1, il, z0))
        )
        bps.append(e)
        maps.append((z1, z0))
        pats.append(q)
        pat, x = q, e
    labels = np.concatenate([[0], np.cumsum(np.asarray(differ, np.int64))]).astype(np.int64)
    n_act = len(pats)
    fl = np.array([float(b) for b in bps], np.float64)
    edges = np.concatenate([[float(lo_q)], fl, [float(hi_q)]])
    widths = np.diff(edges)
    slopes = np.array([[safe_float(v) for v in s] for s, _ in maps], np.float64)[:, :, None]
    icpts = np.array([[safe_float(v) for v in i] for _, i in maps], np.float64)
    return RegionCount(
        linear=int(labels[-1]) + 1,
        activation=n_act,
        dim=1,
        slopes=slopes,
        intercepts=icpts,
        labels=labels,
        breakpoints=fl,
        evaluations=ex.n_eval,
        certified=True,
        certificate={
            "method": METHOD,
            "exact_breakpoints": bps,
            "irrational_breakpoints": sum(not b.is_rational for b in bps),
            "exact_maps": maps,
            "discontinuities": int(sum(jumps)),
            "exact_evaluations": ex.n_eval,
            "patterns_distinct": len({p.tobytes() for p in pats}),
            "min_region_width": float(widths.min()),
            "seconds": round(time.perf_counter() - t0, 3),
        },
    )

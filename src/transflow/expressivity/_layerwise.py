"""Layerwise certified exact 1-D region counting (issue #14, the fast path).

Instead of walking from region to region with full forward passes, the counter propagates
**intervals** through the model, decision layer by decision layer. On every interval
``I = [a, b]`` (midpoint ``m``, half-width ``h``) every quantity ``q`` of the forward pass
is stored as an affine function of ``t`` with a rigorous uniform error bound:

    ``|q_true(t) − (v + s·(t − m))| ≤ e``  for every ``t ∈ I``,

where ``q_true`` is the exact (real-arithmetic) model and ``v, s, e`` are float64 arrays
over all intervals (vectorised in numpy). A second bound ``es`` covers the slope: on the
*clean zone* of I (see below) ``q_true`` is affine with a slope within ``es`` of ``s``.
Linear maps, sums and (constant-query) attention scores propagate ``(v, s, e, es)`` with
the standard bounds ``γ_n Σ|w||x|`` (Higham), as
:meth:`~transflow.expressivity.AbstractBoundedEval.eval_bounded` does for points.

At a decision layer (a table of max-groups) every interval is either

- **decided** for a group: the winner's lower bound exceeds every competitor's upper bound
  at both ends of I (affine functions, uniform bounds: then on all of I), or
- **split**: the float upper envelope of the group's affine competitors gives the switch
  points; each switch between winners p → q gets a rigorous *enclosure* ``[rlo, rhi]``
  (the roots of ``ĝ ∓ e_g`` of the gap ``g = z_p − z_q``, whose float slope must be
  negative), and the split point lies in it. The split is **certified** if every
  enclosure lies strictly inside the clean zone of I (where all earlier decisions are
  constant, so the exact gap is affine there: exactly one root, inside the enclosure), the
  enclosures of all groups of the layer on I are pairwise disjoint (one switch per
  enclosure), and every competitor other than the two neighbours of a piece is provably
  below the piece's winner at both ends of the piece.

The children of a split interval carry the winners of their pieces; their clean zones run
between the neighbouring enclosures. The selected values keep a uniform bound over the
whole child, including the slivers between a true switch and the float split point: the
error of the selected value is ``max(e_w, max_j |v̂_j − v̂_w| + e_j)`` over the competitors
j that could win somewhere on the child (``ẑ_j + e_j ≥ ẑ_w − e_w`` at an end). So the
bounds stay valid for the true model everywhere, and later decisions are proved for it.

An interval whose split cannot be certified (round-off larger than a gap, coinciding
switches of several groups, a switch within round-off of an earlier one) becomes a *hole*.
Each run of holes is recomputed exactly: the exact rational walk of
:class:`transflow.expressivity._exact_walk._Exact` from a point of the clean zone of the good
interval left of it to one right of it (or the domain ends), which counts every switch in
between. Neighbouring affine maps are different if their slopes differ by more than the
sum of their slope bounds; otherwise they are compared exactly (frozen exact evaluation
of both patterns).

The count is then exact: activation regions = good intervals + the regions found by the
exact walks; linear regions = 1 + the switches between different affine maps. A model opts
in by inheriting :class:`AbstractIntervalForward` (``interval_forward(ctx, x)``) and
:class:`AbstractExactEval`; models without them use the walk of ``_certify``.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from ._budget import check_budget
from ._exact_walk import _Exact
from ._pwl import AbstractExactEval, AbstractIntervalForward, lacks, safe_float

__all__ = ["IntervalContext", "IntervalAffine", "NotApplicable", "count_1d_layerwise"]

_U = 2.0**-53  # unit round-off of float64
_INFL = 1.0 + 1e-12  # inflation of propagated bounds (covers the bounds' own round-off)


def _g(n: int) -> float:
    """``γ_n = n u / (1 − n u)``, inflated by 1 %."""
    return 1.01 * n * _U / (1.0 - n * _U)


class NotApplicable(Exception):
    """The layerwise counter does not apply to this model's weights (attention queries that
    depend on x); the caller uses the point walk instead. (Capabilities are decided before
    the count, by the abstract classes the model inherits.)"""


class IntervalAffine:
    """Affine quantities on N intervals: ``v`` (value at the interval's midpoint), ``s``
    (slope), ``e`` (uniform error bound on the interval), ``es`` (slope error bound), all
    of shape ``(N, ...)``; ``gen`` is the interval generation they live on."""

    __slots__ = ("v", "s", "e", "es", "gen", "cols")

    def __init__(self, v, s, e, es, gen, cols=None):
        self.v, self.s, self.e, self.es, self.gen = v, s, e, es, gen
        # optional mask of the last axis: False marks columns that are exactly zero (zero
        # value, slope and bounds), so that sums can skip them
        self.cols = cols

    def map(self, fn) -> IntervalAffine:
        """Apply an indexing/reshaping function to all four arrays."""
        return IntervalAffine(fn(self.v), fn(self.s), fn(self.e), fn(self.es), self.gen)

    @property
    def shape(self):
        return self.v.shape


def _bcast(x, ndim):
    return x.reshape((-1,) + (1,) * (ndim - 1))


class IntervalContext:
    """The current partition of ``[lo, hi]`` and the operations of ``interval_forward``.

    A model's ``interval_forward(ctx, x)`` receives its input as an
    :class:`IntervalAffine` of shape ``(N, d)`` and returns its output ``(N, d_out)``,
    using only :meth:`lin`, :meth:`add`, :meth:`const`, :meth:`scores`, :meth:`decide`
    and :meth:`carry`. After every :meth:`decide` the intervals change: every quantity
    computed before it must be moved to the new intervals with :meth:`carry`.
    """

    def __init__(self, lo: float, hi: float):
        self.lo, self.hi = float(lo), float(hi)
        self.a, self.b = np.array([lo], np.float64), np.array([hi], np.float64)
        self.ca, self.cb = self.a.copy(), self.b.copy()
        self.ea, self.eb = self.a.copy(), self.b.copy()
        self._geometry()
        self.gen = 0
        self.records = []  # per decide: (parent index or None, winners (N, G))
        self.holes = []  # (a, b) arrays of intervals that need the exact fallback
        self.interval_layers = 0  # Σ over decision layers of the intervals processed
        self.n_decide = 0
        self._carry = None
        self._rep = None
        # a callable returning (exact model, pattern length) for exact tie checks, or None
        self.exact_model = None

    def _geometry(self):
        self.m = 0.5 * (self.ea + self.eb)
        self.h = np.maximum(self.m - self.ea, self.eb - self.m) * (1 + 4 * _U)

    @property
    def n(self) -> int:
        return self.a.shape[0]

    def _check(self, *xs):
        for x in xs:
            if x.gen != self.gen:
                raise RuntimeError(
                    "interval_forward: a quantity computed before a decision layer was used "
                    "after it; move it to the new intervals with ctx.carry(x) first."
                )

    # ------------------------------------------------------------------ operations
    def input(self) -> IntervalAffine:
        """The input ``t`` on every interval: exactly ``m + 1·(t − m)``."""
        n = self.n
        z = np.zeros((n, 1))
        return IntervalAffine(self.m[:, None].copy(), np.ones((n, 1)), z, z.copy(), self.gen)

    def const(self, c) -> IntervalAffine:
        """A constant array c, the same on every interval."""
        c = np.asarray(c, np.float64)
        v = np.broadcast_to(c, (self.n,) + c.shape).copy()
        z = np.zeros_like(v)
        return IntervalAffine(v, z, z, z.copy(), self.gen)

    def lin(self, x: IntervalAffine, W, b=None) -> IntervalAffine:
        """``x @ W + b`` over the last axis: ``e' = (e + γ(|v| + |s| h)) |W| + γ|b|`` with
        ``γ = γ_{n+1}`` (n = fan-in); ``es' = (es + γ|s|) |W|``. Zero rows and columns of
        W are skipped (the constructions' weights are sparse); columns of the result that
        are exactly zero are marked in ``cols``."""
        self._check(x)
        W = np.asarray(W, np.float64)
        n, p = W.shape
        bb = np.zeros(p) if b is None else np.asarray(b, np.float64)
        rows = np.nonzero(np.any(W != 0, axis=1))[0]
        cols = np.any(W != 0, axis=0)
        out_cols = cols | (bb != 0)
        sh = x.v.shape[:-1] + (p,)
        xv, xs, xe, xes = x.v, x.s, x.e, x.es
        if rows.size < n:
            xv, xs, xe, xes = (arr[..., rows] for arr in (xv, xs, xe, xes))
            W = W[rows]
        sub = not cols.all()
        if sub:
            W = W[:, cols]
        k, q = W.shape
        check_budget("layerwise interval counter")
        aW = np.abs(W)
        g = _g(k + 1)
        hh = _bcast(self.h, x.v.ndim)
        osh = x.v.shape[:-1] + (q,)
        if k == 0 or q == 0:  # a zero map (dead layer, zero read-out): exactly zero
            v, s, e, es = (np.zeros(osh) for _ in range(4))
        else:
            flat = lambda a: a.reshape(-1, k)
            v = (flat(xv) @ W).reshape(osh)
            s = (flat(xs) @ W).reshape(osh)
            axs = np.abs(xs)
            e = (flat(xe * _INFL + g * (np.abs(xv) + axs * hh)) @ aW).reshape(osh)
            es = (flat(xes * _INFL + g * axs) @ aW).reshape(osh)
        if sub:
            full = []
            for arr in (v, s, e, es):
                z = np.zeros(sh)
                z[..., cols] = arr
                full.append(z)
            v, s, e, es = full
        v = v + bb
        e = e + g * np.abs(bb)
        return IntervalAffine(v, s, e, es, self.gen, None if out_cols.all() else out_cols)

    def _sum(self, xv, xs, xe, xes, yv, ys, ye, yes):
        g = _g(2)
        v, s = xv + yv, xs + ys
        hh = _bcast(self.h, v.ndim)
        e = (xe + ye) * _INFL + g * (np.abs(v) + np.abs(s) * hh)
        es = (xes + yes) * _INFL + g * np.abs(s)
        return v, s, e, es

    def add(self, x: IntervalAffine, y: IntervalAffine) -> IntervalAffine:
        """``x + y`` (broadcasting over the trailing axes); columns of y marked exactly
        zero (``y.cols``) are copied from x unchanged."""
        self._check(x, y)
        X = (x.v, x.s, x.e, x.es)
        Y = (y.v, y.s, y.e, y.es)
        if y.cols is None or x.v.shape != np.broadcast_shapes(x.v.shape, y.v.shape):
            return IntervalAffine(*self._sum(*X, *Y), self.gen)
        c = np.nonzero(y.cols)[0]
        res = self._sum(*(a[..., c] for a in X), *(a[..., c] for a in Y))
        out = []
        for a, r in zip(X, res):
            a = a.copy()
            a[..., c] = r
            out.append(a)
        return IntervalAffine(*out, self.gen)

    def residual(self, x: IntervalAffine, hid: IntervalAffine, W, b=None) -> IntervalAffine:
        """``x + hid @ W + b`` for a residual stream x, **in place** on x's arrays (x must
        own them and not be used afterwards: ``X = ctx.residual(X, h, W, b)``); only the
        columns where W or b is non-zero are computed and changed."""
        self._check(x, hid)
        W = np.asarray(W, np.float64)
        bb = np.zeros(W.shape[1]) if b is None else np.asarray(b, np.float64)
        c = np.nonzero(np.any(W != 0, axis=0) | (bb != 0))[0]
        y = self.lin(hid, W[:, c], bb[c])
        X = (x.v, x.s, x.e, x.es)
        res = self._sum(*(a[..., c] for a in X), y.v, y.s, y.e, y.es)
        for a, r in zip(X, res):
            a[..., c] = r
        return IntervalAffine(*X, self.gen)

    def scores(self, q: IntervalAffine, k: IntervalAffine) -> IntervalAffine:
        """Attention scores ``Σ_c q[h, c] k[t, h, c]`` of shape ``(N, H, T)`` for queries
        ``q (N, H, dk)`` that are constant in t (zero slope and slope bound; otherwise the
        scores are quadratic: :class:`NotApplicable`) and keys ``k (N, T, H, dk)``."""
        self._check(q, k)
        if np.any(q.s != 0) or np.any(q.es != 0):
            raise NotApplicable("attention queries depend on x (quadratic scores)")
        dk = q.v.shape[-1]
        g = _g(dk + 1)
        hh = _bcast(self.h, k.v.ndim)
        aq = np.abs(q.v)
        ak = np.abs(k.v) + np.abs(k.s) * hh
        ein = lambda x, y: np.einsum("nhc,nthc->nht", x, y)
        v = ein(q.v, k.v)
        s = ein(q.v, k.s)
        e = (ein(aq, k.e) + ein(q.e, ak + k.e)) * _INFL + g * ein(aq, ak)
        es = (ein(aq, k.es) + ein(q.e, np.abs(k.s) + k.es)) * _INFL + g * ein(aq, np.abs(k.s))
        return IntervalAffine(v, s, e, es, self.gen)

    # ------------------------------------------------------------------ evaluation helpers
    def _at(self, x_v, x_s, x_e, t, m, h):
        """Values at points t (per interval) and an error bound (uniform error + the
        round-off of the evaluation ``v + s (t − m)``)."""
        nd = x_v.ndim
        d = _bcast(t - m, nd)
        val = x_v + x_s * d
        err = x_e * _INFL + 6 * _U * (np.abs(x_v) + np.abs(x_s) * _bcast(h, nd))
        return val, err

    def _recentre(self, x: IntervalAffine, idx, m_from):
        """Move quantities of the parent intervals ``idx`` (midpoints ``m_from``) to the
        current intervals (their extended domains lie in the parents')."""
        v, s, e, es = x.v[idx], x.s[idx], x.e[idx], x.es[idx]
        dm = _bcast(self.m - m_from, v.ndim)
        # v += s dm; e += 6u (|v| + |s dm|), in place on the gathered copies
        acc = np.abs(v)
        t = s * dm
        v += t
        np.abs(t, out=t)
        acc += t
        acc *= 6 * _U
        e += acc
        return IntervalAffine(v, s, e, es, self.gen, x.cols)

    def carry(self, x: IntervalAffine) -> IntervalAffine:
        """Move a quantity computed before the last :meth:`decide` to the new intervals."""
        if x.gen != self.gen - 1 or self._carry is None:
            raise RuntimeError(
                "ctx.carry: the quantity is not from the interval generation just before the "
                f"last decision layer (its generation {x.gen}, current {self.gen})."
            )
        idx = self._carry
        if idx is None or isinstance(idx, str):
            return IntervalAffine(x.v, x.s, x.e, x.es, self.gen)
        return self._recentre(x, idx, self._m_old[idx])

    # ------------------------------------------------------------------ decisions
    def decide(
        self, Z: IntervalAffine, V: IntervalAffine | None = None, groups=None
    ) -> IntervalAffine:
        """One decision layer: ``Z (N, G, K)`` competing logits of G max-groups, ``V (N, G,
        K, P)`` the values each competitor would pass on (``None``: the logits, P = 1).

        Splits the intervals at the certified switches (uncertifiable intervals become
        holes), records the winners, and returns the selected values ``(N', G, P)`` on the
        new intervals (see the module docstring for the bounds).

        ``groups``: for a layer with groups that are identical by construction (the same
        weights applied to the same inputs, so their exact logits are equal), Z holds only
        the distinct groups and ``groups[g]`` is the distinct group of the layer's group g;
        the winners and values are expanded to all groups (their switches coincide
        exactly, which float64 enclosures could not separate).
        """
        if groups is None:
            self._rep = None
            return self._decide(Z, V)
        groups = np.asarray(groups, np.int64)
        rep = np.zeros(Z.v.shape[1], np.int64)
        rep[groups[::-1]] = np.arange(groups.size)[::-1]  # the first full group of each
        self._rep = rep
        out = self._decide(Z, V)
        parent, W = self.records[-1]
        self.records[-1] = (parent, W[:, groups])
        return out.map(lambda a: a[:, groups])

    def _exact_ties(self, Z, w0, decided, notw, beaten):
        """Groups that float64 cannot decide because some competitors are float-identical
        to the winner (equal value and slope, error bounds > 0): decided if those are
        *exactly* identical affine functions under the interval's frozen earlier pattern
        (then they tie everywhere and the lowest index, w0, wins). Returns the groups so
        decided (N, G)."""
        out = np.zeros_like(decided)
        un, ug = np.nonzero(~decided)
        wu = w0[un, ug][:, None]
        vu, su = Z.v[un, ug], Z.s[un, ug]  # (U, K)
        same_u = (vu == np.take_along_axis(vu, wu, -1)) & (su == np.take_along_axis(su, wu, -1))
        ok = np.all(~notw[un, ug] | beaten[un, ug] | same_u, axis=-1)
        if not ok.any():
            return out
        float_same = np.zeros(notw.shape, bool)
        float_same[un, ug] = same_u
        cand = np.zeros_like(decided)
        cand[un[ok], ug[ok]] = True
        ex, plen = self.exact_model()
        layer = self.n_decide - 1
        for i in np.unique(np.nonzero(cand)[0]):
            check_budget("layerwise exact tie check")
            prefix = self.pattern(int(i)) if self.records else np.zeros(0, np.int64)
            pat = np.zeros(plen, np.int64)
            pat[: prefix.size] = prefix
            t0 = Fraction(float(self.m[i]))
            L0 = ex.eval(t0, pat)[1][layer]
            L1 = ex.eval(t0 + 1, pat)[1][layer]
            for g in np.nonzero(cand[i])[0]:
                fg = g if self._rep is None else int(self._rep[g])
                w = int(w0[i, g])
                same = np.nonzero(float_same[i, g] & notw[i, g])[0]
                if all(L0[fg, j] == L0[fg, w] and L1[fg, j] == L1[fg, w] for j in same):
                    out[i, g] = True
        return out

    def _decide(self, Z: IntervalAffine, V: IntervalAffine | None = None) -> IntervalAffine:
        check_budget("layerwise interval counter")
        self._check(Z)
        if V is None:
            V = Z.map(lambda a: a[..., None])
        self._check(V)
        N, G, K = Z.v.shape
        self.interval_layers += N
        self.n_decide += 1
        # decisions are proved on the extended domains [ea, eb] (see the module docstring)
        a, b, m, h = self.ea, self.eb, self.m, self.h
        za, ea = self._at(Z.v, Z.s, Z.e, a, m, h)
        zb, eb = self._at(Z.v, Z.s, Z.e, b, m, h)
        w0 = np.argmax(za, axis=-1)
        ar = np.arange(K)
        notw = ar != w0[..., None]
        lwa = np.take_along_axis(za - ea, w0[..., None], -1)
        lwb = np.take_along_axis(zb - eb, w0[..., None], -1)
        # w beats j: strictly, or with equality when j > w (ties go to the lowest index)
        after = ar > w0[..., None]
        beat_a = (lwa > za + ea) | (after & (lwa >= za + ea))
        beat_b = (lwb > zb + eb) | (after & (lwb >= zb + eb))
        decided = np.all(~notw | (beat_a & beat_b), axis=-1)  # (N, G)
        if self.exact_model is not None and not decided.all():
            decided |= self._exact_ties(Z, w0, decided, notw, beat_a & beat_b)
        self._m_old = m
        if decided.all():
            W = w0
            self.records.append((None, W.astype(np.int16)))
            self.gen += 1
            self._carry = "identity"
            sel = np.take_along_axis(V.v, W[..., None, None], 2)[:, :, 0]
            sel_s = np.take_along_axis(V.s, W[..., None, None], 2)[:, :, 0]
            sel_e = np.take_along_axis(V.e, W[..., None, None], 2)[:, :, 0]
            sel_es = np.take_along_axis(V.es, W[..., None, None], 2)[:, :, 0]
            return IntervalAffine(sel, sel_s, sel_e, sel_es, self.gen)
        un, ug = np.nonzero(~decided)
        U = un.size
        vu, su, eu = Z.v[un, ug], Z.s[un, ug], Z.e[un, ug]  # (U, K)
        mu, hu, au, bu = m[un], h[un], a[un], b[un]
        rows = np.arange(U)
        # float upper envelope from a: kinetic sweep (at most K − 1 switches)
        cur = w0[un, ug].copy()
        tcur = au.copy()
        win = np.full((U, K), -1, np.int64)
        win[:, 0] = cur
        ys = np.full((U, K - 1), np.inf)
        prev = np.full((U, K - 1), -1, np.int64)
        active = np.ones(U, bool)
        with np.errstate(divide="ignore", invalid="ignore"):
            for it in range(K - 1):
                vw, sw = vu[rows, cur], su[rows, cur]
                ds = su - sw[:, None]
                cand = ds > 0
                tj = mu[:, None] + (vw[:, None] - vu) / np.where(cand, ds, 1.0)
                tj = np.where(cand, np.maximum(tj, tcur[:, None]), np.inf)
                nxt = np.argmin(tj, axis=-1)
                tn = tj[rows, nxt]
                go = active & (tn < bu)
                ys[:, it] = np.where(go, tn, np.inf)
                prev[:, it] = np.where(go, cur, -1)
                win[:, it + 1] = np.where(go, nxt, -1)
                cur = np.where(go, nxt, cur)
                tcur = np.where(go, tn, tcur)
                active = go
            # enclosures of the switches p -> q
            has = prev >= 0  # (U, K-1)
            p = np.where(has, prev, 0)
            q = np.where(has, win[:, 1:], 0)
            tk = lambda arr, idx: np.take_along_axis(arr, idx, -1)
            vp, vq, sp, sq = tk(vu, p), tk(vu, q), tk(su, p), tk(su, q)
            dv, dsl = vp - vq, sp - sq
            Eg = (tk(eu, p) + tk(eu, q)) * _INFL + 6 * _U * (
                np.abs(vp) + np.abs(vq) + (np.abs(sp) + np.abs(sq)) * hu[:, None]
            )
            den = np.where(dsl < 0, -dsl, 1.0)
            tlo, thi, tm = (dv - Eg) / den, (dv + Eg) / den, dv / den
            mar = 4 * _U * (np.abs(mu)[:, None] + np.abs(tlo) + np.abs(thi)) + 1e-300
            rlo = mu[:, None] + tlo - mar
            rhi = mu[:, None] + thi + mar
            yy = np.clip(mu[:, None] + tm, rlo, rhi)
        ok_split = ~has | ((dsl < 0) & (rlo > self.ca[un][:, None]) & (rhi < self.cb[un][:, None]))
        bad_u = ~ok_split.all(-1)
        check_budget("layerwise interval counter")
        # every piece's winner beats its non-neighbours at both ends of the piece
        # piece k: from the enclosure of its left switch to that of its right switch
        left = np.concatenate([au[:, None], np.where(has, rlo, np.nan)], 1)  # (U, K)
        right = np.concatenate([np.where(has, rhi, np.nan), bu[:, None]], 1)
        # the right end of the last piece is b: shift it into place
        npieces = 1 + has.sum(-1)
        right[rows, npieces - 1] = bu
        piece = ar[None, :] < npieces[:, None]  # (U, K)
        for ends in (left, right):
            t = np.where(piece, ends, au[:, None])  # (U, K) pieces
            val = vu[:, None, :] + su[:, None, :] * (t - mu[:, None])[..., None]  # (U, K, K)
            err = (
                eu[:, None, :] * _INFL
                + 6 * _U * (np.abs(vu) + np.abs(su) * hu[:, None])[:, None, :]
            )
            wk = np.where(piece, win, 0)
            lw = np.take_along_axis(val - err, wk[..., None], -1)  # (U, K, 1)
            wprev = np.concatenate([np.full((U, 1), -1), win[:, :-1]], 1)
            wnext = np.concatenate([win[:, 1:], np.full((U, 1), -1)], 1)
            skip = (ar[None, None, :] == wk[..., None]) | (ar[None, None, :] == wprev[..., None])
            skip |= ar[None, None, :] == wnext[..., None]
            beats = skip | (lw > val + err)
            beats |= (ar[None, None, :] > wk[..., None]) & (lw >= val + err)
            bad_u |= ~np.all(beats | ~piece[..., None], axis=(1, 2))
        check_budget("layerwise interval counter")
        # all splits of an interval: disjoint enclosures
        su_n = np.repeat(un, K - 1)[has.ravel()]
        su_g = np.repeat(ug, K - 1)[has.ravel()]
        s_y, s_lo, s_hi = yy[has], rlo[has], rhi[has]
        s_q = win[:, 1:][has]
        order = np.lexsort((s_y, su_n))
        su_n, su_g, s_y, s_lo, s_hi, s_q = (x[order] for x in (su_n, su_g, s_y, s_lo, s_hi, s_q))
        bad = np.zeros(N, bool)
        bad[un[bad_u]] = True
        same = su_n[1:] == su_n[:-1]
        overlap = same & ~(s_hi[:-1] < s_lo[1:])
        bad[su_n[1:][overlap]] = True
        if bad.any():
            self.holes.append(np.stack([self.a[bad], self.b[bad]], 1))
        keep = ~bad[su_n]
        su_n, su_g, s_y, s_lo, s_hi, s_q = (x[keep] for x in (su_n, su_g, s_y, s_lo, s_hi, s_q))
        check_budget("layerwise interval counter")
        # children of the good intervals
        good = np.nonzero(~bad)[0]
        cnt = np.bincount(su_n, minlength=N)
        nch = cnt[good] + 1
        parent = np.repeat(good, nch)
        n2 = parent.size
        start = np.cumsum(nch) - nch
        last = start + nch - 1
        first = np.zeros(n2, bool)
        first[start] = True
        is_last = np.zeros(n2, bool)
        is_last[last] = True
        ca2, cb2 = np.empty(n2), np.empty(n2)
        a2, b2 = np.empty(n2), np.empty(n2)
        ea2, eb2 = np.empty(n2), np.empty(n2)
        a2[first], ca2[first], ea2[first] = self.a[good], self.ca[good], a[good]
        b2[is_last], cb2[is_last], eb2[is_last] = self.b[good], self.cb[good], b[good]
        a2[~first], ca2[~first], ea2[~first] = s_y, s_hi, s_lo
        b2[~is_last], cb2[~is_last], eb2[~is_last] = s_y, s_lo, s_hi
        Wd = np.full((n2, G), -1, np.int64)
        Wd[first] = w0[good]
        Wd[np.nonzero(~first)[0], su_g] = s_q
        pos = np.where(Wd >= 0, np.arange(n2)[:, None], 0)
        np.maximum.accumulate(pos, axis=0, out=pos)
        W = np.take_along_axis(Wd, pos, 0)
        # new intervals
        self.a, self.b, self.ca, self.cb, self.ea, self.eb = a2, b2, ca2, cb2, ea2, eb2
        self._geometry()
        self.gen += 1
        self._carry = parent
        self.records.append((parent, W.astype(np.int16)))
        check_budget("layerwise interval counter")
        # the selected values: the winners' affine functions (exact affine maps of the
        # children's patterns), moved to the children's midpoints
        ix = (parent[:, None], np.arange(G)[None, :], W)
        sel = IntervalAffine(V.v[ix], V.s[ix], V.e[ix], V.es[ix], self.gen - 1)
        self._m_old = m
        return self._recentre(sel, slice(None), m[parent])

    def pattern(self, i: int) -> np.ndarray:
        """The full activation pattern (the model's flat winner vector) of final interval
        i, from the recorded winners and parents."""
        parts = []
        for parent, W in reversed(self.records):
            parts.append(W[i].astype(np.int64))
            if parent is not None:
                i = int(parent[i])
        return np.concatenate(parts[::-1])


# --------------------------------------------------------------------------- driver
def _segment(f, exact, A: Fraction, B: Fraction, cache: dict):
    """The exact switches in (A, B) and, where available, the exact maps of the regions:
    by exact affine propagation layer by layer (models with an integer program: a cost per
    region and layer, however many switches coincide), else by the exact rational walk
    (maps ``None``). ``exact``: a callable returning the :class:`_Exact` model; ``cache``
    keeps the model's integer program (or ``None`` if it has none) between calls."""
    from . import _exact2d

    if "prog" not in cache:
        # a model with AbstractExactProgram brings one; others walk
        cache["prog"] = _exact2d.program_1d(f)
    if cache["prog"] is not None:
        try:
            sw, maps = _exact2d.exact_segments_1d(f, A, B, cache["prog"])
            return sw, maps, True
        except _exact2d.NotExact:
            cache["prog"] = None  # the weights fail the precondition (queries depend on x)
    return exact().walk(A, B), None, False


def _exact_whole(f, lo, hi, t0, c0, reason: str) -> dict:
    """The whole interval exactly (when float64 bounds are useless, or the model has only
    exact evaluation); ``f`` must have :class:`AbstractExactEval`."""
    box = []

    def exact():
        if not box:
            box.append(_Exact(f))
        return box[0]

    A, B = Fraction(float(lo)), Fraction(float(hi))
    sw, maps, layered = _segment(f, exact, A, B, {})
    pts = [A] + [s[0] for s in sw] + [B]
    slopes, icpts = [], []
    if maps is not None:
        for sl, ic in maps:
            slopes.append([safe_float(q) for q in sl])
            icpts.append([safe_float(q) for q in ic])
    else:
        ex = exact()
        for u, v in zip(pts, pts[1:]):
            t = (u + v) / 2
            y0, _, pat = ex.eval(t)
            y1 = ex.eval(t + 1, pat)[0]
            slopes.append([safe_float(q) for q in (y1 - y0)])
            icpts.append([safe_float(q) for q in (y0 - (y1 - y0) * t)])
    n_ex = int(box[0].n_eval) if box else 0
    return {
        "slopes": np.array(slopes, np.float64)[:, :, None],
        "intercepts": np.array(icpts, np.float64),
        "breakpoints": np.array([float(s[0]) for s in sw], np.float64),
        "differ": np.array([bool(s[1]) for s in sw], bool),
        "certified": True,
        "certificate": {
            "method": "exact affine propagation over the whole interval"
            if layered
            else "exact rational walk over the whole interval",
            "reason": reason,
            "junctions": len(sw),
            "junctions_exact": len(sw),
            "exact_evaluations": n_ex,
            "failure": None,
            "seconds_total": round(time.perf_counter() - t0, 3),
            "cpu_seconds": round(time.process_time() - c0, 3),
        },
        "evaluations": n_ex,
    }


def count_1d_layerwise(f, lo: float, hi: float) -> dict:
    """Certified exact count on ``[lo, hi]`` (see the module docstring); returns the dict
    of :func:`transflow.expressivity._certify.count_1d_certified` with the maps of every
    region. ``f`` must have :class:`AbstractIntervalForward` and :class:`AbstractExactEval`
    (refused otherwise); raises :class:`NotApplicable` if its weights fail the interval
    pass's precondition (attention queries that depend on x; the caller then uses the
    point walk)."""
    for cap in (AbstractIntervalForward, AbstractExactEval):
        if not isinstance(f, cap):
            raise TypeError(lacks(f, cap, "count_1d_layerwise", "the layerwise counter needs"))
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = IntervalContext(lo, hi)
    ex_model = None
    plen = []

    def exact():
        nonlocal ex_model
        if ex_model is None:
            ex_model = _Exact(f)
        return ex_model

    def exact_and_length():
        ex = exact()
        if not plen:
            plen.append(int(ex.eval(Fraction(float(lo)))[2].size))
        return ex, plen[0]

    ctx.exact_model = exact_and_length
    try:
        # an overflow (weights near the float64 range) or a NaN makes the float bounds
        # meaningless: then the whole interval is counted by the exact walk
        with np.errstate(over="raise", invalid="raise", divide="ignore", under="ignore"):
            y = f.interval_forward(ctx, ctx.input())
    except FloatingPointError as err:
        return _exact_whole(f, lo, hi, t0, c0, f"float64 overflow ({err})")
    ctx._check(y)
    t_float = time.perf_counter() - t0
    a, b, ca, cb, m = ctx.a, ctx.b, ctx.ca, ctx.cb, ctx.m
    S, V, E, ES = y.s, y.v, y.e, y.es  # (N, d_out)
    n = a.size
    # float switches between touching good intervals
    touch = b[:-1] == a[1:]
    dS = np.abs(S[1:] - S[:-1])
    differ = np.any(dS > (ES[1:] + ES[:-1]) * _INFL + 4 * _U * (np.abs(S[1:]) + np.abs(S[:-1])), 1)
    x = b[:-1]
    with np.errstate(invalid="ignore"):
        yl = V[:-1] + S[:-1] * (x - m[:-1])[:, None]
        yr = V[1:] + S[1:] * (x - m[1:])[:, None]
        # the two maps meet at the true switch r in the enclosure [cb_i, ca_{i+1}] ∋ x
        wid = np.maximum(ca[1:] - cb[:-1], 0.0)[:, None]
        hl, hr = ctx.h[:-1, None], ctx.h[1:, None]
        rnd = 6 * _U * (np.abs(V[:-1]) + np.abs(S[:-1]) * hl + np.abs(V[1:]) + np.abs(S[1:]) * hr)
        tol = (E[1:] + E[:-1] + (dS + ES[1:] + ES[:-1]) * wid + rnd) * _INFL + 2 * _U * np.abs(
            yl - yr
        )
        defect = np.max(np.abs(yl - yr) - tol, axis=1)
    max_defect = float(np.max(defect[touch], initial=-np.inf))

    # different maps: different slopes, or a proved jump at the switch (for a continuous
    # model the defect is never positive); the rest is compared exactly
    differ |= defect > 0
    undec = np.nonzero(touch & ~differ)[0]
    for i in undec:
        check_budget("exact map comparison")
        differ[i] = exact().maps_differ(ctx.pattern(i), ctx.pattern(i + 1), Fraction(float(x[i])))
    # holes: runs of touching holes, recomputed by exact walks between clean points
    holes = np.concatenate(ctx.holes) if ctx.holes else np.zeros((0, 2))
    holes = holes[np.argsort(holes[:, 0])]
    groups = []
    for ha, hb in holes:
        if groups and groups[-1][1] == ha:
            groups[-1][1] = hb
        else:
            groups.append([ha, hb])
    # assemble the regions in order: runs of touching good intervals and hole groups
    slope = S
    icpt = V - S * m[:, None]
    mid_clean = 0.5 * (ca + cb)
    cuts = np.nonzero(~touch)[0] + 1
    runs = list(zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [n]]))) if n else []
    items = [(float(a[r0]), "run", (int(r0), int(r1))) for r0, r1 in runs]
    items += [(float(ha), "hole", (ha, hb)) for ha, hb in groups]
    items.sort(key=lambda it: it[0])
    bps, difs, slopes, icpts = [], [], [], []
    n_exact_sw = exact_regions = n_layered = 0
    seg_cache: dict = {}
    lo_f, hi_f = Fraction(float(lo)), Fraction(float(hi))

    def add_exact_region(t0_, t1_):
        nonlocal exact_regions
        ex = exact()
        t = (t0_ + t1_) / 2
        y0, _, pat = ex.eval(t)
        y1 = ex.eval(t + 1, pat)[0]
        slopes.append(np.array([[safe_float(v) for v in (y1 - y0)]]))
        icpts.append(np.array([[safe_float(v) for v in (y0 - (y1 - y0) * t)]]))
        exact_regions += 1

    prev = None  # None (domain start), ("run", r1) or ("hole", number of switches)
    for k_item, (_, kind, data) in enumerate(items):
        if kind == "run":
            r0, r1 = data
            # the run's first interval starts a new region unless a hole walk without any
            # switch joined it to the region before the hole
            cont = prev is not None and prev[0] == "hole" and prev[1] == 0 and bool(slopes)
            first = r0 + 1 if cont else r0
            idx = np.arange(r0, r1 - 1)
            bps.append(x[idx])
            difs.append(differ[idx])
            slopes.append(slope[first:r1])
            icpts.append(icpt[first:r1])
            prev = ("run", r1)
        else:
            ha, hb = data
            nxt = items[k_item + 1] if k_item + 1 < len(items) else None
            has_prev = prev is not None and prev[0] == "run"
            has_next = nxt is not None and nxt[1] == "run"
            A = Fraction(float(mid_clean[prev[1] - 1])) if has_prev else lo_f
            B = Fraction(float(mid_clean[nxt[2][0]])) if has_next else hi_f
            sw, smaps, layered = _segment(f, exact, A, B, seg_cache)
            n_layered += layered
            n_exact_sw += len(sw)
            pts = [A] + [s_[0] for s_ in sw] + [B]
            for s_ in sw:
                bps.append(np.array([float(s_[0])]))
                difs.append(np.array([bool(s_[1])]))
            # stretches (pts[j], pts[j+1]): the first belongs to the previous run (if any),
            # the last to the next run (if any); the others are new regions
            for j in range(len(pts) - 1):
                if j == 0 and has_prev:
                    continue
                if j == len(pts) - 2 and has_next:
                    continue
                if smaps is None:
                    add_exact_region(pts[j], pts[j + 1])
                else:
                    sl, ic = smaps[j]
                    slopes.append(np.array([[safe_float(v) for v in sl]]))
                    icpts.append(np.array([[safe_float(v) for v in ic]]))
                    exact_regions += 1
            prev = ("hole", len(sw))
    bps = np.concatenate([np.atleast_1d(np.asarray(v, np.float64)) for v in bps] or [np.zeros(0)])
    difs = np.concatenate([np.atleast_1d(np.asarray(v, bool)) for v in difs] or [np.zeros(0, bool)])
    J = np.concatenate(slopes) if slopes else np.zeros((0, V.shape[1]))
    C = np.concatenate(icpts) if icpts else np.zeros((0, V.shape[1]))
    if np.any(np.diff(bps) < 0):
        raise RuntimeError("layerwise count: switches out of order (internal error)")
    if J.shape[0] != bps.size + 1:
        raise RuntimeError(
            f"layerwise count: {J.shape[0]} region maps for {bps.size} switches (internal error)"
        )
    n_float = int(touch.sum())
    return {
        "slopes": J[:, :, None],
        "intercepts": C,
        "breakpoints": bps,
        "differ": difs,
        "certified": True,
        "certificate": {
            "method": "layerwise float64 interval propagation with rigorous error bounds "
            "+ exact rational fallback",
            "points": int(n),
            "junctions": int(bps.size),
            "junctions_certified_float": n_float,
            "junctions_exact": n_exact_sw,
            "holes": int(holes.shape[0]),
            "hole_groups": len(groups),
            "hole_groups_exact_layers": n_layered,
            "maps_compared_exact": int(undec.size),
            "exact_regions": exact_regions,
            "exact_evaluations": 0 if ex_model is None else int(ex_model.n_eval),
            "interval_layer_evaluations": int(ctx.interval_layers),
            "decision_layers": int(ctx.n_decide),
            "max_continuity_defect": max_defect,
            "failure": None,
            "seconds_float": round(t_float, 3),
            "seconds_total": round(time.perf_counter() - t0, 3),
            "cpu_seconds": round(time.process_time() - c0, 3),
        },
        "evaluations": int(-(-ctx.interval_layers // max(ctx.n_decide, 1)))
        + (0 if ex_model is None else int(ex_model.n_eval)),
    }

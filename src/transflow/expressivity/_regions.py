"""Exact counting of linear regions of the piecewise-linear models of this module.

- **1-D certified** (the default): the layerwise interval counter of ``_layerwise`` for
  models with :class:`AbstractIntervalForward` and :class:`AbstractExactEval`, else the
  point walk of ``_certify`` (:class:`AbstractBoundedEval`), else the exact walk over the
  whole interval (:class:`AbstractExactEval`); the path follows the capabilities a model
  inherits.
- **1-D** uncertified (``certify=False``; docs/spec/maxout-expressivity.md §7, "exact 1-D region
    counter"): pattern
  bisection from a seed grid until the endpoints of every interval share the full activation
  pattern (or the interval is shorter than ``tol``); consecutive patterns are the activation
  regions; the affine map of each region comes from the model with its pattern frozen
  (forward-mode derivative at an interior point — exact for the pattern-frozen affine map,
  **not** a finite difference); neighbours with equal maps are merged into linear regions.
- **2-D**: exact polygon refinement over the box (SplineCam-style): decision layer by
  decision layer, every max-group (maxout unit, hardmax head per query, ReLU as a rank-2
  unit) splits the current convex polygons into the cells where each competitor wins,
  using the affine logits of the layer given the pattern of the earlier layers; then
  edge-adjacent polygons with equal affine maps are merged.
- :func:`grid_region_count`: brute-force pattern hashing on a grid (an independent
  lower bound on the activation regions, and on the linear regions via connected
  components of equal maps).

Everything is vectorised: one compiled function per model structure and batch bucket,
many points per call.
"""

from __future__ import annotations

import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._batch import batched, combine, hash_coeffs, pattern_hash
from ._budget import _DEADLINE, BudgetExceeded, check_budget
from ._pwl import (
    AbstractAffineLogits,
    AbstractAttention,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractIntervalForward,
    AbstractPiecewiseLinear,
    AbstractProvenance,
    lacks,
)
from ._region_count import RegionCount, _check_box, _check_model, _components

__all__ = ["RegionCount", "count_linear_regions", "grid_region_count"]


# --------------------------------------------------------------------------- batched kernels
@eqx.filter_jit
def _pattern_hash_kernel(f, xs, coeffs):
    return pattern_hash(jax.vmap(f.pattern)(xs), coeffs)


@eqx.filter_jit
def _affine_kernel(f, xs):
    J = jax.vmap(jax.jacfwd(f))(xs)  # (N, d_out, d)
    y = jax.vmap(f)(xs)
    return J, y - jnp.einsum("nod,nd->no", J, xs)


@eqx.filter_jit
def _logits_kernel(f, xs):
    vals = jax.vmap(f.layer_logits)(xs)
    jacs = jax.vmap(jax.jacfwd(f.layer_logits))(xs)
    return vals, jacs


def _probe(f, x, coeffs):
    """1-D probe at one point: pattern hash, the exit point of its activation region to the
    right (from the affine logits of the frozen pattern), f(x) and f'(x) (frozen slope)."""
    (y, logits), (dy, dlogits) = jax.jvp(f.output_and_logits, (x,), (jnp.ones_like(x),))
    pats, tmin = [], jnp.asarray(jnp.inf, x.dtype)
    for v, dv in zip(logits, dlogits):
        w = jnp.argmax(v, axis=-1)
        vw = jnp.take_along_axis(v, w[:, None], axis=-1)
        dw = jnp.take_along_axis(dv, w[:, None], axis=-1)
        gap, rate = vw - v, dv - dw  # competitor i overtakes at t = gap / rate (rate > 0)
        pos = rate > 0
        t = jnp.where(pos, gap / jnp.where(pos, rate, 1), jnp.inf)
        tmin = jnp.minimum(tmin, jnp.min(t))
        pats.append(w.ravel())
    return pattern_hash(jnp.concatenate(pats), coeffs), x[0] + tmin, y, dy


@eqx.filter_jit
def _probe_kernel(f, xs, coeffs):
    return jax.vmap(lambda x: _probe(f, x, coeffs))(xs)


def _batched64(kernel, f, xs, *extra):
    """:func:`batched` for the float64 counters (named so in a time-budget failure)."""
    return batched(kernel, f, xs, *extra, what="float64 evaluation")


class _Evaluator:
    """Pattern hashes, probes and affine maps of ``f`` on numpy batches (counts points)."""

    def __init__(self, f: AbstractPiecewiseLinear, dtype):
        self.f = f
        self.dtype = dtype
        n_pat = jax.eval_shape(f.pattern, jnp.zeros((f.in_dim,), dtype)).shape[0]
        self.coeffs = jnp.asarray(hash_coeffs(n_pat))
        self.n_eval = 0

    def _prep(self, xs):
        xs = np.asarray(xs, self.dtype).reshape(-1, self.f.in_dim)
        self.n_eval += xs.shape[0]
        return xs

    def hashes(self, xs: np.ndarray) -> np.ndarray:
        xs = self._prep(xs)
        return combine(_batched64(_pattern_hash_kernel, self.f, xs, self.coeffs))

    def probe(self, xs: np.ndarray):
        """1-D: (hash, exit point, f(x) (N, d_out), f'(x) (N, d_out))."""
        xs = self._prep(xs)
        h, e, y, dy = _batched64(_probe_kernel, self.f, xs, self.coeffs)
        return combine(h), e.astype(np.float64), y, dy

    def affine(self, xs: np.ndarray):
        xs = np.asarray(xs, self.dtype).reshape(-1, self.f.in_dim)
        return _batched64(_affine_kernel, self.f, xs)


# --------------------------------------------------------------------------- results
# (RegionCount and the checks of the box and the model are in ._region_count)
def _maps_equal(J1, c1, J2, c2, span, rtol):
    """Equal affine maps up to ``rtol`` relative to their size on the box."""
    if J1.shape[0] == 0:  # one region: nothing to compare
        return np.zeros(0, bool)
    dJ = np.abs(J1 - J2).reshape(J1.shape[0], -1).max(-1)
    dc = np.abs(c1 - c2).reshape(c1.shape[0], -1).max(-1)
    sJ = np.maximum(np.abs(J1), np.abs(J2)).reshape(J1.shape[0], -1).max(-1)
    sc = np.maximum(np.abs(c1), np.abs(c2)).reshape(c1.shape[0], -1).max(-1)
    scale = sJ * span + sc + np.finfo(np.float64).tiny
    return dJ * span + dc <= rtol * scale


def _check_budget_arg(time_budget):
    if time_budget is None:
        return None
    if isinstance(time_budget, bool | np.bool_):  # True is an int, but not a duration
        raise ValueError(
            f"`time_budget` must be a number of seconds > 0 or None, got the bool "
            f"{time_budget!r}; pass e.g. time_budget=60.0 (None: no limit)."
        )
    if not isinstance(time_budget, int | float | np.integer | np.floating):
        raise TypeError(
            "`time_budget` must be a number of seconds > 0 or None, got "
            f"{type(time_budget).__name__} {time_budget!r}."
        )
    t = float(time_budget)
    if not (math.isfinite(t) and t > 0):
        raise ValueError(
            f"`time_budget` must be a finite number of seconds > 0 or None (no limit), got "
            f"{time_budget!r}."
        )
    return t


def _default_dtype():
    return np.float64 if jax.config.jax_enable_x64 else np.float32


# --------------------------------------------------------------------------- 1-D
def _count_1d(f, lo, hi, *, n_seed, tol, rtol, split, dtype, progress=None) -> RegionCount:
    """Pattern bisection on [lo, hi] (see :func:`count_linear_regions`).

    Invariant: an interval whose end points share the full pattern lies in one activation
    region (regions are convex). An interval with different end patterns is split until it
    is shorter than ``tol``; it then holds one region boundary. ``split="affine"`` places
    the split points at ``r ∓ tol/4``, where r is the exit point of the left end's region
    predicted from its affine logits (so an interval holding one boundary is resolved in
    one round); the predicted point only chooses where to evaluate patterns, the
    certificate is the pattern equality above. ``split="midpoint"``: plain bisection.

    ``progress`` (a dict): ``progress["activation"]`` is kept at a lower bound on the
    activation regions found so far (every interval with different end patterns holds a
    boundary), for a count cut short by the time budget.
    """
    progress = {} if progress is None else progress
    ev = _Evaluator(f, dtype)
    a0, b0 = float(lo[0]), float(hi[0])
    xs = np.linspace(a0, b0, n_seed + 1)
    hs, es, _, _ = ev.probe(xs)
    idx = np.nonzero(hs[:-1] != hs[1:])[0]
    progress["activation"] = 1 + int(idx.size)
    # active intervals: ends a < b, their pattern hashes, the exit point of a's region,
    # and whether to bisect at the midpoint in the next round
    a, b, ha, hb, ea = xs[idx], xs[idx + 1], hs[idx], hs[idx + 1], es[idx]
    mid = np.full(a.shape, split == "midpoint")
    found = []
    d = tol / 4
    while a.size:
        small = (b - a) <= tol
        found.append(0.5 * (a[small] + b[small]))
        a, b, ha, hb, ea, mid = (v[~small] for v in (a, b, ha, hb, ea, mid))
        progress["activation"] = 1 + sum(v.size for v in found) + int(a.size)
        if not a.size:
            break
        pred = ~mid & (ea - d > a) & (ea + d < b)
        p1 = np.where(pred, ea - d, 0.5 * (a + b))
        p2 = np.where(pred, ea + d, p1)
        P, M = np.nonzero(pred)[0], np.nonzero(~pred)[0]
        h_all, e_all, _, _ = ev.probe(np.concatenate([p1[P], p2]))
        h1, e1 = h_all[: P.size], e_all[: P.size]
        h2, e2 = h_all[P.size :], e_all[P.size :]
        no, yes = np.zeros(P.size, bool), np.full(M.size, split == "midpoint")
        # predicted: children (a, p1), (p1, p2), (p2, b); a child that still starts with a's
        # pattern at p2 (the prediction fell short) is bisected next round
        children = [
            (a[P], p1[P], ha[P], h1, ea[P], no),
            (p1[P], p2[P], h1, h2[P], e1, no),
            (p2[P], b[P], h2[P], hb[P], e2[P], h2[P] == ha[P]),
            # midpoint: children (a, m), (m, b)
            (a[M], p2[M], ha[M], h2[M], ea[M], yes),
            (p2[M], b[M], h2[M], hb[M], e2[M], yes),
        ]
        # keep the children whose end patterns differ (the others lie in one region)
        children = [tuple(v[c[2] != c[3]] for v in c) for c in children]
        a, b, ha, hb, ea, mid = (np.concatenate(v) for v in zip(*children))
    bps = np.sort(np.concatenate(found)) if found else np.zeros(0)
    # the frozen affine map of every activation region, probed at the middle of the region
    # (points next to a boundary can sit on a numerical tie of the hardmax)
    X = 0.5 * (np.concatenate([[a0], bps]) + np.concatenate([bps, [b0]]))
    progress["activation"] = int(X.size)
    _, _, Y, DY = ev.probe(X)
    Y, DY = Y.astype(np.float64), DY.astype(np.float64)
    J, c = DY[:, :, None], Y - DY * X[:, None]
    same = _maps_equal(J[:-1], c[:-1], J[1:], c[1:], b0 - a0, rtol)
    labels = np.concatenate([[0], np.cumsum(~same)])
    return RegionCount(
        linear=int(labels[-1]) + 1,
        activation=int(X.size),
        dim=1,
        slopes=J,
        intercepts=c,
        labels=labels,
        breakpoints=bps,
        evaluations=ev.n_eval,
    )


# --------------------------------------------------------------------------- 2-D polygons
def _area(P: np.ndarray) -> float:
    x, y = P[:, 0], P[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _clip(P: np.ndarray, c: float, n: np.ndarray) -> np.ndarray | None:
    """Convex polygon ∩ {x : c + n·x ≥ 0} (Sutherland–Hodgman, one half-plane)."""
    v = c + P @ n
    inside = v >= 0
    if inside.all():
        return P
    if not inside.any():
        return None
    out = []
    k = P.shape[0]
    for i in range(k):
        j = (i + 1) % k
        if inside[i]:
            out.append(P[i])
        if inside[i] != inside[j]:
            t = v[i] / (v[i] - v[j])
            out.append(P[i] + t * (P[j] - P[i]))
    Q = np.array(out)
    # drop repeated vertices
    keep = np.ones(len(Q), bool)
    for i in range(1, len(Q)):
        if np.all(np.abs(Q[i] - Q[i - 1]) <= 1e-15 * (1 + np.abs(Q[i]))):
            keep[i] = False
    Q = Q[keep]
    if len(Q) > 1 and np.all(np.abs(Q[-1] - Q[0]) <= 1e-15 * (1 + np.abs(Q[0]))):
        Q = Q[:-1]
    return Q if len(Q) >= 3 else None


def _split_group(P, a, J, area_tol, same_tol):
    """Split convex polygon P into the cells where competitor j wins (lowest index on ties).

    Competitor k is the affine function ``a[k] + J[k]·x``.
    """
    K = a.shape[0]
    vals = a[:, None] + J @ P.T  # (K, V)
    win = np.argmax(vals, axis=0)
    if np.all(win == win[0]):
        return [P]
    out = []
    for j in range(K):
        cell = P
        for i in range(K):
            if i == j:
                continue
            da, dJ = a[j] - a[i], J[j] - J[i]
            if abs(da) + np.abs(dJ).sum() <= same_tol:  # identical competitors
                if i < j:
                    cell = None
                    break
                continue
            cell = _clip(cell, da, dJ)
            if cell is None:
                break
        if cell is not None and _area(cell) > area_tol:
            out.append(cell)
    return out


def _shared_edge(P: np.ndarray, Q: np.ndarray, tol: float) -> bool:
    """True if convex polygons P and Q share a boundary segment of positive length."""
    for i in range(len(P)):
        p1, p2 = P[i], P[(i + 1) % len(P)]
        e = p2 - p1
        le = float(np.hypot(*e))
        if le <= tol:
            continue
        u = e / le
        nrm = np.array([-u[1], u[0]])
        for k in range(len(Q)):
            q1, q2 = Q[k], Q[(k + 1) % len(Q)]
            if abs(float((q1 - p1) @ nrm)) > tol or abs(float((q2 - p1) @ nrm)) > tol:
                continue
            s1, s2 = sorted((float((q1 - p1) @ u), float((q2 - p1) @ u)))
            if min(le, s2) - max(0.0, s1) > tol:
                return True
    return False


def _map_keys(J, c, span, rtol):
    scale = np.abs(J).max() * span + np.abs(c).max() + np.finfo(np.float64).tiny
    q = max(rtol * 1e3, 1e-9) * scale
    flat = np.concatenate([J.reshape(len(J), -1) * span, c.reshape(len(c), -1)], axis=1)
    return [tuple(row) for row in np.round(flat / q).astype(np.int64)]


def _count_2d(f, lo, hi, *, rtol, dtype, progress=None) -> RegionCount:
    """Float64 polygon clipping (uncertified); ``progress`` as in :func:`_count_1d`."""

    progress = {} if progress is None else progress
    ev = _Evaluator(f, dtype)
    span = float(np.max(hi - lo))
    box_area = float(np.prod(hi - lo))
    area_tol = 1e-12 * box_area
    polys = [np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]], float)]
    n_layers = len(jax.eval_shape(f.layer_logits, jnp.zeros((2,), dtype)))
    for layer in range(n_layers):
        cents = np.array([P.mean(axis=0) for P in polys])
        ev.n_eval += len(cents)
        vals, jacs = _batched64(_logits_kernel, f, cents.astype(dtype))
        vals, jacs = vals[layer], jacs[layer]  # (N, G, K), (N, G, K, 2)
        new = []
        for p, P in enumerate(polys):
            # every polygon holds at least one activation region
            progress["activation"] = len(new) + len(polys) - p
            check_budget("float64 polygon clipping")
            Jp = jacs[p]
            ap = vals[p] - Jp @ cents[p]  # (G, K)
            same_tol = 1e-12 * (np.abs(ap).max() + np.abs(Jp).max() * span + 1.0)
            vv = ap[:, :, None] + Jp @ P.T  # (G, K, V)
            win = np.argmax(vv, axis=1)
            varying = np.nonzero(np.any(win != win[:, :1], axis=1))[0]
            cells = [P]
            for g in varying:
                cells = [
                    Q for C in cells for Q in _split_group(C, ap[g], Jp[g], area_tol, same_tol)
                ]
            new.extend(cells)
        polys = new
    progress["activation"] = len(polys)
    cents = np.array([P.mean(axis=0) for P in polys])
    J, c = ev.affine(cents)
    keys = _map_keys(J, c, span, rtol)
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    edge_tol = 1e-9 * span
    pairs = []
    for idx in groups.values():
        for u in range(len(idx)):
            check_budget("float64 polygon merging")
            for v in range(u + 1, len(idx)):
                i, j = idx[u], idx[v]
                if _maps_equal(J[i : i + 1], c[i : i + 1], J[j : j + 1], c[j : j + 1], span, rtol)[
                    0
                ] and _shared_edge(polys[i], polys[j], edge_tol):
                    pairs.append((i, j))
    labels = _components(len(polys), pairs)
    return RegionCount(
        linear=int(labels.max()) + 1 if len(labels) else 0,
        activation=len(polys),
        dim=2,
        slopes=J,
        intercepts=c,
        labels=labels,
        polygons=polys,
        evaluations=ev.n_eval,
    )


# --------------------------------------------------------------------------- 1-D certified
def _float_count(f, lo, hi, *, n_seed, tol, rtol, split, dtype, progress) -> RegionCount:
    """The uncertified float count of a 1-D or 2-D model (the dispatch on ``f.in_dim``)."""
    if f.in_dim == 1:
        return _count_1d(
            f, lo, hi, n_seed=n_seed, tol=tol, rtol=rtol, split=split, dtype=dtype,
            progress=progress,
        )  # fmt: skip
    return _count_2d(f, lo, hi, rtol=rtol, dtype=dtype, progress=progress)


def _count_1d_cert(f, lo, hi, *, n_seed, rtol, dtype, strict) -> RegionCount:
    """The certified 1-D count, by the first path the model's capabilities allow: the
    layerwise interval counter (:class:`AbstractIntervalForward` with
    :class:`AbstractExactEval` for its holes), the point walk
    (:class:`AbstractBoundedEval`; its exact fallback needs :class:`AbstractExactEval`),
    the exact walk over the whole interval (:class:`AbstractExactEval` alone); a model
    with none of them is refused."""
    from ._certify import count_1d_certified
    from ._layerwise import NotApplicable, _exact_whole, count_1d_layerwise

    a0, b0 = float(lo[0]), float(hi[0])
    res = None
    if isinstance(f, AbstractIntervalForward) and isinstance(f, AbstractExactEval):
        try:
            # the fast path: layerwise interval propagation
            res = count_1d_layerwise(f, a0, b0)
        except NotApplicable:  # the weights fail its precondition (queries depend on x)
            res = None
    if res is None and not isinstance(f, AbstractBoundedEval):
        if not isinstance(f, AbstractExactEval):
            raise TypeError(
                lacks(
                    f,
                    AbstractBoundedEval,
                    "count_linear_regions",
                    "a certified 1-D count needs (or AbstractIntervalForward with "
                    "AbstractExactEval, or AbstractExactEval alone); count with certify=False",
                )
            )
        t0, c0 = time.perf_counter(), time.process_time()
        res = _exact_whole(f, a0, b0, t0, c0, "the model has exact evaluation only")
    if res is not None:
        bps, dif = res["breakpoints"], res["differ"]
        J, c = res["slopes"], res["intercepts"]
    else:
        ev = _Evaluator(f, dtype)
        res = count_1d_certified(
            f, a0, b0, n_seed=n_seed, dtype=dtype, coeffs=ev.coeffs, strict=strict
        )
        bps, dif = res["breakpoints"], res["differ"]
        edges = np.concatenate([[a0], bps, [b0]])
        X = 0.5 * (edges[:-1] + edges[1:])
        # the map of every region: forward-mode derivative of the model at the region's
        # midpoint (frozen pattern there; exact for an affine map, unlike a finite difference)
        J, c = ev.affine(X[:, None])
        J, c = np.asarray(J, np.float64), np.asarray(c, np.float64)
    labels = np.concatenate([[0], np.cumsum(dif)]).astype(np.int64)
    return RegionCount(
        linear=int(labels[-1]) + 1,
        activation=int(bps.size) + 1,
        dim=1,
        slopes=J,
        intercepts=c,
        labels=labels,
        breakpoints=bps,
        evaluations=res["evaluations"],
        certified=res["certified"],
        certificate=res["certificate"],
    )


# --------------------------------------------------------------------------- public
def _refuse(f):
    if isinstance(f, AbstractAttention) and not f.hardmax:
        raise ValueError(
            "count_linear_regions: `f` uses softmax attention, which is smooth, not piecewise "
            "linear (it has no linear regions). Build it with attention='hardmax' (for a "
            "MaxoutTransformer you can also count the regions of its maxout network `f.net`)."
        )


def count_linear_regions(
    f: AbstractPiecewiseLinear,
    lo: Float[Array, " d"] | float,
    hi: Float[Array, " d"] | float,
    *,
    n_seed: int = 1024,
    tol: float = 1e-11,
    map_rtol: float = 1e-9,
    split: str = "affine",
    certify: bool = True,
    strict: bool = True,
    time_budget: float | None = None,
) -> RegionCount:
    """Exact number of linear regions of ``f`` on the box ``[lo, hi]`` (d = 1 or 2; d = 1
    only for input-dependent hardmax attention).

    A *linear region* is a maximal connected set **of positive length (area)** on which f
    is affine; an *activation region* is a maximal connected set of positive length (area)
    of fixed full activation pattern (argmax per head and block, ReLU sign per FFN unit and
    token, argmax per maxout unit; ties go to the lowest index). A kink at an end of the
    domain bounds no region inside it and is not counted (``relu(t)`` on ``[0, 1]``: 1
    region); an affine f has 1 linear region. The certificate is about the model as
    stored — its parameters read as exact rationals — on the box as given (float64 numbers,
    also when x64 is off: the box is never rounded to float32) (``certificate["covers"]``);
    ``certificate["outside"]`` names conversions it does not cover (``from_torch``).
    Activation regions are convex, and the linear regions are the connected unions of
    adjacent activation regions with equal affine maps (docs/spec/maxout-expressivity.md §2.5).
    Affine maps are those of the **pattern-frozen** model, never finite differences (the pitfall of
    docs/spec/maxout-expressivity.md §7).

    **Certificate** (``certify=True``, the default). The path is chosen by the capabilities
    ``f`` inherits (docs/expressivity.md, "Adding an architecture"); a model without the
    capability a path needs is refused in one line naming it. In 1-D, models with
    :class:`AbstractIntervalForward` and :class:`AbstractExactEval` (:class:`MaxoutNetwork`,
    :class:`MaxoutTransformer`, their slices) are counted by the layerwise interval counter
    (``transflow.expressivity._layerwise``):
    intervals are propagated decision layer by decision layer with rigorous round-off bounds
    on their affine maps, every switch is certified by a root enclosure inside the
    interval's clean zone, and the intervals that cannot be certified are recounted by the
    exact rational walk. Models with :class:`AbstractBoundedEval` use the point walk
    (``transflow.expressivity._certify``): every region is found at a point where its
    pattern is proved by running round-off bounds (every logit gap exceeds the bound), every
    junction between neighbouring regions is proved to be a single switch (the frozen affine
    gaps of both sides meet at one root) with the maps compared at both sides and continuity
    checked, and every junction that floating point cannot prove (round-off larger than a
    gap) is recomputed in exact rational arithmetic. The result has ``certified=True`` and
    the count is exact; if the exact fallback is unavailable, ``strict=True`` raises
    :class:`CertificationError`, ``strict=False`` returns ``certified=False``. A model with
    only :class:`AbstractExactEval` is counted by the exact walk over the whole interval;
    one with none of these is refused (``certify=False`` needs none). In 2-D the
    partition is computed in exact integer arithmetic (dyadic affine logits per frozen
    prefix pattern, integer lines, homogeneous integer vertices, exact map equality and
    edge adjacency; ``transflow.expressivity._exact2d``), so the count is exact; a model
    without :class:`AbstractExactEval` raises :class:`CertificationError` (``strict=True``) or
    returns the float64 polygon count with ``certified=False``.

    **Input-dependent hardmax attention** (no :class:`AbstractAffineLogits`, e.g.
    :class:`HardmaxTransformer`, whose queries and keys depend on x): with the pattern
    frozen its scores are quadratic in x. In 1-D the count is exact
    (:func:`exact_regions_1d`): the breakpoints are exact roots of the quadratic
    winner-minus-competitor gaps (rationals or quadratic irrationals, ordered exactly),
    the pattern after each root is decided exactly, and the maps are compared exactly;
    ``certificate["method"]`` is ``"exact rational / quadratic-irrational arithmetic"``
    and ``certificate["exact_breakpoints"]`` holds the exact roots. Such a model is
    generally discontinuous at a switch; its pieces are counted. ``n_seed``, ``tol``,
    ``split``, ``map_rtol``, ``certify`` and ``strict`` do not apply. In 2-D (or more) its
    regions have curved boundaries and it is refused: restrict it to a line.

    Args:
        f: a :class:`MaxoutNetwork` (ReLU networks via ``from_relu`` / ``from_torch``), a
            hardmax :class:`MaxoutTransformer` or :class:`HardmaxTransformer`, a slice
            :func:`restrict` of any of them, or any :class:`AbstractPiecewiseLinear` (with
            the capabilities of the path it takes).
        lo, hi: the box: finite numbers (broadcast to ``(d,)``) or arrays of shape
            ``(d,)``, ``lo < hi``.
        n_seed: 1-D: number of seed intervals.
        tol: 1-D, ``certify=False`` only: bisection stops at intervals shorter than ``tol``.
        split: 1-D, ``certify=False`` only: ``"affine"`` or ``"midpoint"`` bisection.
        map_rtol: ``certify=False`` only: two affine maps are equal if they differ by at
            most ``map_rtol`` times their size on the box (certified counts compare maps
            exactly).
        certify: prove the count (default); ``False``: the earlier uncertified bisection.
        strict: raise when the count cannot be certified (default).
        time_budget: seconds (wall clock) the certified count may take; when they run
            out, the count is returned with ``certified=False`` and the reason in
            ``certificate["failure"]`` — also with ``strict=True``. The uncertified
            float64 count (bisection in 1-D, float polygons in 2-D) then gets the same
            time again: its counts (``certificate["counts"] == "uncertified float64"``),
            or, if it runs out too, the lower bounds found so far (``"lower bounds"``:
            ``activation`` found so far, ``linear`` = 1, no maps). The call takes at most
            ``2 * time_budget`` plus one step that cannot be interrupted (a JIT
            compilation, one numpy pass over a layer, one exact evaluation). ``None``
            (default): no limit.

    Returns:
        :class:`RegionCount` (``.linear``, ``.activation``, ``.certified``, maps,
        breakpoints/polygons).

    Use float64 (``jax.config.update("jax_enable_x64", True)``) for deep or steep models
    (docs/spec/maxout-expressivity.md C10).

    Example:
        >>> import jax
        >>> jax.config.update("jax_enable_x64", True)
        >>> from transflow.expressivity import zigzag_maxout, count_linear_regions
        >>> r = count_linear_regions(zigzag_maxout(2, 3), 0.0, 1.0)
        >>> r.linear, r.certified   # 3**3
        (27, True)
    """
    budget = _check_budget_arg(time_budget)
    _check_model(f)
    lo, hi = _check_box(f, lo, hi)

    t0 = time.perf_counter()
    token = _DEADLINE.set(None if budget is None else t0 + budget)
    progress = {"activation": 1}
    try:
        r = _count_linear_regions(
            f,
            lo,
            hi,
            n_seed=n_seed,
            tol=tol,
            map_rtol=map_rtol,
            split=split,
            certify=certify,
            strict=strict,
            progress=progress,
        )
    except BudgetExceeded as exc:
        r = _out_of_time(
            f, lo, hi, exc, t0, budget, progress, certify, n_seed, tol, map_rtol, split
        )
    finally:
        _DEADLINE.reset(token)
    if r.certificate is not None:
        r.certificate.update(_covers(f))
    return r


def _out_of_time(f, lo, hi, exc, t0, budget, progress, certify, n_seed, tol, map_rtol, split):
    """The result of a count whose time budget ran out (see :func:`count_linear_regions`).

    The uncertified float64 count gets the same budget again, so the whole call takes at
    most ``2 * time_budget`` plus one step that cannot be interrupted (a JIT compilation, one
    numpy pass over a layer, one exact evaluation); if that runs out too (or the count was
    already the uncertified one, ``certify=False``), the result holds the lower bounds
    found so far."""

    lower = (
        "`activation` = {} is a lower bound on the activation regions of the (uncertified) "
        "float64 count and `linear` = 1 only the trivial bound; no maps"
    )
    if not certify:  # the uncertified count itself ran out
        r = _partial(f, progress)
        method = "float64 (not certified, certify=False): the time budget ran out"
        counts, what = "lower bounds", lower.format(r.activation)
    else:
        _DEADLINE.set(t0 + 2 * budget)
        method = "float64 (not certified): the time budget ran out"
        progress = {"activation": 1}
        dtype = _default_dtype()
        try:
            r = _float_count(
                f, lo, hi, n_seed=n_seed, tol=tol, rtol=map_rtol, split=split, dtype=dtype,
                progress=progress,
            )  # fmt: skip
            counts, what = "uncertified float64", "the counts are the uncertified float64 ones"
        except BudgetExceeded as exc2:
            r = _partial(f, progress)
            counts = "lower bounds"
            what = (
                f"the uncertified float64 count ran out of time too (in the {exc2}); "
                + lower.format(r.activation)
            )
    r.certified = False
    r.certificate = {
        "method": method,
        "failure": f"time budget of {budget:g} s exceeded (in the {exc}); {what}",
        "counts": counts,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return r


def _partial(f, progress) -> RegionCount:
    """A count cut short by the time budget: lower bounds, no maps."""
    d = f.in_dim
    return RegionCount(
        linear=1,
        activation=max(int(progress.get("activation", 1)), 1),
        dim=d,
        slopes=np.zeros((0, 0, d)),
        intercepts=np.zeros((0, 0)),
        labels=np.zeros(0, np.int64),
        breakpoints=np.zeros(0) if d == 1 else None,
    )


def _covers(f) -> dict:
    """What a certificate is about: the model as stored (and what lies outside)."""
    out = {
        "covers": f"the {type(f).__name__} as stored: its float64 parameters read as exact "
        "(dyadic) rationals, on the box [lo, hi] as float64 numbers; region = maximal "
        "interval (polygon) of positive length (area) on which f is affine (activation "
        "region: fixed pattern, ties to the lowest index); a kink at an end of the domain "
        "is no boundary",
    }
    outside = list(f.outside_certificate()) if isinstance(f, AbstractProvenance) else []
    if outside:
        out["outside"] = "; ".join(outside)
    return out


def _count_linear_regions(f, lo, hi, *, n_seed, tol, map_rtol, split, certify, strict, progress):
    """The count on the validated float64 box ``lo, hi`` (shape ``(d,)``)."""
    _refuse(f)
    affine = isinstance(f, AbstractAffineLogits)
    if f.in_dim not in (1, 2) or (f.in_dim == 2 and not affine):
        if not affine:
            raise ValueError(
                f"count_linear_regions: {type(f).__name__} does not inherit "
                "AbstractAffineLogits (e.g. its attention queries/keys depend on x, so with a "
                "fixed pattern its scores are quadratic in x), so its activation regions "
                f"in {f.in_dim}-D may have curved boundaries (conic arcs); exact counting of "
                "curved regions is not implemented. Count on lines instead: "
                "transflow.expressivity.restrict(f, origin, direction) with ONE direction "
                "(e.g. the line through two data points); 1-D is exact: the breakpoints are "
                "the roots of the quadratic score differences."
            )
        raise ValueError(
            f"count_linear_regions: exact counting is implemented for input dimension 1 or 2, "
            f"got `f.in_dim` = {f.in_dim}. Restrict f to a line or a plane first: "
            "transflow.expressivity.restrict(f, origin, directions) with one or two "
            "directions (e.g. the line through two data points, the plane through three)."
        )
    if not affine:  # 1-D, logits not affine: exact walk over roots of quadratics
        from ._exact1d import exact_regions_1d

        return exact_regions_1d(f, lo, hi)
    dtype = _default_dtype()
    if f.in_dim == 1:
        if not (isinstance(n_seed, int) and n_seed >= 1):
            raise ValueError(f"`n_seed` must be an int >= 1, got {n_seed!r}.")
        if not tol > 0:
            raise ValueError(f"`tol` must be > 0, got {tol!r}.")
        if split not in ("affine", "midpoint"):
            raise ValueError(f"`split` must be 'affine' or 'midpoint', got {split!r}.")
        if certify:
            return _count_1d_cert(
                f, lo, hi, n_seed=n_seed, rtol=map_rtol, dtype=dtype, strict=strict
            )
    if not certify:
        return _float_count(
            f, lo, hi, n_seed=n_seed, tol=tol, rtol=map_rtol, split=split, dtype=dtype,
            progress=progress,
        )  # fmt: skip
    from ._exact2d import count_2d_certified

    return count_2d_certified(
        f,
        lo,
        hi,
        strict=strict,
        float_count=lambda: _count_2d(f, lo, hi, rtol=map_rtol, dtype=dtype),
    )


def _grid_components(ids: np.ndarray) -> int:
    """Number of 4-connected components of equal ids on a 2-D grid."""
    n1, n2 = ids.shape
    lab = np.arange(n1 * n2).reshape(n1, n2)
    while True:
        old = lab
        new = lab.copy()
        same_v = ids[1:, :] == ids[:-1, :]
        same_h = ids[:, 1:] == ids[:, :-1]
        m = np.minimum(new[1:, :], new[:-1, :])
        new[1:, :] = np.where(same_v, m, new[1:, :])
        new[:-1, :] = np.where(same_v, np.minimum(new[:-1, :], m), new[:-1, :])
        m = np.minimum(new[:, 1:], new[:, :-1])
        new[:, 1:] = np.where(same_h, m, new[:, 1:])
        new[:, :-1] = np.where(same_h, np.minimum(new[:, :-1], m), new[:, :-1])
        flat = new.ravel()
        for _ in range(4):
            flat = flat[flat]
        lab = flat.reshape(n1, n2)
        if np.array_equal(lab, old):
            break
    return int(np.unique(lab).size)


def grid_region_count(
    f: AbstractPiecewiseLinear,
    lo: Float[Array, " d"] | float,
    hi: Float[Array, " d"] | float,
    n: int = 600,
    *,
    map_rtol: float = 1e-9,
) -> dict[str, int]:
    """Brute-force region count by pattern hashing on a grid of cell centres (d = 1 or 2).

    Returns ``{"patterns": distinct activation patterns hit, "activation": connected
    components of equal patterns, "linear": connected components of equal affine maps}``
    on ``n`` (1-D) or ``n × n`` (2-D) points. Each is a lower bound on the corresponding
    exact count (regions missed by the grid are not seen; thin regions may also break up a
    component, so compare ``patterns`` with the exact activation count). Independent of
    :func:`count_linear_regions` except for the model's pattern and map.

    Example:
        >>> import jax
        >>> jax.config.update("jax_enable_x64", True)
        >>> from transflow.expressivity import zigzag_maxout, grid_region_count
        >>> grid_region_count(zigzag_maxout(2, 2), 0.0, 1.0, 1000)["linear"]
        9
    """
    if not isinstance(f, AbstractPiecewiseLinear):
        raise TypeError(f"`f` must be an AbstractPiecewiseLinear, got {type(f).__name__}.")
    if not (isinstance(n, int) and n >= 2):
        raise ValueError(f"`n` must be an int >= 2, got {n!r}.")
    dtype = _default_dtype()
    lo, hi = _check_box(f, lo, hi)
    d = f.in_dim
    if d not in (1, 2):
        raise ValueError(f"grid_region_count: need input dimension 1 or 2, got {d}.")
    axes = [lo[i] + (np.arange(n) + 0.5) * (hi[i] - lo[i]) / n for i in range(d)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
    ev = _Evaluator(f, dtype)
    hs = ev.hashes(pts)
    uniq, first, inv = np.unique(hs, return_index=True, return_inverse=True)
    J, c = ev.affine(pts[first])
    keys = _map_keys(J, c, float(np.max(hi - lo)), map_rtol)
    key_id = {}
    map_of_pattern = np.array([key_id.setdefault(k, len(key_id)) for k in keys])
    map_ids = map_of_pattern[inv]
    if d == 1:
        act = 1 + int(np.count_nonzero(inv[1:] != inv[:-1]))
        lin = 1 + int(np.count_nonzero(map_ids[1:] != map_ids[:-1]))
    else:
        act = _grid_components(inv.reshape(n, n))
        lin = _grid_components(map_ids.reshape(n, n))
    return {"patterns": int(uniq.size), "activation": act, "linear": lin}

"""Certified exact 1-D region counting (issue #14).

The count on ``[lo, hi]`` is certified in three steps:

1. **Walk** (float, fast): from a seed grid, every walker jumps from its region to the exit
   point predicted by the region's frozen affine logits, plus a step that clears the
   round-off band, and records one point per region at which the pattern is *certified*:
   every logit gap exceeds the running round-off bound of the two logits
   (:meth:`AbstractBoundedEval.eval_bounded`), so the float pattern is the exact one.
2. **Junctions** (float with error bounds, rigorous): for consecutive recorded points
   ``a < b`` with patterns p and q, the frozen models of p and q are evaluated at both
   points with bounds. Every gap of p is affine, so p is valid on ``[a, x_p]`` where
   ``x_p`` is the first root of its gaps; q on ``[x_q, b]``. The junction is certified if
   ``x_q ≤ x_p`` provably (root intervals from the error bounds), or structurally: the
   binding decision of both sides is the same group of the first layer where p and q
   differ, with the two winners swapped — then ``x_p = x_q`` exactly because that layer's
   logits are the same affine function under p and q. The two affine outputs are
   compared at ``a`` and ``b`` (different maps ⇔ a certified non-zero difference), and
   continuity at the junction is checked.
3. **Exact fallback**: every junction that step 2 cannot certify (round-off larger than a
   gap, a region thinner than the walk's step, maps equal up to round-off) is recomputed
   in exact rational arithmetic (:class:`fractions.Fraction`,
   :meth:`AbstractExactEval.exact_eval`; a model without it gets no exact fallback): exact
   patterns, exact frozen affine gaps (two exact evaluations determine an affine map), an
   exact walk from ``a`` to ``b`` over the exact roots, and exact map comparisons.

The count is then exact: activation regions = 1 + number of certified switches; linear
regions = 1 + number of switches between different affine maps.
"""

from __future__ import annotations

import time
from fractions import Fraction

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._batch import batched, combine, pattern_hash
from ._budget import CertificationError, check_budget
from ._exact_walk import _Exact
from ._pwl import AbstractBoundedEval, AbstractExactEval, lacks

__all__ = ["CertificationError"]


def _structure(f, dtype):
    """Static decision tables of f: per layer (G, K); flat decision and group arrays."""
    shapes = [
        tuple(o.shape)
        for o in jax.eval_shape(lambda x: f.eval_bounded(x)[2], jnp.zeros((f.in_dim,), dtype))
    ]
    lid, gid, cid, glid, goff = [], [], [], [], []
    off = 0
    for layer, (G, K) in enumerate(shapes):
        goff.append(off)
        lid.append(np.full(G * K, layer))
        gid.append(np.repeat(np.arange(G), K))
        cid.append(np.tile(np.arange(K), G))
        glid.append(np.full(G, layer))
        off += G
    cat = lambda a: np.concatenate(a).astype(np.int32)
    return shapes, cat(lid), cat(gid), cat(cid), cat(glid), np.asarray(goff, np.int32)


def _gaps(shapes, L, E, pat):
    """Flat winner-minus-competitor gaps, their error bounds and the competitor mask."""
    gaps, errs, masks = [], [], []
    off = 0
    for (G, K), v, e in zip(shapes, L, E):
        w = pat[off : off + G]
        off += G
        vw = jnp.take_along_axis(v, w[:, None], axis=-1)
        ew = jnp.take_along_axis(e, w[:, None], axis=-1)
        mask = jnp.arange(K, dtype=w.dtype)[None, :] != w[:, None]
        gaps.append((vw - v).ravel())
        errs.append((ew + e).ravel())
        masks.append(mask.ravel())
    return jnp.concatenate(gaps), jnp.concatenate(errs), jnp.concatenate(masks)


def _roots_right(gpa, egpa, gpb, egpb, mask, A, w):
    """Root intervals [lo, hi] of affine gaps valid at A, over [A, A + w] (inf: none)."""
    lo1, lo2, hi1, hi2 = gpa - egpa, gpb - egpb, gpa + egpa, gpb + egpb
    rlo = jnp.where(mask & (lo2 < 0), A + w * lo1 / jnp.where(lo2 < 0, lo1 - lo2, 1.0), jnp.inf)
    rhi = jnp.where(mask & (hi2 < 0), A + w * hi1 / jnp.where(hi2 < 0, hi1 - hi2, 1.0), jnp.inf)
    return rlo, rhi


@eqx.filter_jit
def _point_kernel(f, xprev, x, xnext, coeffs, shapes, lid, gid, cid):
    """Per point x with pattern p (one traced evaluation for the three points):

    - p's side of the junctions (x, xnext) (exit to the right) and (xprev, x) (entry from
      the left), from bounded evaluations of the frozen model at the three points;
    - for the walk: the pattern hash, whether p is certified at x, the predicted exit point
      of p's region to the right and a step that clears the round-off band there (rates
      from the frozen values at x and xnext: exact for affine logits up to round-off).
    """

    def one(xprev, x, xnext):
        # the pattern from the model's own forward pass; its validity at x is checked below
        # (every frozen gap at x exceeds its round-off bound)
        p = f.pattern(x)
        Y, EY, LL, EE, _ = jax.vmap(lambda z: f.eval_bounded(z, None, p))(
            jnp.stack([x, xnext, xprev])
        )
        (y, yn, yp), (ey, eyn, eyp) = Y, EY
        L, Ln, Lp = ([v[i] for v in LL] for i in range(3))
        E, En, Ep = ([v[i] for v in EE] for i in range(3))
        g0, e0, m = _gaps(shapes, L, E, p)
        # strictly: a point on a kink (a gap of zero) is not certified, it is nudged off
        # or left to the exact fallback (a sample on a kink must not hide it)
        valid = jnp.all(~m | (g0 - e0 > 0))
        X = x[0]
        # right side: p valid from x up to its first root in [x, xnext]
        gn, en, _ = _gaps(shapes, Ln, En, p)
        h = xnext[0] - X
        rlo, rhi = _roots_right(g0, e0, gn, en, m, X, h)
        ip = jnp.argmin(rhi)
        right = (
            jnp.min(rlo),
            rhi[ip],
            jnp.isfinite(rhi[ip]) & (jnp.sum(rlo <= rhi[ip]) == 1),
            ip,
        )
        # left side: mirror (t -> -t): p valid from its last root in [xprev, x] up to x
        gp, ep, _ = _gaps(shapes, Lp, Ep, p)
        qlo, qhi = _roots_right(g0, e0, gp, ep, m, -X, X - xprev[0])
        iq = jnp.argmin(qhi)
        left = (
            -jnp.min(qlo),  # the rightmost possible entry point
            -qhi[iq],  # the leftmost bound of the binding root
            jnp.isfinite(qhi[iq]) & (jnp.sum(qlo <= qhi[iq]) == 1),
            iq,
        )
        # walk: exit point and step
        dgap = (gn - g0) / jnp.where(h != 0, h, 1.0)
        down = m & (dgap < 0)
        t = jnp.where(down, g0 / jnp.where(down, -dgap, 1.0), jnp.inf)
        i = jnp.argmin(t)
        step = jnp.where(
            jnp.isfinite(t[i]),
            4.0 * (e0[i] + en[i]) / jnp.abs(jnp.where(down[i], dgap[i], 1.0)),
            0.0,
        )
        walk = (pattern_hash(p, coeffs), X + t[i], step)
        return p.astype(jnp.int8), valid, right, left, (y, ey, yn, eyn, yp, eyp), walk

    return jax.vmap(one)(xprev, x, xnext)


def _run_points(f, xprev, xs, xnext, coeffs, shapes, tables, dtype):
    lid, gid, cid = tables[:3]
    col = lambda v: np.asarray(v, np.float64).reshape(-1, 1).astype(dtype)
    return batched(
        _point_kernel,
        f,
        (col(xprev), col(xs), col(xnext)),
        coeffs,
        shapes,
        jnp.asarray(lid),
        jnp.asarray(gid),
        jnp.asarray(cid),
    )


def _junctions(f, P, coeffs, shapes, tables, dtype):
    """Certify the junctions between consecutive points P (sorted)."""
    lid, gid, cid, glid, goff = tables
    xprev = np.concatenate([P[:1], P[:-1]])
    xnext = np.concatenate([P[1:], P[-1:]])
    pat, valid, right, left, ys, _ = _run_points(f, xprev, P, xnext, coeffs, shapes, tables, dtype)
    y, ey, yn, eyn, yp, eyp = ys
    i, j = np.arange(P.size - 1), np.arange(1, P.size)
    A, B = P[i], P[j]
    w = B - A
    pa, pb = pat[i], pat[j]
    diff = pa != pb
    same = ~diff.any(axis=1)
    va = valid[i] & valid[j]
    xp_lo, rhi_p, uniq_p, ip = (r[i] for r in right)
    xq_hi, rlo_q, uniq_q, iq = (r[j] for r in left)
    np_err = np.errstate(invalid="ignore", divide="ignore")
    np_err.__enter__()
    cert_same = same & va & ~np.isfinite(xp_lo)
    cert_a = ~same & va & (xq_hi <= xp_lo)
    layer, grp = lid[ip], gid[ip]
    gidx = goff[layer] + grp
    rows = np.arange(i.size)
    swap = (
        (lid[iq] == layer)
        & (gid[iq] == grp)
        & (cid[ip] == pb[rows, gidx])
        & (cid[iq] == pa[rows, gidx])
    )
    cols = np.arange(pat.shape[1])
    others = (diff & (cols[None, :] != gidx[:, None]) & (glid[None, :] <= layer[:, None])).any(1)
    cert_b = ~same & va & uniq_p & uniq_q & swap & ~others
    # the binding root of p lies in [xp_lo, rhi_p] (unique binding: its own interval)
    xs_b = 0.5 * (xp_lo + rhi_p)
    xe_b = 0.5 * (rhi_p - xp_lo)
    xs_a, xe_a = 0.5 * (xq_hi + xp_lo), 0.5 * np.abs(xp_lo - xq_hi)
    xstar = np.where(cert_b, xs_b, np.where(cert_a, xs_a, 0.5 * (A + B)))
    xerr = np.where(cert_b, xe_b, np.where(cert_a, xe_a, w))
    # maps of p and q at both ends: different maps <=> a certified non-zero difference
    da, eda = y[i] - yp[j], ey[i] + eyp[j]
    db, edb = yn[i] - y[j], eyn[i] + ey[j]
    differ = (np.abs(da) > eda).any(1) | (np.abs(db) > edb).any(1)
    equal = ((da == 0) & (db == 0) & (eda == 0) & (edb == 0)).all(1)
    lam = ((xstar - A) / w)[:, None]
    dstar = da + (db - da) * lam
    tol = eda + edb + np.abs(db - da) * (xerr / w)[:, None]
    defect = np.max(np.abs(dstar) - tol, axis=1)
    np_err.__exit__(None, None, None)
    cert = cert_same | ((cert_a | cert_b) & (differ | equal) & (defect <= 0))
    # the affine output map of every point's region, from the frozen values at x and xnext
    # (the last point: xprev and x)
    xa = np.where(xnext > P, P, xprev)
    xb = np.where(xnext > P, xnext, P)
    ya_ = np.where((xnext > P)[:, None], y, yp)
    yb_ = np.where((xnext > P)[:, None], yn, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = (yb_ - ya_) / (xb - xa)[:, None]
    icpt = ya_ - slope * xa[:, None]
    return cert, same, xstar, differ, defect, (slope, icpt)


# --------------------------------------------------------------------------- exact path
# the exact rational walk (_Exact) is in ._exact_walk (shared with ._layerwise)


# --------------------------------------------------------------------------- driver
def _snap(x, dtype):
    """The nearest numbers of ``dtype`` (float64 values)."""
    return np.asarray(x, np.float64).astype(dtype).astype(np.float64)


def _up(x, dtype, k: int = 0):
    """The smallest number of ``dtype`` ≥ x, then ``k`` steps further up (float64 values)."""
    x = np.asarray(x, np.float64)
    y = x.astype(dtype)
    y = np.where(y.astype(np.float64) < x, np.nextafter(y, dtype(np.inf)), y)
    for _ in range(k):
        y = np.nextafter(y, dtype(np.inf))
    return y.astype(np.float64)


def _down(x, dtype):
    """The largest number of ``dtype`` ≤ x (float64 value)."""
    x = np.asarray(x, np.float64)
    y = x.astype(dtype)
    y = np.where(y.astype(np.float64) > x, np.nextafter(y, dtype(-np.inf)), y)
    return y.astype(np.float64)


def _all_exact(f, lo: float, hi: float) -> dict:
    """The whole interval by the exact rational walk (a box narrower than two numbers of
    the evaluation dtype)."""
    from ._layerwise import _exact_whole

    if not isinstance(f, AbstractExactEval):
        raise CertificationError(
            f"count_linear_regions: the box [{lo!r}, {hi!r}] holds fewer than two float32 "
            "numbers, so only the exact walk can count on it, and "
            + lacks(f, AbstractExactEval, type(f).__name__, "it needs")
            + ' Or enable float64 with jax.config.update("jax_enable_x64", True).'
        )
    t0, c0 = time.perf_counter(), time.process_time()
    return _exact_whole(f, lo, hi, t0, c0, "the box holds fewer than two float32 numbers")


def count_1d_certified(f, lo: float, hi: float, *, n_seed: int, dtype, coeffs, strict: bool):
    """Certified exact count on [lo, hi]; returns a dict (see module docstring).

    The model is evaluated in ``dtype``; with float32 (JAX's default, x64 off) every point
    of the walk is a float32 number, so a junction proved in floating point is proved for
    exactly its two end points, and the slivers between the box ends as given (float64)
    and the nearest float32 numbers inside them, ``[lo, lo32]`` and ``[hi32, hi]``, are
    counted by the exact rational walk: the certificate covers the box as given."""
    if not isinstance(f, AbstractBoundedEval):
        raise TypeError(lacks(f, AbstractBoundedEval, "count_1d_certified", "the point walk needs"))
    dtype = np.dtype(dtype).type
    lo_d, hi_d = float(_up(lo, dtype)), float(_down(hi, dtype))
    if not lo_d < hi_d:  # no two float32 numbers inside the box: all exact
        return _all_exact(f, lo, hi)
    shapes, lid, gid, cid, glid, goff = _structure(f, dtype)
    shapes = tuple(shapes)
    span = hi_d - lo_d
    timer = {"t0": time.perf_counter(), "cpu0": time.process_time()}
    n_eval = 0

    tables = (lid, gid, cid, glid, goff)

    def probe(xs):
        nonlocal n_eval
        n_eval += 2 * xs.shape[0]
        _, valid, _, _, _, (h, e, s) = _run_points(
            f, xs, xs, xs + span, coeffs, shapes, tables, dtype
        )
        return combine(h), e.astype(np.float64), s.astype(np.float64), valid

    # seeds: numbers of dtype (evaluated exactly where they are)
    xs = np.unique(_snap(np.linspace(lo_d, hi_d, n_seed + 1), dtype))
    h, e, s, c = probe(xs)
    # nudge interior seeds that sit inside a round-off band (at least j steps of dtype)
    for j in range(1, 6):
        bad = np.nonzero(~c[1:-1])[0] + 1
        if not bad.size:
            break
        nudged = np.maximum(_snap(xs[bad] + span * 1e-9 * j * np.pi, dtype), _up(xs[bad], dtype, j))
        xs[bad] = np.clip(nudged, lo_d, hi_d)
        h[bad], e[bad], s[bad], c[bad] = probe(xs[bad])
    pts = [xs]
    # walkers: from seed i towards seed i+1
    idx = np.nonzero(h[:-1] != h[1:])[0]
    x, ex, st, target, xt = xs[idx], e[idx], s[idx], h[idx + 1], xs[idx + 1]
    min_step = span * 2.0**-40
    mult = np.ones_like(x)
    rounds = 0
    while x.size:
        check_budget("point walk")
        rounds += 1
        y = ex + np.maximum(st, min_step) * mult
        with np.errstate(invalid="ignore", over="ignore"):
            y = np.where(np.isfinite(y), np.maximum(_up(y, dtype), _up(x, dtype, 1)), y)
        alive = (y < xt) & (ex > x) & np.isfinite(ex)
        x, ex, st, target, xt, mult, y = (v[alive] for v in (x, ex, st, target, xt, mult, y))
        if not x.size:
            break
        hy, ey, sy, cy = probe(y)
        ok = cy
        pts.append(y[ok & (hy != target)])
        # certified: continue from y unless the target region is reached
        cont = ok & (hy != target)
        retry = ~ok & (mult < 4.0**8)
        x = np.concatenate([y[cont], x[retry]])
        ex = np.concatenate([ey[cont], ex[retry]])
        st = np.concatenate([sy[cont], st[retry]])
        target = np.concatenate([target[cont], target[retry]])
        xt = np.concatenate([xt[cont], xt[retry]])
        mult = np.concatenate([np.ones(int(cont.sum())), mult[retry] * 4.0])
    P = np.concatenate(pts)
    order = np.argsort(P, kind="stable")
    P = P[order]
    keep = np.concatenate([[True], np.diff(P) > 0])
    P = P[keep]
    # junctions between consecutive points
    t_walk = time.perf_counter() - timer["t0"]
    a = P[:-1]
    n_eval += 3 * P.size
    cert, same, xstar, differ, defect, maps = _junctions(f, P, coeffs, shapes, tables, dtype)
    t_junc = time.perf_counter() - timer["t0"] - t_walk
    switches = []  # (point, maps differ, exact?, index of the point right of it)
    ok = cert & ~same
    for i in np.nonzero(ok)[0]:
        switches.append((float(xstar[i]), bool(differ[i]), False, i + 1))
    bad = np.nonzero(~cert)[0]
    # the exact walks: runs of consecutive junctions that floating point could not prove
    # (one walk per run, so a point between two of them is never a blind spot), and the
    # slivers [lo, lo_d], [hi_d, hi] between the box as given and the dtype numbers in it
    spans = []
    for i in bad:
        if spans and spans[-1][1] == i:
            spans[-1][1] = i + 1
        else:
            spans.append([int(i), int(i) + 1])
    walks = [[float(P[i0]), float(P[i1])] for i0, i1 in spans]
    if lo_d > lo:
        if walks and walks[0][0] == P[0]:
            walks[0][0] = lo
        else:
            walks.insert(0, [lo, lo_d])
    if hi_d < hi:
        if walks and walks[-1][1] == P[-1]:
            walks[-1][1] = hi
        else:
            walks.append([hi_d, hi])
    exact_used = 0
    failure = None
    ex_model = None
    if walks:
        if isinstance(f, AbstractExactEval):
            ex_model = _Exact(f)
        else:
            failure = "no exact evaluation: " + lacks(
                f, AbstractExactEval, type(f).__name__, "the exact fallback needs"
            )
            if lo_d > lo or hi_d < hi:
                failure += (
                    f" (the box ends {lo!r}, {hi!r} are not {np.dtype(dtype).name} numbers: the "
                    "slivers to the nearest ones need the exact walk; enable float64 with "
                    'jax.config.update("jax_enable_x64", True) or give bounds that are '
                    f"{np.dtype(dtype).name} numbers)"
                )
        if ex_model is not None:
            for wa, wb in walks:
                for pnt, dif in ex_model.walk(Fraction(wa), Fraction(wb)):
                    switches.append((float(pnt), dif, True, -1))
            exact_used = int(bad.size)
            n_eval += ex_model.n_eval
    certified = failure is None
    if not certified and strict:
        raise CertificationError(
            f"count_linear_regions: {bad.size} of {a.size} junctions could not be certified in "
            f"floating point ({len(walks)} exact walks needed) and the exact fallback is "
            f"unavailable: {failure}"
        )
    switches.sort(key=lambda s: s[0])
    bps = np.array([s[0] for s in switches], np.float64)
    dif = np.array([s[1] for s in switches], bool)
    # the map of every region: from the point that starts it (-1: a region found by the
    # exact fallback, without a float point; its map is left to the caller)
    start = np.array([0] + [s[3] for s in switches], np.int64)
    slope, icpt = maps
    J = np.where(start[:, None] >= 0, slope[np.maximum(start, 0)], np.nan)
    c = np.where(start[:, None] >= 0, icpt[np.maximum(start, 0)], np.nan)
    return {
        "slopes": J[:, :, None],
        "intercepts": c,
        "breakpoints": bps,
        "differ": dif,
        "certified": certified,
        "certificate": {
            "method": f"{np.dtype(dtype).name} running error bounds + exact rational fallback",
            "points": int(P.size),
            "junctions": int(a.size),
            "junctions_certified_float": int(cert.sum()),
            "junctions_exact": exact_used,
            "exact_evaluations": 0 if not walks or failure else int(ex_model.n_eval),
            "exact_walks": len(walks),
            "walk_rounds": rounds,
            "max_continuity_defect": float(np.max(defect[cert & ~same], initial=-np.inf)),
            "failure": failure,
            "seconds_walk": round(t_walk, 3),
            "seconds_junctions": round(t_junc, 3),
            "seconds_exact": round(time.perf_counter() - timer["t0"] - t_walk - t_junc, 3),
            "cpu_seconds": round(time.process_time() - timer["cpu0"], 3),
        },
        "evaluations": n_eval,
    }

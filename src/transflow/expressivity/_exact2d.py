"""Exact (certified) 2-D region counting in integer arithmetic.

Every float weight is a dyadic rational ``m·2^e``, so with the activation pattern of the
earlier layers frozen, every logit of decision layer ``l`` is an affine function
``a + b·s + c·t`` of the plane coordinates with dyadic coefficients. This module computes
those coefficients exactly — as integer arrays with one power-of-two scale per array
(:class:`_Aff`), propagated through the model with Python integers — and refines the box
into the activation polygons with exact integer geometry:

- a **line** is an integer triple ``(a, b, c)``, the half-plane ``a + b s + c t ≥ 0``
  (the difference of two competing logits, scaled by a positive power of two and divided
  by the gcd of its entries);
- a **vertex** is a homogeneous integer triple ``(W, X, Y)`` with ``W > 0`` (the point
  ``(X/W, Y/W)``), the cross product of the two lines meeting there;
- the side of a vertex is the sign of the integer ``a W + b X + c Y``: exact, no
  tolerance.

Decision layer by decision layer every polygon (carrying its exact prefix pattern and the
model's exact affine state) is split by every group whose exact winner is not the same
at all its vertices (one convex cell per competitor: the intersection of the half-planes
where it beats the others, lowest index on ties); a cell is kept iff it has positive area
(a vertex strictly inside the clipping half-plane). The activation regions are the final
cells; the output map of each is exact; two cells are merged into one linear region iff
their maps are exactly equal and they share a boundary segment of positive length
(decided on the canonical integer key of the common supporting line, endpoints compared
as exact rationals). The areas of the cells sum exactly to the box's area.

Models: a model that inherits :class:`AbstractExactProgram` (:class:`MaxoutNetwork`, ReLU
nets via ``from_relu`` / ``from_torch``, hardmax :class:`MaxoutTransformer` with constant
queries — checked exactly — and :func:`restrict` slices of them) brings its own integer
program (``transflow.expressivity._programs``); any other model with
:class:`AbstractExactEval` uses three exact rational evaluations per polygon and layer
(:class:`GenericProgram`); a model with neither has no exact count.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from ._programs import (
    ExactProgram,
    GenericProgram,
    NotExact,
    _Aff,
)
from ._pwl import (
    AbstractExactEval,
    AbstractExactProgram,
    AbstractPiecewiseLinear,
    lacks,
    safe_float,
)
from ._region_count import _components

METHOD = (
    "exact integer arithmetic: dyadic affine logits per frozen prefix pattern, polygons "
    "with integer supporting lines and homogeneous integer vertices, exact sign tests, "
    "exact map equality and edge adjacency"
)


# --------------------------------------------------------------------------- geometry
def _reduce(L):
    g = math.gcd(*L)
    return L if g <= 1 else (L[0] // g, L[1] // g, L[2] // g)


def _meet(L1, L2):
    """The homogeneous integer vertex (W > 0, gcd 1) where two lines meet."""
    a1, b1, c1 = L1
    a2, b2, c2 = L2
    W, X, Y = b1 * c2 - c1 * b2, c1 * a2 - a1 * c2, a1 * b2 - b1 * a2
    if W < 0:
        W, X, Y = -W, -X, -Y
    g = math.gcd(W, X, Y)
    return (W // g, X // g, Y // g) if g > 1 else (W, X, Y)


def _side(L, v):
    return L[0] * v[0] + L[1] * v[1] + L[2] * v[2]


def _clip(poly, L):
    """``poly ∩ {L ≥ 0}`` or None when it has no interior. ``poly = (verts, lines)``:
    ``lines[i]`` supports the edge ``verts[i] → verts[i+1]``."""
    verts, lines = poly
    sg = [_side(L, v) for v in verts]
    if all(s >= 0 for s in sg):
        return poly
    if not any(s > 0 for s in sg):
        return None
    L = _reduce(L)
    nv, nl = [], []
    n = len(verts)
    for i in range(n):
        j = (i + 1) % n
        si, sj = sg[i], sg[j]
        if si >= 0:
            nv.append(verts[i])
            if sj >= 0:
                nl.append(lines[i])
            elif si > 0:
                nl.append(lines[i])
                nv.append(_meet(lines[i], L))
                nl.append(L)
            else:
                nl.append(L)
        elif sj > 0:
            nv.append(_meet(lines[i], L))
            nl.append(lines[i])
    return nv, nl


def _split(poly, Z):
    """The cells of ``poly`` where each competitor line of ``Z`` (K integer triples) wins
    (lowest index on ties): ``[(cell, j), …]``."""
    K = len(Z)
    out = []
    for j in range(K):
        cell = poly
        for i in range(K):
            if i == j:
                continue
            D = (Z[j][0] - Z[i][0], Z[j][1] - Z[i][1], Z[j][2] - Z[i][2])
            if D == (0, 0, 0):
                if i < j:
                    cell = None
                    break
                continue
            cell = _clip(cell, D)
            if cell is None:
                break
        if cell is not None:
            out.append((cell, j))
    return out


def _winners(M, V):
    """Exact winners ``(G, nv)`` of the competitors ``M`` (G, K, 3) at the vertices V."""
    vals = np.matmul(M, np.asarray(V, dtype=object).T)  # (G, K, nv)
    return np.argmax(vals, axis=1)


def _frac_point(v):
    return Fraction(v[1], v[0]), Fraction(v[2], v[0])


def _canonical(L):
    a, b, c = _reduce(L)
    if b < 0 or (b == 0 and c < 0):
        a, b, c = -a, -b, -c
    return a, b, c


def _area2(verts) -> Fraction:
    """Twice the signed area of a polygon with homogeneous integer vertices, exactly."""
    total = Fraction(0)
    n = len(verts)
    for i in range(n):
        W1, X1, Y1 = verts[i]
        W2, X2, Y2 = verts[(i + 1) % n]
        total += Fraction(X1 * Y2 - X2 * Y1, W1 * W2)
    return total


def _adjacent_pairs(polys):
    """Pairs of polygons that share a boundary segment of positive length (exact)."""
    from ._budget import check_budget

    by_line: dict = {}
    for p, (verts, lines) in enumerate(polys):
        check_budget("exact 2-D adjacency")
        n = len(verts)
        for i in range(n):
            by_line.setdefault(_canonical(lines[i]), []).append((p, verts[i], verts[(i + 1) % n]))
    pairs = []
    for key, edges in by_line.items():
        if len(edges) < 2:
            continue
        check_budget("exact 2-D adjacency")
        k = 1 if key[2] != 0 else 2  # parametrise by s unless the line is s = const
        ivs = []
        for p, v1, v2 in edges:
            a, b = Fraction(v1[k], v1[0]), Fraction(v2[k], v2[0])
            ivs.append((min(a, b), max(a, b), p))
        ivs.sort(key=lambda r: r[0])
        for u in range(len(ivs)):
            lo_u, hi_u, pu = ivs[u]
            for w in range(u + 1, len(ivs)):
                lo_w, hi_w, pw = ivs[w]
                if lo_w >= hi_u:
                    break
                if min(hi_u, hi_w) > lo_w and pu != pw:
                    pairs.append((pu, pw))
    return pairs


# --------------------------------------------------------------------------- driver
def _box(lo, hi):
    """The box [lo, hi] as an integer polygon (lines: bottom, right, top, left)."""
    (l0n, l0d), (l1n, l1d) = (float(v).as_integer_ratio() for v in lo)
    (h0n, h0d), (h1n, h1d) = (float(v).as_integer_ratio() for v in hi)
    bottom, right = (-l1n, 0, l1d), (h0n, -h0d, 0)
    top, left = (h1n, 0, -h1d), (-l0n, l0d, 0)
    lines = [bottom, right, top, left]
    verts = [_meet(left, bottom), _meet(bottom, right), _meet(right, top), _meet(top, left)]
    return verts, lines


def program_of(f: AbstractExactEval) -> ExactProgram:
    """The exact program the counters use for ``f``: its own (``f.exact_program()``, a
    model with :class:`AbstractExactProgram`) or the :class:`GenericProgram` of its exact
    evaluation."""
    if isinstance(f, AbstractExactProgram):
        return f.exact_program()
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    shapes = jax.eval_shape(f.layer_logits, jnp.zeros((f.in_dim,), dtype))
    return GenericProgram(f, [int(s.shape[0]) for s in shapes])


def count_2d_exact(f: AbstractExactEval, lo, hi) -> dict:
    """Exact activation polygons, maps and linear-region labels of ``f`` on the box.

    Raises :class:`NotExact` when the model's weights do not meet its program's
    precondition (a hardmax query that depends on x or differs between tokens).
    """
    from ._budget import check_budget

    t0 = time.perf_counter()
    prog = program_of(f)
    ident = _Aff(np.array([[0, 1, 0], [0, 0, 1]], dtype=object), 0)
    box = _box(lo, hi)
    # items: (polygon, state, prefix pattern)
    items = [(box, prog.start(ident), ())]
    n_exact, n_split = 0, 0
    for layer in range(prog.n_layers):
        new = []
        for poly, state, prefix in items:
            check_budget("exact 2-D partition")
            Z, cache = prog.logits(state, layer)
            n_exact += 1
            M = Z.M
            win = _winners(M, poly[0])  # (G, nv)
            fixed = win[:, 0].astype(np.int64)
            varying = np.nonzero(np.any(win != win[:, :1], axis=1))[0]
            cells = [(poly, fixed)]
            for g in varying:
                Zg = [tuple(M[g, k]) for k in range(M.shape[1])]
                nxt = []
                for cell, w in cells:
                    wv = _winners(M[g : g + 1], cell[0])[0]
                    if np.all(wv == wv[0]):
                        w = w.copy()
                        w[g] = wv[0]
                        nxt.append((cell, w))
                        continue
                    n_split += 1
                    for sub, j in _split(cell, Zg):
                        w2 = w.copy()
                        w2[g] = j
                        nxt.append((sub, w2))
                cells = nxt
            for cell, w in cells:
                new.append((cell, prog.advance(state, cache, layer, w), (*prefix, w)))
        items = new
    polys = [it[0] for it in items]
    maps = []
    for _, state, _ in items:
        check_budget("exact 2-D maps")
        y = prog.output(state)
        maps.append(y.fractions() if isinstance(y, _Aff) else y)
    keys = [tuple(m.reshape(-1)) for m in maps]
    ids: dict = {}
    map_id = [ids.setdefault(k, len(ids)) for k in keys]
    check_budget("exact 2-D adjacency")
    pairs = [(i, j) for i, j in _adjacent_pairs(polys) if map_id[i] == map_id[j]]
    labels = _components(len(polys), pairs)
    # exact checks: the cells tile the box, one cell per pattern
    box_area2 = _area2(box[0])
    total = Fraction(0)
    for p in polys:
        check_budget("exact 2-D area check")
        total += abs(_area2(p[0]))
    area_ok = total == abs(box_area2)
    pats = {tuple(np.concatenate(it[2]).tolist()) if it[2] else () for it in items}
    distinct = len(pats) == len(items)
    if not (area_ok and distinct):  # pragma: no cover - would be a bug in this module
        raise AssertionError(
            f"exact 2-D partition inconsistent: tiles the box {area_ok}, one polygon per "
            f"pattern {distinct}"
        )
    bits = max(
        (abs(x).bit_length() for p in polys for v in p[0] for x in v),
        default=0,
    )
    poly_f = [np.array([[v[1] / v[0], v[2] / v[0]] for v in p[0]], np.float64) for p in polys]
    F = np.array([[[safe_float(x) for x in row] for row in m] for m in maps], np.float64)
    return {
        "polygons": poly_f,
        "slopes": F[:, :, 1:],
        "intercepts": F[:, :, 0],
        "labels": labels,
        "linear": int(labels.max()) + 1 if len(labels) else 0,
        "activation": len(polys),
        "evaluations": n_exact,
        "certificate": {
            "method": METHOD,
            "program": prog.name,
            "activation_polygons": len(polys),
            "distinct_maps": len(ids),
            "exact_affine_evaluations": n_exact,
            "polygon_splits": n_split,
            "area_sum_equals_box": area_ok,
            "one_polygon_per_pattern": distinct,
            "merged_adjacent_pairs": len(pairs),
            "max_vertex_bits": bits,
            "seconds": time.perf_counter() - t0,
        },
    }


def count_2d_certified(f, lo, hi, *, strict: bool, float_count):
    """:func:`count_linear_regions` in 2-D with ``certify=True``: the exact count; if the
    model has no exact program, ``strict`` raises :class:`CertificationError`, otherwise
    the float polygon count ``float_count()`` is returned with ``certified=False``."""
    from ._budget import CertificationError
    from ._region_count import RegionCount

    if isinstance(f, AbstractExactEval):
        try:
            res, reason = count_2d_exact(f, lo, hi), None
        except NotExact as err:  # the weights fail the program's precondition (data)
            res, reason = None, f"{type(f).__name__}: {err}"
    else:
        res, reason = (
            None,
            lacks(f, AbstractExactEval, type(f).__name__, "an exact 2-D count needs"),
        )
    if res is None:
        if strict:
            raise CertificationError(
                f"count_linear_regions (2-D): no exact integer program for this model "
                f"({reason}), so the count cannot be certified. Count with strict=False to "
                "get the float64 polygon count marked certified=False."
            )
        r = float_count()
        r.certified = False
        r.certificate = {"method": "float64 polygon clipping (not certified)", "failure": reason}
        return r
    return RegionCount(
        linear=res["linear"],
        activation=res["activation"],
        dim=2,
        slopes=res["slopes"],
        intercepts=res["intercepts"],
        labels=res["labels"],
        polygons=res["polygons"],
        evaluations=res["evaluations"],
        certified=True,
        certificate=res["certificate"],
    )


# --------------------------------------------------------------------------- 1-D segments
def _right_winners(a, b, p, q):
    """Per group the winner just right of the point ``p/q`` (q > 0): the lexicographic
    maximum of (value, slope), lowest index on ties; ``a, b`` (G, K) integer objects."""
    vals = a * q + b * p
    best = vals.max(axis=-1)
    low = b.min() - 1
    masked = np.where(vals == best[:, None], b, low)
    return np.argmax(masked, axis=-1).astype(np.int64)


def _left_winners(a, b, p, q):
    """Per group the winner just left of ``p/q``: the maximum of (value, −slope)."""
    vals = a * q + b * p
    best = vals.max(axis=-1)
    nb = -b
    low = nb.min() - 1
    masked = np.where(vals == best[:, None], nb, low)
    return np.argmax(masked, axis=-1).astype(np.int64)


def _sweep(a, b, w, u: Fraction, v: Fraction):
    """The switches ``[(t, winner after t)]`` in (u, v) of the upper envelope of the lines
    ``a[k] + b[k] s`` (Python ints), starting with winner w right of u."""
    out = []
    pos, cur = u, w
    K = len(a)
    while True:
        best_t, best_k = None, None
        for k in range(K):
            if b[k] <= b[cur]:
                continue
            t = Fraction(a[cur] - a[k], b[k] - b[cur])
            if t <= pos:  # cannot happen for the right-hand winner at pos
                raise AssertionError("exact 1-D sweep: a steeper competitor ahead at pos")
            if best_t is None or t < best_t or (t == best_t and b[k] > b[best_k]):
                best_t, best_k = t, k
        if best_t is None or best_t >= v:
            return out
        out.append((best_t, best_k))
        pos, cur = best_t, best_k


def program_1d(f: AbstractPiecewiseLinear) -> ExactProgram | None:
    """The integer program of a 1-D model for :func:`exact_segments_1d` (build it once per
    count), or ``None`` for a model without :class:`AbstractExactProgram` (the caller
    walks)."""
    if f.in_dim != 1:
        raise ValueError(f"exact_segments_1d: a 1-D model is needed, got in_dim = {f.in_dim}.")
    return f.exact_program() if isinstance(f, AbstractExactProgram) else None


def exact_segments_1d(f: AbstractPiecewiseLinear, A: Fraction, B: Fraction, prog=None):
    """Exact activation regions of a 1-D model on ``[A, B]`` by exact affine propagation,
    decision layer by decision layer (the 1-D analogue of :func:`count_2d_exact`).

    On every interval the earlier layers' winners are fixed, so every logit of the next
    layer is an exact affine function ``a + b s`` (dyadic, integer arrays); each group's
    upper envelope on the interval is swept exactly (its switches are rational roots;
    ties go to the lowest index), and the interval is split at the union of the switches
    of all groups. Coinciding switches of many groups cost nothing extra, unlike float64
    enclosures, which cannot separate them.

    Returns ``(switches, maps)``: the switches in the open interval (A, B) as
    ``[(point, maps differ)]`` (as :meth:`transflow.expressivity._exact_walk._Exact.walk`),
    and per region the exact ``(slope, intercept)`` Fraction arrays ``(d_out,)``.
    Raises :class:`NotExact` where the model's weights fail its program's precondition
    (the caller walks). ``prog``: the model's :func:`program_1d`, if already built.
    """
    from ._budget import check_budget

    if prog is None:
        prog = program_1d(f)
        if prog is None:
            raise TypeError(
                lacks(
                    f, AbstractExactProgram, "exact_segments_1d", "exact affine propagation needs"
                )
            )
    ident = _Aff(np.array([[0, 1, 0]], dtype=object), 0)
    items = [(A, B, prog.start(ident))]
    for layer in range(prog.n_layers):
        new = []
        for u, v, state in items:
            check_budget("exact 1-D layers")
            Z, cache = prog.logits(state, layer)
            M = Z.M
            if any(x != 0 for x in M[..., 2].reshape(-1)):  # pragma: no cover - a bug
                raise NotExact("a 1-D logit depends on a second coordinate")
            a, b = M[..., 0], M[..., 1]
            wu = _right_winners(a, b, u.numerator, u.denominator)
            wv = _left_winners(a, b, v.numerator, v.denominator)
            # the envelope's slope only grows: a group with the same winner at both ends
            # does not switch inside
            events: dict = {}
            for g in np.nonzero(wu != wv)[0]:
                for t, k in _sweep(list(a[g]), list(b[g]), int(wu[g]), u, v):
                    events.setdefault(t, []).append((int(g), k))
            w = wu
            start = u
            for t in sorted(events):
                new.append((start, t, prog.advance(state, cache, layer, w)))
                w = w.copy()
                for g, k in events[t]:
                    w[g] = k
                start = t
            new.append((start, v, prog.advance(state, cache, layer, w)))
        items = new
    maps = []
    for _, _, state in items:
        check_budget("exact 1-D maps")
        y = prog.output(state)
        F = y.fractions() if isinstance(y, _Aff) else y
        maps.append((F[:, 1].copy(), F[:, 0].copy()))
    switches = []
    for j in range(1, len(items)):
        (s0, i0), (s1, i1) = maps[j - 1], maps[j]
        switches.append((items[j][0], bool(np.any(s0 != s1) or np.any(i0 != i1))))
    return switches, maps

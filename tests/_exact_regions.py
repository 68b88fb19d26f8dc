"""An independent exact reference counter of linear and activation regions (tests only).

Small maxout networks with rational weights (:class:`fractions.Fraction`), on an interval
(1-D) or a box (2-D). Nothing here uses transflow's counters: the network is evaluated
layer by layer on exact cells.

- 1-D: every cell is an open interval on which each hidden unit is affine. For every unit
  of the next layer, every crossing point of two of its pieces strictly inside the cell cuts
  it; the winners of each sub-interval are read at its midpoint (lowest index on ties).
- 2-D: the same with convex polygons, cut by every line on which two pieces of a unit
  are equal; the winners of a cell are read at its vertex centroid (an interior point).

Over-cutting is harmless: the cells are then merged. *Activation regions* are the maximal
connected unions of cells with the same full pattern, *linear regions* those with the same
affine output map (cells are connected through a shared edge of positive length). Only
cells of positive length (area) exist, so a kink at an end of the domain is no boundary.
"""

from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np

__all__ = ["ExactNet", "reference_1d", "reference_2d"]


class ExactNet:
    """``y = A h^L + c`` with ``h^l_i = max_j (W^l[i, j] · h^{l-1} + b^l[i, j])``; all
    entries Fractions (nested lists), ``W^l`` of shape ``(n_l, k_l, n_{l-1})``."""

    def __init__(self, Ws, bs, A, c):
        self.Ws = [[[[Fr(x) for x in p] for p in u] for u in W] for W in Ws]
        self.bs = [[[Fr(x) for x in u] for u in b] for b in bs]
        self.A = [[Fr(x) for x in row] for row in A]
        self.c = [Fr(x) for x in c]

    def float_arrays(self):
        """The weights as float64 arrays (exact: the Fractions must be dyadic)."""
        f = lambda a: np.array(a, dtype=object).astype(np.float64)
        out = ([f(W) for W in self.Ws], [f(b) for b in self.bs], f(self.A), f(self.c))
        for W in self.Ws:
            assert all(Fr(float(x)) == x for x in np.array(W, dtype=object).ravel())
        return out


def _aff(w, H, b):
    """Σ_p w[p] H[p] + b for affine maps H[p] = (c0, c1, …) (tuples of Fractions)."""
    n = len(H[0])
    out = [Fr(0)] * n
    for wp, h in zip(w, H):
        if wp:
            out = [o + wp * x for o, x in zip(out, h)]
    out[0] += b
    return tuple(out)


def _at(m, x):
    return m[0] + sum(mi * xi for mi, xi in zip(m[1:], x))


def _argmax(vals):
    best = 0
    for j in range(1, len(vals)):
        if vals[j] > vals[best]:
            best = j
    return best


def _layer(net, layer, H, x):
    """Pieces of every unit of ``layer`` (affine in the input, given the cell's hidden maps
    H) and the winners at the interior point x."""
    pieces = [
        [_aff(p, H, b) for p, b in zip(unit, bu)] for unit, bu in zip(net.Ws[layer], net.bs[layer])
    ]
    wins = tuple(_argmax([_at(p, x) for p in unit]) for unit in pieces)
    return pieces, wins


def _runs(keys):
    return 1 + sum(1 for a, b in zip(keys, keys[1:]) if a != b)


def reference_1d(net: ExactNet, lo, hi) -> dict:
    """``{"activation", "linear", "breakpoints"}`` (breakpoints: the activation-region
    boundaries, Fractions, sorted) of ``net`` on ``[lo, hi]``."""
    lo, hi = Fr(lo), Fr(hi)
    cells = [(lo, hi, [(Fr(0), Fr(1))], ())]  # input t: the map 0 + 1·t
    for layer in range(len(net.Ws)):
        new = []
        for a, b, H, pat in cells:
            pieces, _ = _layer(net, layer, H, ((a + b) / 2,))
            cuts = set()
            for unit in pieces:
                for j in range(len(unit)):
                    for i in range(j):
                        (c0, s0), (c1, s1) = unit[i], unit[j]
                        if s0 != s1:
                            t = (c1 - c0) / (s0 - s1)
                            if a < t < b:
                                cuts.add(t)
            pts = [a, *sorted(cuts), b]
            for u, v in zip(pts, pts[1:]):
                m = (u + v) / 2
                wins = tuple(_argmax([_at(p, (m,)) for p in unit]) for unit in pieces)
                H2 = [unit[w] for unit, w in zip(pieces, wins)]
                new.append((u, v, H2, (*pat, wins)))
        cells = new
    maps = [tuple(_aff(row, H, c) for row, c in zip(net.A, net.c)) for _, _, H, _ in cells]
    pats = [p for *_, p in cells]
    bps = [cells[i][1] for i in range(len(cells) - 1) if pats[i] != pats[i + 1]]
    return {"activation": _runs(pats), "linear": _runs(maps), "breakpoints": bps}


# ----------------------------------------------------------------------------- 2-D
def _area2(P):
    return sum(
        P[i][0] * P[(i + 1) % len(P)][1] - P[(i + 1) % len(P)][0] * P[i][1] for i in range(len(P))
    )


def _half(P, L, sign):
    """P ∩ {sign · L(x) ≥ 0} for the affine L = (c, gx, gy); None if of zero area."""
    v = [sign * _at(L, p) for p in P]
    out = []
    for i in range(len(P)):
        j = (i + 1) % len(P)
        if v[i] >= 0:
            out.append(P[i])
        if (v[i] > 0 and v[j] < 0) or (v[i] < 0 and v[j] > 0):
            t = v[i] / (v[i] - v[j])
            out.append((P[i][0] + t * (P[j][0] - P[i][0]), P[i][1] + t * (P[j][1] - P[i][1])))
    dedup = []
    for p in out:
        if not dedup or dedup[-1] != p:
            dedup.append(p)
    if len(dedup) > 1 and dedup[0] == dedup[-1]:
        dedup.pop()
    return dedup if len(dedup) >= 3 and _area2(dedup) != 0 else None


def _share_edge(P, Q) -> bool:
    """Convex polygons P, Q (no overlap) share a boundary segment of positive length."""
    for i in range(len(P)):
        p1, p2 = P[i], P[(i + 1) % len(P)]
        d = (p2[0] - p1[0], p2[1] - p1[1])
        cr = lambda q, p1=p1, d=d: d[0] * (q[1] - p1[1]) - d[1] * (q[0] - p1[0])
        dot = lambda q, p1=p1, d=d: d[0] * (q[0] - p1[0]) + d[1] * (q[1] - p1[1])
        L = dot(p2)
        for k in range(len(Q)):
            q1, q2 = Q[k], Q[(k + 1) % len(Q)]
            if cr(q1) == 0 and cr(q2) == 0:
                s1, s2 = sorted((dot(q1), dot(q2)))
                if min(L, s2) > max(Fr(0), s1):
                    return True
    return False


def _components(keys, polys) -> int:
    n = len(keys)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            if keys[i] == keys[j] and find(i) != find(j) and _share_edge(polys[i], polys[j]):
                parent[find(i)] = find(j)
    return len({find(i) for i in range(n)})


def reference_2d(net: ExactNet, lo, hi) -> dict:
    """``{"activation", "linear"}`` of ``net`` on the box ``[lo, hi]²`` (or per-axis
    pairs ``lo = (x0, y0)``, ``hi = (x1, y1)``)."""
    lo = (Fr(lo), Fr(lo)) if not isinstance(lo, tuple | list) else tuple(map(Fr, lo))
    hi = (Fr(hi), Fr(hi)) if not isinstance(hi, tuple | list) else tuple(map(Fr, hi))
    box = [(lo[0], lo[1]), (hi[0], lo[1]), (hi[0], hi[1]), (lo[0], hi[1])]
    ident = [(Fr(0), Fr(1), Fr(0)), (Fr(0), Fr(0), Fr(1))]
    cells = [(box, ident, ())]
    for layer in range(len(net.Ws)):
        new = []
        for P, H, pat in cells:
            pieces = [
                [_aff(p, H, b) for p, b in zip(unit, bu)]
                for unit, bu in zip(net.Ws[layer], net.bs[layer])
            ]
            parts = [P]
            for unit in pieces:
                for j in range(len(unit)):
                    for i in range(j):
                        L = tuple(x - y for x, y in zip(unit[i], unit[j]))
                        if L[1] == 0 and L[2] == 0:
                            continue
                        parts = [h for Q in parts for s in (1, -1) if (h := _half(Q, L, s))]
            for Q in parts:
                cx = sum(q[0] for q in Q) / len(Q)
                cy = sum(q[1] for q in Q) / len(Q)
                wins = tuple(_argmax([_at(p, (cx, cy)) for p in unit]) for unit in pieces)
                H2 = [unit[w] for unit, w in zip(pieces, wins)]
                new.append((Q, H2, (*pat, wins)))
        cells = new
    polys = [P for P, _, _ in cells]
    maps = [tuple(_aff(row, H, c) for row, c in zip(net.A, net.c)) for _, H, _ in cells]
    pats = [p for *_, p in cells]
    return {"activation": _components(pats, polys), "linear": _components(maps, polys)}

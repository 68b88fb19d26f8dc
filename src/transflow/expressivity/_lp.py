"""An independent region enumerator by linear programming (in the style of Tseran and
Montúfar's ``maxout_complexity``): layer-by-layer refinement of the input box, one LP
(:func:`scipy.optimize.linprog`) per candidate (region, unit, winning piece). Plain numpy
and scipy, no JAX: a cross-check of :func:`count_linear_regions` on small networks."""

from __future__ import annotations

import numpy as np

from ._maxout import MaxoutNetwork
from ._region_count import _check_box

__all__ = ["lp_region_count"]


def _chebyshev(A, b, eps):
    """Radius of the largest ball inside {A x ≤ b} (0 if empty or flat), via linprog."""
    from scipy.optimize import linprog

    norms = np.linalg.norm(A, axis=1)
    d = A.shape[1]
    c = np.zeros(d + 1)
    c[-1] = -1.0
    res = linprog(
        c,
        A_ub=np.hstack([A, norms[:, None]]),
        b_ub=b,
        bounds=[(None, None)] * d + [(0, None)],
        method="highs",
    )
    return float(-res.fun) if res.status == 0 else 0.0


def _extent(A, b):
    """Largest width of the polytope {A x ≤ b} along the coordinate axes (0 if empty)."""
    from scipy.optimize import linprog

    d = A.shape[1]
    width = 0.0
    for k in range(d):
        c = np.zeros(d)
        c[k] = 1.0
        lo = linprog(c, A_ub=A, b_ub=b, bounds=[(None, None)] * d, method="highs")
        hi = linprog(-c, A_ub=A, b_ub=b, bounds=[(None, None)] * d, method="highs")
        if lo.status != 0 or hi.status != 0:
            return 0.0
        width = max(width, -hi.fun - lo.fun)
    return width


def lp_region_count(net: MaxoutNetwork, lo, hi, *, eps: float = 1e-9) -> dict:
    """Activation and linear regions of a maxout (or ReLU) network on a box, by LPs.

    Every region is a polytope ``{A x ≤ b}`` with the affine map ``h = M x + c`` of the
    current layer. For each unit i and each piece j the candidate cell adds
    ``z_{ic}(x) ≤ z_{ij}(x)`` for every other piece c; it is kept if the LP finds a ball of
    radius > ``eps`` inside it (non-empty interior). Linear regions: regions with equal
    final affine maps (to 1e-9 relative) that share a facet (their closures intersect in a
    set of positive width, 2·d LPs) are merged.

    Returns:
        ``{"activation": int, "linear": int, "maps": (N, d_out, d+1) array, "lps": int}``.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import MaxoutNetwork, lp_region_count
        >>> net = MaxoutNetwork.from_relu([np.eye(2), np.ones((1, 2))], [np.zeros(2), np.zeros(1)])
        >>> lp_region_count(net, [-1.0, -1.0], [1.0, 1.0])["activation"]   # 4 quadrants
        4
    """
    if not isinstance(net, MaxoutNetwork):
        raise TypeError(
            f"lp_region_count: `net` must be a MaxoutNetwork (ReLU nets via from_relu or "
            f"from_torch), got {type(net).__name__}."
        )
    _check_box(net, lo, hi)  # finite, of shape () or (d,), lo < hi
    d = net.in_dim
    lo = np.broadcast_to(np.asarray(lo, np.float64), (d,))
    hi = np.broadcast_to(np.asarray(hi, np.float64), (d,))
    A0 = np.vstack([np.eye(d), -np.eye(d)])
    b0 = np.concatenate([hi, -lo])
    regions = [(A0, b0, np.eye(d), np.zeros(d))]
    n_lp = 0
    for W, bias in zip(net.weights, net.biases):
        W, bias = np.asarray(W, np.float64), np.asarray(bias, np.float64)
        n, k, _ = W.shape
        cells = [(A, b, M, c, []) for A, b, M, c in regions]
        for i in range(n):
            new = []
            for A, b, M, c, rows in cells:
                S = W[i] @ M  # (k, d)
                s0 = W[i] @ c + bias[i]  # (k,)
                for j in range(k):
                    extra_A, extra_b, skip = [], [], False
                    for cc in range(k):
                        if cc == j:
                            continue
                        dS, ds = S[cc] - S[j], s0[j] - s0[cc]
                        if np.abs(dS).sum() + abs(ds) <= 1e-14 * (1 + np.abs(S).sum()):
                            if cc < j:  # identical pieces: the lower index wins
                                skip = True
                                break
                            continue
                        extra_A.append(dS)
                        extra_b.append(ds)
                    if skip:
                        continue
                    A2 = np.vstack([A, *extra_A]) if extra_A else A
                    b2 = np.concatenate([b, extra_b]) if extra_b else b
                    n_lp += 1
                    if _chebyshev(A2, b2, eps) > eps:
                        new.append((A2, b2, M, c, rows + [(S[j], s0[j])]))
            cells = new
        regions = [
            (A, b, np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
            for A, b, _, _, rows in cells
        ]
    R, r0 = np.asarray(net.readout_weight, np.float64), np.asarray(net.readout_bias, np.float64)
    maps = np.array(
        [np.concatenate([R @ M, (R @ c + r0)[:, None]], axis=1) for _, _, M, c in regions]
    )
    N = len(regions)
    parent = list(range(N))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    scale = np.abs(maps).max() + 1.0
    for u in range(N):
        for v in range(u + 1, N):
            if np.abs(maps[u] - maps[v]).max() > 1e-9 * scale or find(u) == find(v):
                continue
            A = np.vstack([regions[u][0], regions[v][0]])
            b = np.concatenate([regions[u][1], regions[v][1]])
            n_lp += 2 * d
            if _extent(A, b) > 1e-7 * float(np.max(hi - lo)):
                parent[find(v)] = find(u)
    linear = len({find(u) for u in range(N)})
    return {"activation": N, "linear": linear, "maps": maps, "lps": n_lp}

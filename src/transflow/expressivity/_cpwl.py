"""CPWL functions as maxout networks (hence transformers): the lattice (max–min) route and
the hinging-hyperplane (Wang–Sun) route of docs/spec/maxout-expressivity.md §3.4.

Under hardmax on a compact box both routes are exact; :func:`maxout_to_transformer` turns
the returned :class:`MaxoutNetwork` into a transformer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._maxout import MaxoutNetwork

__all__ = ["lattice_cpwl", "lattice_from_1d", "hinging_cpwl", "lattice_eval"]


def _pieces(slopes, intercepts):
    A = np.asarray(slopes, np.float64)
    c = np.asarray(intercepts, np.float64)
    if A.ndim != 2:
        raise ValueError(f"`slopes` must have shape (q, d), got {A.shape}.")
    if c.shape != (A.shape[0],):
        raise ValueError(f"`intercepts` must have shape ({A.shape[0]},), got {c.shape}.")
    return A, c


def lattice_cpwl(slopes, intercepts, sets: Sequence[Sequence[int]], *, dtype=None) -> MaxoutNetwork:
    """``f(x) = max_{i ≤ N} min_{j ∈ S_i} ℓ_j(x)`` with ``ℓ_j(x) = slopes[j]·x + intercepts[j]``.

    The lattice representation (Tarela–Martínez 1999, Ovchinnikov 2002) of a CPWL function
    with affine components ℓ_1..ℓ_q, as two maxout layers (docs/spec/maxout-expressivity.md §3.4.1):
    ``u_i = max_{j ∈ S_i} (−ℓ_j)`` (width N, rank ``max |S_i|``; shorter sets are padded
    by repeating a member, which leaves the max unchanged) and ``v = max_i (−u_i)``
    (width 1, rank N). Variant A transformer: ``T = max(max|S_i|, N)`` tokens, 3 blocks.

    Args:
        slopes: ``(q, d)``; intercepts: ``(q,)``.
        sets: the index sets S_1..S_N (non-empty, indices in ``[0, q)``).

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import lattice_cpwl
        >>> net = lattice_cpwl([[1.0], [-1.0], [0.0]], [0.0, 0.0, 1.0], [[0, 2], [1, 2]])
        >>> [float(net(np.array([t]))[0]) for t in (-2.0, 0.5, 2.0)]   # min(|x|, 1)
        [1.0, 0.5, 1.0]
    """
    A, c = _pieces(slopes, intercepts)
    q, d = A.shape
    sets = [list(map(int, s)) for s in sets]
    if not sets:
        raise ValueError("`sets` must hold at least one index set, got none.")
    for i, s in enumerate(sets):
        if not s or min(s) < 0 or max(s) >= q:
            raise ValueError(
                f"`sets[{i}]` must be a non-empty list of piece indices in [0, {q}), got {s}."
            )
    N, r = len(sets), max(len(s) for s in sets)
    W1, b1 = np.zeros((N, r, d)), np.zeros((N, r))
    for i, s in enumerate(sets):
        padded = s + [s[0]] * (r - len(s))
        W1[i] = -A[padded]
        b1[i] = -c[padded]
    W2 = -np.eye(N)[None]  # (1, N, N): piece i = -u_i
    return MaxoutNetwork(
        [W1, W2], [b1, np.zeros((1, N))], np.ones((1, 1)), np.zeros(1), dtype=dtype
    )


def lattice_eval(slopes, intercepts, sets, x) -> np.ndarray:
    """Reference numpy evaluation of ``max_i min_{j∈S_i} ℓ_j(x)`` at points ``x`` (n, d)."""
    A, c = _pieces(slopes, intercepts)
    vals = np.asarray(x, np.float64) @ A.T + c  # (n, q)
    return np.max(np.stack([vals[:, list(s)].min(-1) for s in sets], -1), -1)


def lattice_from_1d(nodes, values, *, dtype=None) -> tuple[MaxoutNetwork, dict]:
    """The lattice network of the continuous piecewise-linear interpolant of 1-D data.

    Pieces ``ℓ_r`` interpolate ``(nodes[r], values[r]) → (nodes[r+1], values[r+1])``;
    ``S_i = {j : ℓ_j ≥ ℓ_i on [nodes[i], nodes[i+1]]}`` (checked at both end points,
    exact for affine functions), duplicate sets removed. Exact on ``[nodes[0], nodes[-1]]``.

    Returns:
        ``(net, info)`` with ``info = {"slopes", "intercepts", "sets"}``.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import lattice_from_1d
        >>> net, _ = lattice_from_1d([0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 1.0, 1.5])
        >>> round(float(net(np.array([1.5]))[0]), 12)
        1.5
    """
    xs = np.asarray(nodes, np.float64)
    ys = np.asarray(values, np.float64)
    if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
        raise ValueError(
            f"`nodes` and `values` must be 1-D of the same length >= 2, got {xs.shape} "
            f"and {ys.shape}."
        )
    if np.any(np.diff(xs) <= 0):
        raise ValueError("`nodes` must be strictly increasing.")
    s = np.diff(ys) / np.diff(xs)
    c = ys[:-1] - s * xs[:-1]
    q = s.size
    ends = np.stack([xs[:-1], xs[1:]], -1)  # (q, 2)
    sets, seen = [], set()
    for i in range(q):
        vi = s[i] * ends[i] + c[i]
        tol = 1e-12 * (1 + np.abs(vi).max())
        S = tuple(j for j in range(q) if np.all(s[j] * ends[i] + c[j] >= vi - tol))
        if S not in seen:
            seen.add(S)
            sets.append(list(S))
    net = lattice_cpwl(s[:, None], c, sets, dtype=dtype)
    return net, {"slopes": s[:, None], "intercepts": c, "sets": sets}


def hinging_cpwl(slopes, intercepts, signs, *, dtype=None) -> MaxoutNetwork:
    """``f(x) = Σ_{i=1}^{P} s_i max_k (slopes[i, k]·x + intercepts[i, k])``, ``s_i = ±1``.

    The generalized hinging-hyperplane form of Wang & Sun (2005), with ``K = d + 1`` pieces
    per term for a general CPWL function on R^d (any K ≥ 1 is accepted): one maxout layer of
    width P and rank K and the read-out ``(s_1, …, s_P)`` (docs/spec/maxout-expressivity.md §3.4.2).
    Variant A
    transformer: ``T = K`` tokens, 2 blocks, P heads.

    Args:
        slopes: ``(P, K, d)``; intercepts: ``(P, K)``; signs: ``(P,)`` with entries ±1.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import hinging_cpwl
        >>> net = hinging_cpwl([[[1.0], [-1.0]]], [[0.0, 0.0]], [1.0])   # |x|
        >>> float(net(np.array([-2.0]))[0])
        2.0
    """
    W = np.asarray(slopes, np.float64)
    b = np.asarray(intercepts, np.float64)
    s = np.asarray(signs, np.float64)
    if W.ndim != 3:
        raise ValueError(f"`slopes` must have shape (P, K, d), got {W.shape}.")
    if b.shape != W.shape[:2]:
        raise ValueError(f"`intercepts` must have shape {W.shape[:2]}, got {b.shape}.")
    if s.shape != (W.shape[0],) or not np.all(np.abs(s) == 1):
        raise ValueError(f"`signs` must be ±1 of shape ({W.shape[0]},), got {s}.")
    return MaxoutNetwork([W], [b], s[None], np.zeros(1), dtype=dtype)

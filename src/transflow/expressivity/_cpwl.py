"""CPWL functions as maxout networks (hence transformers): the lattice (max–min) route and
the hinging-hyperplane (Wang–Sun) route of docs/spec/maxout-expressivity.md §3.4.

Under hardmax on a compact box both routes are exact; :func:`maxout_to_transformer` turns
the returned :class:`MaxoutNetwork` into a transformer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._errors import check_values
from ._maxout import MaxoutNetwork

__all__ = ["lattice_cpwl", "lattice_from_1d", "hinging_cpwl", "lattice_eval"]


def _floats(name: str, x, owner: str, shape: tuple) -> np.ndarray:
    """``x`` as a finite float64 array of ``shape`` (``None``: any size), or one line
    naming ``name``."""
    x = check_values(name, x, owner, ndim=len(shape), shape=shape)
    return np.asarray(x, np.float64)


def _pieces(slopes, intercepts, owner: str):
    A = _floats("slopes", slopes, owner, (None, None))
    c = _floats("intercepts", intercepts, owner, (A.shape[0],))
    return A, c


def _check_sets(sets, q: int, owner: str) -> list[list[int]]:
    ok = isinstance(sets, list | tuple) and len(sets) > 0
    out = []
    for s in sets if ok else ():
        if not isinstance(s, list | tuple | np.ndarray) or not all(
            isinstance(j, int | np.integer) and not isinstance(j, bool) for j in s
        ):
            ok = False
            break
        out.append([int(j) for j in s])
    if not ok:
        raise TypeError(
            f"{owner}: `sets` must be a non-empty list of lists of piece indices, got "
            f"{sets!r:.60}; pass e.g. sets=[[0, 2], [1, 2]]."
        )
    for i, s in enumerate(out):
        if not s or min(s) < 0 or max(s) >= q:
            raise ValueError(
                f"{owner}: `sets[{i}]` must be a non-empty list of piece indices in [0, {q}), "
                f"got {s}."
            )
    return out


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
    A, c = _pieces(slopes, intercepts, "lattice_cpwl")
    q, d = A.shape
    sets = _check_sets(sets, q, "lattice_cpwl")
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
    A, c = _pieces(slopes, intercepts, "lattice_eval")
    sets = _check_sets(sets, A.shape[0], "lattice_eval")
    vals = _floats("x", x, "lattice_eval", (None, A.shape[1])) @ A.T + c  # (n, q)
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
    xs = _floats("nodes", nodes, "lattice_from_1d", (None,))
    ys = _floats("values", values, "lattice_from_1d", xs.shape)
    if xs.size < 2:
        raise ValueError(f"lattice_from_1d: `nodes` must hold >= 2 points, got {xs.size}.")
    if np.any(np.diff(xs) <= 0):
        raise ValueError(
            f"lattice_from_1d: `nodes` must be strictly increasing, got {xs.tolist()!r:.60}."
        )
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
    W = _floats("slopes", slopes, "hinging_cpwl", (None, None, None))
    b = _floats("intercepts", intercepts, "hinging_cpwl", W.shape[:2])
    s = _floats("signs", signs, "hinging_cpwl", (W.shape[0],))
    if not np.all(np.abs(s) == 1):
        raise ValueError(f"hinging_cpwl: `signs` must be ±1 of shape ({W.shape[0]},), got {s}.")
    return MaxoutNetwork([W], [b], s[None], np.zeros(1), dtype=dtype)

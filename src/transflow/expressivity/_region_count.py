"""The result type of the region counters and the checks of their inputs (bottom module:
imports only :mod:`._pwl`, so every counter can import it)."""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._pwl import AbstractPiecewiseLinear

__all__ = ["RegionCount"]


@dataclasses.dataclass
class RegionCount:
    """Result of :func:`count_linear_regions`.

    Attributes:
        linear: number of linear regions (maximal connected sets where f is affine).
        activation: number of activation regions (fixed full pattern), ≥ ``linear``.
        dim: input dimension (1 or 2).
        slopes: Jacobian ``(activation, d_out, d)`` of every activation region.
        intercepts: ``(activation, d_out)``.
        labels: linear-region id of every activation region.
        breakpoints: 1-D: the activation-region boundaries (midpoints of the final
            bisection intervals, width ≤ tol), sorted; 2-D: ``None``.
        polygons: 2-D: vertex arrays ``(V_i, 2)`` of the activation regions; 1-D: ``None``.
        evaluations: number of model evaluations (pattern points) used; for the 1-D
            layerwise counter, the interval-layer evaluations divided by the number of
            decision layers (full forward-pass equivalents) plus exact evaluations.
        certified: True if the count is certified exact (1-D: every junction between
            consecutive regions proved with running round-off bounds or recomputed in exact
            rational arithmetic; 2-D: the whole partition computed in exact integer
            arithmetic, see ``transflow.expressivity._exact2d`` and ``certificate``).
        certificate: what was checked, with counts (junctions, exact fallbacks, …).
    """

    linear: int
    activation: int
    dim: int
    slopes: np.ndarray
    intercepts: np.ndarray
    labels: np.ndarray
    breakpoints: np.ndarray | None = None
    polygons: list[np.ndarray] | None = None
    evaluations: int = 0
    certified: bool = False
    certificate: dict | None = None


def _check_box(f, lo, hi):
    """The box ``[lo, hi]`` as float64 arrays of shape ``(d,)``, validated.

    float64 also in float32 mode: a certificate covers the box as given, never a box
    rounded to float32 (issue #38)."""
    d = f.in_dim
    out = []
    for name, v in (("lo", lo), ("hi", hi)):
        what = f"a finite number or an array of shape ({d},) (the input dimension of `f`)"
        if v is None:
            raise ValueError(f"`{name}` must be {what}, got None; pass the box corner.")
        if isinstance(v, bool | np.bool_):
            raise TypeError(f"`{name}` must be {what}, got the bool {v!r}.")
        try:
            a = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"`{name}` must be {what}, got {type(v).__name__} {v!r}.") from err
        if a.ndim > 1 or (a.ndim == 1 and a.shape != (d,)):
            raise ValueError(
                f"`{name}` must be {what}, got shape {a.shape}; pass a scalar (the same bound "
                f"on every axis) or one bound per input coordinate."
            )
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"`{name}` must be finite, got {v!r}: regions are counted on a bounded box; "
                "give finite bounds (e.g. the range of the data)."
            )
        out.append(np.broadcast_to(a, (d,)).copy())
    lo, hi = out
    if not np.all(hi > lo):
        raise ValueError(f"need `lo` < `hi` componentwise, got lo={lo}, hi={hi}.")
    return lo, hi


def _check_params(f):
    """Refuse a model with NaN or infinite parameters (naming the parameter)."""
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(f, eqx.is_array))
    for path, leaf in leaves:
        if not jnp.issubdtype(leaf.dtype, jnp.inexact):
            continue
        a = np.asarray(leaf)
        if not np.all(np.isfinite(a)):
            bad = "NaN" if np.any(np.isnan(a)) else "infinite"
            raise ValueError(
                f"`f` has {bad} parameters: {type(f).__name__}{jax.tree_util.keystr(path)} "
                f"(shape {a.shape}) holds {int(np.sum(~np.isfinite(a)))} non-finite "
                "entries; a model with NaN/inf weights has no linear regions to count. "
                "Check how the weights were made (training divergence, a bad conversion)."
            )


def _check_model(f):
    if not isinstance(f, AbstractPiecewiseLinear):
        raise TypeError(
            "`f` must be a MaxoutNetwork, a MaxoutTransformer or another "
            f"AbstractPiecewiseLinear, got {type(f).__name__}. For a torch.nn.Sequential "
            "use MaxoutNetwork.from_torch(module) (or restrict(module, origin, directions))."
        )
    _check_params(f)


def _components(n: int, pairs) -> np.ndarray:
    parent = np.arange(n)

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    roots = np.array([find(i) for i in range(n)])
    _, labels = np.unique(roots, return_inverse=True)
    return labels

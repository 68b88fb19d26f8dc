"""Continuous controls θ(t) and kernels W(ξ, y) as functions.

- :class:`~transflow.continuous.PiecewiseConstant` (in ``transflow._paths``, with the other
  :class:`~transflow.continuous.ControlPath` kinds): the paper's controls, one per layer.
- :class:`SmoothPath`: ``θ(t) = θ_0 + sin(ω t) θ_1`` leaf by leaf, a smooth control for
  convergence studies in Δt.
- :class:`KernelAttention`, :class:`KernelLinear`: continuous kernels ``W(ξ, y, t)`` that any
  :class:`~transflow.Grid` samples by quadrature (``W[k, l] = w_k W(y_k, y_l, t)``,
  docs/spec/continuous-model.md §3.4), so one model can be evaluated at any (N_x, N_y, Δt).

Each is a callable ``θ(t)`` returning a pytree of arrays (e.g. an
:class:`~transflow.AttentionParams` or a ``(W, b)`` pair).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from .._controls import AttentionParams
from .._errors import check_callable, check_kind, check_number, check_times
from .._grid import Grid
from .._paths import ControlPath

__all__ = ["SmoothPath", "KernelAttention", "KernelLinear"]

Kernel = Callable[[Array, Array, Array], Array]


class SmoothPath(ControlPath):
    """``θ(t) = θ_0 + sin(ω t) θ_1`` on every floating leaf (a smooth control path).

    ``base`` and ``amplitude`` must be pytrees of the same structure (e.g. two
    :class:`~transflow.AttentionParams`). A :class:`~transflow.continuous.ControlPath` on
    ``[t0, t1]`` (default ``[0, 1]``; the formula holds for every t).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import SmoothPath
        >>> p = SmoothPath(jnp.zeros(2), jnp.ones(2), omega=jnp.pi / 2)
        >>> p(1.0).tolist()
        [1.0, 1.0]
    """

    base: Any
    amplitude: Any
    omega: float = 1.0
    t0: float = eqx.field(static=True, default=0.0)
    t1: float = eqx.field(static=True, default=1.0)

    @property
    def interval(self) -> tuple[float, float]:
        return float(self.t0), float(self.t1)

    def __check_init__(self):
        check_number("omega", self.omega, "SmoothPath", example="1.0", traced_ok=True)
        check_times(self.t0, self.t1, "SmoothPath")
        if jax.tree.structure(self.base) != jax.tree.structure(self.amplitude):
            raise ValueError(
                "SmoothPath: `base` and `amplitude` must have the same pytree structure, got "
                f"{jax.tree.structure(self.base)} and {jax.tree.structure(self.amplitude)}."
            )

    def __call__(self, t):
        s = jnp.sin(self.omega * jnp.asarray(t))
        return jax.tree.map(
            lambda a, b: a + s.astype(jnp.result_type(a)) * b, self.base, self.amplitude
        )


class KernelAttention(eqx.Module):
    """Single-head attention kernels W^Q, W^K, W^V(ξ, y, t) (docs/spec/continuous-model.md §2.2) as
    functions.

    ``sample(grid)`` returns the control path ``t ↦ AttentionParams`` with the quadrature
    matrices ``w_k W(y_k, y_l, t)`` of ``grid``; the score scale |Ω_y|^{-1/2} and the
    feature weights of ⟨Q, K⟩ are applied by :func:`transflow.attention` with
    ``grid=grid``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow import Grid
        >>> from transflow.continuous import KernelAttention
        >>> k = lambda xi, y, t: jnp.cos(jnp.pi * (xi - y)) * (1 + 0 * t)
        >>> p = KernelAttention(k, k, k).sample(Grid.interval(6, 8))(0.0)
        >>> p.wq.shape
        (8, 8)
    """

    wq: Kernel
    wk: Kernel
    wv: Kernel

    def __check_init__(self):
        for name in ("wq", "wk", "wv"):
            check_callable(name, getattr(self, name), "KernelAttention", "lambda xi, y, t: ...")

    def sample(self, grid: Grid) -> Callable[[Any], AttentionParams]:
        check_kind("grid", grid, Grid, "KernelAttention.sample", "pass e.g. Grid.interval(8, 8)")

        def path(t):
            t = jnp.asarray(t, grid.y_nodes.dtype)
            mats = [
                grid.sample_kernel(lambda xi, y, k=k: k(xi, y, t))
                for k in (self.wq, self.wk, self.wv)
            ]
            return AttentionParams.paper(*mats)

        return path


class KernelLinear(eqx.Module):
    """A linear integral operator ``∫ W(ξ, y, t) u(x, ξ) dξ + b(y, t)`` as functions.

    ``sample(grid)`` returns the control path ``t ↦ (W, b)`` (quadrature matrix, bias
    vector); ``b=None`` means no bias.
    """

    w: Kernel
    b: Callable[[Array, Array], Array] | None = None

    def __check_init__(self):
        check_callable("w", self.w, "KernelLinear", "lambda xi, y, t: ...")
        if self.b is not None:
            check_callable("b", self.b, "KernelLinear", "lambda y, t: ... or None")

    def sample(self, grid: Grid) -> Callable[[Any], tuple[Array, Array]]:
        check_kind("grid", grid, Grid, "KernelLinear.sample", "pass e.g. Grid.interval(8, 8)")

        def path(t):
            t = jnp.asarray(t, grid.y_nodes.dtype)
            w = grid.sample_kernel(lambda xi, y: self.w(xi, y, t))
            if self.b is None:
                b = jnp.zeros(grid.n_features, w.dtype)
            else:
                b = self.b(grid.y_nodes, t) * jnp.ones(grid.n_features, w.dtype)
            return w, b

        return path

"""Grids in token index x and feature index y, with quadrature weights.

The continuous model lives on Ω_x × Ω_y. A :class:`Grid` holds the quadrature nodes and
weights of both domains. Discrete weight matrices are quadrature of continuous kernels
(docs/spec/continuous-model.md §3.4): ``W[k, l] = w^y_k · W(y_k, y_l)``, so one continuous kernel
can be sampled on any grid (:meth:`Grid.sample_kernel`).

The paper's convention is the *index grid*: Δx = Δy = 1, |Ω_y| = d. On it every operator
of transflow reduces to the standard Transformer formula (softmax, 1/√d_k, population-
variance LayerNorm). ``grid=None`` everywhere means the index grid.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._errors import check_choice, check_domain, check_positive

__all__ = ["Grid"]


def _rule(n: int, a: float, b: float, rule: str) -> tuple[np.ndarray, np.ndarray]:
    if rule == "midpoint":
        h = (b - a) / n
        return a + h * (np.arange(n) + 0.5), np.full(n, h)
    if rule == "trapezoid":
        if n < 2:
            raise ValueError(f"the trapezoid rule needs n >= 2 nodes, got n={n}.")
        x = np.linspace(a, b, n)
        w = np.full(n, (b - a) / (n - 1))
        w[[0, -1]] *= 0.5
        return x, w
    if rule == "gauss":
        t, w = np.polynomial.legendre.leggauss(n)
        return 0.5 * (b - a) * t + 0.5 * (a + b), 0.5 * (b - a) * w
    raise ValueError(f"`rule` must be 'midpoint', 'trapezoid' or 'gauss', got {rule!r}.")


class Grid(eqx.Module):
    """Quadrature grid on Ω_x (tokens) × Ω_y (features).

    Attributes:
        x_nodes: token nodes, shape ``(n_tokens,)`` for 1-D token domains or
            ``(n_tokens, dim_x)`` for 2-D (image patches, row-major).
        x_weights: token quadrature weights, ``(n_tokens,)``; they enter the attention as
            the *weighted softmax* ``exp(S_ij) w_j / Σ_m exp(S_im) w_m``. Uniform weights
            cancel exactly.
        y_nodes: feature nodes, ``(n_features,)``.
        y_weights: feature quadrature weights, ``(n_features,)``; |Ω_y| = Σ y_weights.

    Example:
        >>> from transflow import Grid
        >>> g = Grid.index(4, 8)              # the paper's grid: Δx = Δy = 1
        >>> float(g.measure_y)
        8.0
        >>> h = Grid.interval(16, 32)         # Ω_x = Ω_y = [0, 1], midpoint rule
        >>> float(h.dy)
        0.03125
    """

    x_nodes: Float[Array, "n_tokens ..."]
    x_weights: Float[Array, " n_tokens"]
    y_nodes: Float[Array, " n_features"]
    y_weights: Float[Array, " n_features"]

    def __check_init__(self):
        if self.x_weights.ndim != 1 or self.x_nodes.shape[0] != self.x_weights.shape[0]:
            raise ValueError(
                f"`x_weights` must have shape (n_tokens,) = ({self.x_nodes.shape[0]},), "
                f"got {tuple(self.x_weights.shape)}."
            )
        if self.y_weights.shape != self.y_nodes.shape or self.y_nodes.ndim != 1:
            raise ValueError(
                f"`y_nodes` and `y_weights` must both have shape (n_features,), got "
                f"{tuple(self.y_nodes.shape)} and {tuple(self.y_weights.shape)}."
            )
        for name, w in (("x_weights", self.x_weights), ("y_weights", self.y_weights)):
            try:
                bad = bool(np.any(np.asarray(w) <= 0))
            except Exception:  # a tracer: values are unknown at trace time
                bad = False
            if bad:
                raise ValueError(f"`{name}` must be positive quadrature weights, got {w}.")

    # ----------------------------------------------------------------- constructors
    @classmethod
    def index(cls, n_tokens: int, n_features: int, *, dtype=None) -> Grid:
        """The paper's integer-index grid: nodes 0..n-1, all weights 1, |Ω_y| = n_features."""
        _check_sizes(n_tokens, n_features)
        dtype = dtype or jnp.result_type(float)
        return cls(
            x_nodes=jnp.arange(n_tokens, dtype=dtype),
            x_weights=jnp.ones(n_tokens, dtype),
            y_nodes=jnp.arange(n_features, dtype=dtype),
            y_weights=jnp.ones(n_features, dtype),
        )

    @classmethod
    def uniform(
        cls, n_tokens: int, n_features: int, *, dx: float = 1.0, dy: float = 1.0, dtype=None
    ) -> Grid:
        """Uniform grids with spacings ``dx`` and ``dy`` (midpoint nodes from 0)."""
        _check_sizes(n_tokens, n_features)
        check_positive("dx", dx)
        check_positive("dy", dy)
        dtype = dtype or jnp.result_type(float)
        return cls(
            x_nodes=jnp.asarray(dx * (np.arange(n_tokens) + 0.5), dtype),
            x_weights=jnp.full(n_tokens, dx, dtype),
            y_nodes=jnp.asarray(dy * (np.arange(n_features) + 0.5), dtype),
            y_weights=jnp.full(n_features, dy, dtype),
        )

    @classmethod
    def interval(
        cls,
        n_tokens: int,
        n_features: int,
        *,
        x_domain: tuple[float, float] = (0.0, 1.0),
        y_domain: tuple[float, float] = (0.0, 1.0),
        x_rule: str = "midpoint",
        y_rule: str = "midpoint",
        dtype=None,
    ) -> Grid:
        """Ω_x and Ω_y as intervals discretized by a quadrature rule.

        ``x_domain`` and ``y_domain`` are intervals ``(a, b)`` of finite numbers, a < b.
        ``x_rule`` (for Ω_x) and ``y_rule`` (for Ω_y) are each ``"midpoint"`` (order 2),
        ``"trapezoid"`` (order 2) or ``"gauss"`` (Gauss–Legendre; non-uniform weights),
        e.g. ``Grid.interval(8, 16, x_rule="gauss", y_rule="gauss")``.
        """
        _check_sizes(n_tokens, n_features)
        x_domain = check_domain("x_domain", x_domain, "Grid.interval")
        y_domain = check_domain("y_domain", y_domain, "Grid.interval")
        for r, nm in ((x_rule, "x_rule"), (y_rule, "y_rule")):
            check_choice(nm, r, ("midpoint", "trapezoid", "gauss"))
        dtype = dtype or jnp.result_type(float)
        xn, xw = _rule(n_tokens, *x_domain, x_rule)
        yn, yw = _rule(n_features, *y_domain, y_rule)
        return cls(
            jnp.asarray(xn, dtype),
            jnp.asarray(xw, dtype),
            jnp.asarray(yn, dtype),
            jnp.asarray(yw, dtype),
        )

    @classmethod
    def image(cls, height: int, width: int, n_features: int, *, dtype=None) -> Grid:
        """A 2-D token grid (patches, row-major) with unit weights and an index y-grid."""
        _check_sizes(height * width, n_features)
        dtype = dtype or jnp.result_type(float)
        ii, jj = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
        nodes = np.stack([ii.ravel(), jj.ravel()], axis=-1)
        return cls(
            x_nodes=jnp.asarray(nodes, dtype),
            x_weights=jnp.ones(height * width, dtype),
            y_nodes=jnp.arange(n_features, dtype=dtype),
            y_weights=jnp.ones(n_features, dtype),
        )

    # ----------------------------------------------------------------- properties
    @property
    def n_tokens(self) -> int:
        return self.x_weights.shape[0]

    @property
    def n_features(self) -> int:
        return self.y_weights.shape[0]

    @property
    def measure_x(self) -> Array:
        return jnp.sum(self.x_weights)

    @property
    def measure_y(self) -> Array:
        """|Ω_y|, the measure of the feature domain."""
        return jnp.sum(self.y_weights)

    @property
    def dx(self) -> Array:
        """Mean token spacing (equal to Δx on uniform grids)."""
        return self.measure_x / self.n_tokens

    @property
    def dy(self) -> Array:
        """Mean feature spacing (equal to Δy on uniform grids)."""
        return self.measure_y / self.n_features

    # ----------------------------------------------------------------- sampling
    def sample_kernel(self, kernel: Callable[[Array, Array], Array]) -> Float[Array, "ny ny"]:
        """Quadrature of a continuous kernel W(ξ, y): ``W[k, l] = w^y_k · W(y_k, y_l)``.

        With row-vector states ``U`` (token × feature), ``U @ W`` is then the midpoint (or
        chosen-rule) approximation of ``∫ W(ξ, y) u(x, ξ) dξ``.
        """
        xi, y = jnp.meshgrid(self.y_nodes, self.y_nodes, indexing="ij")
        return self.y_weights[:, None] * kernel(xi, y)

    def sample_function(self, f: Callable[[Array, Array], Array]) -> Float[Array, "nx ny"]:
        """Sample f(x, y) on the grid (1-D token domains)."""
        x, y = jnp.meshgrid(self.x_nodes, self.y_nodes, indexing="ij")
        return f(x, y)

    def sample_bias(self, b: Callable[[Array], Array]) -> Float[Array, " ny"]:
        """Sample a bias b(y) on the feature nodes."""
        return b(self.y_nodes)


def _check_sizes(n_tokens, n_features):
    for name, v in (("n_tokens", n_tokens), ("n_features", n_features)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {v!r}.")

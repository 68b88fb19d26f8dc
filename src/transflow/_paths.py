"""Control paths θ(t): controls as functions of time, independent of the time grid.

One abstraction, :class:`ControlPath`, for every way transflow represents the controls of
the continuous model on a time interval ``[t0, t1]``:

- :class:`~transflow.continuous.PiecewiseConstant`: one set per layer (the paper's and
  every trained transformer's controls);
- :class:`PiecewiseLinear`: linear between K knots (by default uniform on ``[t0, t1]``);
- :class:`BasisExpansion`: ``θ(t) = Σ_k c_k φ_k(t)`` with K Legendre, Chebyshev or
  Fourier basis functions per weight;
- :class:`TimeEmbeddingNet`: a small network of a Fourier time embedding that outputs
  every weight (the choice of Tong et al., "Neural ODE Transformers", ICLR 2025);
- :class:`~transflow.continuous.SmoothPath`: ``θ_0 + sin(ω t) θ_1`` (convergence studies).

A path is evaluated at any time (``path(t)``), sampled on any uniform grid of N steps
(:meth:`ControlPath.sample`, the stacked controls :func:`transflow.evolve` takes, at the
step midpoints by default) and has a smoothness energy ∫‖θ'(t)‖² dt
(:meth:`ControlPath.smoothness`) usable as a training penalty. :func:`init_path` builds
any of them from a draw of one set of controls, with an initialisation that is constant
(hence smooth) in t.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, PRNGKeyArray

from ._controls import num_steps
from ._errors import check_flag, check_key, check_number, check_step

__all__ = [
    "PATH_KINDS",
    "READINGS",
    "Reading",
    "ControlPath",
    "PiecewiseConstant",
    "PiecewiseLinear",
    "BasisExpansion",
    "TimeEmbeddingNet",
    "init_path",
    "stack_leading",
]

Where = Literal["midpoint", "left"]
#: How a grid of N uniform steps reads θ(t) (:meth:`ControlPath.read`): at a step's midpoint
#: m, θ(m⁺) ("right", the value :meth:`ControlPath.sample` takes) or θ(m⁻) ("left"), or
#: the step's average (1/Δt)∫θ dt ("average"). The three agree where θ is continuous at
#: the midpoints, and differ for a per-layer model read at a depth whose step midpoints
#: fall on its layer boundaries (N = L/2, L/4, …).
Reading = Literal["right", "left", "average"]
READINGS: tuple[str, ...] = ("right", "left", "average")
"""The names of the readings of θ(t) on a grid of N steps (:data:`Reading`)."""
#: Gauss–Legendre nodes per smooth piece of a step in ``read(N, "average")``: exact for
#: θ polynomial of degree <= 15 between the cuts of :meth:`ControlPath.pieces`.
_AVERAGE_NODES = 8
Basis = Literal["legendre", "chebyshev", "fourier"]

#: Names accepted by :func:`init_path` (and the ``path`` option of the training models).
PATH_KINDS = ("per_layer", "linear", "legendre", "chebyshev", "fourier", "embedding")


def _float_dtype(tree):
    for leaf in jax.tree.leaves(tree):
        if eqx.is_inexact_array(leaf):
            return leaf.dtype
    return jnp.result_type(float)


def _check_k(name: str, k) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(
            f"{name}: the number of pieces/knots/basis functions/frequencies K must be an "
            f"integer >= 1, got {k!r}; K = 1 is a control constant in t."
        )
    return int(k)


def _leading(tree) -> int:
    leaves = [x for x in jax.tree.leaves(tree) if eqx.is_array(x)]
    if not leaves:
        raise ValueError("a control path needs at least one array leaf, got none.")
    return int(leaves[0].shape[0])


def stack_leading(trees: list) -> Any:
    """Stack pytrees of arrays along a new leading axis (non-array leaves must agree).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import stack_leading
        >>> stack_leading([jnp.zeros(2), jnp.ones(2)]).shape
        (2, 2)
    """
    if not isinstance(trees, list | tuple) or not trees:
        raise ValueError(
            f"stack_leading: `trees` must be a non-empty list of pytrees, got {trees!r:.40}."
        )
    first = jax.tree.structure(trees[0])
    for i, tree in enumerate(trees[1:], 1):
        if jax.tree.structure(tree) != first:
            raise ValueError(
                f"stack_leading: `trees[{i}]` has another structure than `trees[0]`; every "
                "tree needs the same structure to stack."
            )
        for a, b in zip(jax.tree.leaves(trees[0]), jax.tree.leaves(tree)):
            if np.shape(a) != np.shape(b):
                raise ValueError(
                    f"stack_leading: `trees[{i}]` has a leaf of shape {np.shape(b)} where "
                    f"`trees[0]` has {np.shape(a)}; every tree needs the same shapes."
                )
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


class ControlPath(eqx.Module):
    """A control θ(t) on ``[t0, t1]``: the base class of every control parameterization.

    Subclasses implement ``__call__(t)`` (a pytree of arrays, one set of controls) and
    ``interval``; :meth:`sample` and :meth:`smoothness` work for all of them (subclasses
    override them where a closed form is exact or cheaper).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import PiecewiseLinear
        >>> path = PiecewiseLinear(jnp.array([0.0, 1.0]))  # θ(t) = t on [0, 1]
        >>> path.sample(4).tolist(), path.step_size(4)
        ([0.125, 0.375, 0.625, 0.875], 0.25)
        >>> round(float(path.smoothness()), 12)  # ∫ |θ'|² dt = 1
        1.0
    """

    @property
    def interval(self) -> tuple[float, float]:
        raise NotImplementedError

    def __call__(self, t):
        raise NotImplementedError

    @property
    def duration(self) -> float:
        """``t1 − t0``: the final time T of the evolution when ``t0 = 0``."""
        t0, t1 = self.interval
        return t1 - t0

    def pieces(self) -> list[tuple[float, float, ControlPath]]:
        """``[(a, b, path), …]``: the interval cut where θ(t) is not smooth, each piece
        with a path that is smooth on the *closed* ``[a, b]`` (an adaptive solver then never
        steps over a jump or a kink: ``solve_adaptive(..., split=True)``). A smooth path
        (Legendre, Chebyshev, Fourier, the time-embedding net): one piece, itself."""
        t0, t1 = self.interval
        return [(t0, t1, self)]

    def step_size(self, n_steps: int) -> float:
        """Δt = (t1 − t0) / N of a uniform grid of ``n_steps`` steps."""
        return self.duration / _check_steps(n_steps)

    def times(self, n_steps: int, where: Where = "midpoint") -> np.ndarray:
        """The sample times of :meth:`sample` (NumPy float64): ``t0 + (n + ½)Δt`` for
        ``"midpoint"``, ``t0 + nΔt`` for ``"left"``, n = 0 … N−1."""
        n = _check_steps(n_steps)
        if where not in ("midpoint", "left"):
            raise ValueError(f"`where` must be 'midpoint' or 'left', got {where!r}.")
        t0, _ = self.interval
        off = 0.5 if where == "midpoint" else 0.0
        return t0 + (np.arange(n) + off) * self.step_size(n)

    def sample(self, n_steps: int, where: Where = "midpoint"):
        """The controls of N = ``n_steps`` uniform steps, stacked (leading axis N).

        Step n uses θ at the step's midpoint (default, second-order accurate quadrature of
        a smooth θ) or its left end. Run them with ``transflow.evolve(u0, path.sample(N),
        scheme, dt=path.step_size(N))``.
        """
        return self._right_values(self.times(n_steps, where))

    def read(self, n_steps: int, reading: Reading = "right"):
        """The controls of N = ``n_steps`` uniform steps under a ``reading`` of θ(t).

        ``"right"``: θ(m⁺) at each step's midpoint m, i.e. :meth:`sample`; ``"left"``: the
        left limit θ(m⁻); ``"average"``: (1/Δt)∫θ(t)dt over the step (Gauss–Legendre on each
        smooth piece of the step, cut at :meth:`pieces`: exact for piecewise polynomials of
        degree <= 15). For a per-layer model (:class:`PiecewiseConstant`) read at a depth
        whose step midpoints fall on layer boundaries, "right" takes the layer after the
        boundary, "left" the layer before it, and "average" the mean of the layers the step
        covers; where θ is continuous at the midpoints, "right" and "left" agree.

        Example:
            >>> import jax.numpy as jnp
            >>> from transflow.continuous import PiecewiseConstant
            >>> p = PiecewiseConstant(jnp.array([0.0, 1.0, 2.0, 3.0]))  # 4 layers on [0, 4]
            >>> [p.read(2, r).tolist() for r in ("right", "left", "average")]
            [[1.0, 3.0], [0.0, 2.0], [0.5, 2.5]]
        """
        n = _check_steps(n_steps)
        if reading == "right":
            return self.sample(n)
        if reading == "left":
            return self._left_limits(self.times(n))
        if reading == "average":
            return self._averages(n)
        raise ValueError(f"`reading` must be one of {READINGS}, got {reading!r}.")

    def at_nodes(self, n_steps: int, nodes, reading: Reading = "right"):
        """θ at the stage times ``t0 + (n + c)Δt`` of N = ``n_steps`` uniform steps, one
        set per node c of ``nodes`` (a scheme's ``nodes``), stacked ``(N, len(nodes), …)``.

        θ is read from inside each step: a node at the step's start (c = 0) takes θ's
        right limit there, a node at its end (c = 1) its left limit, as a solver stepping
        between the jumps of θ sees it. At an interior node where θ jumps, ``reading``
        says which side (``"right"`` or ``"left"``; ``"average"`` has no meaning at a node:
        use :meth:`read`, one set per step). For a path continuous in t the readings agree.

        Example:
            >>> import jax.numpy as jnp
            >>> from transflow.continuous import PiecewiseConstant
            >>> p = PiecewiseConstant(jnp.array([0.0, 1.0]))  # 2 layers on [0, 2]
            >>> p.at_nodes(2, (0.0, 1.0)).tolist()  # Heun's nodes: each layer at both ends
            [[0.0, 0.0], [1.0, 1.0]]
        """
        n = _check_steps(n_steps)
        if reading not in ("right", "left"):
            raise ValueError(
                f"`reading` at stage nodes must be 'right' or 'left', got {reading!r}; the "
                "'average' reading is one set per step: use path.read(n_steps, 'average')."
            )
        cs = [float(c) for c in nodes]
        if not cs or any(not 0.0 <= c <= 1.0 for c in cs):
            raise ValueError(f"`nodes` must be stage times c in [0, 1], got {tuple(nodes)}.")
        t0, _ = self.interval
        h = self.step_size(n)
        cols = []
        for c in cs:
            ts = t0 + (np.arange(n) + c) * h
            left = c == 1.0 or (0.0 < c < 1.0 and reading == "left")
            cols.append(self._left_limits(ts) if left else self._right_values(ts))
        return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *cols)

    def _right_values(self, ts: np.ndarray):
        """θ(t⁺) = θ(t) at the times ``ts`` (every path is right-continuous)."""
        return jax.vmap(self.__call__)(jnp.asarray(ts, _float_dtype(self)))

    def left_limit(self, t):
        """θ(t⁻), the left limit at a time ``t`` (traceable): θ(t) itself for a path
        continuous in t (every path but :class:`PiecewiseConstant`, which overrides this)."""
        return self(t)

    def _left_limits(self, ts: np.ndarray):
        """θ(t⁻) at the times ``ts`` (NumPy), stacked."""
        return jax.vmap(self.left_limit)(jnp.asarray(ts, _float_dtype(self)))

    def _averages(self, n: int):
        t0, _ = self.interval
        h = self.step_size(n)
        edges = t0 + np.arange(n + 1) * h
        cuts = np.unique(np.concatenate([edges, [c for a, b, _ in self.pieces() for c in (a, b)]]))
        x, w = np.polynomial.legendre.leggauss(_AVERAGE_NODES)
        nodes, weights, step = [], [], []
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b - a <= 1e-12 * max(1.0, abs(b)):
                continue
            k = min(int(np.floor(((a + b) / 2 - t0) / h)), n - 1)
            nodes.append(a + (b - a) * (x + 1) / 2)
            weights.append((b - a) / 2 * w / h)
            step.append(np.full(len(x), k))
        dtype = _float_dtype(self)
        vals = jax.vmap(self.__call__)(jnp.asarray(np.concatenate(nodes), dtype))
        wts = jnp.asarray(np.concatenate(weights), dtype)
        seg = jnp.asarray(np.concatenate(step))

        def avg(v):
            wv = v * wts.reshape((-1,) + (1,) * (v.ndim - 1))
            return jax.ops.segment_sum(wv, seg, num_segments=n)

        return jax.tree.map(lambda v: avg(v) if eqx.is_inexact_array(v) else v[:n], vals)

    def derivative(self, t):
        """θ'(t) (forward-mode AD in t)."""
        dtype = _float_dtype(self)
        t = jnp.asarray(t, dtype)
        return jax.jvp(self.__call__, (t,), (jnp.ones_like(t),))[1]

    def smoothness(self, n_quad: int = 16) -> Array:
        """The energy ∫_{t0}^{t1} ‖θ'(t)‖² dt (sum over every floating leaf).

        Gauss–Legendre quadrature with ``n_quad`` nodes on the interval (exact for
        polynomial paths of degree ≤ n_quad); piecewise paths override it with the exact
        value. Add ``λ · path.smoothness()`` to a loss for a smoothness penalty.
        """
        n_quad = _check_k("smoothness(n_quad)", n_quad)
        t0, t1 = self.interval
        x, w = np.polynomial.legendre.leggauss(n_quad)
        ts = t0 + (x + 1) * (t1 - t0) / 2
        ws = w * (t1 - t0) / 2
        dtype = _float_dtype(self)
        d = jax.vmap(self.derivative)(jnp.asarray(ts, dtype))
        sq = sum(
            jnp.sum(jnp.reshape(a, (n_quad, -1)) ** 2, axis=1)
            for a in jax.tree.leaves(d)
            if eqx.is_inexact_array(a)
        )
        return jnp.sum(jnp.asarray(ws, dtype) * sq)


def _check_steps(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"`n_steps` must be an integer >= 1 (time steps N_t), got {n!r}.")
    return int(n)


def _interval(name: str, t0, t1) -> None:
    check_number("t0", t0, name)
    check_number("t1", t1, name)
    if not float(t1) > float(t0):
        raise ValueError(
            f"{name}: `t0` < `t1` is needed (the path's interval), got t0={t0!r}, t1={t1!r}; "
            "pass e.g. t0=0.0, t1=1.0."
        )


def _weighted(values, lo, hi, w):
    """``values[lo] (1 − w) + values[hi] w`` leaf by leaf (w broadcast on the lead axis)."""

    def interp(a):
        wa = jnp.asarray(w, a.dtype).reshape(jnp.shape(w) + (1,) * (a.ndim - 1))
        return a[lo] * (1 - wa) + a[hi] * wa

    return jax.tree.map(interp, values)


class PiecewiseConstant(ControlPath):
    """Piecewise-constant controls from a stack (leading time axis) of per-layer controls.

    ``θ(t) = stacked[n]`` for ``t ∈ [t_start + nτ, t_start + (n+1)τ)``, with ``n`` clipped
    to ``[0, N−1]``. A relative tolerance of ``1e-9`` on the layer index makes the left
    end points of the layers (the times where the paper evaluates θⁿ) robust to round-off.
    A :class:`~transflow.continuous.ControlPath` on ``[t_start, t_start + Nτ]``:
    ``sample(k·N)`` is the model refined k times (:func:`transflow.analysis.refine`).

    Example:
        >>> import jax
        >>> from transflow import LayerControls, stack_controls
        >>> from transflow.continuous import PiecewiseConstant
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> path = PiecewiseConstant(theta)
        >>> bool((path(1.5).attn.wq == theta.attn.wq[1]).all())
        True
    """

    stacked: Any
    tau: float = eqx.field(static=True, default=1.0)
    t_start: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        check_step("tau", self.tau, "PiecewiseConstant")
        check_number("t_start", self.t_start, "PiecewiseConstant")

    @property
    def n_pieces(self) -> int:
        return num_steps(self.stacked)

    def index(self, t) -> Array:
        s = (jnp.asarray(t) - self.t_start) / self.tau
        n = jnp.floor(s + 1e-9 * jnp.maximum(1.0, jnp.abs(s))).astype(jnp.int32)
        return jnp.clip(n, 0, self.n_pieces - 1)

    def __call__(self, t):
        i = self.index(t)
        return jax.tree.map(lambda x: x[i], self.stacked)

    def left_limit(self, t):
        """The layer ending at (or containing) ``t``: at a boundary, the one before."""
        s = (jnp.asarray(t) - self.t_start) / self.tau
        n = jnp.ceil(s - 1e-9 * jnp.maximum(1.0, jnp.abs(s))).astype(jnp.int32) - 1
        i = jnp.clip(n, 0, self.n_pieces - 1)
        return jax.tree.map(lambda x: x[i], self.stacked)

    @property
    def interval(self) -> tuple[float, float]:
        return float(self.t_start), float(self.t_start + self.n_pieces * self.tau)

    def pieces(self) -> list[tuple[float, float, ControlPath]]:
        """One piece per layer, each a one-layer path: at a layer's right end θ is still
        that layer's (``self(t)`` there is already the next layer's, a jump)."""
        out = []
        for n in range(self.n_pieces):
            a = float(self.t_start + n * self.tau)
            layer = jax.tree.map(lambda x, n=n: x[n : n + 1], self.stacked)
            out.append((a, a + float(self.tau), PiecewiseConstant(layer, self.tau, a)))
        return out

    def _right_values(self, ts: np.ndarray):
        """The layer starting at (or containing) each time: at a boundary, the one after
        (found in NumPy: static indices, a gather)."""
        s = (np.asarray(ts, np.float64) - self.t_start) / self.tau
        idx = np.floor(s + 1e-9 * np.maximum(1.0, np.abs(s))).astype(int)
        idx = np.clip(idx, 0, self.n_pieces - 1)
        return jax.tree.map(lambda x: x[idx], self.stacked)

    def _left_limits(self, ts: np.ndarray):
        """The layer ending at (or containing) each time: at a boundary, the one before."""
        s = (np.asarray(ts, np.float64) - self.t_start) / self.tau
        idx = np.ceil(s - 1e-9 * np.maximum(1.0, np.abs(s))).astype(int) - 1
        idx = np.clip(idx, 0, self.n_pieces - 1)
        return jax.tree.map(lambda x: x[idx], self.stacked)

    def _averages(self, n: int):
        """Exact: each step's overlap with each layer, as weights (an N × L matrix)."""
        t0, _ = self.interval
        h = self.step_size(n)
        a = t0 + np.arange(n)[:, None] * h
        lo = self.t_start + np.arange(self.n_pieces)[None, :] * self.tau
        overlap = np.clip(np.minimum(a + h, lo + self.tau) - np.maximum(a, lo), 0.0, None)
        dtype = _float_dtype(self)
        w = jnp.asarray(overlap / h, dtype)

        def avg(x):
            if not eqx.is_inexact_array(x):
                return x[np.zeros(n, int)]
            return jnp.tensordot(w, x, axes=(1, 0))

        return jax.tree.map(avg, self.stacked)

    def smoothness(self, n_quad: int = 16) -> Array:
        """Σ_n ‖θⁿ⁺¹ − θⁿ‖² / τ: the energy of the piecewise-linear interpolant through
        the layers (θ' of the step function itself is a sum of Dirac masses)."""
        del n_quad
        sq = sum(
            jnp.sum((x[1:] - x[:-1]) ** 2)
            for x in jax.tree.leaves(self.stacked)
            if eqx.is_inexact_array(x)
        )
        return sq / self.tau


class PiecewiseLinear(ControlPath):
    """θ(t) linear between K knots, held constant before the first and after the last.

    ``values`` is the stack (leading axis K) of the controls at the knots; ``knots`` their
    times (increasing), by default ``K`` uniform points from ``t0`` to ``t1``
    (K = 1: a constant control). Smooth initialisation: every knot the same controls.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import PiecewiseLinear
        >>> p = PiecewiseLinear(jnp.array([0.0, 2.0, 2.0]), t1=2.0)  # knots 0, 1, 2
        >>> [float(p(t)) for t in (0.5, 1.5, 3.0)]
        [1.0, 2.0, 2.0]
    """

    values: Any
    knots: tuple[float, ...] | None = eqx.field(static=True, default=None)
    t0: float = eqx.field(static=True, default=0.0)
    t1: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        _interval("PiecewiseLinear", self.t0, self.t1)
        k = _leading(self.values)
        if self.knots is not None:
            kn = np.asarray(self.knots, np.float64)
            if kn.shape != (k,) or np.any(np.diff(kn) <= 0):
                raise ValueError(
                    f"PiecewiseLinear: `knots` must be {k} increasing times (one per value), "
                    f"got {self.knots!r}."
                )

    @property
    def interval(self) -> tuple[float, float]:
        return float(self.t0), float(self.t1)

    @property
    def n_knots(self) -> int:
        return _leading(self.values)

    def knot_times(self) -> np.ndarray:
        if self.knots is not None:
            return np.asarray(self.knots, np.float64)
        k = self.n_knots
        return np.linspace(self.t0, self.t1, k) if k > 1 else np.array([float(self.t0)])

    def pieces(self) -> list[tuple[float, float, ControlPath]]:
        """Cut at the knots (θ' jumps there; θ is continuous, so every piece is ``self``)
        and at the interval's ends where the knots do not reach them."""
        cuts = sorted({float(self.t0), float(self.t1)} | {float(k) for k in self.knot_times()})
        cuts = [c for c in cuts if self.t0 <= c <= self.t1]
        return [(a, b, self) for a, b in zip(cuts[:-1], cuts[1:])]

    def _position(self, t):
        """(lo, hi, w) of time(s) t: NumPy for NumPy times (exact, static), else jnp."""
        kn = self.knot_times()
        k = len(kn)
        if k == 1:
            z = np.zeros(np.shape(t), int)
            return z, z, np.zeros(np.shape(t))
        if isinstance(t, np.ndarray | float | int):
            s = np.interp(t, kn, np.arange(k, dtype=np.float64))
            lo = np.clip(np.floor(s).astype(int), 0, k - 2)
            return lo, lo + 1, s - lo
        xp, dtype = jnp, _float_dtype(self)
        s = jnp.interp(t, jnp.asarray(kn, dtype), jnp.arange(k, dtype=dtype))
        lo = xp.clip(xp.floor(s).astype(xp.int32), 0, k - 2)
        return lo, lo + 1, s - lo.astype(dtype)

    def __call__(self, t):
        if not isinstance(t, np.ndarray | float | int):
            t = jnp.asarray(t, _float_dtype(self))
        lo, hi, w = self._position(t)
        return _weighted(self.values, lo, hi, w)

    def sample(self, n_steps: int, where: Where = "midpoint"):
        return self(self.times(n_steps, where))

    def smoothness(self, n_quad: int = 16) -> Array:
        """Exact: Σ_j ‖θ_{j+1} − θ_j‖² / (τ_{j+1} − τ_j) (``n_quad`` is not used)."""
        del n_quad
        dtype = _float_dtype(self)
        if self.n_knots == 1:
            return jnp.zeros((), dtype)
        h = jnp.asarray(np.diff(self.knot_times()), dtype)
        sq = sum(
            jnp.sum(jnp.reshape(a[1:] - a[:-1], (h.shape[0], -1)) ** 2, axis=1)
            for a in jax.tree.leaves(self.values)
            if eqx.is_inexact_array(a)
        )
        return jnp.sum(sq / h)


def basis_functions(basis: str, k: int, s):
    """The K basis functions at s ∈ [0, 1] (s = (t − t0)/(t1 − t0)), shape ``(K, *s.shape)``.

    Legendre P_k and Chebyshev T_k of x = 2s − 1 (three-term recurrences, smooth for
    forward-mode AD); Fourier: 1, sin 2πs, cos 2πs, sin 4πs, ….
    """
    x = 2 * s - 1
    one = jnp.ones_like(s)
    if basis == "fourier":
        out = [one]
        for j in range(1, k):
            m = (j + 1) // 2
            out.append(jnp.sin(2 * jnp.pi * m * s) if j % 2 else jnp.cos(2 * jnp.pi * m * s))
        return jnp.stack(out)
    out = [one, x][:k]
    for n in range(1, k - 1):
        if basis == "legendre":
            nxt = ((2 * n + 1) * x * out[n] - n * out[n - 1]) / (n + 1)
        else:
            nxt = 2 * x * out[n] - out[n - 1]
        out.append(nxt)
    return jnp.stack(out)


class BasisExpansion(ControlPath):
    """θ(t) = Σ_k c_k φ_k(t) per weight: K Legendre, Chebyshev or Fourier functions.

    ``coeffs`` is the stack (leading axis K) of the coefficients c_k (each a full set of
    controls). Smooth initialisation: c_0 = one draw of the controls, c_k = 0 for k ≥ 1.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import BasisExpansion
        >>> p = BasisExpansion(jnp.array([1.0, 2.0]), basis="legendre")  # 1 + 2(2t - 1)
        >>> [float(p(t)) for t in (0.0, 0.5, 1.0)]
        [-1.0, 1.0, 3.0]
    """

    coeffs: Any
    basis: Basis = eqx.field(static=True, default="legendre")
    t0: float = eqx.field(static=True, default=0.0)
    t1: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        _check_basis(self.basis)
        _interval("BasisExpansion", self.t0, self.t1)

    @property
    def interval(self) -> tuple[float, float]:
        return float(self.t0), float(self.t1)

    @property
    def n_basis(self) -> int:
        return _leading(self.coeffs)

    def __call__(self, t):
        dtype = _float_dtype(self)
        s = (jnp.asarray(t, dtype) - self.t0) / (self.t1 - self.t0)
        phi = basis_functions(self.basis, self.n_basis, s)  # (K, *t)

        def combine(c):
            return jnp.tensordot(jnp.moveaxis(phi, 0, -1), c, axes=1)

        return jax.tree.map(combine, self.coeffs)


def _check_basis(basis):
    if basis not in ("legendre", "chebyshev", "fourier"):
        raise ValueError(f"`basis` must be 'legendre', 'chebyshev' or 'fourier', got {basis!r}.")


def fourier_embedding(k: int, s):
    """The time embedding of :class:`TimeEmbeddingNet`: ``[sin πjs, cos πjs]_{j=1..K}``."""
    j = jnp.arange(1, k + 1, dtype=jnp.result_type(s))
    return jnp.concatenate([jnp.sin(jnp.pi * j * s), jnp.cos(jnp.pi * j * s)])


class TimeEmbeddingNet(ControlPath):
    """θ(t) = θ_base + unravel(W₂ tanh(W₁ e(s) + b₁)) with a Fourier time embedding e.

    ``e(s) = [sin(πjs), cos(πjs)]_{j=1..K}``, s = (t − t0)/(t1 − t0): K frequencies,
    a hidden layer of width H, and an output layer to every floating weight of θ (the
    hyper-network of Tong et al.). Smooth initialisation: W₂ = 0, a constant path
    θ(t) = θ_base whose first gradient step already moves W₂.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.continuous import TimeEmbeddingNet
        >>> p = TimeEmbeddingNet.init(jnp.zeros(3), n_freq=2, hidden=4, key=jax.random.key(0))
        >>> p(0.3).tolist()  # W₂ = 0 at initialisation: θ(t) = θ_base
        [0.0, 0.0, 0.0]
    """

    base: Any
    w1: Array
    b1: Array
    w2: Array
    t0: float = eqx.field(static=True, default=0.0)
    t1: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        _interval("TimeEmbeddingNet", self.t0, self.t1)
        if self.w1.shape[0] % 2 or self.w1.shape[0] < 2:
            raise ValueError(
                f"TimeEmbeddingNet: `w1` must have 2K rows (K >= 1 frequencies), got "
                f"{self.w1.shape}."
            )

    @classmethod
    def init(
        cls,
        base,
        *,
        n_freq: int = 4,
        hidden: int = 16,
        t0: float = 0.0,
        t1: float = 1.0,
        smooth: bool = True,
        key: PRNGKeyArray,
    ) -> TimeEmbeddingNet:
        """A network for controls shaped like ``base`` (``smooth``: W₂ = 0, else random)."""
        owner = "TimeEmbeddingNet.init"
        check_number("n_freq", n_freq, owner, lower=0, integer=True, example="4")
        check_number("hidden", hidden, owner, lower=0, integer=True, example="16")
        check_flag("smooth", smooth, owner)
        check_key("key", key, owner)
        k = _check_k("TimeEmbeddingNet(n_freq)", n_freq)
        h = _check_k("TimeEmbeddingNet(hidden)", hidden)
        dtype = _float_dtype(base)
        flat, _ = ravel_pytree(eqx.filter(base, eqx.is_inexact_array))
        k1, k2 = jax.random.split(key)
        w1 = jax.random.normal(k1, (2 * k, h), dtype) / np.sqrt(2 * k)
        if smooth:
            w2 = jnp.zeros((h, flat.shape[0]), dtype)
        else:
            w2 = jax.random.normal(k2, (h, flat.shape[0]), dtype) * (
                jnp.std(flat) / np.sqrt(h)
            ).astype(dtype)
        return cls(base, w1, jnp.zeros((h,), dtype), w2, t0, t1)

    @property
    def interval(self) -> tuple[float, float]:
        return float(self.t0), float(self.t1)

    @property
    def n_freq(self) -> int:
        return self.w1.shape[0] // 2

    def __call__(self, t):
        dtype = self.w1.dtype
        s = (jnp.asarray(t, dtype) - self.t0) / (self.t1 - self.t0)
        hid = jnp.tanh(fourier_embedding(self.n_freq, s) @ self.w1 + self.b1)
        params, static = eqx.partition(self.base, eqx.is_inexact_array)
        flat, unravel = ravel_pytree(params)
        return eqx.combine(unravel(flat + hid @ self.w2), static)


def init_path(
    kind: str,
    draw: Callable[[PRNGKeyArray], Any],
    k: int,
    *,
    key: PRNGKeyArray,
    t0: float = 0.0,
    t1: float = 1.0,
    smooth: bool = True,
    hidden: int = 16,
) -> ControlPath:
    """A control path of parameterization ``kind`` with K pieces/knots/functions/frequencies.

    Args:
        kind: one of :data:`PATH_KINDS`: ``"per_layer"`` (:class:`PiecewiseConstant`, K
            layers of length (t1 − t0)/K), ``"linear"`` (:class:`PiecewiseLinear`, K
            uniform knots), ``"legendre"``/``"chebyshev"``/``"fourier"``
            (:class:`BasisExpansion`, K functions), ``"embedding"``
            (:class:`TimeEmbeddingNet`, K frequencies, ``hidden`` units).
        draw: ``draw(key)`` returns one set of controls (e.g.
            ``lambda k: LayerControls.random(d, key=k)``).
        k: K ≥ 1.
        t0, t1: the time interval.
        smooth: initialise a path constant in t (every layer/knot the same draw; higher
            basis coefficients and the network's output layer zero). ``False``: independent
            draws per layer/knot (today's per-layer initialisation), random coefficients
            decaying as 1/(k+1), a random output layer.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.continuous import init_path
        >>> draw = lambda key: jax.random.normal(key, (3,))
        >>> p = init_path("legendre", draw, 4, key=jax.random.key(0))
        >>> p.sample(8).shape, float(p.smoothness())  # smooth init: constant in t
        ((8, 3), 0.0)
    """
    if kind not in PATH_KINDS:
        raise ValueError(f"`path` must be one of {PATH_KINDS}, got {kind!r}.")
    k = _check_k(f"init_path({kind!r})", k)
    _interval("init_path", t0, t1)
    keys = jax.random.split(key, k + 1)
    first = draw(keys[0])
    if smooth:
        draws = [first] * k
    else:
        draws = [first] + [draw(kk) for kk in keys[1:k]]
    if kind == "per_layer":
        return PiecewiseConstant(stack_leading(draws), tau=(t1 - t0) / k, t_start=t0)
    if kind == "linear":
        return PiecewiseLinear(stack_leading(draws), None, t0, t1)
    if kind == "embedding":
        return TimeEmbeddingNet.init(
            first, n_freq=k, hidden=hidden, t0=t0, t1=t1, smooth=smooth, key=keys[-1]
        )
    if smooth:
        coeffs = [first] + [jax.tree.map(jnp.zeros_like, first)] * (k - 1)
    else:
        coeffs = [jax.tree.map(lambda a, j=j: a / (j + 1), dr) for j, dr in enumerate(draws)]
    return BasisExpansion(stack_leading(coeffs), kind, t0, t1)

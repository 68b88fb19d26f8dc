"""Schemes by name (:func:`make_scheme`), their declared orders and stage controls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._base import AbstractScheme
from ._imex import IMEXScheme
from ._lie import LieScheme, RelaxedLieScheme
from ._prenorm import PreNormScheme
from ._runge_kutta import RungeKuttaScheme
from ._strang import StrangScheme

__all__ = ["SCHEME_NAMES", "declared_order", "make_scheme", "stage_controls"]

#: Names accepted by :func:`make_scheme` (and the training tasks' ``scheme`` option).
SCHEME_NAMES = (
    "lie",
    "prenorm",
    "relaxed",
    "macaron",
    "macaron_untied",
    "strang",
    "macaron_post",
    "strang_post",
    "heun",
    "midpoint",
    "rk4",
    "ode_rk2",
    "imex",
    "imex_dissipative",
)


def make_scheme(name: str, **options: Any) -> AbstractScheme:
    """A scheme by name (:data:`SCHEME_NAMES`), with its keyword options.

    ``lie``: the paper's post-LN layer; ``prenorm``: pre-LN (Lie splitting, Euler
    sub-flows); ``relaxed``: :class:`~transflow.continuous.RelaxedLieScheme`;
    ``macaron``/``macaron_post``: :class:`StrangScheme` with Euler sub-flows (Macaron-Net;
    pre-/post-norm; the two half-steps share one FFN); ``macaron_untied``: the same
    pre-norm layer with two FFNs, as Macaron-Net trains it (``StrangScheme(untied=True)``,
    controls with ``ffn_copies=2``); ``strang``/``strang_post``: with Heun sub-flows (order 2
    in pre-norm form, 1 in post-norm form);
    ``heun``/``midpoint``/``rk4``: :class:`RungeKuttaScheme` on f = a + g; ``ode_rk2``: the
    ODE Transformer's RK2 block (Heun on the pre-LN block's increment); ``imex``:
    :class:`IMEXScheme`; ``imex_dissipative``: with W_eff = W − Wᵀ − W Wᵀ implicit
    (``IMEXScheme(parameterization="dissipative")``, Re λ(W_eff) ≤ 0).

    Example:
        >>> from transflow import make_scheme
        >>> make_scheme("rk4").order, make_scheme("macaron").order
        (4, 1)
        >>> make_scheme("rk5")
        Traceback (most recent call last):
        ...
        ValueError: `scheme` must be one of ('lie', 'prenorm', ...), got 'rk5'. ...
    """
    table: dict[str, Callable[..., AbstractScheme]] = {
        "lie": LieScheme,
        "prenorm": PreNormScheme,
        "relaxed": RelaxedLieScheme,
        "macaron": lambda **o: StrangScheme(substep="euler", **o),
        "macaron_untied": lambda **o: StrangScheme(substep="euler", untied=True, **o),
        "strang": lambda **o: StrangScheme(substep="heun", **o),
        "macaron_post": lambda **o: StrangScheme(form="postnorm", substep="euler", **o),
        "strang_post": lambda **o: StrangScheme(form="postnorm", substep="heun", **o),
        "heun": lambda **o: RungeKuttaScheme("heun", **o),
        "midpoint": lambda **o: RungeKuttaScheme("midpoint", **o),
        "rk4": lambda **o: RungeKuttaScheme("rk4", **o),
        "ode_rk2": lambda **o: RungeKuttaScheme("heun", field="layer", **o),
        "imex": IMEXScheme,
        "imex_dissipative": lambda **o: IMEXScheme(parameterization="dissipative", **o),
    }
    if name not in table:
        shown = f"('{SCHEME_NAMES[0]}', '{SCHEME_NAMES[1]}', ...)"
        raise ValueError(
            f"`scheme` must be one of {shown}, got {name!r}. All names: {', '.join(SCHEME_NAMES)}."
        )
    try:
        return table[name](**options)
    except TypeError as e:
        raise TypeError(f"scheme {name!r}: an option it does not take ({e}).") from None


def declared_order(scheme: AbstractScheme) -> int | None:
    """The order of convergence a scheme declares in Δt; ``None`` for the paper's exact
    post-LN :class:`~transflow.LieScheme` (not consistent with an ODE)."""
    order = getattr(scheme, "order", None)
    if order is not None:
        return int(order)
    if isinstance(scheme, PreNormScheme | RelaxedLieScheme):
        return 1
    return None


def stage_controls(path, scheme: AbstractScheme, n_steps: int):
    """The controls of ``n_steps`` uniform steps of ``path`` for ``scheme``.

    A scheme with one node (every scheme but the Runge–Kutta ones) gets θ at the step
    midpoints, ``path.sample(n_steps)``; a Runge–Kutta scheme gets θ at every node
    ``t_n + c Δt`` stacked as ``(n_steps, len(nodes), ...)``. Run them with
    ``evolve(u0, stage_controls(path, s, n), s, dt=path.step_size(n))``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, RungeKuttaScheme, stage_controls
        >>> from transflow.continuous import init_path
        >>> path = init_path("legendre", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> stage_controls(path, RungeKuttaScheme("rk4"), 8).attn.wq.shape
        (8, 3, 4, 4)
    """
    nodes = getattr(scheme, "nodes", (0.5,))
    if tuple(nodes) == (0.5,):
        return path.sample(n_steps)
    t0, _ = path.interval
    h = path.step_size(n_steps)
    ts = t0 + (np.arange(n_steps)[:, None] + np.asarray(nodes)[None, :]) * h
    leaf = next(x for x in jax.tree.leaves(path) if eqx.is_inexact_array(x))
    tt = jnp.asarray(ts, leaf.dtype)
    return jax.vmap(jax.vmap(path.__call__))(tt)

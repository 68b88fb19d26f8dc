"""Sensitivity of a model's flow to its initial state: the finite-time Lyapunov exponent."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._controls import num_steps
from .._errors import check_number
from .._evolve import evolve
from ..schemes import perturbation_growth
from ._flow import as_flow

__all__ = ["lyapunov_exponent"]


def lyapunov_exponent(model, inputs, *, key, n_iter: int = 12) -> float:
    """The finite-time Lyapunov exponent of ``model``'s flow, averaged over ``inputs``:
    the mean over x of log σ_max(∂u_T/∂u_0) / T (the sensitivity measure of Tong et al.).

    Each input is read as a :class:`Flow` (:func:`as_flow`: u_0 = f(x), the controls, the
    scheme, Δt, the grid); σ_max is :func:`transflow.perturbation_growth` of the flow's
    ``evolve`` (``n_iter`` power iterations; one key per input, split from ``key``) and
    T = N_t Δt. Any model :func:`as_flow` supports.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import lyapunov_exponent
        >>> th = stack_controls([LayerControls.random(4, key=jax.random.key(i)) for i in range(2)])
        >>> xs = jax.random.normal(jax.random.key(9), (2, 3, 4))
        >>> bool(jnp.isfinite(lyapunov_exponent(SplitTransformer(th, dt=0.5), xs,
        ...                                     key=jax.random.key(0))))
        True
    """
    check_number("n_iter", n_iter, "lyapunov_exponent", lower=0, integer=True, example="12")
    if len(inputs) < 1:
        raise ValueError("lyapunov_exponent: `inputs` must hold at least one input, got none.")
    flows = [as_flow(model, x) for x in inputs]
    first = flows[0]
    horizon = float(first.dt) * num_steps(first.controls)

    @eqx.filter_jit
    def growth(controls, u0, k):
        def flow(v):
            return evolve(
                v, controls, first.scheme, dt=first.dt, grid=first.grid, causal=first.causal
            )

        return perturbation_growth(flow, u0, key=k, n_iter=n_iter)

    keys = jax.random.split(key, len(flows))
    out = [float(jnp.log(growth(f.controls, f.u0, k))) for f, k in zip(flows, keys)]
    return float(np.mean(out)) / horizon

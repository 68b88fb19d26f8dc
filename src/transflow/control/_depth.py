"""Trained models at any depth: evaluation with any N_t or adaptively, random-depth training.

- :func:`at_depth`: a :class:`FlowModel` evaluated with N uniform steps. A path model
  samples its θ(t) at the N step midpoints; a per-layer model is read as the
  piecewise-constant path of its layers (:class:`~transflow.continuous.PiecewiseConstant`,
  i.e. ``analysis.refine`` for N = k·N_t).
- :func:`adaptive_logits`: the continuous limit of a path model (consistent schemes only)
  solved with diffrax's Tsit5/Dopri5 and a PID controller, with the evaluation count.
- :func:`depth_accuracy`: test accuracy at several depths and adaptively.
- :func:`depth_loss`: a training loss that draws the number of steps per batch from a
  set of depths (one jitted program: ``lax.switch`` over the depths), plus an optional
  smoothness penalty λ ∫‖θ'(t)‖² dt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..continuous._controls import PiecewiseConstant
from ..continuous._depth import solve_adaptive
from ._model import FlowModel
from ._train import cross_entropy_loss

__all__ = ["at_depth", "adaptive_logits", "depth_accuracy", "depth_loss"]


def _check_model(model) -> FlowModel:
    if not isinstance(model, FlowModel):
        raise TypeError(f"`model` must be a transflow.control.FlowModel, got {type(model)}.")
    return model


def at_depth(model: FlowModel, n_steps: int) -> FlowModel:
    """``model`` evaluated with ``n_steps`` uniform steps over the same time interval.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import at_depth, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, key=jax.random.key(0))  # per-layer
        >>> deep = at_depth(m, 8)
        >>> type(deep.controls).__name__, deep.layer_controls()[1]
        ('PiecewiseConstant', 0.25)
    """
    model = _check_model(model)
    if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or n_steps < 1:
        raise ValueError(f"`n_steps` must be an integer >= 1, got {n_steps!r}.")
    if model.is_path:
        return dataclasses.replace(model, n_steps=int(n_steps))
    path = PiecewiseConstant(model.controls, tau=float(model.dt))
    return dataclasses.replace(model, controls=path, n_steps=int(n_steps))


def _path_of(model: FlowModel):
    return model.controls if model.is_path else PiecewiseConstant(model.controls, tau=model.dt)


def adaptive_logits(
    model: FlowModel,
    x,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    solver: str = "tsit5",
    adjoint: Any = "recursive",
    max_steps: int = 4096,
):
    """``(logits, nfev)`` of one example with the continuous limit solved adaptively.

    The model's scheme must be consistent (:class:`~transflow.PreNormScheme` or
    :class:`~transflow.continuous.RelaxedLieScheme`); see
    :func:`transflow.continuous.solve_adaptive` for the options.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import PreNormScheme
        >>> from transflow.control import adaptive_logits, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, path="linear", scheme=PreNormScheme(),
        ...              key=jax.random.key(0))
        >>> logits, nfev = adaptive_logits(m, jnp.zeros((8, 8)), rtol=1e-4, atol=1e-4)
        >>> logits.shape, int(nfev) >= 7
        ((10,), True)
    """
    model = _check_model(model)
    u0 = model.embed(jnp.asarray(x, model.head_w.dtype))
    res = solve_adaptive(
        u0,
        _path_of(model),
        model.scheme,
        grid=model.embed.grid(),
        solver=solver,
        rtol=rtol,
        atol=atol,
        adjoint=adjoint,
        max_steps=max_steps,
    )
    return model.readout(res.u), res.nfev


@eqx.filter_jit
def _adaptive_batch(model, x, rtol, atol, solver):
    return jax.vmap(lambda xx: adaptive_logits(model, xx, rtol=rtol, atol=atol, solver=solver))(x)


@eqx.filter_jit
def _logits_batch(model, x):
    return jax.vmap(model)(x)


def depth_accuracy(
    model: FlowModel,
    x,
    y,
    depths: Sequence[int] = (4, 8, 16, 32, 64),
    *,
    rtol: float | None = 1e-5,
    atol: float | None = None,
    solver: str = "tsit5",
    batch_size: int = 128,
) -> dict[str, Any]:
    """Test accuracy of ``model`` at every depth N in ``depths`` and adaptively.

    Returns ``{"depths", "accuracy", "outputs"}`` (the logits per depth, NumPy) and, when
    ``rtol`` is set (consistent schemes only), ``adaptive_accuracy``,
    ``adaptive_nfev_mean``/``max`` and ``adaptive_outputs``; ``atol`` defaults to ``rtol``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import depth_accuracy, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, key=jax.random.key(0))
        >>> r = depth_accuracy(m, jnp.zeros((3, 8, 8)), jnp.zeros(3, jnp.int32), (2, 4),
        ...                    rtol=None)
        >>> r["depths"], len(r["accuracy"])
        ([2, 4], 2)
    """
    model = _check_model(model)
    y = np.asarray(y)

    def batched(fn):
        outs = [fn(jnp.asarray(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
        return jax.tree.map(lambda *a: np.concatenate([np.asarray(b) for b in a]), *outs)

    out: dict[str, Any] = {"depths": [int(n) for n in depths], "accuracy": [], "outputs": []}
    for n in depths:
        m = at_depth(model, int(n))
        logits = batched(lambda xb, m=m: _logits_batch(m, xb))
        out["accuracy"].append(float(np.mean(np.argmax(logits, -1) == y)))
        out["outputs"].append(logits)
    if rtol is not None:
        atol = rtol if atol is None else atol
        logits, nfev = batched(lambda xb: _adaptive_batch(model, xb, rtol, atol, solver))
        out["adaptive_accuracy"] = float(np.mean(np.argmax(logits, -1) == y))
        out["adaptive_nfev_mean"] = float(np.mean(nfev))
        out["adaptive_nfev_max"] = int(np.max(nfev))
        out["adaptive_outputs"] = logits
    return out


def depth_loss(depths: Sequence[int], *, smoothness: float = 0.0, loss_fn=cross_entropy_loss):
    """A loss ``(model, x, y, key) -> (loss, accuracy)`` at a random depth per batch.

    Each call draws N uniformly from ``depths`` with ``key`` and evaluates
    ``loss_fn(at_depth(model, N), x, y)`` (every depth is compiled once, as a branch of
    ``lax.switch``); ``smoothness`` = λ adds λ ∫‖θ'(t)‖² dt of the model's control path.
    One depth (``depths=[4]``) is plain training at that depth.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import depth_loss, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, path="legendre", key=jax.random.key(0))
        >>> loss, acc = depth_loss([2, 4], smoothness=0.1)(
        ...     m, jnp.zeros((2, 8, 8)), jnp.zeros(2, jnp.int32), jax.random.key(1))
        >>> loss.shape
        ()
    """
    depths = [int(n) for n in depths]
    if not depths or min(depths) < 1:
        raise ValueError(f"`depths` must be a non-empty list of integers >= 1, got {depths}.")
    if not smoothness >= 0:
        raise ValueError(f"`smoothness` (λ) must be >= 0, got {smoothness!r}.")

    def loss(model, x, y, key=None):
        params, static = eqx.partition(model, eqx.is_array)

        def branch(n):
            def run(p):
                return loss_fn(at_depth(eqx.combine(p, static), n), x, y)

            return run

        if len(depths) == 1 or key is None:
            value, acc = branch(depths[0])(params)
        else:
            i = jax.random.randint(key, (), 0, len(depths))
            value, acc = jax.lax.switch(i, [branch(n) for n in depths], params)
        if smoothness and model.is_path:
            value = value + smoothness * model.controls.smoothness()
        return value, acc

    return loss

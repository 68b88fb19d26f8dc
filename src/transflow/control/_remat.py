"""Reverse mode through the split scheme with nested (√N) rematerialisation.

Backpropagation through N_t steps of a splitting scheme is the discrete adjoint of the
scheme (spec §5). Storing every sub-step state costs O(N_t) activations; ``evolve(...,
remat=True)`` (``jax.checkpoint`` per step) still stores one state per step, i.e. O(N_t)
with a smaller constant. :func:`evolve_checkpointed` groups the steps into chunks of k and
checkpoints at two levels: the forward pass stores only the N_t/k chunk-boundary states,
and the backward pass of one chunk recomputes and stores its k step states. With
k ≈ √N_t the stored states number ≈ 2√N_t, so memory grows like √N_t at the price of
about one extra forward pass.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
from jaxtyping import Array, Float

from .._controls import LayerControls, NormParams, num_steps
from .._errors import as_input, check_finite, param_dtype
from .._grid import Grid
from .._operators import project_s1
from .._splitting import AbstractScheme, LieScheme, evolve

__all__ = ["evolve_checkpointed", "RematMode"]

RematMode = Literal["none", "step", "nested"]


def _chunk_size(n: int, chunk: int | None) -> int:
    if chunk is None:
        return max(1, math.isqrt(n - 1) + 1 if n > 1 else 1)
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"`chunk` must be a positive int or None (√N_t), got {chunk!r}.")
    return min(chunk, n)


def evolve_checkpointed(
    u0: Float[Array, "n d"],
    controls: LayerControls,
    scheme: AbstractScheme | None = None,
    *,
    dt: float | Array = 1.0,
    grid: Grid | None = None,
    causal: bool = False,
    final_norm: NormParams | None = None,
    chunk: int | None = None,
) -> Float[Array, "n d"]:
    """:func:`transflow.evolve` with two-level (√N_t) checkpointing for reverse mode.

    The forward value is identical to ``evolve(u0, controls, scheme, ...)`` (same
    operations in the same order). Only the memory of the backward pass changes: the
    N_t steps are split into ⌊N_t/k⌋ chunks of k steps plus a remainder; an outer
    ``lax.scan`` over chunks is checkpointed (it keeps only chunk-boundary states), and
    inside a chunk each step is checkpointed again. Peak stored states ≈ N_t/k + k,
    minimal (≈ 2√N_t) at the default ``k = ⌈√N_t⌉``.

    Args:
        u0: initial condition, shape ``(n_tokens, d)``.
        controls: stacked :class:`~transflow.LayerControls` (leading time axis N_t).
        scheme: splitting scheme (default :class:`~transflow.LieScheme`).
        dt, grid, causal, final_norm: as in :func:`transflow.evolve`.
        chunk: steps per chunk k; ``None`` for ⌈√N_t⌉.

    Returns:
        u at T = N_t Δt, shape ``(n_tokens, d)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, stack_controls, evolve
        >>> from transflow.control import evolve_checkpointed
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(9)])
        >>> u0 = jnp.ones((4, 8)) * jnp.arange(8.0)
        >>> bool(jnp.array_equal(evolve_checkpointed(u0, theta), evolve(u0, theta)))
        True
    """
    shape = (None if grid is None else grid.n_tokens, controls.d_model)
    u0 = as_input("u0", u0, param_dtype(controls), ndim=2, shape=shape)
    n = num_steps(controls)
    scheme = LieScheme() if scheme is None else scheme
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    u0 = check_finite("u0", u0)
    k = _chunk_size(n, chunk)
    n_chunks, rem = divmod(n, k)

    @jax.checkpoint
    def step(u, theta):
        return scheme.step(u, theta, dt, grid=grid, causal=causal), None

    @jax.checkpoint
    def run_chunk(u, thetas):
        u, _ = jax.lax.scan(step, u, thetas)
        return u, None

    head = jax.tree.map(lambda x: x[: n_chunks * k].reshape(n_chunks, k, *x.shape[1:]), controls)
    u, _ = jax.lax.scan(run_chunk, u0, head)
    if rem:
        tail = jax.tree.map(lambda x: x[n_chunks * k :], controls)
        u, _ = jax.lax.scan(step, u, tail)
    if final_norm is not None:
        u = project_s1(
            u,
            final_norm.bias,
            final_norm.gain,
            eps=final_norm.eps,
            y_weights=None if grid is None else grid.y_weights,
        )
    return u


def evolve_remat(u0, controls, scheme=None, *, remat: RematMode = "nested", **kwargs):
    """Dispatch on the rematerialisation mode: ``"none"``, ``"step"`` or ``"nested"``."""
    if remat == "nested":
        return evolve_checkpointed(u0, controls, scheme, **kwargs)
    if remat in ("none", "step"):
        return evolve(u0, controls, scheme, remat=remat == "step", **kwargs)
    raise ValueError(f"`remat` must be 'none', 'step' or 'nested', got {remat!r}.")

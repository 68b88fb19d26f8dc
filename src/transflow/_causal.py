"""Causal (decoder) variants: the restricted token integral of spec §4.4.

Causal attention restricts the token integral to x̃ ≤ x in both the numerator and the
denominator of γ,

    (𝒜u)(x, y) = ∫_{x̃ ≤ x} γ(x, x̃; u) V(x̃, y; u) dx̃,   ∫_{x̃ ≤ x} γ(x, x̃; u) dx̃ = 1,

so the state at token x after any number of steps depends only on the initial condition
at tokens x̃ ≤ x (prefix dependence). Every scheme takes ``causal=True``; a
:class:`CausalScheme` wraps a scheme so that a model (e.g. a GPT-2 block loaded with
:func:`transflow.interop.from_hf`) is causal whatever its caller passes.
"""

from __future__ import annotations

from ._splitting import AbstractScheme

__all__ = ["CausalScheme"]


class CausalScheme(AbstractScheme):
    """A scheme whose attention is always causal (x̃ ≤ x), spec §4.4.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme, SplitTransformer
        >>> from transflow import stack_controls
        >>> from transflow.interop import CausalScheme
        >>> theta = stack_controls([LayerControls.random(8, n_heads=2, key=jax.random.key(0))])
        >>> model = SplitTransformer(theta, CausalScheme(PreNormScheme()))
        >>> u = jax.random.normal(jax.random.key(1), (5, 8))
        >>> bool(jnp.allclose(model(u)[:3], model(u.at[3:].set(0.0))[:3]))
        True
    """

    inner: AbstractScheme

    def __check_init__(self):
        if not isinstance(self.inner, AbstractScheme):
            raise TypeError(
                f"CausalScheme: `inner` must be an AbstractScheme, got {type(self.inner).__name__}."
            )

    def substep_names(self, controls) -> tuple[str, ...]:
        return self.inner.substep_names(controls)

    def step(self, u, controls, dt=1.0, *, grid=None, causal=True, return_substeps=False):
        return self.inner.step(
            u, controls, dt, grid=grid, causal=True, return_substeps=return_substeps
        )

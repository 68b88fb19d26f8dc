"""The causal wrapper: a scheme whose attention is always causal (docs/spec/continuous-model.md
§4.4).

Causal attention restricts the token integral to x̃ ≤ x in both the numerator and the
denominator of γ, so the state at token x after any number of steps depends only on the
initial condition at tokens x̃ ≤ x (prefix dependence). Every scheme takes
``causal=True``; a :class:`CausalScheme` wraps a scheme so that a model (e.g. a GPT-2
block loaded with :func:`transflow.interop.from_hf`) is causal whatever its caller passes.
"""

from __future__ import annotations

from typing import ClassVar

from ._base import (
    AbstractCausal,
    AbstractMaskable,
    AbstractODEScheme,
    AbstractPostNorm,
    AbstractScheme,
    AbstractShardable,
    AbstractWrapper,
    require,
    step_derivative,
)

__all__ = ["CausalScheme"]


class CausalScheme(AbstractWrapper, AbstractCausal):
    """A scheme whose attention is always causal (x̃ ≤ x), docs/spec/continuous-model.md §4.4.

    It runs ``inner``'s own :meth:`~AbstractScheme.advance` with causal operators, and has
    ``inner``'s capabilities :class:`AbstractODEScheme` (its ``order`` and a causal
    vector field), :class:`AbstractShardable`, :class:`AbstractMaskable` and
    :class:`AbstractPostNorm` (``forwards``), and :class:`AbstractCausal`.

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
    forwards: ClassVar[tuple[type, ...]] = (
        AbstractODEScheme,
        AbstractShardable,
        AbstractMaskable,
        AbstractPostNorm,
    )

    def __check_init__(self):
        if not isinstance(self.inner, AbstractScheme):
            raise TypeError(
                f"CausalScheme: `inner` must be an AbstractScheme, got {type(self.inner).__name__}."
            )

    @property
    def nodes(self) -> tuple[float, ...]:
        return self.inner.nodes

    @property
    def order(self) -> int:
        """The inner scheme's order (:class:`AbstractODEScheme`)."""
        require(self, AbstractODEScheme, "CausalScheme.order")
        return self.inner.order

    def substep_names(self, controls) -> tuple[str, ...]:
        return self.inner.substep_names(controls)

    @property
    def ffn_copies(self) -> int:
        return self.inner.ffn_copies

    def advance(self, u, controls, dt, *, ops):
        # masks (in ``ops``) are combined with the causal one
        return self.inner.advance(u, controls, dt, ops=ops.with_causal())

    def vector_field(self, u, controls, *, grid=None):
        """The causal vector field (:meth:`AbstractODEScheme.vector_field` of this step)."""
        require(self, AbstractODEScheme, "vector_field")
        return step_derivative(self, u, controls, grid)

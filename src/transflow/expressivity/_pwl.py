"""The interface the linear-region counter needs from a piecewise-linear model.

A model of this module is a composition of *max-groups*: at decision layer ``l`` it
computes a table of competing affine quantities ``logits_l(x)`` of shape
``(G_l, K_l)`` (``G_l`` independent groups with ``K_l`` competitors each) and continues
with the winner of every group. The **activation pattern** at ``x`` is the winner index of
every group of every layer (the lowest index on ties, as :func:`jax.numpy.argmax`):

- a maxout unit ``max_j z_j`` is one group with ``K = rank`` competitors;
- a ReLU ``max(u, 0)`` is a group with competitors ``(0, u)``, so winner 1 ⇔ ``u > 0``;
- a hardmax attention head is one group per query token with the scores over the keys
  as competitors.

Given the pattern of layers ``< l`` the logits of layer ``l`` are affine in ``x`` (for the
constructions here, whose attention queries are constant), so every activation region is
a convex polyhedron, and the model restricted to one region is affine.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

__all__ = ["AbstractPiecewiseLinear"]


class AbstractPiecewiseLinear(eqx.Module):
    """A continuous piecewise-linear map ``R^d -> R^{d_out}`` built from max-groups.

    Subclasses implement :meth:`__call__` (one input ``x`` of shape ``(d,)``),
    :meth:`layer_logits` and :attr:`in_dim`. :meth:`pattern` is derived from them.
    """

    @property
    @abc.abstractmethod
    def in_dim(self) -> int:
        """Input dimension d."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        """Evaluate the map at one point."""

    @abc.abstractmethod
    def layer_logits(self, x: Float[Array, " d"]) -> tuple[Float[Array, "G K"], ...]:
        """The competing quantities of every decision layer along the forward pass at x."""

    def output_and_logits(
        self, x: Float[Array, " d"]
    ) -> tuple[Float[Array, " d_out"], tuple[Float[Array, "G K"], ...]]:
        """``(f(x), layer_logits(x))``; subclasses may share one forward pass."""
        return self(x), self.layer_logits(x)

    def pattern(self, x: Float[Array, " d"]) -> Int[Array, " P"]:
        """The activation pattern at ``x``: winner per group, all layers, concatenated."""
        return jnp.concatenate(
            [jnp.argmax(z, axis=-1).astype(jnp.int32).ravel() for z in self.layer_logits(x)]
        )

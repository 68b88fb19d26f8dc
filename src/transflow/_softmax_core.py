"""The dense softmax-attention core with a hand-written reverse-mode rule.

``softmax_attention(q, k, v, bias)`` computes, per head,

    o_i = Σ_j p_ij v_j,     p_ij = exp(s_ij + b_ij) / Σ_m exp(s_im + b_im),   s = q kᵀ,

where the additive ``bias`` carries the log token weights (weighted softmax), the causal
restriction and masks (−∞ = no support). The primal is the fused form of
:func:`transflow._operators._dense_heads` (``exp(s − max)`` contracted with the values
first, one division of the ``(H, n, d_v)`` result). Autodiff of that form stores the
unnormalised kernel and replays the division and the row sums; the rule below instead keeps
the normalised kernel ``p`` and the output ``o`` and forms the standard softmax backward

    dv = pᵀ do,   dp = do vᵀ,   ds = p ⊙ (dp − rowsum(do ⊙ o)),   dq = ds k,   dk = dsᵀ q,

four batched matmuls and one elementwise pass over the ``(H, n, m)`` kernel. It is the same
gradient in exact arithmetic; ``tests/test_softmax_core.py`` checks it against autodiff of
the textbook formula in float64 to 1e-12. ``d bias = ds`` summed over the broadcast axes,
so the gradient with respect to grid weights is kept.

A row with no support (every ``bias`` entry −∞) gets ``o = 0`` and zero gradients, a
defined and finite value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["softmax_attention"]


def _kernel(q, k, bias):
    s = jnp.einsum("...ic,...jc->...ij", q, k)
    if bias is not None:
        s = s + bias
    top = jnp.max(s, axis=-1, keepdims=True)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros_like(top))
    e = jnp.exp(s - top)
    denom = jnp.sum(e, axis=-1, keepdims=True)
    return e, jnp.where(denom > 0, denom, jnp.ones_like(denom))


@jax.custom_vjp
def softmax_attention(
    q: Float[Array, "*heads n c"],
    k: Float[Array, "*heads m c"],
    v: Float[Array, "*heads m cv"],
    bias: Float[Array, "*#heads #n #m"] | None = None,
) -> Float[Array, "*heads n cv"]:
    """``softmax(q kᵀ + bias) v`` over the last two axes (leading axes: heads).

    Example:
        >>> import jax.numpy as jnp
        >>> q = k = v = jnp.eye(2)[None]
        >>> softmax_attention(q, k, v).shape
        (1, 2, 2)
    """
    e, denom = _kernel(q, k, bias)
    return jnp.einsum("...ij,...jc->...ic", e, v) / denom


def _fwd(q, k, v, bias):
    e, denom = _kernel(q, k, bias)
    p = e / denom
    o = jnp.einsum("...ij,...jc->...ic", p, v)
    return o, (q, k, v, p, o, bias)


def _reduce_to(x, like):
    """Sum ``x`` over the axes along which ``like`` was broadcast."""
    if like is None:
        return None
    lead = x.ndim - like.ndim
    if lead:
        x = jnp.sum(x, axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(like.shape) if s == 1 and x.shape[i] != 1)
    if axes:
        x = jnp.sum(x, axis=axes, keepdims=True)
    return x.astype(like.dtype)


def _bwd(res, do):
    q, k, v, p, o, bias = res
    dv = jnp.einsum("...ij,...ic->...jc", p, do)
    dp = jnp.einsum("...ic,...jc->...ij", do, v)
    ds = p * (dp - jnp.sum(do * o, axis=-1, keepdims=True))
    dq = jnp.einsum("...ij,...jc->...ic", ds, k)
    dk = jnp.einsum("...ij,...ic->...jc", ds, q)
    return dq, dk, dv, _reduce_to(ds, bias)


softmax_attention.defvjp(_fwd, _bwd)

"""Explicitly partitioned operators for :func:`jax.shard_map` (the ``"ring"`` method).

Inside ``shard_map`` every device holds the block ``u[x ∈ X_p, y ∈ Y_q]`` of one sequence
(token block p of the token axis, feature block q of the feature axis). The operators of
the continuous model become:

- attention (:func:`ring_attention`): queries stay local; key/value blocks travel around
  the ring of token devices with :func:`jax.lax.ppermute`, and the softmax over x̃ is
  accumulated *online* (running maximum m, denominator ℓ, numerator a):

      m' = max(m, max_j s_ij),  ℓ' = e^{m−m'} ℓ + Σ_j w_j e^{s_ij−m'},
      a' = e^{m−m'} a + Σ_j w_j e^{s_ij−m'} V_j,      γV = a / ℓ  after P blocks.

  The feature axis splits the heads (column blocks of W_Q, W_K, W_V; row blocks of W_O):
  the input is all-gathered over features, the per-head outputs are reduce-scattered.
- the projection onto S1 (:func:`project_s1`): the per-token mean and variance over Ω_y
  are ``psum`` reductions over the feature shards.
- the FFN maps: each all-gathers its input over the features and computes its own
  column block of the output (the FFN width is split).

:class:`RingOperators` hands these to a scheme's own ``advance``
(:class:`~transflow.schemes.AbstractShardable`): the ring never re-codes a step. All
functions take the names of the manual mesh axes (``None`` = not split).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..schemes._base import AbstractOperators

__all__ = ["RingOperators", "ring_attention", "project_s1"]


def _gather_features(u, f_axis):
    return u if f_axis is None else jax.lax.all_gather(u, f_axis, axis=u.ndim - 1, tiled=True)


def _psum(x, axis):
    return x if axis is None else jax.lax.psum(x, axis)


def ring_attention(
    u,
    attn,
    *,
    n_heads_local: int,
    t_axis: str | None,
    f_axis: str | None,
    n_token_shards: int,
    head_scale,
    q_weights=None,
    x_weights=None,
    causal: bool = False,
    hardmax: bool = False,
    temperature: float = 1.0,
    key_padding_mask=None,
    attention_mask=None,
):
    """Attention of the local token block against all tokens (ring over ``t_axis``).

    Args:
        u: local state block ``(n_loc, d_loc)``.
        attn: :class:`~transflow.AttentionParams` holding this device's column blocks
            of ``wq, wk, wv`` (its heads), row block of ``wo`` and column block of ``bo``.
        n_heads_local: heads on this device (``n_heads / feature shards``).
        head_scale: per-head score scale ``(H_loc,)``; q_weights: per-head feature weights
            ``(H_loc, d_k)`` or ``None``; x_weights: local token weights ``(n_loc,)`` or None.
        key_padding_mask: local ``(n_loc,)`` bool (True = padded); it travels around the
            ring with its key/value block (zero weight, as :func:`transflow.attention`).
        attention_mask: the local query rows ``(1|H_loc, n_loc, n)`` over all keys (bool
            True = may attend, or additive float); round r reads the column block of the
            visiting keys. Rows without admissible keys give 0 (as the dense operator).

    Returns:
        The local block ``(n_loc, d_loc)`` of 𝒜u (no residual), as :func:`transflow.attention`.
    """
    n = u.shape[0]
    H = n_heads_local
    dk = attn.wq.shape[-1] // H
    dv = attn.wv.shape[-1] // H
    uf = _gather_features(u, f_axis)
    q = (uf @ attn.wq + attn.bq).reshape(n, H, dk)
    k = (uf @ attn.wk + attn.bk).reshape(n, H, dk)
    v = (uf @ attn.wv + attn.bv).reshape(n, H, dv)
    if q_weights is not None:
        q = q * q_weights[None]
    P_t = n_token_shards
    me = jax.lax.axis_index(t_axis) if t_axis is not None else 0
    q_idx = me * n + jnp.arange(n)
    logw = None if x_weights is None else jnp.log(x_weights).astype(u.dtype)

    neg = jnp.asarray(-jnp.inf, u.dtype)
    masked = key_padding_mask is not None or attention_mask is not None
    kpm_lw = None
    if key_padding_mask is not None:
        kpm_lw = jnp.where(key_padding_mask, neg, jnp.zeros((), u.dtype))
    bias_rows = None
    if attention_mask is not None:
        from .._masks import mask_bias

        bias_rows = mask_bias(attention_mask, u.dtype)
    m = jnp.full((H, n, 1), neg)
    ell = jnp.zeros((H, n, 1), u.dtype)
    acc = jnp.zeros((H, n, dv), u.dtype)
    opts = dict(causal=causal, hardmax=hardmax, temperature=temperature, masked=masked)
    for r in range(P_t):
        src = (me - r) % P_t
        visit = (q, k, v, head_scale, q_idx, src, x_weights, logw, kpm_lw, bias_rows)
        if causal and r > 0:
            # Every key of shard ``src > me`` lies after every local query: the round
            # would add nothing (running statistics unchanged), so it is skipped. The
            # block is still passed on below. Round 0 (the diagonal shard) always runs.
            m, ell, acc = jax.lax.cond(
                src > me,
                lambda state, _: state,
                lambda state, vis: _ring_round(state, vis, **opts),
                (m, ell, acc),
                visit,
            )
        else:
            m, ell, acc = _ring_round((m, ell, acc), visit, **opts)
        if r + 1 < P_t:
            perm = [(i, (i + 1) % P_t) for i in range(P_t)]
            k, v = jax.lax.ppermute((k, v), t_axis, perm)
            if logw is not None:
                x_weights, logw = jax.lax.ppermute((x_weights, logw), t_axis, perm)
            if kpm_lw is not None:
                kpm_lw = jax.lax.ppermute(kpm_lw, t_axis, perm)
    if masked:  # rows without admissible keys: the integral over ∅ is 0
        ell = jnp.where(ell == 0, jnp.ones_like(ell), ell)
    heads = jnp.transpose(acc / ell, (1, 0, 2)).reshape(n, H * dv)
    out = heads @ attn.wo
    if f_axis is not None:
        out = jax.lax.psum_scatter(out, f_axis, scatter_dimension=1, tiled=True)
    return out + attn.bo


def _ring_round(state, visit, *, causal, hardmax, temperature, masked):
    """One ring round: fold the visiting key/value shard ``src`` into (m, ℓ, a)."""
    m, ell, acc = state
    q, k, v, head_scale, q_idx, src, x_weights, logw, kpm_lw, bias_rows = visit
    n = q.shape[0]
    dtype = q.dtype
    neg = jnp.asarray(-jnp.inf, dtype)
    s = jnp.einsum("ihc,jhc->hij", q, k) * head_scale[:, None, None]
    allowed = None
    if causal:
        k_idx = src * n + jnp.arange(n)
        allowed = (k_idx[None, :] <= q_idx[:, None])[None]
    if masked:  # padding and the mask's column block of the visiting keys: one bias
        bias = jnp.zeros((1, 1, n), dtype) if kpm_lw is None else kpm_lw[None, None, :]
        if bias_rows is not None:
            bias = bias + jax.lax.dynamic_slice_in_dim(bias_rows, src * n, n, axis=2)
        fin = bias > neg
        allowed = fin if allowed is None else allowed & fin
    if hardmax:
        sm = s if allowed is None else jnp.where(allowed, s, neg)
        bm = jnp.max(sm, axis=-1, keepdims=True)
        m_new = jnp.maximum(m, bm)
        hit = sm == m_new
        if allowed is not None:
            hit = hit & allowed
        ind = hit.astype(dtype)
        if masked:
            ind = jnp.where(hit, jnp.exp(bias), 0.0)
        if logw is not None:
            ind = ind * x_weights
        keep = (m == m_new).astype(dtype)
        ell = ell * keep + jnp.sum(ind, axis=-1, keepdims=True)
        acc = acc * keep + jnp.einsum("hij,jhc->hic", ind, v)
    else:
        logits = temperature * s
        if logw is not None:
            logits = logits + logw
        if masked:
            logits = logits + bias
        if allowed is not None:
            logits = jnp.where(allowed, logits, neg)
        bm = jnp.max(logits, axis=-1, keepdims=True)
        m_new = jnp.maximum(m, bm)
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, jnp.zeros_like(m_new))
        p = jnp.exp(logits - m_safe)
        corr = jnp.exp(m - m_safe)
        ell = ell * corr + jnp.sum(p, axis=-1, keepdims=True)
        acc = acc * corr + jnp.einsum("hij,jhc->hic", p, v)
    return m_new, ell, acc


def project_s1(v, sigma1, sigma2, *, eps: float, y_weights, f_axis: str | None, d_total: int):
    """:func:`transflow.project_s1` on a feature block: mean/variance by ``psum`` over Ω_y."""
    if y_weights is None:
        alpha = _psum(jnp.sum(v, axis=-1, keepdims=True), f_axis) / d_total
        centred = v - alpha
        beta = _psum(jnp.sum(centred * centred, axis=-1, keepdims=True), f_axis) / d_total
    else:
        w = (y_weights / _psum(jnp.sum(y_weights), f_axis)).astype(v.dtype)
        alpha = _psum(jnp.sum(v * w, axis=-1, keepdims=True), f_axis)
        centred = v - alpha
        beta = _psum(jnp.sum(centred * centred * w, axis=-1, keepdims=True), f_axis)
    sigma1 = jnp.asarray(sigma1, v.dtype)
    sigma2 = jnp.asarray(sigma2, v.dtype)
    if eps > 0:
        return sigma2 * centred * jax.lax.rsqrt(beta + jnp.asarray(eps, v.dtype)) + sigma1
    tiny = (d_total * jnp.finfo(v.dtype).eps) ** 2
    msq = _psum(jnp.sum(v * v, axis=-1, keepdims=True), f_axis) / d_total
    degenerate = beta <= tiny * msq
    safe = jnp.where(degenerate, jnp.ones_like(beta), beta)
    out = sigma2 * centred * jax.lax.rsqrt(safe) + sigma1
    return jnp.where(degenerate, jnp.broadcast_to(sigma1, out.shape), out)


class RingOperators(AbstractOperators):
    """The sharded operators of one device's block inside ``shard_map``: the ring
    attention (:func:`ring_attention`), the projection onto S1 by ``psum`` over the
    feature shards (:func:`project_s1`) and the FFN maps on column blocks. A scheme that
    declares :class:`~transflow.schemes.AbstractShardable` runs its own ``advance`` in
    them. There is no ``grid``: its weights are the local ``x_weights``/``y_weights``
    (and ``q_weights``) the operators apply."""

    t_axis: str | None = eqx.field(static=True)
    f_axis: str | None = eqx.field(static=True)
    n_token_shards: int = eqx.field(static=True)
    n_heads_local: int = eqx.field(static=True)
    d_total: int = eqx.field(static=True)
    head_scale: Any
    q_weights: Any = None
    x_weights: Any = None
    y_weights: Any = None
    causal: bool = eqx.field(static=True, default=False)
    masks: dict = eqx.field(default_factory=dict)
    grid: None = eqx.field(static=True, default=None)

    def attention(self, scheme, v, attn):
        return ring_attention(
            v,
            attn,
            n_heads_local=self.n_heads_local,
            t_axis=self.t_axis,
            f_axis=self.f_axis,
            n_token_shards=self.n_token_shards,
            head_scale=self.head_scale,
            q_weights=self.q_weights,
            x_weights=self.x_weights,
            causal=self.causal,
            hardmax=scheme.hardmax,
            temperature=scheme.temperature,
            **self.masks,
        )

    def project(self, v, norm, eps_scale: float = 1.0):
        return project_s1(
            v,
            norm.bias,
            norm.gain,
            eps=norm.eps * eps_scale,
            y_weights=self.y_weights,
            f_axis=self.f_axis,
            d_total=self.d_total,
        )

    def linear(self, z, w, b):
        """``z W + b`` with ``W``'s column block: the input all-gathered over features."""
        return _gather_features(z, self.f_axis) @ w + b

"""Memory-efficient (chunked) attention: an online softmax over key blocks.

The attention kernel of the continuous model is a weighted softmax over the token grid,

    γ(x_i, x_j) = exp(λ s_ij) w_j / Σ_m exp(λ s_im) w_m,      (𝒜u)(x_i) = Σ_j γ_ij V_j,

with token quadrature weights ``w_j``. Evaluated densely it needs the ``(H, n, n)`` score
matrix: 4 GiB in float32 at n = 32 768 tokens and one head. Following Rabe & Staats
("Self-attention does not need O(n²) memory", 2021) and FlashAttention (Dao et al., 2022),
:func:`online_softmax_attention` visits the keys in blocks of ``key_block`` and keeps, per
query, a running maximum ``m``, a running normaliser ``ℓ`` and a running numerator
``a``:

    m' = max(m, max_j λs_ij + log w_j),   c = exp(m − m'),
    ℓ' = c ℓ + Σ_j exp(λs_ij + log w_j − m'),   a' = c a + Σ_j exp(λs_ij + log w_j − m') V_j,

and returns ``a / ℓ``. Queries are processed in blocks of ``query_block``, so the largest
temporary is ``(H, query_block, key_block)`` and the memory is linear in the number of
tokens. The result equals the dense operator up to round-off (≈1e-7 relative in float32,
≈1e-15 in float64).

The gradient is a ``jax.custom_vjp`` that stores only the output and the per-query
log-normaliser ``L = m + log ℓ`` and recomputes the probabilities block by block in the
backward pass (FlashAttention's backward, in FlashAttention-2's order: key blocks
outside, query blocks inside), so reverse-mode AD is memory-linear too.

Hardmax (λ → ∞, Yun et al. 2020) is the same recursion with the running maximum of the
scores and the indicator of the maximizers instead of the exponentials; ties are averaged
with the token weights, as in the dense operator.

The operator-level wrapper :func:`transflow.chunked_attention` (same arguments as
:func:`transflow.attention`) lives in ``transflow._operators``, which calls this module.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ._errors import as_input, check_array
from ._masks import check_attention_mask, check_key_padding_mask, key_log_weights, mask_bias

__all__ = ["online_softmax_attention"]


def _check_block(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive int, got {value!r}.")
    return value


def _pad_to(x, length: int, axis: int, fill=0.0):
    """Pad ``x`` along ``axis`` to ``length`` with ``fill`` (no copy when already there)."""
    pad = length - x.shape[axis]
    if not pad:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=fill)


def _padded_keys(k, v, lw, bk: int, masked: bool, hardmax: bool, uniform: bool):
    """Keys, values and log-weights padded to whole key blocks, shared by the forward and
    the backward: ``(kp, vp, lwp, fast, no_lw)``.

    The plain softmax path (``fast``: no masks, no hardmax) pads log w with −∞, so padded
    keys get weight exp(−∞) = 0 without a select and only causal blocks on the diagonal
    need one; ``no_lw``: log w ≡ 0 and no padded key, so it is not added at all.
    """
    n_k = k.shape[1]
    length = -(-n_k // bk) * bk
    fast = not (masked or hardmax)
    lwp = _pad_to(lw, length, axis=0, fill=-jnp.inf if fast else 0.0)
    no_lw = fast and uniform and n_k % bk == 0
    return _pad_to(k, length, axis=1), _pad_to(v, length, axis=1), lwp, fast, no_lw


def _mask(q0, k0, bq: int, bk: int, n_k: int, causal: bool):
    """Admissible (query, key) pairs of the block at (q0, k0): keys < n_k, causal ``j ≤ i``.

    Called once per executed block body, also where the body does not need it (XLA drops
    it there); the tests count the executed blocks through this call.
    """
    kidx = k0 + jnp.arange(bk)
    mask = (kidx < n_k)[None, :]
    if causal:
        qidx = q0 + jnp.arange(bq)
        mask = mask & (kidx[None, :] <= qidx[:, None])
    return jnp.broadcast_to(mask, (bq, bk))[None]  # (1, bq, bk): shared by the heads


def _bias_block(bias, q0, k0, bq: int, bk: int):
    """The ``(1|H, bq, bk)`` block of a (padded) additive mask at (q0, k0)."""
    return jax.lax.dynamic_slice(bias, (0, q0, k0), (bias.shape[0], bq, bk))


def _forward(q, k, v, lw, bias, causal, hardmax, bq, bk, masked=False, uniform=False):
    """Blockwise forward. Returns the output (H, n_q, dv) and two per-query statistics.

    ``masked`` (static): keys with ``log w = −∞`` (padding) or ``bias = −∞`` are not
    admissible, and rows with no admissible key return 0 (L = +∞ for the backward).
    ``bias`` is ``None`` or the padded additive mask ``(1|H, nqb·bq, nkb·bk)``.
    ``uniform`` (static): ``lw`` is all zeros (no token weights), so the plain softmax path
    skips adding it when no key padding is needed either. Blocks are read with dynamic
    slices of the (padded) inputs and the outputs written in place, so no blocked copy of
    q, k, v or of the output is made.
    """
    H, n_q, _ = q.shape
    n_k, dv = k.shape[1], v.shape[2]
    nqb, nkb = -(-n_q // bq), -(-n_k // bk)
    qp = _pad_to(q, nqb * bq, axis=1)
    kp, vp, lwp, fast, no_lw = _padded_keys(k, v, lw, bk, masked, hardmax, uniform)
    dtype = q.dtype
    neg_inf = jnp.asarray(-jnp.inf, dtype)

    def one_query_block(i, outs):
        q0 = i * bq
        qi = jax.lax.dynamic_slice_in_dim(qp, q0, bq, axis=1)

        def body(j, carry, structural=True):
            # ``structural=False``: a block known to be free of causal and padding masks
            # (the plain softmax path pads log w with −∞ instead), so no select is needed.
            m, ell, acc = carry
            k0 = j * bk
            kj = jax.lax.dynamic_slice_in_dim(kp, k0, bk, axis=1)
            vj = jax.lax.dynamic_slice_in_dim(vp, k0, bk, axis=1)
            lwj = jax.lax.dynamic_slice_in_dim(lwp, k0, bk, axis=0)
            s = jnp.einsum("hqc,hkc->hqk", qi, kj)
            mask = _mask(q0, k0, bq, bk, n_k, causal)
            if masked:
                lwj, mask = _masked_terms(lwj, mask, bias, q0, k0, bq, bk)
            if hardmax:
                sm = jnp.where(mask, s, neg_inf)
                m_new = jnp.maximum(m, jnp.max(sm, axis=-1))
                keep = (m == m_new).astype(dtype)
                p = jnp.where(mask & (sm == m_new[..., None]), jnp.exp(lwj), 0.0)
                ell = keep * ell + jnp.sum(p, axis=-1)
                acc = keep[..., None] * acc + jnp.einsum("hqk,hkc->hqc", p, vj)
                return m_new, ell, acc
            logits = s if no_lw else s + lwj
            if structural:
                logits = jnp.where(mask, logits, neg_inf)
            m_new = jnp.maximum(m, jnp.max(logits, axis=-1))
            m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
            corr = jnp.exp(m - m_safe)  # 0 while m = −∞
            p = jnp.exp(logits - m_safe[..., None])
            ell = corr * ell + jnp.sum(p, axis=-1)
            acc = corr[..., None] * acc + jnp.einsum("hqk,hkc->hqc", p, vj)
            return m_new, ell, acc

        init = (
            jnp.full((H, bq), -jnp.inf, dtype),
            jnp.zeros((H, bq), dtype),
            jnp.zeros((H, bq, dv), dtype),
        )
        # Causal: only the key blocks with k0 ≤ q0 + bq − 1 (a while loop, the blocks
        # above the diagonal are never computed; they would leave m, ℓ, a unchanged).
        n_active = nkb if not causal else jnp.minimum(nkb, (q0 + bq - 1) // bk + 1)
        if fast:  # unmasked key blocks first, then (causal) those crossing the diagonal
            n_full = nkb if not causal else jnp.minimum((q0 + 1) // bk, n_active)
            carry = jax.lax.fori_loop(0, n_full, partial(body, structural=False), init)
            if causal:
                carry = jax.lax.fori_loop(n_full, n_active, body, carry)
        else:
            carry = jax.lax.fori_loop(0, n_active, body, init)
        m, ell, acc = carry
        if masked:  # rows without admissible keys: the integral over ∅ is 0
            empty = ell == 0
            ell = jnp.where(empty, 1.0, ell)
            s1 = m if hardmax else jnp.where(empty, jnp.inf, m + jnp.log(ell))
        else:
            s1 = m if hardmax else m + jnp.log(ell)
        out, s1b, s2b = outs
        out = jax.lax.dynamic_update_slice_in_dim(out, acc / ell[..., None], q0, axis=1)
        s1b = jax.lax.dynamic_update_slice_in_dim(s1b, s1, q0, axis=1)
        s2b = jax.lax.dynamic_update_slice_in_dim(s2b, ell, q0, axis=1)
        return out, s1b, s2b

    init = (
        jnp.zeros((H, nqb * bq, dv), dtype),
        jnp.zeros((H, nqb * bq), dtype),
        jnp.zeros((H, nqb * bq), dtype),
    )
    out, s1, s2 = jax.lax.fori_loop(0, nqb, one_query_block, init)
    return out[:, :n_q], s1[:, :n_q], s2[:, :n_q]


def _masked_terms(lwj, mask, bias, q0, k0, bq, bk):
    """Fold padding (``log w = −∞``) and an additive mask block into (log-weights, mask)."""
    mask = mask & (lwj > -jnp.inf)[None, None, :]
    if bias is None:
        return lwj[None, None, :], mask
    bj = _bias_block(bias, q0, k0, bq, bk)
    return lwj[None, None, :] + bj, mask & (bj > -jnp.inf)


def _keymajor_block(kj, qi, lwj, bias, q0, k0, bq, bk, n_k, causal, masked):
    """The backward's view of block (q0, k0): key-major scores ``k qᵀ`` ``(H, bk, bq)``,
    the admissible pairs and the log-weights (plus the additive mask's block). The hardmax
    maxima and the backward's gradient pass both build their scores here, so they compare
    products computed the same way."""
    st = jnp.einsum("hkc,hqc->hkq", kj, qi)
    mask = jnp.swapaxes(_mask(q0, k0, bq, bk, n_k, causal), -1, -2)  # (1, bk, bq)
    lwt = lwj[None, :, None]
    if masked:
        mask = mask & (lwj > -jnp.inf)[None, :, None]
        if bias is not None:
            bt = jnp.swapaxes(_bias_block(bias, q0, k0, bq, bk), -1, -2)
            lwt = lwt + bt
            mask = mask & (bt > -jnp.inf)
    return st, mask, lwt


def _hardmax_stats_keymajor(qp, kp, lwp, bias, causal, bq, bk, n_q, n_k, masked):
    """The hardmax row maxima and Σ_argmax w, recomputed in the backward's own layout.

    The backward recognises a maximizer by ``s_ij == max_j s_ij``. The forward computes the
    scores query-major (``q kᵀ``) and the backward key-major (``k qᵀ``); XLA does not
    promise the two products round alike (at ``--xla_backend_optimization_level=0`` they
    differ in the last bit), and a maximizer that compares unequal silently loses its
    gradient. So the backward compares its scores with maxima taken over the same
    key-major products, not with the forward's: ``(max, Σ_argmax w)`` per query, padded
    query rows ``(+∞, 1)`` (no maximizer), rows without admissible keys ``Σ w = 1``.
    """
    H = qp.shape[0]
    nqb, nkb = qp.shape[1] // bq, kp.shape[1] // bk
    dtype = qp.dtype
    neg_inf = jnp.asarray(-jnp.inf, dtype)

    def key_block(j, carry):
        k0 = j * bk
        kj = jax.lax.dynamic_slice_in_dim(kp, k0, bk, axis=1)
        lwj = jax.lax.dynamic_slice_in_dim(lwp, k0, bk, axis=0)

        def query_block(i, carry):
            m, ell = carry
            q0 = i * bq
            qi = jax.lax.dynamic_slice_in_dim(qp, q0, bq, axis=1)
            st, mask, lwt = _keymajor_block(kj, qi, lwj, bias, q0, k0, bq, bk, n_k, causal, masked)
            smt = jnp.where(mask, st, neg_inf)
            mi = jax.lax.dynamic_slice_in_dim(m, q0, bq, axis=1)
            li = jax.lax.dynamic_slice_in_dim(ell, q0, bq, axis=1)
            m_new = jnp.maximum(mi, jnp.max(smt, axis=1))
            pt = jnp.where(mask & (smt == m_new[:, None, :]), jnp.exp(lwt), 0.0)
            li = jnp.where(mi == m_new, li, 0.0) + jnp.sum(pt, axis=1)
            m = jax.lax.dynamic_update_slice_in_dim(m, m_new, q0, axis=1)
            ell = jax.lax.dynamic_update_slice_in_dim(ell, li, q0, axis=1)
            return m, ell

        lo = jnp.minimum(k0 // bq, nqb) if causal else 0
        return jax.lax.fori_loop(lo, nqb, query_block, carry)

    init = (jnp.full((H, nqb * bq), -jnp.inf, dtype), jnp.zeros((H, nqb * bq), dtype))
    m, ell = jax.lax.fori_loop(0, nkb, key_block, init)
    padded = jnp.arange(nqb * bq) >= n_q
    m = jnp.where(padded[None, :], jnp.inf, m)
    ell = jnp.where(padded[None, :] | (ell == 0), 1.0, ell)
    return m, ell


@partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8, 9, 10))
def _attend(q, k, v, lw, bias, causal, hardmax, bq, bk, masked, uniform):
    return _forward(q, k, v, lw, bias, causal, hardmax, bq, bk, masked, uniform)[0]


def _attend_fwd(q, k, v, lw, bias, causal, hardmax, bq, bk, masked, uniform):
    out, s1, s2 = _forward(q, k, v, lw, bias, causal, hardmax, bq, bk, masked, uniform)
    return out, (q, k, v, lw, bias, out, s1, s2)


def _attend_bwd(causal, hardmax, bq, bk, masked, uniform, res, g):
    """FlashAttention-2's backward, one pass: key blocks outside, query blocks inside.

    A key block's ``dk``, ``dv`` and ``d log w`` are the (small) carry of the inner loop;
    ``dq`` is one full-size buffer updated in place, block by block. The block products
    are computed key-major (``s^T`` of shape ``(H, bk, bq)``), so the products that
    accumulate into the carry and ``dp^T`` are plain or right-transposed matmuls, and
    ``dq`` is accumulated transposed (``dq^T += k^T ds^T``), so none is left-transposed
    (XLA:CPU runs those as slow generic dots). Causal: a key block at ``k0`` visits only
    the query blocks with ``q0 + bq − 1 ≥ k0``; on the plain softmax path only those
    crossing the diagonal build a mask (padded keys have ``log w = −∞`` there).
    ``uniform``: ``lw`` is an internal constant 0 (no token weights): its gradient is not
    formed (a zero is returned) and, without padded keys, it is not added either.
    """
    q, k, v, lw, bias, out, s1, s2 = res
    H, n_q, dk = q.shape
    n_k, dv = k.shape[1], v.shape[2]
    nqb, nkb = -(-n_q // bq), -(-n_k // bk)
    # D_i = Σ_j p_ij dp_ij = ⟨do_i, o_i⟩ (the softmax Jacobian's rank-one part).
    delta = _pad_to(jnp.sum(g * out, axis=-1), nqb * bq, axis=1)
    qp = _pad_to(q, nqb * bq, axis=1)
    gp = _pad_to(g, nqb * bq, axis=1)
    # Padded query rows get L = +∞ (softmax) / an unreachable max (hardmax): p = 0 there.
    kp, vp, lwp, fast, no_lw = _padded_keys(k, v, lw, bk, masked, hardmax, uniform)
    if hardmax:  # the maximizers as the backward's own products see them (see there)
        s1p, s2p = _hardmax_stats_keymajor(qp, kp, lwp, bias, causal, bq, bk, n_q, n_k, masked)
    else:
        s1p = _pad_to(s1, nqb * bq, axis=1, fill=jnp.inf)
        s2p = _pad_to(s2, nqb * bq, axis=1, fill=1.0)
    dtype = q.dtype
    hb = None if bias is None else bias.shape[0]

    def key_block(j, carry):
        dqt, dkp, dvp, dlwp, dbias = carry
        k0 = j * bk
        kj = jax.lax.dynamic_slice_in_dim(kp, k0, bk, axis=1)
        ktj = jnp.swapaxes(kj, 1, 2)  # (H, dk, bk): dq^T += k^T ds^T is a plain matmul
        vj = jax.lax.dynamic_slice_in_dim(vp, k0, bk, axis=1)
        lwj = jax.lax.dynamic_slice_in_dim(lwp, k0, bk, axis=0)

        def query_block(i, inner, structural=True):
            dkj, dvj, dlwj, dqt, dbias = inner
            q0 = i * bq
            qi = jax.lax.dynamic_slice_in_dim(qp, q0, bq, axis=1)
            gi = jax.lax.dynamic_slice_in_dim(gp, q0, bq, axis=1)
            di = jax.lax.dynamic_slice_in_dim(delta, q0, bq, axis=1)
            s1i = jax.lax.dynamic_slice_in_dim(s1p, q0, bq, axis=1)
            st, mask, lwt = _keymajor_block(kj, qi, lwj, bias, q0, k0, bq, bk, n_k, causal, masked)
            if hardmax:  # p = w_j / Σ_argmax w on the maximizers (s1 = max, s2 = Σ w)
                s2i = jax.lax.dynamic_slice_in_dim(s2p, q0, bq, axis=1)
                ind = mask & (st == s1i[:, None, :])
                pt = jnp.where(ind, jnp.exp(lwt), 0.0) / s2i[:, None, :]
            else:  # p = exp(s + log w − L)
                pt = jnp.exp((st if no_lw else st + lwt) - s1i[:, None, :])
                if structural:
                    pt = jnp.where(mask, pt, 0.0)
            dvj = dvj + jnp.einsum("hkq,hqc->hkc", pt, gi)
            dpt = jnp.einsum("hkc,hqc->hkq", vj, gi)
            dst = pt * (dpt - di[:, None, :])
            if not uniform:
                dlwj = dlwj + jnp.sum(dst, axis=(0, 2))
            if bias is not None:  # d/d(bias) of the block = ds, summed over broadcast heads
                dbt = dst if hb == H else jnp.sum(dst, 0, keepdims=True)
                dbias = jax.lax.dynamic_update_slice(dbias, jnp.swapaxes(dbt, -1, -2), (0, q0, k0))
            if not hardmax:  # hardmax: the maximizers are locally constant in the scores
                dkj = dkj + jnp.einsum("hkq,hqc->hkc", dst, qi)
                dqti = jax.lax.dynamic_slice_in_dim(dqt, q0, bq, axis=2)
                dqti = dqti + jnp.einsum("hck,hkq->hcq", ktj, dst)
                dqt = jax.lax.dynamic_update_slice_in_dim(dqt, dqti, q0, axis=2)
            return dkj, dvj, dlwj, dqt, dbias

        lo = jnp.minimum(k0 // bq, nqb) if causal else 0
        init = (
            jnp.zeros((H, bk, dk), dtype),
            jnp.zeros((H, bk, dv), dtype),
            jnp.zeros((bk,), dtype),
            dqt,
            dbias,
        )
        if fast:  # query blocks crossing the diagonal, then those entirely below it
            inner, i_full = init, 0
            if causal:
                i_full = jnp.minimum(-(-(k0 + bk - 1) // bq), nqb)
                inner = jax.lax.fori_loop(lo, i_full, query_block, inner)
            inner = jax.lax.fori_loop(i_full, nqb, partial(query_block, structural=False), inner)
        else:
            inner = jax.lax.fori_loop(lo, nqb, query_block, init)
        dkj, dvj, dlwj, dqt, dbias = inner
        dkp = jax.lax.dynamic_update_slice_in_dim(dkp, dkj, k0, axis=1)
        dvp = jax.lax.dynamic_update_slice_in_dim(dvp, dvj, k0, axis=1)
        dlwp = jax.lax.dynamic_update_slice_in_dim(dlwp, dlwj, k0, axis=0)
        return dqt, dkp, dvp, dlwp, dbias

    init = (
        jnp.zeros((H, dk, nqb * bq), dtype),
        jnp.zeros((H, nkb * bk, dk), dtype),
        jnp.zeros((H, nkb * bk, dv), dtype),
        jnp.zeros((nkb * bk,), dtype),
        None if bias is None else jnp.zeros_like(bias),
    )
    dqt, dkp, dvp, dlwp, dbias = jax.lax.fori_loop(0, nkb, key_block, init)
    dq = jnp.swapaxes(dqt, 1, 2)[:, :n_q]
    return dq, dkp[:, :n_k], dvp[:, :n_k], dlwp[:n_k], dbias


_attend.defvjp(_attend_fwd, _attend_bwd)


def online_softmax_attention(
    q: Float[Array, "heads n_q d_k"],
    k: Float[Array, "heads n_k d_k"],
    v: Float[Array, "heads n_k d_v"],
    log_weights: Float[Array, " n_k"] | None = None,
    *,
    causal: bool = False,
    hardmax: bool = False,
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask: Bool[Array, " n_k"] | None = None,
    attention_mask: Bool[Array, "*h n_q n_k"] | Float[Array, "*h n_q n_k"] | None = None,
) -> Float[Array, "heads n_q d_v"]:
    """Blockwise ``softmax_j(⟨q_i, k_j⟩ + log w_j) V_j`` without the ``(n_q, n_k)`` matrix.

    Heads-first arrays; ``q`` carries every score factor (|Ω_η|^{-1/2}, feature weights,
    temperature λ). The result is ``Σ_j γ_ij v_j`` with
    ``γ_ij = exp(⟨q_i,k_j⟩) w_j / Σ_m exp(⟨q_i,k_m⟩) w_m`` over the allowed keys
    (``j ≤ i`` when ``causal``); with ``hardmax`` γ puts weight ``w_j / Σ_{argmax} w`` on
    the maximizers of ``⟨q_i, k_j⟩``. Peak memory ``O(H · query_block · key_block)`` beyond
    the inputs, in the forward *and* the backward pass (custom VJP that recomputes).

    Args:
        q, k, v: queries ``(H, n_q, d_k)``, keys ``(H, n_k, d_k)``, values ``(H, n_k, d_v)``.
        log_weights: ``log w_j`` of the key quadrature weights, ``(n_k,)``; ``None`` means
            uniform weights.
        causal: keys ``j ≤ i`` only.
        hardmax: the λ → ∞ limit (gradient flows to ``v`` and ``log_weights`` only).
        query_block, key_block: block sizes (any sizes; the last block is padded). The
            defaults 512 × 512 (a 4-head fp32 score block of 4 MiB): as fast as
            256 × 256 on one core and 1.8× faster on two (each block's products are
            then large enough for XLA:CPU to split over the cores); 1024 × 1024 is
            slower (docs/performance.md).
        key_padding_mask: ``(n_k,)`` bool, True = padded: ``log w_j = −∞`` (zero weight);
            memory stays linear in the tokens.
        attention_mask: ``(n_q, n_k)`` or ``(1|H, n_q, n_k)``, bool (True = may attend) or
            additive float; read block by block (no extra ``n_q × n_k`` temporaries beyond
            the mask itself; its gradient, for float masks, is computed blockwise).
            Rows with no admissible key return 0.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import online_softmax_attention
        >>> q, k, v = jax.random.normal(jax.random.key(0), (3, 1, 100, 4))
        >>> out = online_softmax_attention(q, k, v, query_block=32, key_block=32)
        >>> ref = jax.nn.softmax(q @ k.swapaxes(-1, -2), axis=-1) @ v
        >>> bool(jnp.allclose(out, ref, atol=1e-5))
        True
    """
    bq = _check_block("query_block", query_block)
    bk = _check_block("key_block", key_block)
    q = as_input("q", q, ndim=3, nonempty=(1,))
    k = as_input("k", k, q.dtype, ndim=3, shape=(q.shape[0], None, q.shape[2]), nonempty=(1,))
    v = as_input("v", v, q.dtype, ndim=3, shape=(q.shape[0], k.shape[1], None))
    uniform = log_weights is None  # an internal constant: its gradient is not needed
    if uniform:
        log_weights = jnp.zeros((k.shape[1],), q.dtype)
    else:
        check_array("log_weights", log_weights, ndim=1, shape=(k.shape[1],))
        log_weights = log_weights.astype(q.dtype)
    bq, bk = min(bq, q.shape[1]), min(bk, k.shape[1])
    if key_padding_mask is None and attention_mask is None:
        return _attend(
            q, k, v, log_weights, None, bool(causal), bool(hardmax), bq, bk, False, uniform
        )
    n_q, n_k = q.shape[1], k.shape[1]
    kpm = check_key_padding_mask(key_padding_mask, n_k)
    if kpm is not None:
        log_weights = log_weights + key_log_weights(kpm, q.dtype)
    bias = check_attention_mask(attention_mask, n_q, n_k, q.shape[0])
    if bias is not None:
        bias = mask_bias(bias, q.dtype)
        pq, pk = -(-n_q // bq) * bq - n_q, -(-n_k // bk) * bk - n_k
        if pq or pk:
            bias = jnp.pad(bias, ((0, 0), (0, pq), (0, pk)))
    return _attend(q, k, v, log_weights, bias, bool(causal), bool(hardmax), bq, bk, True, uniform)

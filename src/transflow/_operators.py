"""The operators of the continuous model, discretized on a :class:`~transflow.Grid`.

All functions act on **one** sequence ``u`` of shape ``(n_tokens, n_features)``: row =
token x_i, column = feature y_k. Batch with :func:`jax.vmap`.

- :func:`attention`: the non-local integral operator
  ``(𝒜u)(x, y) = ∫_{Ω_x} γ(x, x̃; u) V(x̃, y; u) dx̃`` with
  ``γ = softmax_x̃(|Ω_η|^{-1/2} ⟨Q(x,·), K(x̃,·)⟩)`` (docs/spec/continuous-model.md §2.2),
  multi-head as eq. (5.7).
- :func:`project_s1`: the projection onto S1(σ1, σ2) (Theorem 3.1: LayerNorm).
- :func:`project_s2`: the projection onto S2 = {u ≥ 0} (ReLU).
- :func:`linear_y`: a linear integral operator in y, ``∫ W(ξ, y) u(x, ξ) dξ + b(y)``.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, Bool, Float

from ._activations import (
    PROJECTION_ACTIVATIONS as PROJECTION_ACTIVATIONS,
    activation_fn as activation_fn,
    project_s2 as project_s2,
)
from ._controls import AttentionParams
from ._errors import as_input, check_array, check_number, check_temperature, param_dtype
from ._grid import Grid
from ._masks import (
    causal_mask,
    check_attention_mask,
    check_key_padding_mask,
    key_log_weights,
    mask_bias,
)

__all__ = [
    "attention",
    "cross_attention",
    "attention_scores",
    "attention_weights",
    "CHUNKED_THRESHOLD",
    "project_s1",
    "project_s2",
    "linear_y",
    "activation_fn",
    "chunked_attention",
]


# --------------------------------------------------------------------------- attention
def _head_scale(p: AttentionParams, grid: Grid | None, scale: float | None, dtype):
    """Per-head score scale and feature weights for the inner product ⟨Q, K⟩_{Ω_η}.

    With ``grid=None`` (the index grid) this is the standard ``1/√d_k``. On a grid with
    feature weights, head m integrates over its sub-domain Ω_y^{(m)} (the contiguous
    block of d_k feature nodes, as torch splits heads): weights w^{(m)} and scale
    |Ω_y^{(m)}|^{-1/2}. An explicit ``scale`` replaces |Ω_y^{(m)}|^{-1/2} only: the feature
    weights w^{(m)} still weight the inner product; if the heads do not partition the
    grid's features, ``scale`` gives the unweighted ``scale · Σ_c q_c k_c``.
    """
    H, dk = p.n_heads, p.head_dim
    if grid is None or (scale is not None and grid.n_features != H * dk):
        return jnp.asarray(dk**-0.5 if scale is None else scale, dtype), None
    if grid.n_features != H * dk:
        raise ValueError(
            f"`grid` has {grid.n_features} feature nodes but the attention has "
            f"n_heads * head_dim = {H} * {dk} = {H * dk} query/key features; the head "
            "feature domains must partition Ω_y. Pass `scale=` explicitly for other layouts."
        )
    w = grid.y_weights.reshape(H, dk).astype(dtype)
    if scale is not None:
        return jnp.full((H,), scale, dtype), w
    return jnp.sum(w, axis=-1) ** -0.5, w


def _dot_last_first(u, w):
    return jax.lax.dot_general(u, w, (((u.ndim - 1,), (0,)), ((), ())))


@jax.custom_jvp
def wmul(u: Float[Array, "*n d_in"], w: Float[Array, "d_in d_out"]) -> Float[Array, "*n d_out"]:
    """``u @ w``, with a tangent rule that keeps the backward pass's weight gradient fast.

    The value is the plain product. Only the derivative w.r.t. ``w`` is written
    differently: ``u · (ẇᵀ)ᵀ`` with ``ẇᵀ`` held transposed in memory behind an
    optimisation barrier (XLA would otherwise fold the transpose back into the dot).
    Transposed for reverse mode, this gives the weight gradient as ``(ḡᵀ u)ᵀ``, a dot
    XLA:CPU's fast kernels take; from the plain product's own rule XLA:CPU lays out
    ``uᵀ ḡ`` as a dot with *both* operands transposed, after a transposing copy of the
    cotangent, at about half the rate of the other dots. Forward + backward of a
    6-layer encoder about 15 % faster, the forward unchanged (``docs/performance.md``,
    ``benchmarks/bench_layer.py``); the values are the same products.
    """
    return _dot_last_first(u, w)


@partial(wmul.defjvp, symbolic_zeros=True)
def _wmul_jvp(primals, tangents):
    u, w = primals
    du, dw = tangents
    out = _dot_last_first(u, w)
    parts = []
    if not isinstance(du, SymbolicZero):
        parts.append(_dot_last_first(du, w))
    if not isinstance(dw, SymbolicZero):
        dwt = jax.lax.optimization_barrier(jnp.swapaxes(dw, -1, -2))
        parts.append(jax.lax.dot_general(u, dwt, (((u.ndim - 1,), (1,)), ((), ()))))
    if not parts:
        return out, jnp.zeros_like(out)
    return out, parts[0] if len(parts) == 1 else parts[0] + parts[1]


def _heads(x: Float[Array, "n hc"], n_heads: int) -> Float[Array, "heads n c"]:
    """``(n, H·c) -> (H, n, c)``: heads first, so the score and value products are plain
    batched matmuls over the head axis (also under :func:`jax.vmap`)."""
    n = x.shape[0]
    return x.reshape(n, n_heads, x.shape[-1] // n_heads).transpose(1, 0, 2)


def _scaled_queries(u, p: AttentionParams, grid: Grid | None, scale, factor):
    """Queries ``(H, n, d_k)`` carrying the feature weights and the score scale × factor."""
    s, w = _head_scale(p, grid, scale, u.dtype)
    q = _heads(wmul(u, p.wq) + p.bq, p.n_heads)
    if w is not None:
        q = q * w[:, None, :]
    s = s * jnp.asarray(factor, u.dtype)
    return q * (s[:, None, None] if jnp.ndim(s) == 1 else s)


def attention_scores(
    u: Float[Array, "n d"],
    p: AttentionParams,
    *,
    grid: Grid | None = None,
    scale: float | None = None,
) -> Float[Array, "heads n n"]:
    """Scores ``s(x_i, x_j) = |Ω_η|^{-1/2} ⟨Q(x_i,·), K(x_j,·)⟩_{Ω_η}`` for every head.

    ``scale`` overrides the |Ω_η|^{-1/2} factor (e.g. CvT's ``embed_dim**-0.5`` quirk); the
    feature quadrature weights of ``grid`` still weight ⟨Q, K⟩ (see :func:`attention`).
    """
    u = as_input("u", u, param_dtype(p), ndim=2, shape=(None, p.wq.shape[-2]))
    q = _scaled_queries(u, p, grid, scale, 1.0)
    k = _heads(wmul(u, p.wk) + p.bk, p.n_heads)
    return jnp.einsum("hic,hjc->hij", q, k)


def attention_weights(
    scores: Float[Array, "heads n m"],
    *,
    x_weights: Float[Array, " m"] | None = None,
    causal: bool = False,
    hardmax: bool = False,
    temperature: float = 1.0,
    key_padding_mask: Bool[Array, " m"] | None = None,
    attention_mask: Bool[Array, "*h n m"] | Float[Array, "*h n m"] | None = None,
) -> Float[Array, "heads n m"]:
    """The attention kernel γ(x_i, x_j): a (weighted) softmax over keys, rows sum to 1.

    Args:
        scores: ``(heads, n_queries, n_keys)``.
        x_weights: token quadrature weights ``w_j`` of the keys. ``None`` means uniform
            weights, which cancel exactly: ``γ_ij = exp(λ s_ij) w_j / Σ_m exp(λ s_im) w_m``.
        causal: restrict the token integral to x̃ ≤ x (key index ≤ query index).
        hardmax: the λ → ∞ limit: weight ``w_j / Σ_{argmax} w`` on each maximizer, ties
            averaged (Yun et al. 2020).
        temperature: the scale λ multiplying the scores (ignored by hardmax).
        key_padding_mask: ``(m,)`` bool, True = padded: zero weight ``w_j = 0``.
        attention_mask: ``(n, m)`` or ``(1|H, n, m)``, bool (True = may attend) or an
            additive float ``b_ij``: ``γ_ij ∝ exp(λ s_ij + b_ij) w_j``. A row without
            admissible keys is all zeros. See :mod:`transflow._masks` / docs/masks.md.
    """
    check_array("scores", scores, ndim=3)
    check_temperature("attention_weights", temperature)
    n, m = scores.shape[-2:]
    if key_padding_mask is not None or attention_mask is not None:
        bias = _mask_bias(key_padding_mask, attention_mask, n, m, scores.shape[0], scores.dtype)
        lw = None if x_weights is None else jnp.log(x_weights).astype(scores.dtype)
        if causal:
            bias = jnp.where(causal_mask(n, m), bias, -jnp.inf)
        return _masked_weights(scores, lw, bias, hardmax, temperature)
    allowed = None
    if causal:
        allowed = causal_mask(n, m)
    if hardmax:
        s = scores if allowed is None else jnp.where(allowed, scores, -jnp.inf)
        top = jnp.max(s, axis=-1, keepdims=True)
        ind = (s == top).astype(scores.dtype)
        if x_weights is not None:
            ind = ind * x_weights
        return ind / jnp.sum(ind, axis=-1, keepdims=True)
    logits = temperature * scores
    if x_weights is not None:
        logits = logits + jnp.log(x_weights).astype(scores.dtype)
    return jax.nn.softmax(logits, axis=-1, where=allowed)


def _mask_bias(key_padding_mask, attention_mask, n_q, n_k, n_heads, dtype):
    """Validate the masks and merge them into one additive ``b_ij`` ``(1|H, 1|n_q, n_k)``."""
    kpm = check_key_padding_mask(key_padding_mask, n_k)
    am = check_attention_mask(attention_mask, n_q, n_k, n_heads)
    bias = None if am is None else mask_bias(am, dtype)
    if kpm is not None:
        kb = key_log_weights(kpm, dtype)[None, None, :]
        bias = kb if bias is None else bias + kb
    return bias


def _masked_weights(scores, lw, bias, hardmax: bool, temperature):
    """γ with an additive mask ``bias`` (−∞ = not admissible); empty rows are 0."""
    allowed = bias > -jnp.inf
    if lw is not None:
        bias = bias + lw
    if hardmax:
        s = jnp.where(allowed, scores, -jnp.inf)
        top = jnp.max(s, axis=-1, keepdims=True)
        ind = jnp.where(allowed & (s == top), jnp.exp(bias), 0.0)
        den = jnp.sum(ind, axis=-1, keepdims=True)
        return ind / jnp.where(den > 0, den, 1.0)
    logits = temperature * scores + bias
    top = jnp.max(logits, axis=-1, keepdims=True)
    top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
    e = jnp.exp(logits - top)
    den = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(den > 0, den, 1.0)


Implementation = Literal["auto", "dense", "chunked"]

#: ``implementation="auto"`` switches to the chunked operator when one sequence's score
#: tensor would hold more than this many entries (2**24: 64 MiB in float32).
CHUNKED_THRESHOLD = 2**24


def _dense_heads(q, k, v, x_weights, causal: bool, hardmax: bool, bias=None):
    """Dense ``Σ_j γ_ij v_j`` on heads-first arrays (``q`` carries every score factor).

    The softmax is fused: ``exp(s − max s)`` is contracted with the values first and the
    ``(H, n, d_v)`` result divided by the row sums, which saves a pass over the
    ``(H, n, n)`` matrix. The subtracted maximum is a constant of the softmax, so its
    gradient is stopped. ``bias`` (masks, −∞ = not admissible) takes a separate branch;
    ``None`` is the unmasked code path unchanged.
    """
    scores = jnp.einsum("hic,hjc->hij", q, k)
    if bias is not None:
        if causal:
            n, m = scores.shape[-2:]
            bias = jnp.where(causal_mask(n, m), bias, -jnp.inf)
        lw = None if x_weights is None else jnp.log(x_weights)
        if hardmax:
            gamma = _masked_weights(scores, lw, bias, True, 1.0)
            return jnp.einsum("hij,hjc->hic", gamma, v)
        logits = scores + bias if lw is None else scores + bias + lw
        top = jnp.max(logits, axis=-1, keepdims=True)
        top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0.0))
        e = jnp.exp(logits - top)
        den = jnp.sum(e, axis=-1)
        return jnp.einsum("hij,hjc->hic", e, v) / jnp.where(den > 0, den, 1.0)[..., None]
    if hardmax:
        gamma = attention_weights(scores, x_weights=x_weights, causal=causal, hardmax=True)
        return jnp.einsum("hij,hjc->hic", gamma, v)
    if x_weights is None:
        return _softmax_attend(q, k, v, causal)
    return _softmax_attend_w(q, k, v, jnp.log(x_weights), causal)


def _softmax_parts(q, k, v, lw, causal: bool):
    """The fused softmax attention's value ``(e v) / Σ_j e`` and its ``e``, row sums."""
    scores = jnp.einsum("hic,hjc->hij", q, k)
    if lw is not None:
        scores = scores + lw
    if causal:
        n, m = scores.shape[-2:]
        allowed = causal_mask(n, m)
        scores = jnp.where(allowed, scores, -jnp.inf)
    top = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    e = jnp.exp(scores - top)
    den = jnp.sum(e, axis=-1)
    return jnp.einsum("hij,hjc->hic", e, v) / den[..., None], e, den


def _softmax_tangent(q, k, v, lw, causal, dq, dk, dv, dlw):
    """Primal and tangent of the softmax attention, oriented for a fast reverse mode.

    The tangent is ``dγ v + γ dv`` with ``dγ = γ ⊙ (ds − Σ_j γ ds)``, ``ds = dq kᵀ + q dkᵀ
    (+ d log w)``. JAX transposes a product ``A · x`` (``x`` the tangent) into a product
    whose *left* operand is the cotangent, contracted over the axes ``A`` kept; plain
    autodiff of the primal therefore forms ``dv = γᵀ ḡ`` and ``dk = dsᵀ q`` as dots with
    a left operand contracted over a non-minor axis, which XLA:CPU runs as generic dots at
    under half the rate of its fast kernels. Here every product has the tangent on the
    left; where that yields a transposed result (``dvᵀ γᵀ`` and ``dk qᵀ``), the transpose
    sits behind an optimisation barrier, so the backward pass transposes the (small)
    cotangent ``ḡ`` and the score cotangent once in memory and then runs plain matmuls
    only. Forward mode keeps working (its own products are the transposed ones). The
    values are those of the primal's products; ``docs/performance.md`` has the timings.
    """
    out, e, den = _softmax_parts(q, k, v, lw, causal)
    zero = [isinstance(t, SymbolicZero) for t in (dq, dk, dv, dlw)]
    if all(zero):
        return out, jnp.zeros_like(out)
    p = e / den[..., None]  # γ (H, n, m)
    parts = []
    if not zero[0]:
        parts.append(jnp.einsum("hqc,hkc->hqk", dq, k))
    if not zero[1]:
        dst = jnp.einsum("hkc,hqc->hkq", dk, q)
        parts.append(jnp.swapaxes(jax.lax.optimization_barrier(dst), -1, -2))
    if not zero[3]:
        parts.append(jnp.broadcast_to(dlw, p.shape))
    dout = []
    if parts:
        ds = parts[0]
        for t in parts[1:]:
            ds = ds + t
        dp = p * (ds - jnp.sum(p * ds, axis=-1, keepdims=True))
        dout.append(jnp.einsum("hqk,hkc->hqc", dp, v))
    if not zero[2]:
        dot = jnp.einsum("hkc,hqk->hcq", dv, p)
        dout.append(jnp.swapaxes(jax.lax.optimization_barrier(dot), -1, -2))
    return out, dout[0] if len(dout) == 1 else dout[0] + dout[1]


@partial(jax.custom_jvp, nondiff_argnums=(3,))
def _softmax_attend(q, k, v, causal: bool):
    """Unmasked softmax attention ``Σ_j γ_ij v_j`` (heads first); fast reverse mode."""
    return _softmax_parts(q, k, v, None, causal)[0]


@partial(_softmax_attend.defjvp, symbolic_zeros=True)
def _softmax_attend_jvp(causal, primals, tangents):
    q, k, v = primals
    dq, dk, dv = tangents
    return _softmax_tangent(q, k, v, None, causal, dq, dk, dv, SymbolicZero(None))


@partial(jax.custom_jvp, nondiff_argnums=(4,))
def _softmax_attend_w(q, k, v, lw, causal: bool):
    """As :func:`_softmax_attend`, with key log-weights ``lw`` ``(m,)`` (quadrature)."""
    return _softmax_parts(q, k, v, lw, causal)[0]


@partial(_softmax_attend_w.defjvp, symbolic_zeros=True)
def _softmax_attend_w_jvp(causal, primals, tangents):
    return _softmax_tangent(*primals, causal, *tangents)


def _resolve_implementation(implementation: str, n_heads: int, n_q: int, n_k: int) -> str:
    if implementation not in ("auto", "dense", "chunked"):
        raise ValueError(
            f"`implementation` must be 'auto', 'dense' or 'chunked', got {implementation!r}."
        )
    if implementation == "auto":
        return "chunked" if n_heads * n_q * n_k > CHUNKED_THRESHOLD else "dense"
    return implementation


def _attend_heads(
    q,
    k,
    v,
    x_weights,
    impl,
    causal,
    hardmax,
    query_block,
    key_block,
    key_padding_mask,
    attention_mask,
):
    """``Σ_j γ_ij v_j`` on heads-first arrays, dense or chunked, with optional masks.

    Without masks the dense path gets no bias at all (the unmasked program is unchanged).
    """
    H, n, m = q.shape[0], q.shape[1], k.shape[1]
    if impl == "chunked":
        from ._chunked import online_softmax_attention

        return online_softmax_attention(
            q,
            k,
            v,
            None if x_weights is None else jnp.log(x_weights),
            causal=causal,
            hardmax=hardmax,
            query_block=query_block,
            key_block=key_block,
            key_padding_mask=key_padding_mask,
            attention_mask=attention_mask,
        )
    bias = _mask_bias(key_padding_mask, attention_mask, n, m, H, q.dtype)  # None: no masks
    return _dense_heads(q, k, v, x_weights, causal, hardmax, bias)


def _merge_heads(out: Float[Array, "heads n c"], p: AttentionParams) -> Float[Array, "n d"]:
    """Eq. (5.7): concatenate the heads and apply W_O (``+ b_O``)."""
    n = out.shape[1]
    return wmul(out.transpose(1, 0, 2).reshape(n, p.n_heads * p.value_dim), p.wo) + p.bo


def attention(
    u: Float[Array, "n d"],
    p: AttentionParams,
    *,
    grid: Grid | None = None,
    causal: bool = False,
    hardmax: bool = False,
    temperature: float = 1.0,
    scale: float | None = None,
    implementation: Implementation = "auto",
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask: Bool[Array, " n"] | None = None,
    attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
) -> Float[Array, "n d"]:
    """The attention integral operator (𝒜u)(x, y), all heads summed (eq. 5.7).

    ``Σ_m γ_m V_m W_O^{(m)} + b_O`` with ``V_m = u W_V^{(m)} + b_V^{(m)}``; this is the
    same as concatenating the heads and applying W_O. The residual ("u +") is *not*
    included: it is the identity part of the explicit Euler sub-step.

    Args:
        u: one sequence on the grid, ``(n_tokens, d)``.
        p: the kernels of all heads.
        grid: quadrature weights in x (weighted softmax) and y (per-head inner products);
            ``None`` is the index grid.
        causal, hardmax, temperature: see :func:`attention_weights`.
        scale: overrides the |Ω_η|^{-1/2} score factor only: on a grid the per-head
            feature quadrature weights still weight ⟨Q, K⟩, i.e. the scores are
            ``scale · Σ_c w_c q_c k_c``; when the heads do not partition the grid's
            features (``n_heads·head_dim ≠ n_features``) they are ``scale · Σ_c q_c k_c``.
        implementation: ``"dense"`` forms the ``(H, n, n)`` kernel; ``"chunked"`` runs
            the online softmax over key blocks (:func:`transflow.online_softmax_attention`,
            memory linear in n, also in the gradient); ``"auto"`` (default) is dense unless
            ``H·n²`` exceeds :data:`CHUNKED_THRESHOLD` entries. Both agree to round-off.
        query_block, key_block: block sizes of the chunked implementation.
        key_padding_mask: ``(n,)`` bool, **True = padded** (torch's polarity): the padded
            tokens get zero quadrature weight, so the integral runs over the kept tokens
            only; padded query rows still evolve and are never read by kept rows.
        attention_mask: ``(n, n)`` or ``(1|H, n, n)``; bool **True = may attend** (support
            of γ), or float added to the scores (``γ ∝ exp(λs + b) w``). A row with no
            admissible key gives 0 for every head (𝒜u = b_O there). Masks apply to every
            implementation; ``None`` (default) runs the unmasked code unchanged. See
            docs/masks.md for the continuous reading and the torch/HF polarities.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import AttentionParams, attention
        >>> p = AttentionParams.random(8, n_heads=2, key=jax.random.key(0))
        >>> attention(jnp.ones((5, 8)), p).shape
        (5, 8)
        >>> u = jax.random.normal(jax.random.key(1), (5, 8))
        >>> pad = jnp.array([False, False, False, True, True])
        >>> a = attention(u, p, key_padding_mask=pad)
        >>> bool(jnp.allclose(a[:3], attention(u[:3], p)))
        True
    """
    u = as_input("u", u, param_dtype(p), ndim=2, shape=(None, p.wq.shape[-2]))
    check_temperature("attention", temperature)
    n = u.shape[0]
    H = p.n_heads
    impl = _resolve_implementation(implementation, H, n, n)
    q = _scaled_queries(u, p, grid, scale, 1.0 if hardmax else temperature)
    k = _heads(wmul(u, p.wk) + p.bk, H)
    v = _heads(wmul(u, p.wv) + p.bv, H)
    x_weights = None if grid is None else grid.x_weights.astype(u.dtype)
    out = _attend_heads(
        q,
        k,
        v,
        x_weights,
        impl,
        causal,
        hardmax,
        query_block,
        key_block,
        key_padding_mask,
        attention_mask,
    )
    return _merge_heads(out, p)


def cross_attention(
    u: Float[Array, "n d"],
    memory: Float[Array, "m d_mem"],
    p: AttentionParams,
    *,
    grid: Grid | None = None,
    memory_grid: Grid | None = None,
    hardmax: bool = False,
    temperature: float = 1.0,
    scale: float | None = None,
    implementation: Implementation = "auto",
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask: Bool[Array, " m"] | None = None,
    attention_mask: Bool[Array, "*h n m"] | Float[Array, "*h n m"] | None = None,
) -> Float[Array, "n d"]:
    """Cross-attention: the attention integral over the memory's own token domain.

    ``(𝒜_c(u; m))(x) = ∫ γ(x, x′) V(m)(x′) dx′`` with γ built from the queries Q(u(x)) of
    the evolving state and the keys K(m(x′)) of a fixed field ``m`` (the encoder's output)
    on its own token grid Ω_x′ (``memory_grid``: its quadrature weights; ``None`` =
    uniform). ``grid`` gives the feature weights of the score inner product, as in
    :func:`attention`. ``key_padding_mask`` ``(m,)`` (True = padded) marks padded *memory*
    tokens; ``attention_mask`` is ``(n, m)`` or ``(1|H, n, m)`` with :func:`attention`'s
    polarity. No ``causal``: the memory has no order relative to the queries.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import AttentionParams, cross_attention
        >>> p = AttentionParams.random(8, n_heads=2, key=jax.random.key(0))
        >>> u, mem = jnp.ones((5, 8)), jax.random.normal(jax.random.key(1), (7, 8))
        >>> cross_attention(u, mem, p).shape
        (5, 8)
    """
    u = as_input("u", u, param_dtype(p), ndim=2, shape=(None, p.wq.shape[-2]))
    memory = as_input("memory", memory, param_dtype(p), ndim=2, shape=(None, p.wk.shape[-2]))
    check_temperature("cross_attention", temperature)
    for name, size in (("query_block", query_block), ("key_block", key_block)):
        check_number(name, size, "cross_attention", lower=0, integer=True, example="512")
    n, m = u.shape[0], memory.shape[0]
    H = p.n_heads
    impl = _resolve_implementation(implementation, H, n, m)
    q = _scaled_queries(u, p, grid, scale, 1.0 if hardmax else temperature)
    k = _heads(wmul(memory, p.wk) + p.bk, H)
    v = _heads(wmul(memory, p.wv) + p.bv, H)
    x_weights = None if memory_grid is None else memory_grid.x_weights.astype(u.dtype)
    if memory_grid is not None and memory_grid.n_tokens != m:
        raise ValueError(
            f"`memory_grid` has {memory_grid.n_tokens} tokens but `memory` has {m} rows."
        )
    out = _attend_heads(
        q,
        k,
        v,
        x_weights,
        impl,
        False,
        hardmax,
        query_block,
        key_block,
        key_padding_mask,
        attention_mask,
    )
    return _merge_heads(out, p)


# --------------------------------------------------------------------------- projections
def project_s1(
    v: Float[Array, "n d"],
    sigma1: Float[Array, "*d"] | float = 0.0,
    sigma2: Float[Array, "*d"] | float = 1.0,
    *,
    eps: float = 0.0,
    y_weights: Float[Array, " d"] | None = None,
) -> Float[Array, "n d"]:
    """Projection onto S1(σ1, σ2): per token, mean σ1 and standard deviation σ2.

    Theorem 3.1: for a token row v with mean α and (population) variance β > 0 over Ω_y,
    the L²(Ω_y)-closest point of S1 is ``σ2 (v − α)/√β + σ1`` — LayerNorm with scalar
    gain σ2 and bias σ1. Means and variances are quadrature over Ω_y normalized by |Ω_y|
    (``y_weights=None``: uniform weights, i.e. the standard LayerNorm).

    Extensions (not a projection, documented for interop): ``eps > 0`` gives
    ``σ2 (v − α)/√(β + ε) + σ1`` (PyTorch's LayerNorm); vector ``sigma1``/``sigma2`` of
    shape ``(d,)`` give per-feature bias and gain (docs/spec/continuous-model.md Q3: P_{S1(0,1)}
    followed by a diagonal affine map).

    Degenerate tokens (docs/spec/continuous-model.md Q2): if β = 0 every point of S1 is equally
    close and the projection is not unique. transflow returns σ1 for such tokens (the limit of the
    ε-regularized LayerNorm as ε → 0), without NaN in the value or the gradient. With
    ``eps == 0`` a token counts as constant when ``β ≤ (d·ε_mach)² · mean(v²)``, i.e. it is
    constant up to the round-off of computing its mean.
    """
    check_number("eps", eps, "project_s1", lower=0, strict=False, example="1e-5")
    v = as_input("v", v, nonempty=())
    d = v.shape[-1]
    if y_weights is None:
        alpha = jnp.mean(v, axis=-1, keepdims=True)
        centred = v - alpha
        beta = jnp.mean(centred * centred, axis=-1, keepdims=True)
    else:
        w = (y_weights / jnp.sum(y_weights)).astype(v.dtype)
        alpha = jnp.sum(v * w, axis=-1, keepdims=True)
        centred = v - alpha
        beta = jnp.sum(centred * centred * w, axis=-1, keepdims=True)
    sigma1 = jnp.asarray(sigma1, v.dtype)
    sigma2 = jnp.asarray(sigma2, v.dtype)
    if eps > 0:
        return sigma2 * centred * jax.lax.rsqrt(beta + jnp.asarray(eps, v.dtype)) + sigma1
    tiny = (d * jnp.finfo(v.dtype).eps) ** 2
    degenerate = beta <= tiny * jnp.mean(v * v, axis=-1, keepdims=True)
    safe = jnp.where(degenerate, jnp.ones_like(beta), beta)
    out = sigma2 * centred * jax.lax.rsqrt(safe) + sigma1
    return jnp.where(degenerate, jnp.broadcast_to(sigma1, out.shape), out)


def linear_y(
    u: Float[Array, "n d_in"],
    w: Float[Array, "d_in d_out"],
    b: Float[Array, "*d_out"] | None = None,
) -> Float[Array, "n d_out"]:
    """Linear integral operator in y: ``∫ W(ξ, y) u(x, ξ) dξ + b(y)`` as ``u @ W + b``.

    ``W`` is the sampled kernel including quadrature weights (:meth:`Grid.sample_kernel`).
    """
    check_array("w", w, ndim=2)
    u = as_input("u", u, param_dtype(w), nonempty=(), shape=(None, w.shape[0]))
    out = wmul(u, w)
    return out if b is None else out + b


def chunked_attention(
    u: Float[Array, "n d"],
    p: AttentionParams,
    *,
    grid: Grid | None = None,
    causal: bool = False,
    hardmax: bool = False,
    temperature: float = 1.0,
    scale: float | None = None,
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask: Bool[Array, " n"] | None = None,
    attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
) -> Float[Array, "n d"]:
    """The attention integral operator with memory linear in the token grid.

    Same operator and arguments as :func:`transflow.attention` (token quadrature weights,
    per-head feature weights, causal, hardmax, temperature, explicit scale, rectangular
    heads, ``key_padding_mask``, ``attention_mask``), evaluated with
    :func:`online_softmax_attention`. Equivalent to
    ``attention(..., implementation="chunked")``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import AttentionParams, attention, chunked_attention
        >>> p = AttentionParams.random(8, n_heads=2, key=jax.random.key(0))
        >>> u = jax.random.normal(jax.random.key(1), (300, 8))
        >>> a = chunked_attention(u, p, query_block=64, key_block=128)
        >>> bool(jnp.allclose(a, attention(u, p, implementation="dense"), atol=1e-5))
        True
    """
    return attention(
        u,
        p,
        grid=grid,
        causal=causal,
        hardmax=hardmax,
        temperature=temperature,
        scale=scale,
        implementation="chunked",
        query_block=query_block,
        key_block=key_block,
        key_padding_mask=key_padding_mask,
        attention_mask=attention_mask,
    )

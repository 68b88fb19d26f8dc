"""Llama-family pieces of the continuous model: RMSNorm, rotary attention with shared
key/value heads, the gated (SwiGLU) FFN, and the pre-norm scheme that composes them.

Continuous readings (docs/models.md):

- **RMSNorm** (:func:`project_sphere`): with ε = 0, ``v / sqrt(mean_y v²)`` is the
  L²(Ω_y)-closest point of the sphere S_rms = {u : |Ω_y|⁻¹ ∫ u² dy = 1}: the set S1(0, 1)
  of Theorem 3.1 *without the mean constraint*. The proof of Theorem 3.1 carries over
  with the mean constraint dropped: the Lagrange condition ``v − u = λ u`` gives
  ``u = v / (1 + λ)``, and of the two points ``± v/‖v‖_rms`` of the sphere on that line
  the one with the positive sign is the closest. As for S1 the set is non-convex (the
  projection is unique except at v = 0, where every point is equally close; transflow
  returns 0 there, the ε → 0 limit of the regularised map). The per-feature gain γ is
  the diagonal affine map after the projection (docs/spec/continuous-model.md Q3); ε > 0 is the
  regularised projection ``v / sqrt(mean v² + ε)`` (an extension, as for LayerNorm).
- **Rotary positions** (:func:`apply_rotary`): queries and keys of head m are rotated by
  R(x) = ⊕_i rot(x ω_i) with ω_i = θ^{-2i/d_k} (rotate-half pairing of HF), so
  ``⟨R(x) Q u(x), R(x̃) K u(x̃)⟩ = ⟨Q u(x), R(x̃ − x) K u(x̃)⟩``: the attention kernel
  γ(x, x̃) depends on the positions only through x̃ − x (translation covariance). On
  the index grid x_i = i. Scaled rotary embeddings (:class:`RotaryScaling`: linear,
  dynamic NTK, yarn, llama3) are the same rotation with rescaled frequencies ω'_i (yarn
  also scales the rotated vectors by a constant); dynamic NTK's frequencies depend on the
  length of the position domain.
- **Grouped-query attention**: H query heads share G ≤ H key/value heads; query head m
  uses key/value head ⌊m G / H⌋ (HF's ``repeat_kv``). It is the multi-head operator of
  eq. (5.7) with tied W_K, W_V blocks.
- **SwiGLU** (:func:`gated_ffn`): ``W_down (act(W_gate z) ⊙ W_up z)``: an explicit step
  of a gated, non-monotone operator (the product of two lifted fields), not a projection.

The scheme (:class:`RMSPreNormScheme`) is the pre-norm extension of docs/spec/continuous-model.md
§4.2 with these
operators: ``u¹ = u + Δt 𝒜_rot(P_sph u)``, ``u² = u¹ + Δt ℱ_gated(P_sph u¹)``.
"""

from __future__ import annotations

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._errors import (
    check_array,
    check_choice,
    check_flag,
    check_kind,
    check_number,
    check_values,
)
from ._operators import activation_fn, wmul

__all__ = [
    "RMSNormParams",
    "RotaryAttentionParams",
    "GatedFFNParams",
    "RMSLayerControls",
    "project_sphere",
    "apply_rotary",
    "rotary_frequencies",
    "RotaryScaling",
    "rotary_attention",
    "gated_ffn",
    "random_rms_controls",
    "check_not_hf_mask",
]


# ----------------------------------------------------------------------------- RMSNorm
class RMSNormParams(eqx.Module):
    """An RMSNorm sub-step: projection onto the sphere {mean_y u² = 1}, then the gain.

    ``gain`` is the per-feature γ (shape ``(d,)`` or ``()``); ``eps`` is HF's
    ``rms_norm_eps`` (0: the exact projection).
    """

    gain: Float[Array, "*d"]
    eps: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        check_number("eps", self.eps, "RMSNormParams", lower=0, strict=False, example="1e-6")
        check_values("gain", self.gain, "RMSNormParams", ndim=(0, 1, 2))


def project_sphere(
    v: Float[Array, "n d"], gain: Float[Array, "*d"] | float = 1.0, *, eps: float = 0.0
) -> Float[Array, "n d"]:
    """RMSNorm: per token, the projection onto {mean_y u² = 1}, times ``gain``.

    ``gain · v / sqrt(mean_y v² + eps)``. With ``eps = 0`` this is the L²(Ω_y)-closest
    point of the sphere (Theorem 3.1 without the mean constraint, see the module
    docstring); a zero token (no unique closest point) maps to 0 without NaN in the value
    or the gradient.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.interop import project_sphere
        >>> u = project_sphere(jnp.array([[3.0, -4.0]]))
        >>> float(jnp.mean(u**2))
        1.0
    """
    check_array("v", v)  # an operator of the step loop: shapes and dtypes only
    check_number(
        "eps", eps, "project_sphere", lower=0, strict=False, example="1e-6", traced_ok=True
    )
    ms = jnp.mean(v * v, axis=-1, keepdims=True)
    gain = jnp.asarray(gain, v.dtype)
    if eps > 0:
        return gain * (v * jax.lax.rsqrt(ms + jnp.asarray(eps, v.dtype)))
    zero = ms == 0
    out = v * jax.lax.rsqrt(jnp.where(zero, jnp.ones_like(ms), ms))
    return gain * jnp.where(zero, jnp.zeros_like(out), out)


# ----------------------------------------------------------------------------- rotary
_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")


@dataclasses.dataclass(frozen=True)
class RotaryScaling:
    """A scaled rotary embedding: which rescaling of the frequencies ω_i = θ^{-2i/d_k}.

    Every type keeps the reading of the default rotary embedding, a position-dependent
    rotation R(x) = ⊕_i rot(x ω'_i) of each query/key pair, with rescaled frequencies ω'_i
    (and, for yarn, a constant magnitude a on the rotated queries and keys, so the scores
    are multiplied by a²). The attention kernel depends on the positions only through
    x̃ − x for every type; for ``dynamic`` the frequencies also depend on the length of the
    position domain (the sequence length L), so the kernel is translation covariant within
    one domain, not across lengths. Types (HF's ``rope_parameters['rope_type']``):

    - ``"linear"`` (position interpolation): ω'_i = ω_i / s, ``s = factor``; equivalently
      the positions are rescaled x → x/s (the domain is compressed).
    - ``"dynamic"`` (NTK-aware): the base is enlarged with the sequence length,
      θ' = θ · (s L / L₀ − (s − 1))^{d_k/(d_k − 2)} with L = max(n, L₀), n = max position + 1
      and L₀ = ``max_position_embeddings``; ω'_i = θ'^{-2i/d_k}. For L ≤ L₀ it is the
      default embedding. (HF keeps the frequencies of the longest sequence seen since
      the last reset in the module's state; transflow computes them from the current
      sequence, which equals HF on a freshly built module.)
    - ``"yarn"``: a per-frequency blend ω'_i = (1 − r_i) ω_i / s + r_i ω_i of the
      interpolated and the original frequency, with r_i = 1 − clip((i − lo)/(hi − lo), 0, 1)
      a linear ramp between the dimensions lo, hi at which the wavelength fits
      ``beta_fast`` and ``beta_slow`` rotations into L₀ = ``original_max_position_embeddings``
      (high frequencies kept, low ones interpolated); and the magnitude
      a = ``attention_factor`` (default 0.1 ln s + 1, or the ``mscale``/``mscale_all_dim``
      ratio).
    - ``"llama3"``: by wavelength λ_i = 2π/ω_i: ω'_i = ω_i if λ_i < L₀/h (high frequency),
      ω_i / s if λ_i > L₀/l (low frequency), and in between the blend
      (1 − t) ω_i / s + t ω_i with t = (L₀/λ_i − l)/(h − l); l = ``low_freq_factor``,
      h = ``high_freq_factor``, L₀ = ``original_max_position_embeddings``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.interop import RotaryScaling, rotary_frequencies
        >>> w = rotary_frequencies(4, 100.0, jnp.float32)
        >>> lin = rotary_frequencies(4, 100.0, jnp.float32, RotaryScaling("linear", 2.0))
        >>> bool(jnp.allclose(lin, w / 2))
        True
    """

    rope_type: str = "default"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    max_position_embeddings: int | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True

    def __post_init__(self):
        check_choice("rope_type", self.rope_type, _ROPE_TYPES)
        check_number("factor", self.factor, "RotaryScaling", lower=0, example="2.0")
        need = {
            "dynamic": "max_position_embeddings",
            "yarn": "original_max_position_embeddings",
            "llama3": "original_max_position_embeddings",
        }.get(self.rope_type)
        if need is not None and getattr(self, need) is None:
            raise ValueError(f"RotaryScaling({self.rope_type!r}) needs `{need}`.")
        if self.rope_type == "llama3" and self.high_freq_factor == self.low_freq_factor:
            raise ValueError(
                "RotaryScaling('llama3'): `high_freq_factor` must differ from `low_freq_factor`."
            )

    @property
    def magnitude(self) -> float:
        """a: the factor on the rotated queries and keys (scores times a²); 1 but for yarn."""
        if self.rope_type != "yarn":
            return 1.0
        if self.attention_factor is not None:
            return float(self.attention_factor)

        def get(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if self.mscale and self.mscale_all_dim:
            return float(get(self.factor, self.mscale) / get(self.factor, self.mscale_all_dim))
        return get(self.factor)


def rotary_frequencies(
    head_dim: int,
    theta: float,
    dtype,
    scaling: RotaryScaling | None = None,
    seq_len=None,
) -> Float[Array, " half"]:
    """ω'_i, i = 0 … d_k/2 − 1: θ^{-2i/d_k} (HF's ``inv_freq``) rescaled by ``scaling``.

    ``seq_len`` (the length L of the position domain, may be traced) is used by
    ``"dynamic"`` only; see :class:`RotaryScaling` for the formulas. Computed in ``dtype``.
    """
    check_number("head_dim", head_dim, "rotary_frequencies", lower=0, integer=True, example="64")
    if head_dim % 2:
        raise ValueError(
            f"rotary_frequencies: `head_dim` must be even (pairs rotate), got {head_dim}."
        )
    check_number("theta", theta, "rotary_frequencies", lower=0, example="10000.0", traced_ok=True)
    exps = jnp.arange(0, head_dim, 2, dtype=dtype) / jnp.asarray(head_dim, dtype)
    base = jnp.asarray(theta, dtype)
    kind = "default" if scaling is None else scaling.rope_type
    if kind == "default":
        return 1.0 / (base**exps)
    s = scaling.factor
    if kind == "linear":
        return 1.0 / (base**exps) / jnp.asarray(s, dtype)
    if kind == "dynamic":
        L0 = scaling.max_position_embeddings
        L = jnp.asarray(L0 if seq_len is None else seq_len, dtype)
        L = jnp.maximum(L, jnp.asarray(L0, dtype))
        grown = base * ((s * L / L0) - (s - 1)) ** (head_dim / (head_dim - 2))
        return 1.0 / (grown**exps)
    if kind == "yarn":
        L0 = scaling.original_max_position_embeddings

        def correction_dim(rotations):
            return (head_dim * math.log(L0 / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        lo, hi = correction_dim(scaling.beta_fast), correction_dim(scaling.beta_slow)
        if scaling.truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, head_dim - 1)
        if lo == hi:
            hi += 0.001  # HF's guard against a zero-width ramp
        pos_freqs = base**exps
        ramp = jnp.clip((jnp.arange(head_dim // 2, dtype=dtype) - lo) / (hi - lo), 0, 1)
        keep = 1 - ramp  # r_i: the weight of the original frequency
        return (1.0 / (s * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
    # llama3
    inv = 1.0 / (base**exps)
    L0 = scaling.original_max_position_embeddings
    lf, hf = scaling.low_freq_factor, scaling.high_freq_factor
    wavelen = 2 * math.pi / inv
    out = jnp.where(wavelen > L0 / lf, inv / s, inv)
    t = (L0 / wavelen - lf) / (hf - lf)
    smoothed = (1 - t) * out / s + t * out
    medium = ~(wavelen < L0 / hf) & ~(wavelen > L0 / lf)
    return jnp.where(medium, smoothed, out)


def apply_rotary(
    x: Float[Array, "heads n dk"],
    positions: Float[Array, " n"],
    theta: float,
    scaling: RotaryScaling | None = None,
) -> Float[Array, "heads n dk"]:
    """Rotate each head's features by the position angle x·ω'_i (rotate-half pairing).

    Feature i is paired with feature i + d_k/2; the pair is rotated by ``positions · ω'_i``
    (:func:`rotary_frequencies`, with the rescaling ``scaling``; the domain length of
    ``"dynamic"`` is max(positions) + 1). Rotations are orthogonal: the norm of every
    token's query/key is unchanged (for yarn it is multiplied by the magnitude a).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.interop import apply_rotary
        >>> x = jnp.ones((1, 3, 4))
        >>> r = apply_rotary(x, jnp.arange(3.0), 10000.0)
        >>> bool(jnp.allclose(jnp.linalg.norm(r, axis=-1), 2.0))
        True
    """
    # an operator of the step loop: shapes, dtypes and options only (free at trace time)
    check_array("x", x, ndim=3)
    check_array("positions", positions, ndim=1, shape=(x.shape[1],), floating=False)
    check_number("theta", theta, "apply_rotary", lower=0, example="10000.0", traced_ok=True)
    if scaling is not None:
        check_kind("scaling", scaling, RotaryScaling, "apply_rotary")
    dk = x.shape[-1]
    if dk % 2:
        raise ValueError(
            f"apply_rotary: `x` must have an even head width (rotary pairs), got {dk}."
        )
    pos = positions.astype(x.dtype)
    seq_len = None
    if scaling is not None and scaling.rope_type == "dynamic":
        seq_len = jnp.max(pos) + 1
    omega = rotary_frequencies(dk, theta, x.dtype, scaling, seq_len)
    freqs = pos[:, None] * omega[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    cos, sin = jnp.cos(emb), jnp.sin(emb)
    if scaling is not None and scaling.magnitude != 1.0:
        a = jnp.asarray(scaling.magnitude, x.dtype)
        cos, sin = cos * a, sin * a
    half = dk // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


class RotaryAttentionParams(eqx.Module):
    """Kernels of rotary grouped-query attention.

    Shapes: ``wq: (d, H·d_k)``, ``wk: (d, G·d_k)``, ``wv: (d, G·d_v)``,
    ``wo: (H·d_v, d)``, biases of the output sizes; ``n_heads = H`` query heads,
    ``n_kv_heads = G`` key/value heads (G divides H); ``rope_theta`` the rotary base θ
    (``None``: no rotation) and ``rope_scaling`` its rescaling (:class:`RotaryScaling`;
    ``None``: the default frequencies). The score scale is ``d_k^{-1/2}``.
    """

    wq: Float[Array, "d hk"]
    wk: Float[Array, "d gk"]
    wv: Float[Array, "d gv"]
    wo: Float[Array, "hv d"]
    bq: Float[Array, " hk"]
    bk: Float[Array, " gk"]
    bv: Float[Array, " gv"]
    bo: Float[Array, " d"]
    n_heads: int = eqx.field(static=True)
    n_kv_heads: int = eqx.field(static=True)
    rope_theta: float | None = eqx.field(static=True, default=10000.0)
    rope_scaling: RotaryScaling | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        owner = "RotaryAttentionParams"
        for name in ("wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"):
            check_values(name, getattr(self, name), owner)
        d = self.wq.shape[-2] if self.wq.ndim >= 2 else None
        for name, want in (
            ("wk", (d, None)),
            ("wv", (d, None)),
            ("wo", (None, d)),
            ("bq", (self.wq.shape[-1],)),
            ("bk", (self.wk.shape[-1],)),
            ("bv", (self.wv.shape[-1],)),
            ("bo", (d,)),
        ):
            got = tuple(getattr(self, name).shape)
            if len(got) < len(want) or any(
                w is not None and w != g for w, g in zip(want, got[-len(want) :])
            ):
                shape = tuple("*" if w is None else w for w in want)
                raise ValueError(
                    f"{owner}: `{name}` must have shape {shape} (d = {d} from `wq`), got {got}."
                )
        check_number("n_heads", self.n_heads, owner, lower=0, integer=True, example="4")
        check_number("n_kv_heads", self.n_kv_heads, owner, lower=0, integer=True, example="2")
        if self.rope_theta is not None:
            check_number("rope_theta", self.rope_theta, owner, lower=0, example="10000.0")
        if self.rope_scaling is not None:
            check_kind("rope_scaling", self.rope_scaling, RotaryScaling, owner)
        H, G = self.n_heads, self.n_kv_heads
        if not (isinstance(H, int) and isinstance(G, int) and H >= 1 and G >= 1 and H % G == 0):
            raise ValueError(
                f"RotaryAttentionParams: `n_kv_heads`={G!r} must be a positive int dividing "
                f"`n_heads`={H!r}."
            )
        hk, gk = self.wq.shape[-1], self.wk.shape[-1]
        if hk % H or gk * H != hk * G or self.wv.shape[-1] % G:
            raise ValueError(
                f"RotaryAttentionParams: widths wq {hk}, wk {gk}, wv {self.wv.shape[-1]} do not "
                f"split into {H} query heads and {G} key/value heads of equal width."
            )
        if self.wo.shape[-2] != self.wv.shape[-1] // G * H:
            raise ValueError(
                f"RotaryAttentionParams: `wo` must have {self.wv.shape[-1] // G * H} input rows "
                f"(H·d_v), got {self.wo.shape[-2]}."
            )

    @property
    def head_dim(self) -> int:
        return self.wq.shape[-1] // self.n_heads

    @property
    def value_dim(self) -> int:
        return self.wv.shape[-1] // self.n_kv_heads


def _heads(x, n_heads: int):
    n = x.shape[0]
    return x.reshape(n, n_heads, x.shape[-1] // n_heads).transpose(1, 0, 2)


def rotary_attention(
    u: Float[Array, "n d"],
    p: RotaryAttentionParams,
    *,
    positions: Float[Array, " n"] | Int[Array, " n"] | None = None,
    causal: bool = False,
    implementation: str = "auto",
    key_padding_mask: Bool[Array, " n"] | None = None,
    attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
) -> Float[Array, "n d"]:
    """Rotary grouped-query attention 𝒜_rot u (no residual), all heads summed.

    Queries and keys are rotated by their position (:func:`apply_rotary`) after the
    projections; key/value head ⌊m G/H⌋ serves query head m. The kernel is the same
    softmax operator as :func:`transflow.attention` (dense or the memory-linear chunked
    one, ``implementation`` as there), with the same masks: ``key_padding_mask`` ``(n,)``
    bool (True = padded: zero token weight) and ``attention_mask`` ``(n, n)`` or
    ``(1|H, n, n)`` (bool True = may attend, or additive float); a row with no
    admissible key gives 0 for every head.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.interop import RotaryAttentionParams, rotary_attention
        >>> k = jax.random.split(jax.random.key(0), 4)
        >>> p = RotaryAttentionParams(jax.random.normal(k[0], (8, 8)),
        ...     jax.random.normal(k[1], (8, 4)), jax.random.normal(k[2], (8, 4)),
        ...     jax.random.normal(k[3], (8, 8)), jnp.zeros(8), jnp.zeros(4), jnp.zeros(4),
        ...     jnp.zeros(8), n_heads=4, n_kv_heads=2)
        >>> rotary_attention(jnp.ones((5, 8)), p, causal=True).shape
        (5, 8)
    """
    from ._operators import _dense_heads, _mask_bias, _resolve_implementation

    check_kind("p", p, RotaryAttentionParams, "rotary_attention")
    check_array("u", u, ndim=2, shape=(None, p.wq.shape[-2]))  # a step-loop operator
    if positions is not None:
        check_array("positions", positions, ndim=1, shape=(u.shape[0],), floating=False)
    check_flag("causal", causal, "rotary_attention")
    n = u.shape[0]
    H, G = p.n_heads, p.n_kv_heads
    pos = jnp.arange(n, dtype=u.dtype) if positions is None else jnp.asarray(positions)
    q = _heads(wmul(u, p.wq) + p.bq, H)
    k = _heads(wmul(u, p.wk) + p.bk, G)
    v = _heads(wmul(u, p.wv) + p.bv, G)
    if p.rope_theta is not None:
        q = apply_rotary(q, pos, p.rope_theta, p.rope_scaling)
        k = apply_rotary(k, pos, p.rope_theta, p.rope_scaling)
    q = q * jnp.asarray(p.head_dim**-0.5, u.dtype)
    if G != H:  # shared key/value heads: query head m reads key/value head m // (H/G)
        k = jnp.repeat(k, H // G, axis=0)
        v = jnp.repeat(v, H // G, axis=0)
    impl = _resolve_implementation(implementation, H, n, n)
    masks = {}
    if key_padding_mask is not None:
        masks["key_padding_mask"] = key_padding_mask
    if attention_mask is not None:
        masks["attention_mask"] = attention_mask
    if impl == "chunked":
        from ._chunked import online_softmax_attention

        out = online_softmax_attention(q, k, v, None, causal=causal, **masks)
    elif masks:
        bias = _mask_bias(key_padding_mask, attention_mask, n, n, H, u.dtype)
        out = _dense_heads(q, k, v, None, causal, False, bias)
    else:
        out = _dense_heads(q, k, v, None, causal, False)
    return wmul(out.transpose(1, 0, 2).reshape(n, H * p.value_dim), p.wo) + p.bo


# ----------------------------------------------------------------------------- SwiGLU
class GatedFFNParams(eqx.Module):
    """A gated FFN (SwiGLU): ``(act(z W_gate + b_gate) ⊙ (z W_up + b_up)) W_down + b_down``.

    ``w_gate, w_up: (d, h)``, ``w_down: (h, d)``; ``activation`` the gate's pointwise map,
    any name of :func:`transflow.activation_fn` ("silu": SwiGLU, "gelu": GeGLU, ...).
    """

    w_gate: Float[Array, "d h"]
    w_up: Float[Array, "d h"]
    w_down: Float[Array, "h d"]
    b_gate: Float[Array, " h"]
    b_up: Float[Array, " h"]
    b_down: Float[Array, " d"]
    activation: str = eqx.field(static=True, default="silu")

    def __check_init__(self):
        owner = "GatedFFNParams"
        for name in ("w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down"):
            check_values(name, getattr(self, name), owner)
        if self.w_gate.shape != self.w_up.shape or self.w_down.shape[-2] != self.w_up.shape[-1]:
            raise ValueError(
                f"GatedFFNParams: `w_gate` {tuple(self.w_gate.shape)} and `w_up` "
                f"{tuple(self.w_up.shape)} must match and `w_down` {tuple(self.w_down.shape)} "
                "must map their width back to d."
            )
        for name, want in (
            ("b_gate", self.w_gate.shape[-1:]),
            ("b_up", self.w_up.shape[-1:]),
            ("b_down", self.w_down.shape[-1:]),
        ):
            if tuple(getattr(self, name).shape[-1:]) != tuple(want):
                raise ValueError(
                    f"{owner}: `{name}` must have shape {tuple(want)} (the width of its "
                    f"weight), got {tuple(getattr(self, name).shape)}."
                )
        activation_fn(self.activation)  # validates the name
        if self.w_gate.shape != self.w_up.shape or self.w_down.shape[-2] != self.w_up.shape[-1]:
            raise ValueError(
                f"GatedFFNParams: `w_gate` {tuple(self.w_gate.shape)} and `w_up` "
                f"{tuple(self.w_up.shape)} must match and `w_down` {tuple(self.w_down.shape)} "
                "must map their width back to d."
            )


def gated_ffn(z: Float[Array, "n d"], f: GatedFFNParams, *, record: bool = False):
    """The gated FFN map ℱ_gated(z); with ``record`` also the gated hidden field.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.interop import GatedFFNParams, gated_ffn
        >>> f = GatedFFNParams(jnp.ones((2, 3)), jnp.ones((2, 3)), jnp.ones((3, 2)),
        ...                    jnp.zeros(3), jnp.zeros(3), jnp.zeros(2))
        >>> gated_ffn(jnp.zeros((4, 2)), f).shape
        (4, 2)
    """
    check_kind("f", f, GatedFFNParams, "gated_ffn")
    check_array("z", z)  # a step-loop operator: shapes and dtypes only
    if z.ndim < 1 or z.shape[-1] != f.w_gate.shape[-2]:
        raise ValueError(
            f"gated_ffn: `z` has shape {tuple(z.shape)}; expected {f.w_gate.shape[-2]} features "
            "on the last axis (the rows of `f.w_gate`)."
        )
    check_flag("record", record, "gated_ffn")
    act = activation_fn(f.activation)
    hidden = act(wmul(z, f.w_gate) + f.b_gate) * (wmul(z, f.w_up) + f.b_up)
    out = wmul(hidden, f.w_down) + f.b_down
    return (out, hidden) if record else out


# ----------------------------------------------------------------------------- scheme
class RMSLayerControls(eqx.Module):
    """Controls of one Llama-family step: rotary GQA, two RMSNorm sets, the gated FFN."""

    attn: RotaryAttentionParams
    norm1: RMSNormParams
    ffn: GatedFFNParams
    norm2: RMSNormParams

    def __check_init__(self):
        owner = "RMSLayerControls"
        check_kind("attn", self.attn, RotaryAttentionParams, owner)
        check_kind("norm1", self.norm1, RMSNormParams, owner)
        check_kind("ffn", self.ffn, GatedFFNParams, owner)
        check_kind("norm2", self.norm2, RMSNormParams, owner)
        d = self.attn.wq.shape[-2]
        for name, got in (
            ("norm1", self.norm1.gain.shape[-1:]),
            ("ffn", self.ffn.w_gate.shape[-2:-1]),
            ("norm2", self.norm2.gain.shape[-1:]),
        ):
            if got not in ((), (d,)):
                raise ValueError(
                    f"{owner}: `{name}` acts on {got[0]} features but `attn` on d = {d}; "
                    "the sub-steps of one layer need the same d."
                )

    @property
    def d_model(self) -> int:
        return self.attn.wq.shape[-2]


def random_rms_controls(
    d: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
    *,
    bias: bool = False,
    eps: float = 1e-6,
    rope_theta: float | None = 10000.0,
    dtype=None,
    key,
) -> RMSLayerControls:
    """Random Llama-family controls with entries ~ N(0, 1/fan_in) (tests, experiments)."""
    owner = "random_rms_controls"
    for name, size in (("d", d), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads), ("d_ff", d_ff)):
        check_number(name, size, owner, lower=0, integer=True, example="8")
    if d % n_heads:
        raise ValueError(f"{owner}: `n_heads` must divide d = {d}, got {n_heads}.")
    if n_heads % n_kv_heads:
        raise ValueError(
            f"{owner}: `n_kv_heads` must divide n_heads = {n_heads} (grouped queries), got "
            f"{n_kv_heads}."
        )
    check_number("eps", eps, owner, lower=0, strict=False, example="1e-6")
    if rope_theta is not None:
        check_number("rope_theta", rope_theta, owner, lower=0, example="10000.0")
    dtype = dtype or jnp.result_type(float)
    dk = d // n_heads
    ks = jax.random.split(key, 12)
    n = lambda k, shape: jax.random.normal(k, shape, dtype) * shape[0] ** -0.5
    b = (
        (lambda k, shape: 0.1 * jax.random.normal(k, shape, dtype))
        if bias
        else (lambda k, shape: jnp.zeros(shape, dtype))
    )
    attn = RotaryAttentionParams(
        n(ks[0], (d, n_heads * dk)),
        n(ks[1], (d, n_kv_heads * dk)),
        n(ks[2], (d, n_kv_heads * dk)),
        n(ks[3], (n_heads * dk, d)),
        b(ks[4], (n_heads * dk,)),
        b(ks[5], (n_kv_heads * dk,)),
        b(ks[6], (n_kv_heads * dk,)),
        jnp.zeros((d,), dtype),
        n_heads,
        n_kv_heads,
        rope_theta,
    )
    ffn = GatedFFNParams(
        n(ks[7], (d, d_ff)),
        n(ks[8], (d, d_ff)),
        n(ks[9], (d_ff, d)),
        jnp.zeros((d_ff,), dtype),
        jnp.zeros((d_ff,), dtype),
        jnp.zeros((d,), dtype),
    )
    g = lambda k: 1.0 + 0.1 * jax.random.normal(k, (d,), dtype)
    return RMSLayerControls(attn, RMSNormParams(g(ks[10]), eps), ffn, RMSNormParams(g(ks[11]), eps))


def check_not_hf_mask(attention_mask) -> None:
    """A 1-D ``attention_mask`` is HF's (1 = keep): say how to pass it."""
    if attention_mask is not None and getattr(attention_mask, "ndim", 2) == 1:
        raise ValueError(
            f"`attention_mask` has shape {tuple(attention_mask.shape)}: transflow's "
            "attention_mask is (n, n) (True = may attend). A HuggingFace attention_mask "
            "(1 = keep, 0 = padding) is a key padding mask: pass "
            "`key_padding_mask=transflow.mask_from_hf(mask)` (i.e. mask == 0)."
        )

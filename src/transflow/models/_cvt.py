"""CvT: attention with convolutional projections over the 2-D token grid
(docs/spec/continuous-model.md §4.3).

Real CvT (Wu et al. 2021; HF ``CvtSelfAttention``) forms the queries, keys and values by a
depthwise convolution over the 2-D token grid Ω_x, a BatchNorm in eval mode (a per-feature
affine map) and a pointwise linear map, with K/V evaluated on a coarser sub-grid
(``stride_kv``). In the continuous model (docs/spec/continuous-model.md §4.3 [R]):

    Q(x, y) = ∫_{Ω_y} W^Q_pw(η, y) [ a_η ∫_{Ω_x} κ^Q(x − x̃, η) u(x̃, η) dx̃ + c_η ] dη + b^Q(y),

local κ in x (depthwise: one kernel per feature η), BN folded into a_η, c_η. Strided K/V
evaluate the inner integral on a sub-grid of Ω_x with uniform weights, which cancel in
the softmax exactly as in §3.4. A class token (``n_prefix = 1``) is not on the grid: it
is split off before the convolutions and re-attached afterwards.

The literal transcription of §4.3 (open question Q7) convolves in the *feature* variable
instead, Q(x, y) = ∫ κ^Q(ξ) u(x, y − ξ) dξ; :class:`FeatureConv` implements it as a
documented option. It is a translation-invariant (Toeplitz/circulant) kernel
W(ξ, y) = κ(y − ξ), i.e. a structured special case of the standard W^Q.

The attention kernel itself is :func:`transflow.attention_weights` on the rectangular
``(heads, n_q, n_kv)`` scores, so it is implemented once.
"""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._controls import AttentionParams, FFNParams, NormParams, num_steps
from .._errors import (
    as_input,
    check_choice,
    check_flag,
    check_kind,
    check_number,
    check_sizes,
    check_temperature,
    check_values,
    param_dtype,
)
from .._evolve import evolve
from .._operators import attention_weights, project_s1
from ..schemes._conv import ConvPreNormScheme as ConvPreNormScheme

__all__ = [
    "DepthwiseConv2d",
    "FeatureConv",
    "ConvAttentionParams",
    "ConvLayerControls",
    "ConvPreNormScheme",
    "ConvEmbedding",
    "CvtStageModel",
    "CvtModel",
    "conv_attention",
    "conv_output_size",
]

_HI = jax.lax.Precision.HIGHEST


def conv_output_size(n: int, kernel: int, stride: int, padding: int) -> int:
    """Number of output nodes of a strided convolution along one axis."""
    owner = "conv_output_size"
    for name, size in (("n", n), ("kernel", kernel), ("stride", stride)):
        check_number(name, size, owner, lower=0, integer=True, example="3")
    check_number("padding", padding, owner, lower=0, strict=False, integer=True, example="1")
    if kernel > n + 2 * padding:
        raise ValueError(
            f"{owner}: `kernel` {kernel} is larger than the padded input, n + 2·padding = "
            f"{n + 2 * padding}."
        )
    return _conv_output_size(n, kernel, stride, padding)


def _conv_output_size(n: int, kernel: int, stride: int, padding: int) -> int:
    """:func:`conv_output_size` unchecked (the modules check their own geometry)."""
    return (n + 2 * padding - kernel) // stride + 1


class DepthwiseConv2d(eqx.Module):
    """Depthwise convolution over the 2-D token grid, then a per-feature affine map.

    ``out[i, j, η] = scale[η] · Σ_{a,b} kernel[a, b, η] · u_pad[s·i + a, s·j + b, η] + shift[η]``

    (cross-correlation with zero padding ``padding`` and stride ``s``, as torch's
    ``Conv2d(groups=D, bias=False)``). A BatchNorm in eval mode folds into
    ``scale = γ/√(var + ε)`` and ``shift = β − mean · scale``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.vision import DepthwiseConv2d
        >>> conv = DepthwiseConv2d(jnp.ones((3, 3, 4)) / 9, jnp.ones(4), jnp.zeros(4),
        ...                        stride=2, padding=1)
        >>> conv(jnp.ones((4, 6, 4))).shape
        (2, 3, 4)
    """

    kernel: Float[Array, "kh kw d"]
    scale: Float[Array, " d"]
    shift: Float[Array, " d"]
    stride: int = eqx.field(static=True, default=1)
    padding: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        check_values("kernel", self.kernel, "DepthwiseConv2d", ndim=(3, 4))
        check_values("scale", self.scale, "DepthwiseConv2d")
        check_sizes("DepthwiseConv2d", stride=self.stride)
        check_number(
            "padding",
            self.padding,
            "DepthwiseConv2d",
            lower=0,
            strict=False,
            integer=True,
            example="1",
        )
        d = self.kernel.shape[-1]
        for name, arr in (("scale", self.scale), ("shift", self.shift)):
            if arr.shape[-1:] != (d,):
                raise ValueError(
                    f"DepthwiseConv2d: `{name}` must have shape ({d},), got {tuple(arr.shape)}."
                )
        if not (isinstance(self.stride, int) and self.stride >= 1):
            raise ValueError(f"DepthwiseConv2d: `stride` must be an int >= 1, got {self.stride!r}.")
        if not (isinstance(self.padding, int) and self.padding >= 0):
            raise ValueError(
                f"DepthwiseConv2d: `padding` must be an int >= 0, got {self.padding!r}."
            )

    def output_shape(self, grid_shape: tuple[int, int]) -> tuple[int, int]:
        kh, kw = self.kernel.shape[-3:-1]
        return (
            _conv_output_size(grid_shape[0], kh, self.stride, self.padding),
            _conv_output_size(grid_shape[1], kw, self.stride, self.padding),
        )

    def __call__(self, u: Float[Array, "h w d"]) -> Float[Array, "h2 w2 d"]:
        u = as_input("u", u, self.kernel.dtype, ndim=3, shape=(None, None, self.kernel.shape[-1]))
        # A sum of k_h·k_w shifted, strided slices: the depthwise cross-correlation,
        # cheap to compile (XLA's grouped float64 convolution compiles slowly on CPU).
        kh, kw = self.kernel.shape[-3:-1]
        h2, w2 = self.output_shape(u.shape[:2])
        if h2 < 1 or w2 < 1:
            raise ValueError(
                f"`u` has a {u.shape[0]}x{u.shape[1]} token grid, too small for a {kh}x{kw} "
                f"kernel with padding {self.padding}."
            )
        p, s = self.padding, self.stride
        up = jnp.pad(u, ((p, p), (p, p), (0, 0)))
        kernel = self.kernel.astype(u.dtype)
        out = jnp.zeros((h2, w2, u.shape[-1]), u.dtype)
        for a in range(kh):
            for b in range(kw):
                patch = up[a : a + s * (h2 - 1) + 1 : s, b : b + s * (w2 - 1) + 1 : s]
                out = out + kernel[a, b] * patch
        return out * self.scale + self.shift

    @classmethod
    def random(
        cls,
        d: int,
        kernel_size: int = 3,
        *,
        stride: int = 1,
        padding: int = 1,
        dtype=None,
        key: PRNGKeyArray,
    ) -> DepthwiseConv2d:
        dtype = dtype or jnp.result_type(float)
        k1, k2, k3 = jax.random.split(key, 3)
        return cls(
            jax.random.normal(k1, (kernel_size, kernel_size, d), dtype) / kernel_size,
            1.0 + 0.1 * jax.random.normal(k2, (d,), dtype),
            0.1 * jax.random.normal(k3, (d,), dtype),
            stride,
            padding,
        )


class FeatureConv(eqx.Module):
    """The literal y-convolution of docs/spec/continuous-model.md §4.3 / Q7:
    ``Q(x, y) = Σ_ξ κ(ξ) u(x, y − ξ)``.

    ``kernel[m]`` is κ at offset ξ = m − ``origin`` (default: the centre, ``k // 2``).
    ``boundary="circular"`` treats Ω_y as periodic; ``"zero"`` extends u by 0. On the
    index grid (Δy = 1) this is ``u @ T`` with the Toeplitz (circulant) matrix
    ``T[l', l] = κ(l − l')`` (:meth:`matrix`): a translation-invariant kernel
    W(ξ, y) = κ(y − ξ), i.e. a structured special case of the standard W^Q.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.vision import FeatureConv
        >>> FeatureConv(jnp.array([0.0, 1.0, 0.0]))(jnp.eye(3)).tolist()  # identity
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """

    kernel: Float[Array, " k"]
    boundary: Literal["circular", "zero"] = eqx.field(static=True, default="circular")
    origin: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_choice("boundary", self.boundary, ("circular", "zero"))
        check_values("kernel", self.kernel, "FeatureConv")
        if self.origin is not None:
            k = self.kernel.shape[-1]
            check_number(
                "origin",
                self.origin,
                "FeatureConv",
                lower=0,
                upper=k - 1,
                strict=False,
                integer=True,
                example=str(k // 2),
            )

    def matrix(self, d: int) -> Float[Array, "d d"]:
        """The d × d matrix T with ``conv(u) = u @ T``."""
        k = self.kernel.shape[-1]
        origin = k // 2 if self.origin is None else self.origin
        lp, l_ = np.meshgrid(np.arange(d), np.arange(d), indexing="ij")
        shift = l_ - lp  # ξ = l − l'
        if self.boundary == "circular":
            shift = np.mod(shift + origin, d) - origin  # wrap to the kernel's window
            if k > d:
                raise ValueError(
                    f"FeatureConv: a circular kernel of size {k} needs at most d={d} taps."
                )
        m = shift + origin
        valid = (m >= 0) & (m < k)
        vals = self.kernel[..., np.clip(m, 0, k - 1)]
        return jnp.where(jnp.asarray(valid), vals, jnp.zeros((), self.kernel.dtype))

    def __call__(self, u: Float[Array, "n d"]) -> Float[Array, "n d"]:
        u = as_input("u", u, self.kernel.dtype, ndim=2)
        return jnp.matmul(u, self.matrix(u.shape[-1]).astype(u.dtype), precision=_HI)


TokenConv = DepthwiseConv2d | FeatureConv | None


class ConvAttentionParams(eqx.Module):
    """Controls of attention with convolutional projections (CvT).

    ``attn`` holds the pointwise maps W^Q_pw, W^K_pw, W^V_pw (with biases), the heads and
    the output map W_O, b_O; ``q_conv``/``k_conv``/``v_conv`` are applied before them
    (``None``: no convolution, HF's ``"linear"`` projection). ``scale`` overrides the
    score scale |Ω_η|^{-1/2} = 1/√d_k; HF's CvT uses ``embed_dim**-0.5`` (the full
    width, not the head width), and :func:`transflow.interop.from_hf` copies that.
    """

    attn: AttentionParams
    q_conv: DepthwiseConv2d | FeatureConv | None
    k_conv: DepthwiseConv2d | FeatureConv | None
    v_conv: DepthwiseConv2d | FeatureConv | None
    scale: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        owner = "ConvAttentionParams"
        check_kind("attn", self.attn, AttentionParams, owner, "AttentionParams.random(...)")
        for name in ("q_conv", "k_conv", "v_conv"):
            conv = getattr(self, name)
            if conv is not None:
                check_kind(name, conv, DepthwiseConv2d | FeatureConv, owner, "or None")
        if self.scale is not None:
            check_number("scale", self.scale, owner, lower=0, example="0.125")

    @property
    def d_model(self) -> int:
        return self.attn.wq.shape[-2]

    def attend(self, u, *, grid_shape=None, n_prefix=0, hardmax=False, temperature=1.0):
        """:func:`conv_attention` of these controls (the attention operator of
        :class:`ConvPreNormScheme`)."""
        return conv_attention(
            u,
            self,
            grid_shape=grid_shape,
            n_prefix=n_prefix,
            hardmax=hardmax,
            temperature=temperature,
        )


def _apply_conv(conv: TokenConv, u, grid_shape, n_prefix):
    if conv is None:
        return u
    if isinstance(conv, FeatureConv):
        return conv(u)
    if grid_shape is None:
        raise ValueError(
            "`grid_shape` is needed for convolutions over the 2-D token grid; pass "
            "grid_shape=(rows, columns) of the patch grid."
        )
    h, w = grid_shape
    n, d = u.shape
    if n != n_prefix + h * w:
        raise ValueError(
            f"`u` has {n} tokens but n_prefix + rows*columns = {n_prefix} + {h}*{w} = "
            f"{n_prefix + h * w} (grid_shape={tuple(grid_shape)})."
        )
    body = conv(u[n_prefix:].reshape(h, w, d)).reshape(-1, d)
    return jnp.concatenate([u[:n_prefix], body], axis=0)


def _check_grid_shape(grid_shape, owner: str) -> None:
    if grid_shape is None:
        return
    if not isinstance(grid_shape, tuple | list) or len(grid_shape) != 2:
        raise TypeError(
            f"{owner}: `grid_shape` must be (rows, columns) or None, got {grid_shape!r:.40}; "
            "pass e.g. grid_shape=(4, 4)."
        )
    for side in grid_shape:
        check_number("grid_shape", side, owner, lower=0, integer=True, example="(4, 4)")


def conv_attention(
    u: Float[Array, "n d"],
    p: ConvAttentionParams,
    *,
    grid_shape: tuple[int, int] | None = None,
    n_prefix: int = 0,
    hardmax: bool = False,
    temperature: float = 1.0,
    return_weights: bool = False,
):
    """Attention with convolutional Q/K/V projections (no residual), docs/spec/continuous-model.md
    §4.3.

    ``Q = conv_q(u) W^Q + b^Q`` on the query grid, ``K, V`` likewise on the (possibly
    strided, coarser) key grid; the kernel is ``γ = attention_weights(scale · Q Kᵀ)`` of
    shape ``(heads, n_q, n_kv)``, and the output ``Σ_m γ_m V_m W_O^{(m)} + b_O``. The first
    ``n_prefix`` tokens (a class token) bypass the token-grid convolutions and are
    re-attached in front of the convolved grid tokens. The output has one row per query
    token, so a residual update needs ``n_q = n`` (stride 1 and "same" padding for Q).

    Args:
        u: state ``(n_prefix + rows·columns, d)``, grid tokens row-major.
        p: :class:`ConvAttentionParams`.
        grid_shape: ``(rows, columns)`` of the token grid (needed for
            :class:`DepthwiseConv2d`).
        n_prefix: number of leading tokens that are not on the grid.
        hardmax, temperature: as in :func:`transflow.attention_weights`.
        return_weights: also return γ.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import AttentionParams
        >>> from transflow.vision import ConvAttentionParams, DepthwiseConv2d, conv_attention
        >>> ks = jax.random.split(jax.random.key(0), 3)
        >>> conv = lambda k, s: DepthwiseConv2d.random(8, stride=s, key=k)
        >>> p = ConvAttentionParams(AttentionParams.random(8, n_heads=2, key=ks[0]),
        ...                         conv(ks[1], 1), conv(ks[2], 2), conv(ks[2], 2))
        >>> out, g = conv_attention(jnp.ones((1 + 12, 8)), p, grid_shape=(3, 4), n_prefix=1,
        ...                         return_weights=True)
        >>> out.shape, g.shape
        ((13, 8), (2, 13, 5))
    """
    owner = "conv_attention"
    check_kind("p", p, ConvAttentionParams, owner)
    u = as_input("u", u, param_dtype(p), ndim=2, shape=(None, p.d_model))
    _check_grid_shape(grid_shape, owner)
    check_number("n_prefix", n_prefix, owner, lower=0, strict=False, integer=True, example="1")
    check_flag("hardmax", hardmax, owner)
    check_temperature(owner, temperature)
    check_flag("return_weights", return_weights, owner)
    a = p.attn
    H, dk, dv = a.n_heads, a.head_dim, a.value_dim
    uq = _apply_conv(p.q_conv, u, grid_shape, n_prefix)
    uk = _apply_conv(p.k_conv, u, grid_shape, n_prefix)
    uv = _apply_conv(p.v_conv, u, grid_shape, n_prefix)
    if uq.shape[0] != u.shape[0]:
        raise ValueError(
            f"the query convolution maps {u.shape[0]} tokens to {uq.shape[0]}; a residual "
            "update needs one query per token (q_conv with stride 1 and 'same' padding, "
            "e.g. kernel 3 with padding 1)."
        )
    mm = lambda x, w: jnp.matmul(x, w, precision=_HI)
    q = (mm(uq, a.wq) + a.bq).reshape(-1, H, dk)
    k = (mm(uk, a.wk) + a.bk).reshape(-1, H, dk)
    v = (mm(uv, a.wv) + a.bv).reshape(-1, H, dv)
    scale = dk**-0.5 if p.scale is None else p.scale
    scores = jnp.einsum("ihc,jhc->hij", q, k, precision=_HI) * jnp.asarray(scale, u.dtype)
    gamma = attention_weights(scores, hardmax=hardmax, temperature=temperature)
    heads = jnp.einsum("hij,jhc->ihc", gamma, v, precision=_HI).reshape(-1, H * dv)
    out = mm(heads, a.wo) + a.bo
    return (out, gamma) if return_weights else out


class ConvLayerControls(eqx.Module):
    """Controls of one pre-LN CvT layer: conv attention, two LayerNorms and the FFN."""

    attn: ConvAttentionParams
    norm1: NormParams
    ffn: FFNParams
    norm2: NormParams

    def __check_init__(self):
        owner = "ConvLayerControls"
        check_kind("attn", self.attn, ConvAttentionParams, owner)
        check_kind("norm1", self.norm1, NormParams, owner)
        check_kind("ffn", self.ffn, FFNParams, owner)
        check_kind("norm2", self.norm2, NormParams, owner)
        d = self.attn.d_model
        for name in ("norm1", "norm2"):
            got = getattr(self, name).gain.shape[-1:]
            if got not in ((), (d,)):
                raise ValueError(
                    f"{owner}: `{name}` acts on {got[0]} features but `attn` on d = {d}; "
                    "the sub-steps of one layer need the same d."
                )

    @property
    def d_model(self) -> int:
        return self.attn.d_model


def _project(v, norm: NormParams):
    return project_s1(v, norm.bias, norm.gain, eps=norm.eps)


class ConvEmbedding(eqx.Module):
    """CvT's convolutional token embedding: strided Conv2d, then LayerNorm per token.

    ``kernel`` has torch's layout ``(D, C, k_h, k_w)``. Maps a feature map ``(C, H, W)`` to
    tokens ``(h·w, D)`` (row-major) on the next, coarser token grid: a change of
    discretization between stages (docs/spec/continuous-model.md §4.3 [R]).
    """

    kernel: Float[Array, "d c kh kw"]
    bias: Float[Array, " d"]
    norm: NormParams | None
    stride: int = eqx.field(static=True, default=1)
    padding: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        owner = "ConvEmbedding"
        d = check_values("kernel", self.kernel, owner, ndim=4).shape[0]
        check_values("bias", self.bias, owner, shape=(d,))
        if self.norm is not None:
            check_kind("norm", self.norm, NormParams, owner, "or None")
        check_sizes(owner, stride=self.stride)
        check_number("padding", self.padding, owner, lower=0, strict=False, integer=True)

    def output_shape(self, hw: tuple[int, int]) -> tuple[int, int]:
        kh, kw = self.kernel.shape[-2:]
        return (
            _conv_output_size(hw[0], kh, self.stride, self.padding),
            _conv_output_size(hw[1], kw, self.stride, self.padding),
        )

    def __call__(self, x: Float[Array, "c h w"]) -> Float[Array, "n d"]:
        x = as_input(
            "x",
            x,
            self.kernel.dtype,
            ndim=3,
            shape=(self.kernel.shape[1], None, None),
            nonempty=(1, 2),
        )
        p = self.padding
        out = jax.lax.conv_general_dilated(
            x[None].astype(self.kernel.dtype),
            self.kernel,
            (self.stride, self.stride),
            ((p, p), (p, p)),
            precision=_HI,
        )[0]
        d = out.shape[0]
        u = out.reshape(d, -1).T + self.bias
        return u if self.norm is None else _project(u, self.norm)


class CvtStageModel(eqx.Module):
    """One CvT stage: conv embedding → [class token] → N pre-LN conv-attention steps.

    ``stage(x)`` maps a feature map ``(C, H, W)`` (pixels for stage 0) to
    ``(hidden (D, h, w), cls_token (D,) or None)``, like HF's ``CvtStage`` for one image.
    """

    embedding: ConvEmbedding
    cls_token: Float[Array, " d"] | None
    controls: ConvLayerControls
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        owner = "CvtStageModel"
        check_kind("embedding", self.embedding, ConvEmbedding, owner)
        check_kind("controls", self.controls, ConvLayerControls, owner)
        num_steps(self.controls)
        d = self.controls.d_model
        if self.embedding.kernel.shape[0] != d:
            raise ValueError(
                f"{owner}: `embedding` makes {self.embedding.kernel.shape[0]} features but "
                f"`controls` act on d = {d}; they must match."
            )
        if self.cls_token is not None:
            check_values("cls_token", self.cls_token, owner, shape=(d,))
        check_flag("hardmax", self.hardmax, owner)
        check_temperature(owner, self.temperature)

    def scheme(self, grid_shape: tuple[int, int]) -> ConvPreNormScheme:
        return ConvPreNormScheme(
            tuple(grid_shape), 0 if self.cls_token is None else 1, self.hardmax, self.temperature
        )

    def initial_condition(self, x: Float[Array, "c h w"]):
        """f on the stage's token grid and the grid shape ``(rows, columns)``."""
        hw = self.embedding.output_shape(x.shape[-2:])
        u = self.embedding(x)
        if self.cls_token is not None:
            u = jnp.concatenate([self.cls_token[None].astype(u.dtype), u], axis=0)
        return u, hw

    def __call__(self, x: Float[Array, "c h w"]):
        u0, (h, w) = self.initial_condition(x)
        u = evolve(u0, self.controls, self.scheme((h, w)))
        n0 = 0 if self.cls_token is None else 1
        hidden = u[n0:].T.reshape(-1, h, w)
        return hidden, (u[0] if n0 else None)


class CvtModel(eqx.Module):
    """A whole CvT (HF ``CvtModel``): its stages in turn, each a :class:`CvtStageModel`.

    ``model(x)`` maps an image ``(C, H, W)`` to ``(last_hidden_state (D, h, w),
    cls_token_value (D,) or None)``: stage s maps the feature map of stage s − 1 (pixels
    for stage 0), as HF's ``CvtEncoder``; the class token is the last stage's.
    """

    stages: tuple[CvtStageModel, ...]

    def __check_init__(self):
        if not isinstance(self.stages, tuple | list) or not self.stages:
            raise ValueError(
                f"CvtModel: `stages` must be a non-empty tuple of CvtStageModel, got "
                f"{self.stages!r:.40}."
            )
        for i, stage in enumerate(self.stages):
            check_kind(f"stages[{i}]", stage, CvtStageModel, "CvtModel")

    def __call__(self, x: Float[Array, "c h w"]):
        cls = None
        for stage in self.stages:
            x, cls = stage(x)
        return x, cls

"""T5 encoders and encoder–decoders (T5 v1.0, v1.1, flan-T5): :class:`T5Encoder`,
:class:`T5EncoderDecoder`, their stacks :class:`T5Stack`, one step's controls
:class:`T5LayerControls` and the :class:`RelativePositionBias`.

Continuous readings (docs/models.md, docs/architectures.md):

- **Relative position buckets** (:class:`RelativePositionBias`): each head m adds
  ``b_m(x̃ − x)`` to the attention logits, so the attention kernel is
  ``γ_m(x, x̃) ∝ exp(⟨Q u(x), K u(x̃)⟩ + b_m(x̃ − x))``: a translation-invariant kernel
  (it depends on the positions only through x̃ − x) multiplying the content kernel. b_m
  is piecewise constant: exact for |x̃ − x| < B/2 (B buckets per direction), then on
  logarithmically growing bins up to ``max_distance``, constant beyond. The encoder's
  bias is bidirectional (x̃ > x and x̃ < x have separate values); the decoder's is
  unidirectional (only x̃ ≤ x is distinguished; with the causal mask the others do not
  enter). As in HF, the first layer holds the table and every layer uses it: the bias
  is one field of the stack, not of a step.
- **T5's LayerNorm** is RMS normalization without mean subtraction and without bias:
  ``gain · v / sqrt(mean_y v² + ε)``, the projection onto the sphere
  ``{u : |Ω_y|⁻¹ ∫ u² dy = 1}`` (Theorem 3.1's S1 without the mean constraint,
  :func:`transflow.interop.project_sphere`), then the per-feature gain.
- **No 1/sqrt(d_k) scaling:** T5's scores are ``⟨Q u(x), K u(x̃)⟩`` (the scale is folded
  into the initialisation of W^Q); transflow's attention runs with ``scale=1``.
- **FFN:** ``W_o act(W_i z)`` (v1.0: ReLU, the projection onto S2) or, with
  ``feed_forward_proj="gated-gelu"`` (v1.1, flan), ``W_o (gelu(W_0 z) ⊙ W_1 z)``: an
  explicit step of a gated operator (:class:`transflow.interop.GatedFFNParams`).
- **Scheme:** pre-norm residual steps (docs/spec/continuous-model.md §4.2):
  ``u¹ = u + 𝒜(P u)``, [decoder: ``u² = u¹ + 𝒜_cross(P u¹; m)`` with the encoder's
  output m as the memory, an integral over the memory's own token domain], then
  ``u³ = u² + ℱ(P u²)``; the stack ends with a closing RMS projection.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._controls import AttentionParams, FFNParams, num_steps
from .._errors import check_array, check_flag, check_kind, check_number, check_sizes, check_values
from .._llama_ops import GatedFFNParams, RMSNormParams, gated_ffn, project_sphere
from .._operators import attention, cross_attention
from ..schemes._base import ffn_branch
from ._heads import AbstractLanguageModel

__all__ = [
    "RelativePositionBias",
    "T5Encoder",
    "T5EncoderDecoder",
    "T5LayerControls",
    "T5Stack",
    "relative_position_buckets",
]


def relative_position_buckets(
    relative_position: np.ndarray, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> np.ndarray:
    """T5's bucket of each relative position ``x̃ − x`` (integers, numpy).

    HF's ``T5Attention._relative_position_bucket`` (Mesh TensorFlow's), computed as HF
    computes it (the logarithm in float32), so the buckets are HF's exactly. Below, 8
    buckets (4 per direction): offsets 0 and ±1 are exact, ±2 and ±3 share a log bin.

    Example:
        >>> import numpy as np
        >>> from transflow.models import relative_position_buckets
        >>> relative_position_buckets(np.arange(-3, 4), bidirectional=True, num_buckets=8,
        ...                           max_distance=16).tolist()
        [2, 2, 1, 0, 5, 6, 6]
    """
    check_flag("bidirectional", bidirectional, "relative_position_buckets")
    check_sizes("relative_position_buckets", max_distance=max_distance)
    # two buckets per direction at least: an exact one and a logarithmic one
    check_number(
        "num_buckets",
        num_buckets,
        "relative_position_buckets",
        lower=4 if bidirectional else 2,
        strict=False,
        integer=True,
        example="32",
    )
    r = np.asarray(relative_position, np.int64)
    out = np.zeros_like(r)
    n = int(num_buckets)
    if bidirectional:
        n //= 2
        out += (r > 0).astype(np.int64) * n
        r = np.abs(r)
    else:
        r = -np.minimum(r, 0)
    exact = n // 2
    small = r < exact
    with np.errstate(divide="ignore"):
        v = (
            np.log(r.astype(np.float32) / np.float32(exact))
            / np.float32(math.log(max_distance / exact))
            * np.float32(n - exact)
        )
    large = exact + np.where(small, 0, v).astype(np.int64)
    large = np.minimum(large, n - 1)
    return out + np.where(small, r, large)


class RelativePositionBias(eqx.Module):
    """The bias ``b_m(x̃ − x)`` of every head on the logits (see the module docstring).

    ``table`` is HF's ``relative_attention_bias.weight`` ``(num_buckets, heads)``;
    ``bias(n_q, n_k)`` is ``(heads, n_q, n_k)``, entry ``[m, i, j] = table[bucket(j − i), m]``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.models import RelativePositionBias
        >>> b = RelativePositionBias(jnp.arange(16.0).reshape(8, 2), bidirectional=True,
        ...                          max_distance=16)
        >>> b(3, 3)[0].tolist()
        [[0.0, 10.0, 12.0], [2.0, 0.0, 10.0], [4.0, 2.0, 0.0]]
    """

    table: Float[Array, "buckets heads"]
    bidirectional: bool = eqx.field(static=True, default=True)
    max_distance: int = eqx.field(static=True, default=128)

    def __check_init__(self):
        check_values("table", self.table, "RelativePositionBias", ndim=(2, 3))
        check_flag("bidirectional", self.bidirectional, "RelativePositionBias")
        check_sizes("RelativePositionBias", max_distance=self.max_distance)

    def buckets(self, n_q: int, n_k: int) -> np.ndarray:
        rel = np.arange(n_k)[None, :] - np.arange(n_q)[:, None]
        return relative_position_buckets(
            rel,
            bidirectional=self.bidirectional,
            num_buckets=self.table.shape[0],
            max_distance=self.max_distance,
        )

    def __call__(self, n_q: int, n_k: int) -> Float[Array, "heads n_q n_k"]:
        return jnp.moveaxis(self.table[self.buckets(n_q, n_k)], -1, 0)


class T5LayerControls(eqx.Module):
    """Controls of one T5 block: self-attention, [cross-attention], FFN, an RMS norm each.

    ``ffn`` is :class:`~transflow.FFNParams` (``wi`` then ``wo``, no biases, ReLU or
    another pointwise map) or :class:`~transflow.interop.GatedFFNParams` (gated-GELU).
    ``cross``/``cross_norm`` are ``None`` in the encoder.
    """

    attn: AttentionParams
    attn_norm: RMSNormParams
    ffn: FFNParams | GatedFFNParams
    ffn_norm: RMSNormParams
    cross: AttentionParams | None = None
    cross_norm: RMSNormParams | None = None

    def __check_init__(self):
        owner = "T5LayerControls"
        check_kind("attn", self.attn, AttentionParams, owner)
        check_kind("attn_norm", self.attn_norm, RMSNormParams, owner)
        check_kind("ffn", self.ffn, FFNParams | GatedFFNParams, owner)
        check_kind("ffn_norm", self.ffn_norm, RMSNormParams, owner)
        if (self.cross is None) != (self.cross_norm is None):
            raise ValueError(
                f"{owner}: `cross` and `cross_norm` go together (a decoder block has both, an "
                "encoder block neither)."
            )
        if self.cross is not None:
            check_kind("cross", self.cross, AttentionParams, owner, "or None")
            check_kind("cross_norm", self.cross_norm, RMSNormParams, owner, "or None")
        d = self.attn.wq.shape[-2]
        w_in = self.ffn.w_gate if isinstance(self.ffn, GatedFFNParams) else self.ffn.weights[0]
        sizes = {"ffn": w_in.shape[-2], "attn_norm": self.attn_norm.gain.shape[-1:]}
        sizes["ffn_norm"] = self.ffn_norm.gain.shape[-1:]
        if self.cross is not None:
            sizes["cross"] = self.cross.wq.shape[-2]
        for name, got in sizes.items():
            if got not in ((), (d,), d):
                raise ValueError(
                    f"{owner}: `{name}` acts on {got if isinstance(got, int) else got[0]} "
                    f"features but `attn` on d = {d}; the sub-steps of one block need one d."
                )


def _ffn(z, ffn):
    if isinstance(ffn, GatedFFNParams):
        return gated_ffn(z, ffn)
    return ffn_branch(z, ffn)


def _check_mask(name, mask, n):
    if mask is not None:
        check_array(name, mask, shape=(n,), floating=False)


class T5Stack(eqx.Module):
    """A T5 encoder or decoder stack: pre-RMS-norm steps sharing one position bias.

    ``stack(f)`` (encoder) or ``stack(f, memory=m)`` (decoder, ``causal=True``) maps the
    embedded sequence f ``(n, d)`` to HF's ``last_hidden_state`` (the closing RMS norm
    included). ``controls`` are stacked along a leading layer axis and run as one
    ``lax.scan``. Masks (True = padded): ``key_padding_mask`` ``(n,)`` for f,
    ``memory_key_padding_mask`` ``(m,)`` for the memory.
    """

    controls: T5LayerControls
    position_bias: RelativePositionBias
    final_norm: RMSNormParams
    causal: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        owner = "T5Stack"
        check_kind("controls", self.controls, T5LayerControls, owner)
        if self.controls.attn.wq.ndim != 3:
            raise ValueError(
                f"{owner}: `controls` must be stacked along a leading layer axis (attn.wq of "
                f"shape (L, d, d)), got attn.wq of shape {tuple(self.controls.attn.wq.shape)}; "
                "stack the blocks with jax.tree.map(lambda *x: jnp.stack(x), *blocks)."
            )
        num_steps(self.controls)
        check_kind("position_bias", self.position_bias, RelativePositionBias, owner)
        check_kind("final_norm", self.final_norm, RMSNormParams, owner)
        check_flag("causal", self.causal, owner)

    @property
    def n_layers(self) -> int:
        return int(self.controls.attn.wq.shape[0])

    def __call__(
        self,
        f: Float[Array, "n d"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        memory: Float[Array, "m d"] | None = None,
        memory_key_padding_mask: Bool[Array, " m"] | None = None,
    ) -> Float[Array, "n d"]:
        check_array("f", f, ndim=2)
        n = f.shape[0]
        _check_mask("key_padding_mask", key_padding_mask, n)
        cross = self.controls.cross is not None
        if cross and memory is None:
            raise ValueError("this T5Stack is a decoder: pass `memory=` (the encoder output).")
        if not cross and memory is not None:
            raise ValueError("this T5Stack is an encoder (no cross-attention): drop `memory=`.")
        if memory is not None:
            check_array("memory", memory, ndim=2)
            _check_mask("memory_key_padding_mask", memory_key_padding_mask, memory.shape[0])
        bias = self.position_bias(n, n).astype(f.dtype)

        def norm(u, p):
            return project_sphere(u, p.gain, eps=p.eps)

        def step(u, c: T5LayerControls):
            z = norm(u, c.attn_norm)
            u = u + attention(
                z,
                c.attn,
                scale=1.0,
                causal=self.causal,
                key_padding_mask=key_padding_mask,
                attention_mask=bias,
            )
            if c.cross is not None:
                z = norm(u, c.cross_norm)
                u = u + cross_attention(
                    z, memory, c.cross, scale=1.0, key_padding_mask=memory_key_padding_mask
                )
            u = u + _ffn(norm(u, c.ffn_norm), c.ffn)
            return u, None

        u, _ = jax.lax.scan(step, f, self.controls)
        return norm(u, self.final_norm)


def _check_t5_table(owner: str, table, stacks: dict) -> int:
    """The token table (finite, ``(vocab, d)``) and stacks of the same d; returns d."""
    d = check_values("table", table, owner, ndim=2).shape[1]
    for name, stack in stacks.items():
        check_kind(name, stack, T5Stack, owner)
        got = stack.controls.attn.wq.shape[-2]
        if got != d:
            raise ValueError(
                f"{owner}: `{name}` acts on d = {got} features but `table` embeds {d}; they "
                "must match."
            )
    return d


def _embed(table, ids, name):
    check_array(name, ids, ndim=1, floating=False)
    if not jnp.issubdtype(ids.dtype, jnp.integer):
        raise TypeError(f"`{name}` must be integer token ids, got dtype {ids.dtype}.")
    return table[ids]


class T5Encoder(eqx.Module):
    """HF ``T5EncoderModel``: ``f = table[ids]`` → the encoder :class:`T5Stack`.

    ``model(ids, key_padding_mask=pad)`` is ``last_hidden_state`` of one sequence
    (``pad`` True = padded, i.e. HF's ``attention_mask == 0``); batch with ``jax.vmap``.
    """

    table: Float[Array, "vocab d"]
    encoder: T5Stack

    def __check_init__(self):
        _check_t5_table("T5Encoder", self.table, {"encoder": self.encoder})

    def initial_condition(self, ids: Int[Array, " n"]) -> Float[Array, "n d"]:
        return _embed(self.table, ids, "ids")

    def __call__(
        self, ids: Int[Array, " n"], *, key_padding_mask: Bool[Array, " n"] | None = None
    ) -> Float[Array, "n d"]:
        return self.encoder(self.initial_condition(ids), key_padding_mask=key_padding_mask)


class T5EncoderDecoder(AbstractLanguageModel):
    """HF ``T5Model`` / ``T5ForConditionalGeneration``: encoder, then the decoder driven
    by the encoder's output (cross-attention), one token table for both.

    ``model(ids, decoder_ids, key_padding_mask=..., decoder_key_padding_mask=...)`` is
    the decoder's ``last_hidden_state``; ``model.encode(ids, ...)`` the encoder's;
    ``model.logits(...)`` the LM logits of ``T5ForConditionalGeneration``
    (``lm_head(u · d^{-1/2})`` when HF scales the decoder output, i.e. tied embeddings).
    Masks: True = padded; the encoder's padding mask also masks the memory in the
    cross-attention, as HF's ``attention_mask``.
    """

    table: Float[Array, "vocab d"]
    encoder: T5Stack
    decoder: T5Stack
    lm_head: Float[Array, "d vocab"] | None = None
    scale_decoder_outputs: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        owner = "T5EncoderDecoder"
        d = _check_t5_table(owner, self.table, {"encoder": self.encoder, "decoder": self.decoder})
        if self.decoder.controls.cross is None:
            raise ValueError(f"{owner}: `decoder` must have cross-attention (a decoder T5Stack).")
        if self.lm_head is not None:
            check_values("lm_head", self.lm_head, owner, shape=(d, None))
        check_flag("scale_decoder_outputs", self.scale_decoder_outputs, owner)

    def encode(
        self, ids: Int[Array, " n"], *, key_padding_mask: Bool[Array, " n"] | None = None
    ) -> Float[Array, "n d"]:
        return self.encoder(_embed(self.table, ids, "ids"), key_padding_mask=key_padding_mask)

    def decode(
        self,
        decoder_ids: Int[Array, " t"],
        memory: Float[Array, "n d"],
        *,
        decoder_key_padding_mask: Bool[Array, " t"] | None = None,
        memory_key_padding_mask: Bool[Array, " n"] | None = None,
    ) -> Float[Array, "t d"]:
        return self.decoder(
            _embed(self.table, decoder_ids, "decoder_ids"),
            key_padding_mask=decoder_key_padding_mask,
            memory=memory,
            memory_key_padding_mask=memory_key_padding_mask,
        )

    def __call__(
        self,
        ids: Int[Array, " n"],
        decoder_ids: Int[Array, " t"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        decoder_key_padding_mask: Bool[Array, " t"] | None = None,
    ) -> Float[Array, "t d"]:
        memory = self.encode(ids, key_padding_mask=key_padding_mask)
        return self.decode(
            decoder_ids,
            memory,
            decoder_key_padding_mask=decoder_key_padding_mask,
            memory_key_padding_mask=key_padding_mask,
        )

    def logits(
        self,
        ids: Int[Array, " n"],
        decoder_ids: Int[Array, " t"],
        *,
        key_padding_mask: Bool[Array, " n"] | None = None,
        decoder_key_padding_mask: Bool[Array, " t"] | None = None,
    ) -> Float[Array, "t vocab"]:
        if self.lm_head is None:
            raise ValueError(
                "this T5EncoderDecoder has no `lm_head` (convert a T5ForConditionalGeneration)."
            )
        u = self(
            ids,
            decoder_ids,
            key_padding_mask=key_padding_mask,
            decoder_key_padding_mask=decoder_key_padding_mask,
        )
        if self.scale_decoder_outputs:
            u = u * (u.shape[-1] ** -0.5)
        return u @ self.lm_head

"""Task heads: read-outs applied after the flow (masked-LM and sequence classification).

A head is not part of the evolution: the flow maps the initial condition f to the final
state u_T, and the head reads u_T out, token by token (masked-LM logits) or at one token
(sequence classification: the first token for the BERT family, the last non-padding token
for GPT-2 and Llama). :class:`DenseHead` is a chain of affine maps, each followed by an
optional pointwise activation (:func:`transflow.activation_fn`) and an optional
LayerNorm (the projection onto S1); :class:`HeadModel` composes a converted model with a
head.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._controls import NormParams
from .._errors import check_choice, check_kind, check_number, check_values
from .._operators import activation_fn, project_s1, wmul

__all__ = ["AbstractLanguageModel", "DenseHead", "HeadModel"]


class AbstractLanguageModel(eqx.Module):
    """The capability of a model with a language-model head: ``model(...)`` is the final
    state (HF's ``last_hidden_state``) and ``model.logits(...)`` the vocabulary logits
    (HF's ``logits`` of ``...ForCausalLM`` / ``...ForConditionalGeneration``).

    A consumer that needs logits (the HF zoo's rows) asks ``isinstance(model,
    AbstractLanguageModel)``, never ``hasattr``: :class:`CausalDecoder`,
    :class:`RMSDecoder` and :class:`T5EncoderDecoder` declare it.
    """

    @abc.abstractmethod
    def logits(self, *args, **kwargs) -> Float[Array, "..."]:
        """The vocabulary logits of the model's inputs (the arguments of ``__call__``)."""


class DenseHead(eqx.Module):
    """``z ↦ … P_S1(act(z W₁ + b₁)) W₂ + b₂ …``: affine maps with optional activations
    and LayerNorms (``None`` = none), applied to the last axis.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.models import DenseHead
        >>> head = DenseHead((jnp.eye(3), jnp.ones((3, 2))), (jnp.zeros(3), jnp.zeros(2)),
        ...                  (None, None), ("tanh", None))
        >>> head(jnp.zeros((4, 3))).shape
        (4, 2)
    """

    weights: tuple[Float[Array, "din dout"], ...]
    biases: tuple[Float[Array, " dout"], ...]
    norms: tuple[NormParams | None, ...]
    activations: tuple[str | None, ...] = eqx.field(static=True)

    def __check_init__(self):
        owner = "DenseHead"
        for name in ("weights", "biases", "norms", "activations"):
            if not isinstance(getattr(self, name), tuple | list):
                raise TypeError(
                    f"{owner}: `{name}` must be a tuple with one entry per affine map, got "
                    f"{type(getattr(self, name)).__name__}."
                )
        n = len(self.weights)
        if not (len(self.biases) == len(self.norms) == len(self.activations) == n >= 1):
            raise ValueError(
                "DenseHead: `weights`, `biases`, `norms` and `activations` need one entry per "
                f"affine map; got lengths {len(self.weights)}, {len(self.biases)}, "
                f"{len(self.norms)}, {len(self.activations)}."
            )
        prev = None
        for i, (w, b, norm) in enumerate(zip(self.weights, self.biases, self.norms)):
            w = check_values(f"weights[{i}]", w, owner, ndim=2, shape=(prev, None))
            check_values(f"biases[{i}]", b, owner, ndim=1, shape=(w.shape[1],))
            if norm is not None:
                check_kind(f"norms[{i}]", norm, NormParams, owner, "or None")
            prev = w.shape[1]
        for a in self.activations:
            if a is not None:
                activation_fn(a)

    def __call__(self, z: Float[Array, "*n d"]) -> Float[Array, "*n k"]:
        for w, b, norm, act in zip(self.weights, self.biases, self.norms, self.activations):
            z = wmul(z, w) + b
            if act is not None:
                z = activation_fn(act)(z)
            if norm is not None:
                z = project_s1(z, norm.bias, norm.gain, eps=norm.eps)
        return z


class HeadModel(eqx.Module):
    """A converted model followed by a task head: ``model(ids, ...)`` returns the logits.

    ``pooling``: ``"tokens"`` (the head on every token: masked-LM logits ``(n, vocab)``),
    ``"first"`` (on the first token: BERT-family sequence classification, ``(labels,)``)
    or ``"last"`` (on the last token whose id is not ``pad_token_id``, HF's rule for GPT-2
    and Llama sequence classification; the last token if ``pad_token_id`` is ``None``).
    ``model.base`` is the model without its head (HF's base model), with the same masks
    (``key_padding_mask`` ``(n,)`` True = padded, ``attention_mask``).
    """

    base: eqx.Module
    head: DenseHead
    pooling: str = eqx.field(static=True, default="tokens")
    pad_token_id: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_kind("base", self.base, eqx.Module, "HeadModel", "pass a converted model")
        check_kind("head", self.head, DenseHead, "HeadModel")
        check_choice("pooling", self.pooling, ("tokens", "first", "last"))
        if self.pad_token_id is not None:
            check_number(
                "pad_token_id",
                self.pad_token_id,
                "HeadModel",
                lower=0,
                strict=False,
                integer=True,
                example="0",
            )

    def __call__(
        self,
        ids: Int[Array, " n"],
        *args,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> Float[Array, "..."]:
        u = self.base(ids, *args, key_padding_mask=key_padding_mask, attention_mask=attention_mask)
        if self.pooling == "tokens":
            return self.head(u)
        if self.pooling == "first":
            return self.head(u[0])
        if self.pad_token_id is None:
            return self.head(u[-1])
        positions = jnp.arange(ids.shape[0])
        last = jnp.argmax(positions * (ids != self.pad_token_id).astype(positions.dtype))
        return self.head(u[last])

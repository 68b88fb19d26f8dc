"""Attention masks as restrictions of the attention integral (docs/spec/reference-layers.md C1).

The attention kernel of the continuous model is a weighted softmax over the token grid,

    γ(x_i, x_j) = exp(λ s_ij + b_ij) w_j / Σ_m exp(λ s_im + b_im) w_m,

and every mask is a statement about the quadrature weights ``w_j`` or the log-reweighting
``b_ij`` of the kernel:

- ``key_padding_mask`` ``(n_keys,)`` bool, **True = padded** (torch's polarity): padded
  tokens x̃ get zero quadrature weight, ``w_j = 0`` (``log w_j = −∞``); the attention
  integral ∫ γ(x, x̃) V(x̃) dx̃ runs over the kept tokens only and the softmax normalises
  over them. Padded *query* rows still evolve (they attend to the kept tokens), but no
  kept row ever reads them: changing a padded token's value changes no kept row, exactly.
  Their values are those of torch's slow path (not the zeros of its nested-tensor path).
- ``attention_mask`` bool ``(n_q, n_k)`` (or ``(1|H, n_q, n_k)`` per head), **True = may
  attend** (transflow's polarity, as ``scaled_dot_product_attention``): it restricts the
  kernel's support, ``b_ij = −∞`` where False. A float ``attention_mask`` is the additive
  ``b_ij`` itself (a log-reweighting of the kernel; −∞ entries restrict the support).
  ``causal=True`` is the bool mask ``j ≤ i``.
- A row whose admissible set is empty (every key masked) has no softmax; transflow defines
  the integral over an empty domain as 0: every head contributes 0 and the operator's
  value there is the output bias ``b_O`` (𝒜u = b_O; with no bias the sub-step leaves u
  unchanged). torch's slow path returns NaN there (softmax of −∞ only); HuggingFace's
  additive masks use the dtype's finite minimum, so its rows become a softmax over the
  masked keys (transflow reproduces that exactly when given HF's float mask).

Converters at the library boundaries: :func:`mask_from_torch` (torch's bool masks are
True = *not* allowed), :func:`mask_from_hf` (HF 2-D ``attention_mask`` 1 = keep, or
its 4-D additive/boolean masks), :func:`causal_mask`, :func:`padding_mask`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from ._errors import _from_torch, _is_torch_tensor, check_number, is_array

__all__ = ["causal_mask", "padding_mask", "mask_from_torch", "mask_from_hf"]


def _is_bool(x) -> bool:
    return jnp.dtype(x.dtype) == jnp.bool_


def check_key_padding_mask(mask, n_keys: int, name: str = "key_padding_mask"):
    """Validate a key padding mask ``(n_keys,)`` bool (True = padded); returns it."""
    if mask is None:
        return None
    if not is_array(mask):
        raise TypeError(
            f"`{name}` must be a bool array of shape ({n_keys},) (True = padded), got "
            f"{type(mask).__name__}."
        )
    if tuple(mask.shape) != (n_keys,):
        hint = (
            " transflow acts on one sequence; batch with jax.vmap(model)(u, "
            f"{name}=mask) over a ({'batch'}, {n_keys}) mask."
            if len(mask.shape) == 2 and mask.shape[-1] == n_keys
            else ""
        )
        raise ValueError(
            f"`{name}` has shape {tuple(mask.shape)}; expected shape ({n_keys},) "
            f"(one bool per key token, True = padded).{hint}"
        )
    if not _is_bool(mask):
        raise TypeError(
            f"`{name}` must have dtype bool (True = padded, torch's polarity), got "
            f"{mask.dtype}. For a HuggingFace attention_mask (1 = keep) use "
            "`transflow.mask_from_hf(mask)`."
        )
    return jnp.asarray(mask)


def check_attention_mask(mask, n_q: int, n_k: int, n_heads: int, name: str = "attention_mask"):
    """Validate an attention mask; returns it as ``(1|H, n_q, n_k)`` (bool or float)."""
    if mask is None:
        return None
    want = f"({n_q}, {n_k}) or (1 or {n_heads}, {n_q}, {n_k})"
    if not is_array(mask):
        raise TypeError(
            f"`{name}` must be an array of shape {want} (bool, True = may attend, or an "
            f"additive float), got {type(mask).__name__}."
        )
    shape = tuple(mask.shape)
    ok = shape == (n_q, n_k) or (
        len(shape) == 3 and shape[0] in (1, n_heads) and shape[1:] == (n_q, n_k)
    )
    if not ok:
        raise ValueError(
            f"`{name}` has shape {shape}; expected shape {want} (queries × keys of one "
            "sequence; batch with jax.vmap)."
        )
    if not (_is_bool(mask) or jnp.issubdtype(mask.dtype, jnp.floating)):
        raise TypeError(
            f"`{name}` must be bool (True = may attend) or floating (added to the scores), "
            f"got dtype {mask.dtype}. torch's bool masks are True = NOT allowed: convert "
            "them with `transflow.mask_from_torch(mask)`."
        )
    mask = jnp.asarray(mask)
    return mask[None] if mask.ndim == 2 else mask


def key_log_weights(key_padding_mask, dtype):
    """``log w`` contribution of a key padding mask: 0 on kept keys, −∞ on padded ones."""
    return jnp.where(key_padding_mask, jnp.asarray(-jnp.inf, dtype), jnp.asarray(0, dtype))


def mask_bias(attention_mask, dtype):
    """The additive log-reweighting ``b_ij`` of an attention mask (bool → 0 / −∞)."""
    if _is_bool(attention_mask):
        return jnp.where(attention_mask, jnp.asarray(0, dtype), jnp.asarray(-jnp.inf, dtype))
    return attention_mask.astype(dtype)


# --------------------------------------------------------------------------- public helpers
def _check_lengths(owner: str, **sizes) -> None:
    for name, size in sizes.items():
        check_number(name, size, owner, lower=0, integer=True, example="8")


def causal_mask(n_q: int, n_k: int | None = None) -> Bool[Array, "n_q n_k"]:
    """The causal attention mask ``j ≤ i`` (True = may attend), ``(n_q, n_k)``.

    Example:
        >>> from transflow import causal_mask
        >>> causal_mask(3).astype(int).tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    n_k = n_q if n_k is None else n_k
    _check_lengths(n_q=n_q, n_k=n_k, owner="causal_mask")
    return jnp.arange(n_k)[None, :] <= jnp.arange(n_q)[:, None]


def padding_mask(lengths, n: int) -> Bool[Array, "batch n"]:
    """Key padding masks ``(batch, n)`` (True = padded) of right-padded sequences.

    Example:
        >>> from transflow import padding_mask
        >>> padding_mask([1, 3], 3).astype(int).tolist()
        [[0, 1, 1], [0, 0, 0]]
    """
    _check_lengths(n=n, owner="padding_mask")
    lengths = jnp.asarray(lengths)
    return jnp.arange(n)[None, :] >= lengths[:, None]


def _mask_array(owner: str, mask, ranks: tuple[int, ...]):
    """``mask`` (a torch tensor or an array) as a jax array, checked: numbers or bools,
    one of the ``ranks``, not empty, no NaN (an additive float mask may hold -inf)."""
    if _is_torch_tensor(mask):
        mask = _from_torch("mask", mask)
    arr = np.asarray(mask) if not isinstance(mask, jnp.ndarray) else mask
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{owner}: `mask` must be an array of bools or numbers, got {type(mask).__name__} "
            f"{mask!r:.40}."
        )
    if arr.ndim not in ranks or arr.size == 0:
        raise ValueError(
            f"{owner}: `mask` must be a non-empty array of rank {' or '.join(map(str, ranks))}, "
            f"got shape {tuple(arr.shape)}."
        )
    if arr.dtype.kind == "f" and bool(jnp.any(jnp.isnan(arr))):
        raise ValueError(f"{owner}: `mask` contains NaN; an additive mask holds 0 or -inf.")
    return jnp.asarray(arr)


def mask_from_torch(mask) -> Bool[Array, "..."] | Float[Array, "..."]:
    """A torch ``attn_mask``/``src_mask``/``tgt_mask``/``memory_mask`` in transflow's polarity.

    torch's boolean masks mean True = **not** allowed (``nn.MultiheadAttention``); transflow's
    ``attention_mask`` means True = may attend, so bool masks are inverted. Float masks are
    additive in both and pass unchanged. ``key_padding_mask`` has the same polarity in
    both libraries (True = padded) and needs no conversion. Accepts torch tensors or arrays.

    Example:
        >>> import numpy as np
        >>> from transflow import mask_from_torch
        >>> mask_from_torch(np.triu(np.ones((2, 2), bool), 1)).astype(int).tolist()
        [[1, 0], [1, 1]]
    """
    mask = _mask_array("mask_from_torch", mask, (2, 3))
    if mask.dtype == bool:
        return jnp.logical_not(jnp.asarray(mask))
    return jnp.asarray(mask)


def mask_from_hf(mask) -> Bool[Array, "..."] | Float[Array, "..."]:
    """A HuggingFace attention mask in transflow's terms (one example or a batch).

    - 1-D ``(n,)`` / 2-D ``(batch, n)`` integer or bool ``attention_mask`` with 1 = keep,
      0 = padding (the tokenizer's output) → a ``key_padding_mask`` (True = padded).
    - 3-D ``(heads|1, n_q, n_k)`` / 4-D ``(batch, heads|1, n_q, n_k)`` extended masks:
      float (0 or the dtype's minimum, added to the scores) → a float ``attention_mask``
      (unchanged; HF's finite minimum is reproduced exactly, including its uniform weights
      on fully masked rows); bool (True = attend, as SDPA) → a bool ``attention_mask``.

    Example:
        >>> import numpy as np
        >>> from transflow import mask_from_hf
        >>> mask_from_hf(np.array([1, 1, 0])).tolist()
        [False, False, True]
    """
    mask = _mask_array("mask_from_hf", mask, (1, 2, 3, 4))
    if mask.ndim in (1, 2):
        if jnp.issubdtype(mask.dtype, jnp.floating) and mask.ndim == 2:
            raise ValueError(
                "`mask` is a 2-D float array: HF's 2-D attention_mask holds 0/1 integers "
                "(1 = keep). Pass it as integers, or an extended 3-D/4-D mask."
            )
        return mask == 0
    if mask.ndim in (3, 4):
        return mask
    raise ValueError(
        f"`mask` must be a HF attention_mask of rank 1-2 (1 = keep) or an extended mask of "
        f"rank 3-4, got shape {tuple(mask.shape)}."
    )

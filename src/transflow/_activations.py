"""Pointwise activations of the FFN sub-steps, by name (the lowest layer: no transflow
operator needed). :func:`project_s2` is the projection onto S2 = {u ≥ 0} (ReLU);
:func:`activation_fn` maps a name to its function. Re-exported by ``transflow._operators``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ._errors import as_input

__all__ = ["PROJECTION_ACTIVATIONS", "activation_fn", "project_s2"]


def project_s2(v: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Projection onto S2 = {u ≥ 0}: ``max(v, 0)`` (ReLU). Equals (I + τN_{S2})^{-1} ∀τ > 0."""
    return jnp.maximum(as_input("v", v, nonempty=()), 0)


def _gelu_fast(z):
    # HF's FastGELUActivation: the tanh approximation with the constant rounded to 10 digits
    return 0.5 * z * (1.0 + jnp.tanh(z * 0.7978845608 * (1.0 + 0.044715 * z * z)))


def _leaky_relu(slope: float):
    return lambda z: jnp.where(z >= 0, z, z * slope)


_ACTIVATIONS = {
    "relu": project_s2,
    "relu6": lambda z: jnp.clip(z, 0, 6),
    "identity": lambda z: z,
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
    "gelu_tanh": lambda z: jax.nn.gelu(z, approximate=True),
    "gelu_fast": _gelu_fast,
    "quick_gelu": lambda z: z * jax.nn.sigmoid(1.702 * z),
    "silu": jax.nn.silu,
    "mish": lambda z: z * jnp.tanh(jax.nn.softplus(z)),
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "leaky_relu": _leaky_relu(0.01),
}

#: Activations that are projections onto a closed convex set of the hidden field (an
#: implicit step, the same for every Δt): relu onto S2 = {u ≥ 0}, relu6 onto the box
#: {0 ≤ u ≤ 6}, identity onto the whole space. Every other activation is an explicit
#: pointwise map.
PROJECTION_ACTIVATIONS = ("relu", "relu6", "identity")


def activation_fn(name: str):
    """Pointwise activation of the FFN sub-step by name.

    - projections (:data:`PROJECTION_ACTIVATIONS`): ``relu`` (onto S2 = {u ≥ 0}),
      ``relu6`` (onto the box {0 ≤ u ≤ 6}), ``identity``;
    - explicit pointwise maps (extensions): ``gelu`` (exact erf), ``gelu_tanh`` (the tanh
      approximation; HF's gelu_new / gelu_pytorch_tanh), ``gelu_fast`` (HF's, constant
      0.7978845608), ``quick_gelu`` (z σ(1.702 z)), ``silu`` (z σ(z), swish), ``mish``
      (z tanh(softplus z)), ``tanh``, ``sigmoid``, ``leaky_relu`` (slope 0.01) and
      ``leaky_relu:<slope>`` (e.g. ``"leaky_relu:0.2"``; not a projection: it is not
      idempotent).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow._operators import activation_fn
        >>> activation_fn("leaky_relu:0.5")(jnp.array([-2.0, 3.0])).tolist()
        [-1.0, 3.0]
    """
    if isinstance(name, str) and name.startswith("leaky_relu:"):
        try:
            slope = float(name.split(":", 1)[1])
        except ValueError:
            slope = float("nan")
        if slope == slope and abs(slope) != float("inf"):
            return _leaky_relu(slope)
    try:
        return _ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unsupported activation {name!r} (`activation`); expected one of "
            f"{sorted(_ACTIVATIONS)} or 'leaky_relu:<slope>'."
        ) from None

"""The scheme abstraction: what every splitting scheme declares, and the shared sub-steps.

A scheme (:class:`AbstractScheme`) is a small immutable object for one time step of the
continuous model, i.e. one layer, as diffrax keeps its solvers: its ``step`` (one call
signature for every scheme: :meth:`AbstractScheme.step` hands the state, the controls,
Δt, the grid, causality and the masks to the family's :meth:`~AbstractScheme.advance`),
its ``substep_names``, whether it is ``consistent`` (has a continuous limit), and then its
``vector_field`` (∂/∂Δt of the step at Δt = 0); families with a declared order of
convergence carry an ``order`` (:func:`transflow.declared_order`).

The sub-steps every family is written in live here once: the attention sub-step
(:func:`attend`), the projection onto S1 (``_project``), the FFN branch
(:func:`ffn_branch`) and the mask keywords.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .._controls import FFNParams, LayerControls, NormParams
from .._errors import check_choice
from .._grid import Grid
from .._operators import Implementation, activation_fn, attention, project_s1, wmul

__all__ = ["AbstractScheme", "AttentionOptions", "check_consistent", "check_masks", "ffn_branch"]

Substeps = dict[str, Float[Array, "n d"]]


def _project(v, norm: NormParams, grid: Grid | None, eps_scale: float = 1.0):
    return project_s1(
        v,
        norm.bias,
        norm.gain,
        eps=norm.eps * eps_scale,
        y_weights=None if grid is None else grid.y_weights,
    )


def _ffn_substep(z: Float[Array, "n d"], ffn: FFNParams, j: int, dt: float | Array):
    """FFN sub-step ``j`` without its activation: ``Z + dt (Z W_j + b_j)`` (residual) or
    ``Z W_j + b_j`` (lifting). Shared by :func:`ffn_branch` and ``transflow.continuous``."""
    lin = wmul(z, ffn.weights[j]) + ffn.biases[j]
    return z + dt * lin if ffn.residual[j] else lin


def _masks(key_padding_mask, attention_mask) -> dict:
    """The mask keywords that are set (none: the unmasked call, unchanged)."""
    out = {}
    if key_padding_mask is not None:
        out["key_padding_mask"] = key_padding_mask
    if attention_mask is not None:
        out["attention_mask"] = attention_mask
    return out


def check_masks(scheme, u, n_heads, key_padding_mask, attention_mask) -> dict:
    """Validate per-sequence masks for ``u`` before any compilation; the set keywords."""
    masks = _masks(key_padding_mask, attention_mask)
    if not masks:
        return masks
    import inspect

    from .._masks import check_attention_mask, check_key_padding_mask

    n = u.shape[0]
    check_key_padding_mask(key_padding_mask, n)
    check_attention_mask(attention_mask, n, n, n_heads)
    params = inspect.signature(scheme.step).parameters
    missing = [k for k in masks if k not in params]
    if missing:
        raise TypeError(
            f"{type(scheme).__name__}.step does not take {missing[0]}=; masks are supported "
            "by LieScheme, PreNormScheme and CausalScheme (and schemes whose step accepts "
            "key_padding_mask/attention_mask)."
        )
    return masks


def check_tau(owner: str, tau) -> None:
    """ValueError unless ``tau`` (the relaxation time of relaxed projections) is > 0."""
    if isinstance(tau, bool) or not isinstance(tau, int | float) or not tau > 0:
        raise ValueError(
            f"{owner}: `tau` (the relaxation time of the projections) must be a number > 0, "
            f"got {tau!r}; tau = dt gives the paper's exact projections."
        )


def attend(scheme, v, attn, *, grid, causal, masks):
    """The attention operator 𝒜(v) of a scheme's controls with the scheme's kernel options
    (``hardmax``, ``temperature``, ``implementation``): the one attention call of every
    family's sub-steps."""
    return attention(
        v,
        attn,
        grid=grid,
        causal=causal,
        hardmax=scheme.hardmax,
        temperature=scheme.temperature,
        implementation=scheme.implementation,
        **masks,
    )


def _exact(u, p):
    """The exact projection sub-step ``P(u)`` (the paper's; see :meth:`LieScheme.toward`)."""
    return p


def ffn_branch(
    z: Float[Array, "n d"], ffn: FFNParams, dt: float | Array = 1.0, *, record: bool = False
):
    """Run the J FFN sub-steps on ``z``; returns the branch output (and sub-step states).

    Residual sub-steps are explicit Euler steps ``Z + dt (Z W + b)``; lifting sub-steps
    are ``Z W + b``. The activation (for ReLU: the projection onto S2) follows every
    sub-step but the last, or every sub-step if ``ffn.activation_on_last``.
    """
    return _ffn_branch(z, ffn, dt, _exact, record)


def _ffn_branch(z, ffn: FFNParams, dt, toward, record: bool):
    """:func:`ffn_branch` whose activation sub-steps are ``toward(z, act(z))``."""
    act = activation_fn(ffn.activation)
    J = ffn.num_substeps
    states = []
    for j in range(J):
        z = _ffn_substep(z, ffn, j, dt)
        if j < J - 1 or ffn.activation_on_last:
            z = toward(z, act(z))
        states.append(z)
    return (z, states) if record else z


class AbstractScheme(eqx.Module):
    """A splitting scheme: maps (u at tⁿ, controls θⁿ, Δt) to u at tⁿ⁺¹."""

    def step(
        self,
        u: Float[Array, "n d"],
        controls: LayerControls,
        dt: float | Array = 1.0,
        *,
        grid: Grid | None = None,
        causal: bool = False,
        return_substeps: bool = False,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ):
        """One step. Schemes that take masks accept ``key_padding_mask`` (True = padded)
        and ``attention_mask`` (True = may attend, or additive float) and pass them to
        every attention sub-step (see :func:`transflow.attention`); a scheme without
        these keywords is refused by :func:`evolve` when masks are given.

        Written once for every family: the family's :meth:`advance` computes the next
        state and the sub-step states; ``return_substeps=True`` names them by
        :meth:`substep_names`."""
        masks = _masks(key_padding_mask, attention_mask)
        out, states = self.advance(u, controls, dt, grid=grid, causal=causal, masks=masks)
        if not return_substeps:
            return out
        return out, dict(zip(self.substep_names(controls), states))

    def advance(self, u, controls, dt, *, grid, causal, masks) -> tuple:
        """The family's step: ``(u at tⁿ⁺¹, the sub-step states)`` (``masks``: the mask
        keywords that are set, for every attention sub-step)."""
        raise NotImplementedError

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def ffn_copies(self) -> int:
        """How many FFNs the scheme's controls hold one after the other in ``ffn`` (1; 2 for
        the untied Macaron layer, whose two half-steps have their own FFN). The model
        builders draw the controls with ``LayerControls.random(..., ffn_copies=...)``."""
        return 1

    @property
    def consistent(self) -> bool:
        """Whether ``step(u, θ, Δt) = u + Δt f(u, θ) + O(Δt²)`` for a vector field f (the
        scheme has a continuous limit, :meth:`vector_field`). True unless a scheme says
        otherwise (the paper's :class:`LieScheme`: its projections do not depend on Δt)."""
        return True

    def vector_field(
        self, u: Float[Array, "n d"], controls: LayerControls, *, grid: Grid | None = None
    ) -> Float[Array, "n d"]:
        """``f(u, θ) = ∂/∂Δt step(u, θ, Δt) at Δt = 0`` (one forward-mode JVP of one step).

        The continuous right-hand side of a consistent scheme
        (:func:`transflow.continuous.vector_field` evaluates it along a path).
        """
        check_consistent(self)

        def step(dt):
            return self.step(u, controls, dt, grid=grid)

        zero = jnp.zeros((), u.dtype)
        return jax.jvp(step, (zero,), (jnp.ones_like(zero),))[1]


class AttentionOptions(AbstractScheme):
    """The attention kernel options every family with an attention sub-step carries,
    declared once (keyword-only, so each family's own fields keep their positions):
    ``hardmax``, ``temperature`` (see :func:`transflow.attention_weights`) and
    ``implementation`` (``"auto"``, ``"dense"`` or ``"chunked"``, see
    :func:`transflow.attention`; the same operator up to round-off)."""

    hardmax: bool = eqx.field(static=True, default=False, kw_only=True)
    temperature: float = eqx.field(static=True, default=1.0, kw_only=True)
    implementation: Implementation = eqx.field(static=True, default="auto", kw_only=True)

    def __check_init__(self):
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))


def check_consistent(scheme) -> None:
    """TypeError unless ``scheme`` is a scheme with a vector field (:attr:`consistent`)."""
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    if not scheme.consistent:
        raise TypeError(
            "the paper's LieScheme is not consistent with an ODE (its projections do not "
            "depend on Δt), so it has no vector field; use RelaxedLieScheme(tau=...) (the "
            "relaxed post-LN reading) or PreNormScheme."
        )

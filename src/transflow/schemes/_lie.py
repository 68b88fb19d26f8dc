"""The Lie family: the paper's post-LN splitting and its relaxed reading.

The continuous model (docs/spec/continuous-model.md §2.5, sign convention of the toolkit)

    0 ∈ u_t − 𝒜(t; u) − Σ_j (𝒲_j(t) u + b_j(t)) + N_{S1(σ1, σ2)}(u) + N_{S2}(u)

is split into M = 4 + J sub-problems per time step (docs/spec/continuous-model.md §3.2,
:class:`LieScheme`):

1. attention, explicit Euler:       u¹ = u⁰ + Δt 𝒜(u⁰)
2. projection onto S1:              u² = P_{S1}(u¹)           (implicit; Δt-independent)
3..2+J. FFN sub-steps:              Z ← Z + Δt(Z W_j + b_j), then P_{S2} for j < J
3+J. relaxation (skip connection):  u^{3+J} = ½ (u^{2+J} + u²)
4+J. projection onto S1:            u^{n+1} = P_{S1}(u^{3+J})

With Δt = 1 this is exactly one post-LN Transformer encoder layer (docs/spec/continuous-model.md
§3.5).

A scheme is a small immutable object with a ``step`` method; schemes carry options (such
as the FFN branch time step of docs/spec/continuous-model.md §3.2) but no state. A
consistent scheme (``consistent``) also has a continuous limit, its ``vector_field``.
:class:`RelaxedLieScheme` is the Lie scheme with every projection P relaxed to
``u + (Δt/τ)(P(u) − u)`` (the same step code, :func:`_post_ln_step`, with another
``toward``): the two are siblings on :class:`AbstractLieScheme`, each final.
"""

import abc

import equinox as eqx

from .._controls import FFN_BRANCH_DT, FfnBranchDt, LayerControls, NormParams
from .._errors import check_choice
from ._base import (
    AbstractMaskable,
    AbstractODEScheme,
    AbstractPostNorm,
    AbstractShardable,
    AttentionOptions,
    DenseOperators,
    _exact,
    _ffn_branch,
    _masks,
    _project,
    check_tau,
)

__all__ = ["AbstractLieScheme", "LieScheme", "RelaxedLieScheme"]


class AbstractLieScheme(AttentionOptions, AbstractShardable, AbstractMaskable, AbstractPostNorm):
    """The post-LN Lie step of :class:`LieScheme` with its projection sub-steps
    ``toward(dt)`` (exact, or relaxed at rate 1/τ): the step both siblings share."""

    ffn_branch_dt: eqx.AbstractVar[FfnBranchDt]

    @abc.abstractmethod
    def toward(self, dt):
        """The projection sub-steps ``(u, P(u)) -> u⁺``."""

    nodes = (0.5,)

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("attention", "ln1", *(f"ffn{j + 1}" for j in range(J)), "relax", "ln2")

    def attention_substep(
        self,
        u,
        attn,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        """Sub-step 1, explicit Euler on attention: ``u + Δt 𝒜(u)`` (masks: see
        :func:`transflow.attention`)."""
        ops = DenseOperators(grid, causal, _masks(key_padding_mask, attention_mask))
        return u + dt * ops.attention(self, u, attn)

    @staticmethod
    def norm_substep(v, norm: NormParams, *, grid=None, closing: bool = False):
        """Sub-steps 2 (``closing=False``) and 4+J (``closing=True``, with ε/4): P_S1."""
        return _project(v, norm, grid, eps_scale=0.25 if closing else 1.0)

    def advance(self, u, controls, dt, *, ops):
        return _post_ln_step(self, u, controls, dt, ops, self.toward(dt))


def _post_ln_step(scheme, u, c, dt, ops, toward):
    """The M = 4 + J sub-steps of the post-LN Lie step with projection sub-steps ``toward``
    (exact: :class:`LieScheme`; relaxed: :class:`RelaxedLieScheme`), in the operators
    ``ops``."""
    u1 = u + dt * ops.attention(scheme, u, c.attn)
    u2 = toward(u1, ops.project(u1, c.norm1))
    ffn_dt = dt if scheme.ffn_branch_dt == "dt" else 2 * dt
    z, states = _ffn_branch(u2, c.ffn, ffn_dt, toward, True, ops.linear)
    u5 = 0.5 * (z + u2)
    u6 = toward(u5, ops.project(u5, c.norm2, 0.25))
    return u6, (u1, u2, *states, u5, u6)


class LieScheme(AbstractLieScheme):
    """The paper's sequential (Lie) splitting, M = 4 + J sub-steps (docs/spec/continuous-model.md
    §3.2).

    Options:
        ffn_branch_dt: ``"dt"`` (paper-literal: the FFN sub-steps use Δt) or ``"2dt"``
            (the consistent parallel reading of the ½ relaxation, docs/spec/continuous-model.md §3.2
            / Q10: the FFN branch of a K = 2 parallel splitting runs with 2Δt). Irrelevant for
            lifting sub-steps, which have no Δt.
        hardmax, temperature: attention kernel options (see :func:`attention_weights`).
        implementation: how the attention operator is evaluated, ``"auto"`` (default),
            ``"dense"`` or ``"chunked"`` (memory linear in the token grid); see
            :func:`transflow.attention`. The same operator up to round-off.

    The closing projection uses ``ε/4`` when the layer's ``eps = ε > 0``: by LN's scale
    invariance LN_ε(w) = LN_{ε/4}(½ w) (docs/spec/continuous-model.md §8.7), so the scheme
    reproduces PyTorch's post-LN layer for every ε. With ε = 0 (the paper) both are the same
    projection.

    Not consistent with an ODE (its projections do not depend on Δt): it has no vector
    field and no order (:class:`RelaxedLieScheme` is the consistent reading).

    Sub-step names (``return_substeps=True``): ``attention``, ``ln1``, ``ffn1`` …
    ``ffnJ``, ``relax``, ``ln2``.
    """

    ffn_branch_dt: FfnBranchDt = eqx.field(static=True, default="dt")

    def __check_init__(self):
        check_choice("ffn_branch_dt", self.ffn_branch_dt, FFN_BRANCH_DT)

    def toward(self, dt):
        """The projection sub-steps ``(u, P(u)) -> u⁺``: the paper's exact ``P(u)``."""
        return _exact


class RelaxedLieScheme(AbstractLieScheme, AbstractODEScheme):
    """The post-LN Lie scheme with relaxed projections ``u + (Δt/τ)(P(u) − u)``.

    Every projection of :class:`~transflow.LieScheme` (the two LayerNorms and the S2
    activations between FFN sub-steps) becomes a relaxation towards the set at rate 1/τ;
    the attention and FFN sub-steps and the ½-relaxation are unchanged. With Δt = τ it is
    the paper's scheme (``u + (P(u) − u) = P(u)``); for fixed τ the scheme is consistent
    and refines at first order to the penalised ODE of :func:`vector_field`. Δt/τ > 1
    over-relaxes (past the set), so evaluate with Δt ≤ τ. FFN sub-steps must be residual
    (lifting maps ``Z W + b`` have no Δt).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, LieScheme
        >>> from transflow.continuous import RelaxedLieScheme
        >>> theta = LayerControls.random(4, key=jax.random.key(0))
        >>> u = jax.random.normal(jax.random.key(1), (3, 4))
        >>> a = RelaxedLieScheme(tau=1.0).step(u, theta, 1.0)  # Δt = τ: the paper's layer
        >>> bool(jnp.allclose(a, LieScheme().step(u, theta, 1.0), atol=1e-5))
        True
    """

    ffn_branch_dt: FfnBranchDt = eqx.field(static=True, default="dt")
    tau: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        check_tau("RelaxedLieScheme", self.tau)
        check_choice("ffn_branch_dt", self.ffn_branch_dt, FFN_BRANCH_DT)

    order = 1

    def advance(self, u, controls, dt, *, ops):
        if not all(controls.ffn.residual):
            raise ValueError(
                "RelaxedLieScheme needs residual FFN sub-steps (square W_j: Ω_y → Ω_y); "
                "lifting sub-steps (d_ff set) have no Δt, so no consistent relaxed reading."
            )
        return _post_ln_step(self, u, controls, dt, ops, self.toward(dt))

    def toward(self, dt):
        """The relaxed projection sub-steps ``u + (Δt/τ)(P(u) − u)``."""
        r = dt / self.tau
        return lambda u, p: u + r * (p - u)

"""The IMEX family: the post-LN Lie layer with implicit linear FFN sub-steps."""

from __future__ import annotations

from typing import Literal

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._controls import FFN_BRANCH_DT, FfnBranchDt, LayerControls
from .._errors import check_choice
from .._operators import activation_fn
from ._base import (
    AbstractImplicitFFN,
    AbstractMaskable,
    AbstractODEScheme,
    AttentionOptions,
    check_tau,
)
from ._subfields import Field, _identity

__all__ = ["IMEXScheme"]


class IMEXScheme(AttentionOptions, AbstractODEScheme, AbstractImplicitFFN, AbstractMaskable):
    """The post-LN Lie layer with implicit linear FFN sub-steps (a semi-implicit IMEX step).

    Sub-steps (those of :class:`~transflow.LieScheme`, docs/spec/continuous-model.md §3.2):

    1. attention, explicit:  u¹ = u + Δt 𝒜(u)
    2. P_{S1} relaxed:       u² = u¹ + (Δt/τ)(P_{S1}(u¹) − u¹)
    3. FFN sub-step j, **implicit**: Z ← (Z + s b_j)(I − s W_j)⁻¹ (s = Δt, or 2Δt with
       ``ffn_branch_dt="2dt"``), one ``jnp.linalg.solve`` per step and sub-step (an LU
       factorisation of the d×d matrix, the n tokens as right-hand sides), then the
       activation relaxed: Z ← Z + (Δt/τ)(act(Z) − Z) (not after the last sub-step);
    4. relaxation ½(Z + u²); 5. P_{S1} relaxed (closing, ε/4 as in LieScheme).

    With Δt = τ the relaxed projections are exact (the paper's projections); for fixed τ
    the scheme is consistent and first order, with the continuous limit of
    :class:`~transflow.continuous.RelaxedLieScheme` (the implicit and explicit linear
    sub-steps agree to O(Δt²)). On the linear FFN part it is A-stable: the factor of one
    sub-step is 1/(1 − sλ). Needs residual (square) FFN sub-steps.

    ``parameterization="dissipative"`` takes the implicit sub-steps with
    W_eff = W − Wᵀ − W Wᵀ (:meth:`dissipative_weight`; the same parameters W): its
    symmetric part −W Wᵀ is negative semi-definite, so Re λ(W_eff) ≤ 0 and
    σ_min(I − s W_eff) ≥ 1 for every s ≥ 0 (the solve has no pole; its inverse has norm
    ≤ 1). ``"free"`` (default) uses W as it is, whose eigenvalues may have Re λ > 0, which
    puts (I − s W) at a pole when s λ reaches 1 (issue 37: trained digits weights reach
    Re λ ≈ +1).

    Example:
        >>> import jax, numpy as np
        >>> from transflow import IMEXScheme, LayerControls
        >>> theta = LayerControls.random(8, key=jax.random.key(0))
        >>> w = np.asarray(theta.ffn.weights[0])
        >>> w_eff = np.asarray(IMEXScheme.dissipative_weight(w))  # W − Wᵀ − W Wᵀ
        >>> re = lambda m: np.linalg.eigvals(m).real.max()
        >>> bool(re(w) > 0), bool(re(w_eff) <= 0)  # W has a pole at s = 1/λ, W_eff none
        (True, True)
        >>> smin = [np.linalg.svd(np.eye(8) - s * w_eff)[1].min() for s in (0.5, 4, 100)]
        >>> bool(min(smin) >= 1)  # σ_min(I − s W_eff) ≥ 1: the solve's inverse has norm ≤ 1
        True
    """

    tau: float = eqx.field(static=True, default=1.0)
    ffn_branch_dt: FfnBranchDt = eqx.field(static=True, default="dt")
    parameterization: Literal["free", "dissipative"] = eqx.field(static=True, default="free")

    def __check_init__(self):
        check_tau("IMEXScheme", self.tau)
        check_choice("ffn_branch_dt", self.ffn_branch_dt, FFN_BRANCH_DT)
        check_choice("parameterization", self.parameterization, ("free", "dissipative"))

    order = 1
    nodes = (0.5,)

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("attention", "ln1", *(f"ffn{j + 1}" for j in range(J)), "relax", "ln2")

    @staticmethod
    def dissipative_weight(w: Float[Array, "d d"]) -> Float[Array, "d d"]:
        """W_eff = W − Wᵀ − W Wᵀ: skew part W − Wᵀ plus the negative semi-definite −W Wᵀ,
        so xᵀ W_eff x = −‖Wᵀx‖² ≤ 0 for every real x (Re λ(W_eff) ≤ 0)."""
        wt = jnp.swapaxes(w, -1, -2)
        return w - wt - w @ wt

    def implicit_weights(self, controls: LayerControls) -> tuple:
        """The matrices the implicit FFN sub-steps take: the FFN's W_j (``"free"``) or
        their :meth:`dissipative_weight` (``"dissipative"``)."""
        ws = tuple(controls.ffn.weights)
        if self.parameterization == "dissipative":
            ws = tuple(self.dissipative_weight(w) for w in ws)
        return ws

    @staticmethod
    def implicit_substep(z: Float[Array, "n d"], w: Float[Array, "d d"], b, s):
        """``(z + s b)(I − s W)⁻¹`` by an LU solve of ``(I − s W)ᵀ xᵀ = (z + s b)ᵀ``."""
        d = w.shape[-1]
        m = jnp.eye(d, dtype=w.dtype) - s * w
        rhs = z + s * b
        return jnp.linalg.solve(m.T, rhs.T).T

    def _compose(self, u, dt, attn: Field, p1: Field, p2: Field, act: Field, ws, bs):
        r = dt / self.tau
        s = dt if self.ffn_branch_dt == "dt" else 2 * dt
        u1 = u + dt * attn(u)
        u2 = u1 + r * (p1(u1) - u1)
        z, states = u2, []
        for j, (w, b) in enumerate(zip(ws, bs)):
            z = self.implicit_substep(z, w, b, s)
            if act is not None and (j < len(ws) - 1):
                z = z + r * (act(z) - z)
            states.append(z)
        u5 = 0.5 * (z + u2)
        u6 = u5 + r * (p2(u5) - u5)
        return u6, (u1, u2, *states, u5, u6)

    def advance(self, u, controls, dt, *, ops):
        c = controls
        if not all(c.ffn.residual):
            raise ValueError(
                "IMEXScheme needs residual FFN sub-steps (square W_j: Z + Δt(Z W_j + b_j)) "
                "to take implicitly; got lifting sub-steps (d_ff set). Use d_ff=None/0, or "
                "an explicit scheme for a lifted FFN."
            )
        if c.ffn.activation_on_last:
            raise ValueError(
                "IMEXScheme: `activation_on_last=True` is not supported (the last FFN "
                "sub-step is linear); use an FFN without an activation after the last step."
            )

        def attn(v):
            return ops.attention(self, v, c.attn)

        return self._compose(
            u,
            dt,
            attn,
            lambda v: ops.project(v, c.norm1),
            lambda v: ops.project(v, c.norm2, 0.25),
            activation_fn(c.ffn.activation),
            self.implicit_weights(c),
            c.ffn.biases,
        )

    def stability_function(self, z_attention, z_ffn):
        """(1 + z_a) · ½ (1 + 1/(1 − c z_g)), c = 1 (``ffn_branch_dt="dt"``) or 2."""
        c = 1.0 if self.ffn_branch_dt == "dt" else 2.0
        return (1 + z_attention) * 0.5 * (1 + 1 / (1 - c * z_ffn))

    def linear_step_matrix(self, j_attention, j_ffn, dt):
        """J_g: the linear FFN part (one implicit sub-step, no activation) or a stack
        ``(J, m, m)`` of the matrices of J implicit sub-steps."""
        ja, jg = j_attention, j_ffn
        m = ja.shape[0]
        eye = jnp.eye(m, dtype=ja.dtype)
        ws = tuple(jg) if jg.ndim == 3 else (jg,)
        zero = jnp.zeros((m,), ja.dtype)
        lin = lambda u: u @ ja  # noqa: E731
        out, _ = self._compose(eye, dt, lin, _identity, _identity, None, ws, (zero,) * len(ws))
        return out

    def implicit_branch_weight(self) -> float:
        """½ for ``"dt"`` (the FFN branch is averaged with the skip connection), 1 for
        ``"2dt"``."""
        return 0.5 if self.ffn_branch_dt == "dt" else 1.0

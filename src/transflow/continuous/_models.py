"""Vector fields and sub-flows of the well-posed sub-models and of the full model.

The well-posed sub-models of docs/spec/continuous-model.md §8.10, on a fixed grid (a finite system
of ODEs in
``u ∈ ℝ^{n × d}``), with F(t, u) = 𝒜(t) u (+ Σ_j 𝒲_j(t) u + b_j(t)):

- ``"a"``: ``u_t = F(t, u)`` (no constraint);
- ``"b"``: ``0 ∈ u_t − F(t, u) + N_{S1(σ1(t), σ2(t))}(u)``, i.e. on S1 the tangent-space
  projected ODE

      u_t = F − mean_y F + σ1' − [(mean_y((u − σ1) F) − σ2 σ2') / σ2²] (u − σ1);

- ``"c"``: ``0 ∈ u_t − F(t, u) + N_{S2}(u)``, S2 = {u ≥ 0} convex; the solution follows
  the projected field ``u_t = P_{T_{S2}(u)} F`` (components at 0 with F < 0 stay at 0).

Operators of the splittings (names used by the schemes):

- ``"attention"``: F's attention part (for ``"b"`` with ``tangent=True`` its tangent part
  ``P_T F = F − mean F − [mean((u − ū) F)/var u] (u − ū)``, whose flow keeps every token's
  mean and variance);
- ``"linear"``: the linear terms ``u W(t) + b(t)`` (if the model has them);
- ``"s1"``: the normal cone of S1(σ1(t), σ2(t)). For a state on S1(σ(t0)) the *exact*
  flow of the constraint drift ``σ1' + (σ2'/σ2)(u − σ1)`` up to t1 is the projection
  P_{S1(σ(t1))}, so its sub-flow is exact;
- ``"s2"``: the normal cone of S2, whose flow is P_{S2} = ReLU.

:func:`full_model_flows` gives the operators of the paper's full model (``attention``,
``ln1``, ``ffn1`` … ``ffnJ``, ``relu``, ``ln2``) for :func:`~transflow.continuous.paper_lie`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._controls import LayerControls
from .._errors import (
    check_array,
    check_callable,
    check_flag,
    check_kind,
    check_same_shape,
    check_temperature,
)
from .._grid import Grid
from .._operators import activation_fn, attention, linear_y, project_s1, project_s2
from ..schemes._base import _ffn_substep
from ..schemes._lie import LieScheme
from ._schemes import Flow
from ._solver import ProjectionTerm, flows_from_terms

__all__ = ["SubModel", "full_model_flows", "tangent_s1", "y_mean"]


def _check_field(name: str, v, grid, owner: str) -> None:
    """A state of a sub-flow (called at every step of a solve): shapes, dtypes and the
    grid only, free at trace time."""
    check_array(name, v)
    if grid is not None:
        check_kind("grid", grid, Grid, owner, "pass e.g. Grid.interval(n, d) or None")
        if v.shape[-1] != grid.n_features:
            raise ValueError(
                f"{owner}: `{name}` has shape {tuple(v.shape)}; expected {grid.n_features} "
                "features on the last axis (the grid's)."
            )


def y_mean(v: Float[Array, "n d"], grid: Grid | None) -> Float[Array, "n 1"]:
    """Per-token mean over Ω_y, ``(1/|Ω_y|) ∫ v dy`` by the grid's quadrature."""
    _check_field("v", v, grid, "y_mean")
    if grid is None:
        return jnp.mean(v, axis=-1, keepdims=True)
    w = (grid.y_weights / jnp.sum(grid.y_weights)).astype(v.dtype)
    return jnp.sum(v * w, axis=-1, keepdims=True)


def tangent_s1(u: Float[Array, "n d"], f: Float[Array, "n d"], grid: Grid | None = None):
    """Project ``f`` onto the tangent space at ``u`` of the level set of u's mean and
    variance: ``f − mean f − [mean((u − ū) f)/var u] (u − ū)`` per token."""
    _check_field("u", u, grid, "tangent_s1")
    check_array("f", f)
    check_same_shape(("u", "f"), u, f, "tangent_s1")
    c = u - y_mean(u, grid)
    var = y_mean(c * c, grid)
    return f - y_mean(f, grid) - y_mean(c * f, grid) / var * c


class SubModel(eqx.Module):
    """A well-posed sub-model of docs/spec/continuous-model.md §8.10 on a fixed grid.

    Attributes:
        kind: ``"a"`` (attention + linear), ``"b"`` (+ S1 constraint), ``"c"`` (+ S2).
        attn: the control path ``t ↦ AttentionParams``.
        linear: ``t ↦ (W, b)`` (quadrature matrix and bias) or ``None``.
        norm: for ``"b"``, ``t ↦ (σ1, σ2)`` (scalars; must be differentiable in t).
        grid: the grid (``None``: the index grid).
        temperature: attention temperature λ.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import AttentionParams
        >>> from transflow.continuous import SubModel
        >>> p = AttentionParams.random(4, key=jax.random.key(0))
        >>> m = SubModel("a", lambda t: p)
        >>> m.operators
        ('attention',)
        >>> m.vector_field(0.0, jnp.ones((3, 4))).shape
        (3, 4)
    """

    kind: Literal["a", "b", "c"] = eqx.field(static=True)
    attn: Callable[[Any], Any]
    linear: Callable[[Any], Any] | None = None
    norm: Callable[[Any], Any] | None = None
    grid: Grid | None = None
    temperature: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        if self.kind not in ("a", "b", "c"):
            raise ValueError(f"SubModel: `kind` must be 'a', 'b' or 'c', got {self.kind!r}.")
        if self.kind == "b" and self.norm is None:
            raise ValueError("SubModel: kind 'b' needs `norm` (t ↦ (σ1, σ2)), got None.")
        owner = "SubModel"
        check_callable("attn", self.attn, owner, "a path t -> AttentionParams")
        if self.linear is not None:
            check_callable("linear", self.linear, owner, "a path t -> (W, b), or None")
        if self.norm is not None:
            check_callable("norm", self.norm, owner, "t -> (sigma1, sigma2), or None")
        if self.grid is not None:
            check_kind("grid", self.grid, Grid, owner, "pass e.g. Grid.interval(n, d) or None")
        check_temperature(owner, self.temperature)

    # ------------------------------------------------------------------ fields
    def attention_field(self, t, u):
        return attention(u, self.attn(t), grid=self.grid, temperature=self.temperature)

    def linear_field(self, t, u):
        w, b = self.linear(t)
        return linear_y(u, w, b)

    def drive(self, t, u):
        """F(t, u): attention plus the linear terms."""
        f = self.attention_field(t, u)
        return f if self.linear is None else f + self.linear_field(t, u)

    def sigma(self, t):
        """``(σ1, σ2, σ1', σ2')`` at time t (derivatives by forward-mode AD)."""
        t = jnp.asarray(t, float)
        (s1, s2), (d1, d2) = jax.jvp(
            lambda s: tuple(map(jnp.asarray, self.norm(s))), (t,), (jnp.ones_like(t),)
        )
        return s1, s2, d1, d2

    def project_s1(self, t, u):
        s1, s2, _, _ = self.sigma(t)
        yw = None if self.grid is None else self.grid.y_weights
        return project_s1(u, s1, s2, y_weights=yw)

    def vector_field(self, t, u):
        """The right-hand side of the continuous sub-model (the diffrax reference)."""
        f = self.drive(t, u)
        if self.kind == "a":
            return f
        if self.kind == "b":
            s1, s2, d1, d2 = self.sigma(t)
            c = u - s1
            coef = (y_mean(c * f, self.grid) - s2 * d2) / s2**2
            return f - y_mean(f, self.grid) + d1 - coef * c
        return jnp.where((u <= 0) & (f < 0), jnp.zeros_like(f), f)

    # ------------------------------------------------------------------ splitting
    @property
    def operators(self) -> tuple[str, ...]:
        """Operator names in their default splitting order."""
        ops = ("attention",) + (() if self.linear is None else ("linear",))
        return ops + {"a": (), "b": ("s1",), "c": ("s2",)}[self.kind]

    def terms(self, *, tangent: bool = True) -> diffrax.MultiTerm:
        """The split operators as diffrax terms, in the order of :attr:`operators`.

        ``attention`` and ``linear`` are :class:`diffrax.ODETerm`\\ s, ``s1``/``s2`` are
        :class:`~transflow.continuous.ProjectionTerm`\\ s (P_S1(σ(t)) and ReLU). Give them
        to :class:`~transflow.continuous.SplittingSolver`; :meth:`flows` derives the
        sub-flows of :func:`~transflow.continuous.integrate` from the same terms.

        Args:
            tangent: for ``"b"``, split off the tangent part P_T F of the attention and
                linear fields (exact invariants in each sub-flow; needed for order 2).
                ``False`` splits F itself against the projection, the paper's reading
                (explicit step, then LayerNorm): consistent, but first order whatever the
                scheme (docs/continuous.md).
        """
        grid = self.grid
        tan = self.kind == "b" and tangent

        def ode(g):
            if tan:
                return diffrax.ODETerm(lambda t, u, args: tangent_s1(u, g(t, u), grid))
            return diffrax.ODETerm(lambda t, u, args: g(t, u))

        parts = [ode(self.attention_field)]
        if self.linear is not None:
            parts.append(ode(self.linear_field))
        if self.kind == "b":
            parts.append(ProjectionTerm(lambda t, u, args: self.project_s1(t, u)))
        if self.kind == "c":
            parts.append(ProjectionTerm(lambda t, u, args: project_s2(u)))
        return diffrax.MultiTerm(*parts)

    def flows(
        self, solver: str = "rk4", *, n_sub: int = 1, tangent: bool = True
    ) -> dict[str, Flow]:
        """Sub-flows of the operators, derived from :meth:`terms` by
        :func:`~transflow.continuous.flows_from_terms`.

        Args:
            solver: ``"rk4"`` (order 4, for Strang) or ``"euler"`` (the paper's explicit
                sub-steps) for the attention and linear operators. Constraint operators
                are solved exactly (projections).
            n_sub: RK4 sub-steps per sub-flow.
            tangent: see :meth:`terms`.
        """
        terms = self.terms(tangent=tangent)
        return flows_from_terms(self.operators, terms, sub_solver=solver, n_sub=n_sub)


def full_model_flows(
    controls: Callable[[Any], LayerControls],
    *,
    grid: Grid | None = None,
    causal: bool = False,
    hardmax: bool = False,
    temperature: float = 1.0,
    scheme: LieScheme | None = None,
) -> dict[str, Flow]:
    """Sub-flows of the paper's full model for :func:`~transflow.continuous.paper_lie`.

    Every sub-step uses the controls at the *start* of its interval, θ(t0) (the paper's
    θⁿ on the whole step). The sub-steps are those of the core :class:`transflow.LieScheme`
    (one implementation): ``attention`` is :meth:`LieScheme.attention_substep` (explicit
    Euler), ``ln1``/``ln2`` are :meth:`LieScheme.norm_substep` (P_S1; the closing one with
    ε/4), ``ffn{j}`` the FFN sub-steps of :func:`transflow.ffn_branch` (lifting sub-steps,
    ``residual=False``, are ``Z W + b``) and ``relu`` the FFN activation (P_S2 for ReLU).

    Args:
        controls: the control path ``t ↦ LayerControls`` (e.g. :class:`PiecewiseConstant`).
        scheme: the core scheme whose attention options (``hardmax``, ``temperature``,
            ``implementation``) are used; default ``LieScheme(hardmax=, temperature=)``.
            Its ``ffn_branch_dt`` is not used: the data scheme's stage speed sets it.
    """
    owner = "full_model_flows"
    check_callable("controls", controls, owner, "PiecewiseConstant(theta)")
    if grid is not None:
        check_kind("grid", grid, Grid, owner, "pass e.g. Grid.index(n, d) or None")
    check_flag("causal", causal, owner)
    check_flag("hardmax", hardmax, owner)
    check_temperature(owner, temperature)
    if scheme is not None:
        check_kind("scheme", scheme, LieScheme, owner, "pass LieScheme(...) or None")
    lie_scheme = LieScheme(hardmax=hardmax, temperature=temperature) if scheme is None else scheme

    def att(t0, t1, u, speed=1.0):
        attn = controls(t0).attn
        return lie_scheme.attention_substep(u, attn, speed * (t1 - t0), grid=grid, causal=causal)

    def ln(which, closing):
        def flow(t0, t1, u, speed=1.0):
            nrm = getattr(controls(t0), which)
            return lie_scheme.norm_substep(u, nrm, grid=grid, closing=closing)

        return flow

    def ffn(j):
        def flow(t0, t1, u, speed=1.0):
            return _ffn_substep(u, controls(t0).ffn, j, speed * (t1 - t0))

        return flow

    def relu(t0, t1, u, speed=1.0):
        # P_S2 for "relu"; other activations are explicit pointwise maps (extensions).
        return activation_fn(controls(t0).ffn.activation)(u)

    # J is read lazily from the controls at t=0 (static structure).
    J = controls(0.0).ffn.num_substeps
    flows: dict[str, Flow] = {
        "attention": att,
        "ln1": ln("norm1", False),
        "ln2": ln("norm2", True),
        "relu": relu,
    }
    for j in range(J):
        flows[f"ffn{j + 1}"] = ffn(j)
    return flows

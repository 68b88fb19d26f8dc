"""Layers designed by numerical analysis: Strang, Runge–Kutta and IMEX steps of the flow.

Every layer of this module is one step of a time-stepper for the same continuous model,
written as a scheme object (``step``, a declared ``order``) that :func:`transflow.evolve`
runs like :class:`~transflow.LieScheme`/:class:`~transflow.PreNormScheme`. In the pre-norm
form the continuous model is the ODE

    u' = f(u) = a(u) + g(u),     a(u) = 𝒜(P_{S1}(u)),     g(u) = ℱ(P_{S1'}(u)),

(attention and FFN sub-fields, each behind its projection; ℱ is the FFN map with unit
sub-steps, as in :class:`~transflow.PreNormScheme`, whose step is the Lie splitting
``Φ^g_Δt ∘ Φ^a_Δt`` with explicit Euler sub-flows, order 1):

- :class:`StrangScheme`: ``Φ^g_{Δt/2} ∘ Φ^a_Δt ∘ Φ^g_{Δt/2}``, the Macaron layer (Lu et al.
  2019: half FFN, attention, half FFN). With Euler sub-flows (``substep="euler"``, the
  published layer) the local error is O(Δt²) but the global order is 1; with Heun sub-flows
  (``substep="heun"``) it is Strang splitting proper, order 2. ``form="postnorm"`` puts the
  paper's projection after every sub-flow instead of before it (post-LN Macaron); its
  projections limit it to order 1.
- :class:`RungeKuttaScheme`: an explicit Runge–Kutta method (Butcher tableau as data:
  Heun, midpoint, classical RK4) with the layer's weights shared by all stages (ODE
  Transformer, Li et al. 2022). ``field="parallel"`` uses f = a + g (order 2 / 4);
  ``field="layer"`` uses the whole pre-LN block's increment as the stage function, as the
  ODE Transformer does, F_Δt(u) = a(u) + g(u + Δt a(u)), which is f + O(Δt): order 1.
- :class:`IMEXScheme`: the paper's post-LN Lie layer with every linear FFN sub-step
  ``Z ← Z + Δt(Z W_j + b_j)`` taken implicitly, ``Z ← (Z + Δt b_j)(I − Δt W_j)⁻¹`` (a
  linear solve per step and sub-step), attention explicit and the projections relaxed at
  rate 1/τ as in :class:`~transflow.continuous.RelaxedLieScheme` (Δt = τ: exact
  projections). Order 1, the same continuous limit as the relaxed Lie scheme.

Time-dependent controls: :func:`stage_controls` samples a control path θ(t) at each
step's stage times (``scheme.nodes``); with the midpoint sample of
:meth:`~transflow.continuous.ControlPath.sample` every scheme is at most second order in
time, RK4 needs its three nodes to be fourth order.

Linear stability: :func:`stability_function` is each scheme's amplification factor on
u' = (λ_a + λ_g) u with the two sub-fields as rates, :func:`amplification_factor` measures
it by running the scheme's own step code on linear sub-fields, and
:func:`linear_step_matrix` is the step matrix of linearised dynamics u' = u (J_a + J_g).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from ._controls import LayerControls
from ._errors import check_choice
from ._operators import Implementation, activation_fn, attention
from ._splitting import AbstractScheme, LieScheme, PreNormScheme, _masks, _project, ffn_branch

__all__ = [
    "SCHEME_NAMES",
    "StrangScheme",
    "RungeKuttaScheme",
    "IMEXScheme",
    "ButcherTableau",
    "TABLEAUS",
    "make_scheme",
    "declared_order",
    "stage_controls",
    "stability_function",
    "amplification_factor",
    "linear_step_matrix",
    "reference_solution",
    "sub_field_jacobians",
    "spectral_radius",
    "confirm_stable_dt",
    "largest_stable_dt",
    "linearised_stability",
    "linear_run_growth",
    "perturbation_growth",
]

Field = Callable[[Array], Array]


class _Ops(NamedTuple):
    """The sub-operators a scheme's step is written in (real ones or linear test ones).

    ``attn``/``ffn``: the sub-fields a, g; ``proj_attn``/``proj_ffn``: the projections the
    post-norm form applies after a sub-flow (identity in the linear test problem).
    """

    attn: Field
    ffn: Field
    proj_attn: Field
    proj_ffn: Field


def _identity(u):
    return u


class ButcherTableau(eqx.Module):
    """An explicit Runge–Kutta method as data: ``a`` (strictly lower), ``b``, ``c``, order.

    Example:
        >>> from transflow import TABLEAUS
        >>> t = TABLEAUS["rk4"]
        >>> t.order, t.nodes  # R(z) = 1 + z + z²/2 + z³/6 + z⁴/24:
        (4, (0.0, 0.5, 1.0))
        >>> [round(1 / c) for c in t.polynomial()]
        [1, 1, 2, 6, 24]
    """

    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    b: tuple[float, ...] = eqx.field(static=True)
    c: tuple[float, ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)

    def __check_init__(self):
        s = len(self.b)
        if len(self.c) != s or len(self.a) != s:
            raise ValueError(f"ButcherTableau: a, b, c must have {s} stages.")
        for i, row in enumerate(self.a):
            if len(row) != i:
                raise ValueError(
                    f"ButcherTableau: row {i} of `a` must have {i} entries (explicit), got "
                    f"{len(row)}."
                )
            if abs(sum(row) - self.c[i]) > 1e-14:
                raise ValueError(f"ButcherTableau: c[{i}] must equal sum(a[{i}]).")
        if abs(sum(self.b) - 1.0) > 1e-14:
            raise ValueError("ButcherTableau: the weights `b` must sum to 1 (consistency).")

    @property
    def nodes(self) -> tuple[float, ...]:
        """The distinct stage times c (sorted): where θ(t) is sampled in a step."""
        return tuple(sorted(set(self.c)))

    def polynomial(self) -> np.ndarray:
        """Coefficients (lowest first) of the stability polynomial R(z) = 1 + z bᵀ(I − zA)⁻¹1."""
        s = len(self.b)
        a = np.zeros((s, s))
        for i, row in enumerate(self.a):
            a[i, :i] = row
        b = np.asarray(self.b)
        coef = [1.0]
        v = np.ones(s)
        for _ in range(s):
            coef.append(float(b @ v))
            v = a @ v
        return np.asarray(coef)


#: The Runge–Kutta methods of :class:`RungeKuttaScheme`.
TABLEAUS: dict[str, ButcherTableau] = {
    "heun": ButcherTableau(((), (1.0,)), (0.5, 0.5), (0.0, 1.0), 2),
    "midpoint": ButcherTableau(((), (0.5,)), (0.0, 1.0), (0.0, 0.5), 2),
    "rk4": ButcherTableau(
        ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        (1 / 6, 1 / 3, 1 / 3, 1 / 6),
        (0.0, 0.5, 0.5, 1.0),
        4,
    ),
}


def _is_staged(controls) -> bool:
    """Whether ``controls`` carry a leading stage axis (θ at each node of the step)."""
    return controls.attn.wq.ndim == 3


def _at(controls, i: int):
    return jax.tree.map(lambda x: x[i], controls) if _is_staged(controls) else controls


class _ExplicitBase(AbstractScheme):
    """The real sub-operators of the pre-/post-norm forms (subclasses hold the options
    ``hardmax``, ``temperature``, ``implementation``)."""

    def _ops(self, c: LayerControls, grid, causal, masks, form: str) -> _Ops:
        def attend(v):
            return attention(
                v,
                c.attn,
                grid=grid,
                causal=causal,
                hardmax=self.hardmax,
                temperature=self.temperature,
                implementation=self.implementation,
                **masks,
            )

        def p1(v):
            return _project(v, c.norm1, grid)

        def p2(v):
            return _project(v, c.norm2, grid)

        if form == "prenorm":
            return _Ops(
                lambda v: attend(p1(v)),
                lambda v: ffn_branch(p2(v), c.ffn, 1.0),
                _identity,
                _identity,
            )
        return _Ops(attend, lambda v: ffn_branch(v, c.ffn, 1.0), p1, p2)


def _check_options(self) -> None:
    check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))


class StrangScheme(_ExplicitBase):
    """Strang splitting of attention and FFN: the Macaron layer (half FFN, attention, half FFN).

    ``form="prenorm"``: each sub-flow integrates a sub-field behind its projection,

        u¹ = Φ^g_{Δt/2}(u),   u² = Φ^a_Δt(u¹),   u^{n+1} = Φ^g_{Δt/2}(u²),

    with a(u) = 𝒜(P_{S1}(u)) (``norm1``) and g(u) = ℱ(P_{S1'}(u)) (``norm2``).
    ``form="postnorm"`` (the paper's projection form, post-LN Macaron-Net):
    ``u¹ = P_{S1'}(Φ^ℱ_{Δt/2}(u))``, ``u² = P_{S1}(Φ^𝒜_Δt(u¹))``,
    ``u^{n+1} = P_{S1'}(Φ^ℱ_{Δt/2}(u²))``. The two FFN half-steps share the FFN's
    weights (one vector field split in two; Macaron-Net trains two FFNs).

    ``substep="euler"``: Φ^X_h(u) = u + h X(u) (Macaron-Net's layer; global order 1);
    ``"heun"``: Φ^X_h(u) = u + h/2 (X(u) + X(u + h X(u))) (order 2, Strang proper). θ is
    frozen at the step's midpoint (``nodes = (0.5,)``), which keeps order 2.

    The post-norm form is consistent (on S1, with ``norm1`` and ``norm2`` the same fixed
    set) with the projected field u' = Π_{T_u S1}(𝒜(u) + ℱ(u)), but its projections limit
    it to order 1 whatever the sub-flow: P(u + h v) = u + h Π v + O(h²), and the O(h²)
    curvature term of every projection is a local error of the step. ``order`` says so
    (1 for ``form="postnorm"``); ``tests/test_layer_schemes.py`` measures it.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, StrangScheme, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> u0 = jax.random.normal(jax.random.key(5), (4, 8))
        >>> s = StrangScheme()
        >>> s.order, evolve(u0, theta, s, dt=0.5).shape
        (2, (4, 8))
        >>> StrangScheme(substep="euler").order  # Macaron-Net's layer
        1
    """

    form: Literal["prenorm", "postnorm"] = eqx.field(static=True, default="prenorm")
    substep: Literal["euler", "heun"] = eqx.field(static=True, default="heun")
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)
    implementation: Implementation = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_choice("form", self.form, ("prenorm", "postnorm"))
        check_choice("substep", self.substep, ("euler", "heun"))
        _check_options(self)

    @property
    def order(self) -> int:
        return 2 if (self.substep == "heun" and self.form == "prenorm") else 1

    @property
    def nodes(self) -> tuple[float, ...]:
        return (0.5,)

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        return ("ffn_half1", "attention", "ffn_half2")

    def _flow(self, field: Field, u, h):
        if self.substep == "euler":
            return u + h * field(u)
        k1 = field(u)
        return u + (0.5 * h) * (k1 + field(u + h * k1))

    def _advance(self, u, dt, ops: _Ops):
        u1 = ops.proj_ffn(self._flow(ops.ffn, u, 0.5 * dt))
        u2 = ops.proj_attn(self._flow(ops.attn, u1, dt))
        u3 = ops.proj_ffn(self._flow(ops.ffn, u2, 0.5 * dt))
        return u3, (u1, u2, u3)

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        if _is_staged(controls):
            raise ValueError(
                "StrangScheme: `controls` must be one set per step (θ at the step midpoint, "
                "nodes=(0.5,)), got controls with a stage axis; sample them with "
                "stage_controls(path, StrangScheme(), n) or path.sample(n)."
            )
        ops = self._ops(controls, grid, causal, _masks(key_padding_mask, attention_mask), self.form)
        out, states = self._advance(u, dt, ops)
        if not return_substeps:
            return out
        return out, dict(zip(self.substep_names(controls), states))


class RungeKuttaScheme(_ExplicitBase):
    """An explicit Runge–Kutta block on the pre-norm vector field (ODE Transformer form).

    ``k_i = F(u + Δt Σ_j a_ij k_j)``, ``u^{n+1} = u + Δt Σ_i b_i k_i`` with the layer's
    weights shared by all stages (the stages are evaluations, not extra layers).

    Args:
        method: ``"heun"`` (RK2, the ODE Transformer's RK2 block), ``"midpoint"`` (RK2) or
            ``"rk4"`` (classical); see :data:`TABLEAUS`.
        field: ``"parallel"``: F = f = 𝒜(P_{S1}u) + ℱ(P_{S1'}u), order = the method's;
            ``"layer"``: F = the pre-LN block's increment a(u) + g(u + Δt a(u)) (Li et al.
            2022: F(y) = block(y) − y at Δt = 1), which is f + O(Δt), so order 1.

    Controls: one set per step (frozen at the step midpoint: at most order 2 for a
    time-dependent θ) or one set per node of ``nodes`` stacked on a leading axis
    (:func:`stage_controls`), which keeps the method's order for a smooth θ(t).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, RungeKuttaScheme, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(2)])
        >>> u0 = jax.random.normal(jax.random.key(5), (4, 8))
        >>> rk4 = RungeKuttaScheme("rk4")
        >>> rk4.order, rk4.nodes, evolve(u0, theta, rk4, dt=0.5).shape
        (4, (0.0, 0.5, 1.0), (4, 8))
        >>> RungeKuttaScheme("heun", field="layer").order  # the ODE Transformer's block
        1
    """

    method: str = eqx.field(static=True, default="heun")
    field: Literal["parallel", "layer"] = eqx.field(static=True, default="parallel")
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)
    implementation: Implementation = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_choice("method", self.method, tuple(TABLEAUS))
        check_choice("field", self.field, ("parallel", "layer"))
        _check_options(self)

    @property
    def tableau(self) -> ButcherTableau:
        return TABLEAUS[self.method]

    @property
    def order(self) -> int:
        return self.tableau.order if self.field == "parallel" else 1

    @property
    def nodes(self) -> tuple[float, ...]:
        return self.tableau.nodes

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        return tuple(f"stage{i + 1}" for i in range(len(self.tableau.b))) + ("update",)

    def _stage_field(self, ops: _Ops, dt) -> Field:
        if self.field == "parallel":
            return lambda v: ops.attn(v) + ops.ffn(v)

        def layer(v):
            a = ops.attn(v)
            return a + ops.ffn(v + dt * a)

        return layer

    def _advance(self, u, dt, ops_at: Callable[[int], _Ops]):
        tab = self.tableau
        nodes = tab.nodes
        ks = []
        for i, row in enumerate(tab.a):
            v = u
            for aij, kj in zip(row, ks):
                if aij:
                    v = v + (dt * aij) * kj
            ks.append(self._stage_field(ops_at(nodes.index(tab.c[i])), dt)(v))
        out = u
        for bi, ki in zip(tab.b, ks):
            if bi:
                out = out + (dt * bi) * ki
        return out, (*ks, out)

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        masks = _masks(key_padding_mask, attention_mask)
        if _is_staged(controls):
            n = controls.attn.wq.shape[0]
            if n != len(self.nodes):
                raise ValueError(
                    f"RungeKuttaScheme({self.method!r}): staged controls need one set per "
                    f"node {self.nodes} (leading axis {len(self.nodes)}), got {n}; use "
                    "stage_controls(path, scheme, n_steps)."
                )
        cache: dict[int, _Ops] = {}

        def ops_at(i):
            if i not in cache:
                c = _at(controls, i)
                cache[i] = self._ops(c, grid, causal, masks, "prenorm")
            return cache[i]

        out, states = self._advance(u, dt, ops_at)
        if not return_substeps:
            return out
        return out, dict(zip(self.substep_names(controls), states))


class IMEXScheme(AbstractScheme):
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

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import IMEXScheme, LayerControls
        >>> from transflow.continuous import RelaxedLieScheme
        >>> theta = LayerControls.random(8, key=jax.random.key(0))
        >>> u = jax.random.normal(jax.random.key(1), (4, 8))
        >>> h = 1e-4  # explicit and implicit linear sub-steps differ at O(Δt²)
        >>> a = IMEXScheme(tau=1.0).step(u, theta, h)
        >>> b = RelaxedLieScheme(tau=1.0).step(u, theta, h)
        >>> bool(jnp.max(jnp.abs(a - b)) < 1e-6)
        True
    """

    tau: float = eqx.field(static=True, default=1.0)
    ffn_branch_dt: Literal["dt", "2dt"] = eqx.field(static=True, default="dt")
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)
    implementation: Implementation = eqx.field(static=True, default="auto")

    def __check_init__(self):
        if isinstance(self.tau, bool) or not isinstance(self.tau, int | float) or not self.tau > 0:
            raise ValueError(
                f"IMEXScheme: `tau` (the relaxation time of the projections) must be a number "
                f"> 0, got {self.tau!r}; tau = dt gives the paper's exact projections."
            )
        check_choice("ffn_branch_dt", self.ffn_branch_dt, ("dt", "2dt"))
        _check_options(self)

    @property
    def order(self) -> int:
        return 1

    @property
    def nodes(self) -> tuple[float, ...]:
        return (0.5,)

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("attention", "ln1", *(f"ffn{j + 1}" for j in range(J)), "relax", "ln2")

    @staticmethod
    def implicit_substep(z: Float[Array, "n d"], w: Float[Array, "d d"], b, s):
        """``(z + s b)(I − s W)⁻¹`` by an LU solve of ``(I − s W)ᵀ xᵀ = (z + s b)ᵀ``."""
        d = w.shape[-1]
        m = jnp.eye(d, dtype=w.dtype) - s * w
        rhs = z + s * b
        return jnp.linalg.solve(m.T, rhs.T).T

    def _advance(self, u, dt, attn: Field, p1: Field, p2: Field, act: Field, ws, bs):
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

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
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
        masks = _masks(key_padding_mask, attention_mask)

        def attn(v):
            return attention(
                v,
                c.attn,
                grid=grid,
                causal=causal,
                hardmax=self.hardmax,
                temperature=self.temperature,
                implementation=self.implementation,
                **masks,
            )

        out, states = self._advance(
            u,
            dt,
            attn,
            lambda v: _project(v, c.norm1, grid),
            lambda v: _project(v, c.norm2, grid, eps_scale=0.25),
            activation_fn(c.ffn.activation),
            c.ffn.weights,
            c.ffn.biases,
        )
        if not return_substeps:
            return out
        return out, dict(zip(self.substep_names(c), states))


#: Names accepted by :func:`make_scheme` (and the training tasks' ``scheme`` option).
SCHEME_NAMES = (
    "lie",
    "prenorm",
    "relaxed",
    "macaron",
    "strang",
    "macaron_post",
    "strang_post",
    "heun",
    "midpoint",
    "rk4",
    "ode_rk2",
    "imex",
)


def make_scheme(name: str, **options: Any) -> AbstractScheme:
    """A scheme by name (:data:`SCHEME_NAMES`), with its keyword options.

    ``lie``: the paper's post-LN layer; ``prenorm``: pre-LN (Lie splitting, Euler
    sub-flows); ``relaxed``: :class:`~transflow.continuous.RelaxedLieScheme`;
    ``macaron``/``macaron_post``: :class:`StrangScheme` with Euler sub-flows (Macaron-Net;
    pre-/post-norm); ``strang``/``strang_post``: with Heun sub-flows (order 2 in pre-norm
    form, 1 in post-norm form);
    ``heun``/``midpoint``/``rk4``: :class:`RungeKuttaScheme` on f = a + g; ``ode_rk2``: the
    ODE Transformer's RK2 block (Heun on the pre-LN block's increment); ``imex``:
    :class:`IMEXScheme`.

    Example:
        >>> from transflow import make_scheme
        >>> make_scheme("rk4").order, make_scheme("macaron").order
        (4, 1)
        >>> make_scheme("rk5")
        Traceback (most recent call last):
        ...
        ValueError: `scheme` must be one of ('lie', 'prenorm', ...), got 'rk5'. ...
    """
    table: dict[str, Callable[..., AbstractScheme]] = {
        "lie": LieScheme,
        "prenorm": PreNormScheme,
        "relaxed": _relaxed,
        "macaron": lambda **o: StrangScheme(substep="euler", **o),
        "strang": lambda **o: StrangScheme(substep="heun", **o),
        "macaron_post": lambda **o: StrangScheme(form="postnorm", substep="euler", **o),
        "strang_post": lambda **o: StrangScheme(form="postnorm", substep="heun", **o),
        "heun": lambda **o: RungeKuttaScheme("heun", **o),
        "midpoint": lambda **o: RungeKuttaScheme("midpoint", **o),
        "rk4": lambda **o: RungeKuttaScheme("rk4", **o),
        "ode_rk2": lambda **o: RungeKuttaScheme("heun", field="layer", **o),
        "imex": IMEXScheme,
    }
    if name not in table:
        shown = f"('{SCHEME_NAMES[0]}', '{SCHEME_NAMES[1]}', ...)"
        raise ValueError(
            f"`scheme` must be one of {shown}, got {name!r}. All names: {', '.join(SCHEME_NAMES)}."
        )
    try:
        return table[name](**options)
    except TypeError as e:
        raise TypeError(f"scheme {name!r}: an option it does not take ({e}).") from None


def _relaxed(**options):
    from .continuous import RelaxedLieScheme

    return RelaxedLieScheme(**options)


def declared_order(scheme: AbstractScheme) -> int | None:
    """The order of convergence a scheme declares in Δt; ``None`` for the paper's exact
    post-LN :class:`~transflow.LieScheme` (not consistent with an ODE)."""
    order = getattr(scheme, "order", None)
    if order is not None:
        return int(order)
    from .continuous import RelaxedLieScheme

    if isinstance(scheme, PreNormScheme | RelaxedLieScheme):
        return 1
    return None


def stage_controls(path, scheme: AbstractScheme, n_steps: int):
    """The controls of ``n_steps`` uniform steps of ``path`` for ``scheme``.

    A scheme with one node (every scheme but the Runge–Kutta ones) gets θ at the step
    midpoints, ``path.sample(n_steps)``; a Runge–Kutta scheme gets θ at every node
    ``t_n + c Δt`` stacked as ``(n_steps, len(nodes), ...)``. Run them with
    ``evolve(u0, stage_controls(path, s, n), s, dt=path.step_size(n))``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, RungeKuttaScheme, stage_controls
        >>> from transflow.continuous import init_path
        >>> path = init_path("legendre", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> stage_controls(path, RungeKuttaScheme("rk4"), 8).attn.wq.shape
        (8, 3, 4, 4)
    """
    nodes = getattr(scheme, "nodes", (0.5,))
    if tuple(nodes) == (0.5,):
        return path.sample(n_steps)
    t0, _ = path.interval
    h = path.step_size(n_steps)
    ts = t0 + (np.arange(n_steps)[:, None] + np.asarray(nodes)[None, :]) * h
    leaf = next(x for x in jax.tree.leaves(path) if eqx.is_inexact_array(x))
    tt = jnp.asarray(ts, leaf.dtype)
    return jax.vmap(jax.vmap(path.__call__))(tt)


# ----------------------------------------------------------------------- linear stability
def _poly(coef, z):
    return sum(float(c) * z**k for k, c in enumerate(coef))


def _complex(z):
    return jnp.asarray(z).astype(jnp.result_type(1j))


def stability_function(scheme: AbstractScheme, z_attention, z_ffn):
    """The amplification factor R on the linear test problem u' = (λ_a + λ_g) u.

    ``z_attention = Δt λ_a`` and ``z_ffn = Δt λ_g`` are the sub-fields' rates (the linear
    test problem of a splitting: two commuting linear sub-fields). For IMEX, λ_a is the
    explicit (attention) part and λ_g the linear FFN part taken implicitly, with one FFN
    sub-step (J = 1) and the projections and activations the identity.

    - pre-norm (Lie, Euler sub-flows): (1 + z_a)(1 + z_g)
    - Strang: R_s(z_g/2) R_s(z_a) R_s(z_g/2), R_s(z) = 1 + z (Euler) or 1 + z + z²/2 (Heun)
    - Runge–Kutta, parallel field: R_RK(z_a + z_g) (its stability polynomial);
      layer field: R_RK((1 + z_a)(1 + z_g) − 1)
    - IMEX: (1 + z_a) · ½ (1 + 1/(1 − c z_g)), c = 1 (``ffn_branch_dt="dt"``) or 2

    Example:
        >>> from transflow import RungeKuttaScheme, stability_function
        >>> complex(stability_function(RungeKuttaScheme("heun"), -1.0, 0.0))
        (0.5+0j)
    """
    za = _complex(z_attention)
    zg = _complex(z_ffn)
    if isinstance(scheme, StrangScheme):
        rs = (lambda z: 1 + z) if scheme.substep == "euler" else (lambda z: 1 + z + z * z / 2)
        return rs(zg / 2) * rs(za) * rs(zg / 2)
    if isinstance(scheme, RungeKuttaScheme):
        coef = scheme.tableau.polynomial()
        z = za + zg if scheme.field == "parallel" else (1 + za) * (1 + zg) - 1
        return _poly(coef, z)
    if isinstance(scheme, IMEXScheme):
        c = 1.0 if scheme.ffn_branch_dt == "dt" else 2.0
        return (1 + za) * 0.5 * (1 + 1 / (1 - c * zg))
    if isinstance(scheme, PreNormScheme):
        return (1 + za) * (1 + zg)
    raise TypeError(
        f"stability_function: no stability function for {type(scheme).__name__} (the paper's "
        "LieScheme applies Δt-independent projections, which a linear test problem lacks)."
    )


def _rot(z):
    """The real 2×2 matrix of multiplication by z = x + iy on row vectors (x, y)."""
    return jnp.array([[z.real, z.imag], [-z.imag, z.real]])


def linear_step_matrix(scheme: AbstractScheme, j_attention, j_ffn, dt):
    """The step matrix S of a scheme on linear sub-fields a(u) = u J_a, g(u) = u J_g.

    Runs the scheme's own step code (:meth:`StrangScheme._advance` …) on the linear
    sub-fields, with the projections the identity; row convention ``u^{n+1} = u S``. For
    :class:`IMEXScheme`, J_g is the linear FFN part taken implicitly (one sub-step, no
    activation). For a parallel Runge–Kutta scheme S = R(Δt (J_a + J_g)).
    """
    ja, jg = jnp.asarray(j_attention), jnp.asarray(j_ffn)
    m = ja.shape[0]
    eye = jnp.eye(m, dtype=ja.dtype)

    def lin(j):
        return lambda u: u @ j

    if isinstance(scheme, IMEXScheme):
        zero = jnp.zeros((m,), ja.dtype)
        out, _ = scheme._advance(eye, dt, lin(ja), _identity, _identity, None, (jg,), (zero,))
        return out
    ops = _Ops(lin(ja), lin(jg), _identity, _identity)
    if isinstance(scheme, StrangScheme):
        return scheme._advance(eye, dt, ops)[0]
    if isinstance(scheme, RungeKuttaScheme):
        return scheme._advance(eye, dt, lambda i: ops)[0]
    if isinstance(scheme, PreNormScheme):  # the Lie composition of pre_ln_step
        u1 = eye + dt * ops.attn(eye)
        return u1 + dt * ops.ffn(u1)
    raise TypeError(f"linear_step_matrix: unsupported scheme {type(scheme).__name__}.")


def amplification_factor(scheme: AbstractScheme, z_attention, z_ffn) -> Complex[Array, ""]:
    """The measured amplification factor on u' = (λ_a + λ_g) u (complex rates).

    A complex rate z = x + iy acts on ℝ² as the matrix [[x, y], [−y, x]]; one step of the
    scheme's code with Δt = 1 and these sub-fields (:func:`linear_step_matrix`) maps
    (1, 0) to (Re R, Im R).

    Example:
        >>> from transflow import StrangScheme, amplification_factor, stability_function
        >>> s = StrangScheme()
        >>> z = (-0.3 + 0.2j, -0.5 - 0.1j)
        >>> abs(complex(amplification_factor(s, *z)) - complex(stability_function(s, *z))) < 1e-6
        True
    """
    za = _complex(z_attention)
    zg = _complex(z_ffn)
    s = linear_step_matrix(scheme, _rot(za), _rot(zg), 1.0)
    return jax.lax.complex(s[0, 0], s[0, 1])


def reference_solution(
    u0: Float[Array, "n d"],
    path,
    scheme: AbstractScheme,
    *,
    rtol: float = 1e-12,
    atol: float = 1e-12,
    grid=None,
    max_steps: int = 100_000,
) -> Float[Array, "n d"]:
    """u(T) of the scheme's continuous limit u' = f(t, u) by diffrax's Dopri8 (order 8, PID
    step control), for order studies in float64. ``f`` is
    :func:`transflow.continuous.vector_field` of ``scheme`` along ``path``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, StrangScheme, evolve, reference_solution
        >>> from transflow.continuous import init_path
        >>> with jax.enable_x64(True):
        ...     path = init_path("legendre", lambda k: LayerControls.random(
        ...         4, dtype=jnp.float64, key=k), 2, key=jax.random.key(0), smooth=False)
        ...     u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
        ...     ref = reference_solution(u0, path, StrangScheme())
        ...     err = [float(jnp.max(jnp.abs(evolve(u0, path.sample(n), StrangScheme(),
        ...            dt=path.step_size(n)) - ref))) for n in (8, 16)]
        >>> round(err[0] / err[1])  # second order: halving Δt divides the error by 4
        4
    """
    import diffrax

    from .continuous import vector_field

    f = vector_field(scheme, path, grid=grid)
    t0, t1 = path.interval
    dtype = jnp.result_type(u0)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, u, _: f(t, u)),
        diffrax.Dopri8(),
        t0=jnp.asarray(t0, dtype),
        t1=jnp.asarray(t1, dtype),
        dt0=jnp.asarray((t1 - t0) / 8, dtype),
        y0=u0,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
    )
    return sol.ys[-1]


# ------------------------------------------------------- stability of a layer's linearisation
def sub_field_jacobians(
    controls: LayerControls, u: Float[Array, "n d"], *, grid=None
) -> tuple[Float[Array, "m m"], Float[Array, "m m"]]:
    """Jacobians (m = n·d, row convention: δa = δu J_a) of the pre-norm sub-fields
    a(u) = 𝒜(P_{S1}u) and g(u) = ℱ(P_{S1'}u) at ``u``: the linearised dynamics
    δu' = δu (J_a + J_g) of the layer around ``u``."""
    ops = StrangScheme()._ops(controls, grid, False, {}, "prenorm")
    shape = u.shape

    def jac(fn):
        jc = jax.jacfwd(lambda v: fn(v.reshape(shape)).reshape(-1))(u.reshape(-1))
        return jc.T

    return jac(ops.attn), jac(ops.ffn)


def spectral_radius(m: Float[Array, "m m"]) -> float:
    """max |eigenvalue| (NumPy, float64)."""
    return float(np.max(np.abs(np.linalg.eigvals(np.asarray(m, np.float64)))))


def largest_stable_dt(
    scheme: AbstractScheme,
    j_attention: Float[Array, "m m"],
    j_ffn: Float[Array, "m m"],
    *,
    dt_max: float = 64.0,
    n_grid: int = 200,
    rtol: float = 1e-6,
) -> float:
    """The largest Δt of the first interval (0, Δt*] on which the scheme's step matrix on
    the linear dynamics u' = u (J_a + J_g) has spectral radius ≤ 1.

    ρ(S(Δt)) is evaluated (:func:`linear_step_matrix`, the scheme's own step code) on a
    geometric grid of ``n_grid`` steps in [dt_max·1e-6, dt_max]; the first crossing of 1
    is refined by bisection to relative width ``rtol``. Returns ``inf`` if none is found
    (e.g. an IMEX step on a dissipative linear part) and 0 if the smallest grid step is
    already unstable (dynamics with a growing mode: shift it first, see
    :func:`linearised_stability`).
    """
    ja, jg = np.asarray(j_attention, np.float64), np.asarray(j_ffn, np.float64)
    with jax.enable_x64(True):
        step_matrix = jax.jit(lambda a, g, h: linear_step_matrix(scheme, a, g, h))
        ja_j, jg_j = jnp.asarray(ja), jnp.asarray(jg)

    def rho(h):
        with jax.enable_x64(True):
            return spectral_radius(step_matrix(ja_j, jg_j, jnp.asarray(h, jnp.float64)))

    grid = dt_max * np.geomspace(1e-6, 1.0, n_grid)
    prev = None
    for h in grid:
        if rho(h) > 1.0 + 1e-12:
            if prev is None:
                return 0.0
            lo, hi = prev, float(h)
            while hi - lo > rtol * lo:
                mid = 0.5 * (lo + hi)
                lo, hi = (mid, hi) if rho(mid) <= 1.0 + 1e-12 else (lo, mid)
            return lo
        prev = float(h)
    return float("inf")


def linearised_stability(
    scheme: AbstractScheme,
    controls: LayerControls,
    trajectory: Float[Array, "k n d"],
    *,
    margin: float = 0.05,
    grid=None,
    **kwargs: Any,
) -> dict:
    """The largest stable Δt of ``scheme`` on a layer's linearised dynamics along a trajectory.

    At every state u_k the sub-field Jacobians J_a, J_g (:func:`sub_field_jacobians`) are
    shifted by −σ/2 each, σ = max Re λ(J_a + J_g) + ``margin`` · ρ(J_a + J_g): the
    linearised dynamics in the frame of its least stable mode, whose exact solution decays
    (a random layer has growing modes; without the shift no Δt would be stable, and the
    scheme's error in them is not an instability). Δt*_k = :func:`largest_stable_dt`;
    the result is the smallest over the trajectory with its index, the eigenvalues of the
    shifted J_a + J_g there and the shifted Jacobians (to confirm by a run).
    """
    best: dict = {"dt": float("inf")}
    for k, u in enumerate(trajectory):
        ja, jg = sub_field_jacobians(controls, u, grid=grid)
        ja, jg = np.asarray(ja, np.float64), np.asarray(jg, np.float64)
        lam = np.linalg.eigvals(ja + jg)
        sigma = float(np.max(lam.real)) + margin * float(np.max(np.abs(lam)))
        eye = np.eye(ja.shape[0])
        ja_s, jg_s = ja - 0.5 * sigma * eye, jg - 0.5 * sigma * eye
        dt = largest_stable_dt(scheme, ja_s, jg_s, **kwargs)
        if dt < best["dt"]:
            best = {
                "dt": dt,
                "index": k,
                "shift": sigma,
                "eigenvalues": lam - sigma,
                "j_attention": ja_s,
                "j_ffn": jg_s,
            }
    return best


def linear_run_growth(
    scheme: AbstractScheme, j_attention, j_ffn, dt: float, n_steps: int, *, seed: int = 0
) -> float:
    """‖u_N‖ / ‖u_0‖ after ``n_steps`` steps of the scheme on u' = u (J_a + J_g) from a
    random u_0 (the run that confirms a stable Δt: bounded below it, growing above)."""
    with jax.enable_x64(True):
        s = linear_step_matrix(scheme, jnp.asarray(j_attention), jnp.asarray(j_ffn), dt)
        u0 = jax.random.normal(jax.random.key(seed), (1, s.shape[0]), jnp.float64)

        def body(u, _):
            u = u @ s
            nrm = jnp.linalg.norm(u)
            return u / nrm, jnp.log(nrm)

        _, logs = jax.lax.scan(body, u0 / jnp.linalg.norm(u0), None, length=n_steps)
        return float(jnp.exp(jnp.sum(logs)))


def confirm_stable_dt(
    scheme: AbstractScheme,
    j_attention: Float[Array, "m m"],
    j_ffn: Float[Array, "m m"],
    dt_star: float,
    *,
    factor: float = 0.05,
    min_steps: int = 2000,
    max_steps: int = 1_000_000,
    growth: float = 1e4,
) -> dict:
    """Confirm a largest stable Δt* by runs: ``(1 − factor) Δt*`` must stay bounded and
    ``(1 + factor) Δt*`` must grow.

    How fast the run above grows is ρ(S)ⁿ, ρ the spectral radius of the step matrix there.
    For the explicit schemes ρ leaves 1 steeply (2000 steps grow by many orders); for an
    IMEX step it can leave 1 slowly (ρ = 1.0006 at 1.05 Δt* on a random layer, a factor
    3 in 2000 steps, less than that for a start vector with a small component in the
    mode). The run above therefore has ``n = ln(growth) / ln ρ`` steps (at least
    ``min_steps``, at most ``max_steps``), so an instability shows as a growth by
    ``growth`` whatever its rate. Returns the growth of both runs, their spectral radii
    and step counts.

    Example:
        >>> import numpy as np
        >>> from transflow import make_scheme
        >>> j = -np.eye(2)  # u' = -2u in two halves; pre-norm factor (1 − Δt)²: Δt* = 2
        >>> r = confirm_stable_dt(make_scheme("prenorm"), j, j, 2.0)
        >>> bool(r["growth_below"] < 1 < 10 < r["growth_above"])
        True
    """
    with jax.enable_x64(True):
        ja, jg = jnp.asarray(j_attention, jnp.float64), jnp.asarray(j_ffn, jnp.float64)
        lo, hi = (1.0 - factor) * dt_star, (1.0 + factor) * dt_star
        rho_lo = spectral_radius(linear_step_matrix(scheme, ja, jg, lo))
        rho_hi = spectral_radius(linear_step_matrix(scheme, ja, jg, hi))
    n_hi = min_steps
    if rho_hi > 1.0:
        n_hi = int(min(max_steps, max(min_steps, np.ceil(np.log(growth) / np.log(rho_hi)))))
    return {
        "growth_below": linear_run_growth(scheme, ja, jg, lo, min_steps),
        "growth_above": linear_run_growth(scheme, ja, jg, hi, n_hi),
        "rho_below": rho_lo,
        "rho_above": rho_hi,
        "steps_below": min_steps,
        "steps_above": n_hi,
    }


def perturbation_growth(
    fn: Callable[[Array], Array], x: Array, *, key, n_iter: int = 20
) -> Float[Array, ""]:
    """The largest singular value of the Jacobian of ``fn`` at ``x`` (power iteration on
    JᵀJ with one JVP and one VJP per iteration): the worst-case growth ‖δy‖/‖δx‖ of a small
    input perturbation. ``log(growth)/T`` is the finite-time Lyapunov exponent of a flow
    over time T (the sensitivity measure of Tong et al.).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import perturbation_growth
        >>> a = jnp.diag(jnp.array([3.0, 1.0, 0.5]))
        >>> g = perturbation_growth(lambda v: a @ v, jnp.ones(3), key=jax.random.key(0))
        >>> round(float(g), 4)
        3.0
    """
    v = jax.random.normal(key, jnp.shape(x), jnp.result_type(x))
    v = v / jnp.linalg.norm(v)
    _, vjp = jax.vjp(fn, x)

    def body(v, _):
        jv = jax.jvp(fn, (x,), (v,))[1]
        w = vjp(jv)[0]
        return w / jnp.linalg.norm(w), None

    v, _ = jax.lax.scan(body, v, None, length=n_iter)
    return jnp.linalg.norm(jax.jvp(fn, (x,), (v,))[1])

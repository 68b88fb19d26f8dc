"""The Runge–Kutta family: explicit tableaux with the layer's weights shared by all stages
(ODE Transformer, Li et al. 2022); the tableaux as data (:data:`TABLEAUS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._controls import LayerControls
from .._errors import check_choice, check_number
from ._subfields import AbstractExplicitScheme, Field, SubFields, _at, _is_staged, linear_sub_fields

__all__ = ["ButcherTableau", "RungeKuttaScheme", "TABLEAUS"]


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
        check_number("order", self.order, "ButcherTableau", lower=0, integer=True, example="2")
        for name, entries in (
            ("a", [x for row in self.a for x in row]),
            ("b", self.b),
            ("c", self.c),
        ):
            for x in entries:
                check_number(name, x, "ButcherTableau", example="the coefficients of the method")
        s = len(self.b)
        if len(self.c) != s or len(self.a) != s:
            raise ValueError(
                f"ButcherTableau: `b` has {s} stages but `a` has {len(self.a)} rows and `c` "
                f"{len(self.c)} entries; give a, b, c one entry per stage."
            )
        for i, row in enumerate(self.a):
            if len(row) != i:
                raise ValueError(
                    f"ButcherTableau: row {i} of `a` must have {i} entries (explicit), got "
                    f"{len(row)}."
                )
            if abs(sum(row) - self.c[i]) > 1e-14:
                raise ValueError(
                    f"ButcherTableau: `c` must have c[{i}] = sum(a[{i}]) = {sum(row)}, got "
                    f"{self.c[i]}."
                )
        if abs(sum(self.b) - 1.0) > 1e-14:
            raise ValueError(
                f"ButcherTableau: the weights `b` must sum to 1 (consistency), got {sum(self.b)}."
            )

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


class RungeKuttaScheme(AbstractExplicitScheme):
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
        >>> from transflow import RungeKuttaScheme
        >>> heun, mid = RungeKuttaScheme("heun"), RungeKuttaScheme("midpoint")
        >>> heun.tableau.b, heun.nodes, mid.nodes  # θ(t) is sampled at the stage nodes
        ((0.5, 0.5), (0.0, 1.0), (0.0, 0.5))
        >>> heun.order, RungeKuttaScheme("heun", field="layer").order  # the ODE Transformer's
        (2, 1)
    """

    method: str = eqx.field(static=True, default="heun")
    field: Literal["parallel", "layer"] = eqx.field(static=True, default="parallel")

    def __check_init__(self):
        check_choice("method", self.method, tuple(TABLEAUS))
        check_choice("field", self.field, ("parallel", "layer"))

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

    def _stage_field(self, ops: SubFields, dt) -> Field:
        if self.field == "parallel":
            return lambda v: ops.attn(v) + ops.ffn(v)

        def layer(v):
            a = ops.attn(v)
            return a + ops.ffn(v + dt * a)

        return layer

    def _compose(self, u, dt, ops_at: Callable[[int], SubFields]):
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

    def advance(self, u, controls, dt, *, ops):
        if _is_staged(controls):
            n = controls.attn.wq.shape[0]
            if n != len(self.nodes):
                raise ValueError(
                    f"RungeKuttaScheme({self.method!r}): staged controls need one set per "
                    f"node {self.nodes} (leading axis {len(self.nodes)}), got {n}; use "
                    "stage_controls(path, scheme, n_steps)."
                )
        cache: dict[int, SubFields] = {}

        def ops_at(i):
            if i not in cache:
                c = _at(controls, i)
                cache[i] = self.sub_fields(c, ops, "prenorm")
            return cache[i]

        return self._compose(u, dt, ops_at)

    def stability_function(self, z_attention, z_ffn):
        """R_RK(z_a + z_g) (parallel field) or R_RK((1 + z_a)(1 + z_g) − 1) (layer field)."""
        za, zg = z_attention, z_ffn
        coef = self.tableau.polynomial()
        z = za + zg if self.field == "parallel" else (1 + za) * (1 + zg) - 1
        return sum(float(c) * z**k for k, c in enumerate(coef))

    def linear_step_matrix(self, j_attention, j_ffn, dt):
        eye = jnp.eye(j_attention.shape[0], dtype=j_attention.dtype)
        lin = linear_sub_fields(j_attention, j_ffn)
        return self._compose(eye, dt, lambda i: lin)[0]

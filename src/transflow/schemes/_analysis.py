"""Numerical analysis of the schemes, as numbers a study records: measured orders of
convergence on a smooth problem, the stability-function identity, the largest stable Δt of a
layer as trained (confirmed by runs) and the IMEX step's linear solve.

- :class:`OrderProblem`: a smooth control path θ(t) and an initial state on S1;
  :func:`measure_order` / :func:`measure_orders`: the errors at T against a Dopri8 solve of
  the scheme's own vector field (:func:`~transflow.reference_solution`) on a grid of step
  counts N, the local slopes between consecutive N and the order fitted on a declared
  window (:func:`empirical_order`), as an :class:`OrderMeasurement`;
- :func:`stability_function_error`: the measured amplification factors on u' = λu against
  the declared stability function;
- :func:`layer_stable_dt`: :func:`~transflow.linearised_stability` in the form the scheme
  declares (``stability_form``), confirmed by runs at 0.95 and 1.05 Δt*
  (:func:`~transflow.confirm_stable_dt`); :func:`stability_survey`: both for every
  registered scheme, on a random layer along its own trajectory;
- :func:`implicit_solve_check`, :func:`step_cpu_seconds`: the IMEX step's LU solve, its
  residual, and the CPU cost of a jitted step; :func:`imex_step_check`: both on a random
  layer, the IMEX step's cost against the explicit step's;
- :func:`order_table`, :func:`stable_dt_table`: the results as markdown tables.

Every function dispatches on the capabilities a scheme declares (:func:`require`):
orders need :class:`AbstractODEScheme`, stability :class:`AbstractLinearStability`, the
solve check :class:`AbstractImplicitFFN`. ``experiment=schemes`` runs them all
(docs/schemes.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._controls import LayerControls, stack_controls
from .._errors import check_number
from .._integrate import ConstantSteps, Remat, SaveAt, scan_steps
from .._paths import BasisExpansion, ControlPath, init_path
from ._base import (
    AbstractImplicitFFN,
    AbstractLinearStability,
    AbstractODEScheme,
    AbstractScheme,
    _project,
    has,
    require,
)
from ._registry import SCHEME_NAMES, declared_order, make_scheme, stage_controls
from ._stability import (
    amplification_factor,
    confirm_stable_dt,
    linearised_stability,
    reference_solution,
    stability_function,
)
from ._subfields import split_ffn

__all__ = [
    "OrderMeasurement",
    "OrderProblem",
    "convergence_errors",
    "empirical_order",
    "implicit_solve_check",
    "imex_step_check",
    "layer_stable_dt",
    "measure_order",
    "measure_orders",
    "order_table",
    "stability_function_error",
    "stability_survey",
    "stable_dt_table",
    "step_cpu_seconds",
]


def _steps(name: str, values, owner: str, *, distinct: int = 0) -> list[int]:
    """``values`` as a list of step counts N ≥ 1 (at least ``distinct`` distinct ones)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(
            f"{owner}: `{name}` must be a list of step counts N, got "
            f"{type(values).__name__} {values!r}; pass e.g. {name}=[64, 128, 256]."
        )
    for n in values:
        check_number(name, n, owner, lower=0, integer=True, example="[64, 128, 256]")
    out = [int(n) for n in values]
    if len(set(out)) < distinct:
        raise ValueError(
            f"{owner}: `{name}` must hold at least {distinct} distinct step counts N (a "
            f"slope needs two), got {out}; pass e.g. {name}=[64, 128, 256]."
        )
    return out


def _check_scheme(scheme, capability: type, consumer: str) -> None:
    require(scheme, capability, consumer)


def _check_layer_sizes(owner: str, **sizes: int) -> None:
    """Each of ``sizes`` (``d``, ``n_tokens``, ``n_heads``, ...) a positive int, and
    ``n_heads`` a divisor of ``d``: the random layer the analyses below draw."""
    for name, v in sizes.items():
        check_number(name, v, owner, lower=0, integer=True, example="4")
    d, n_heads = sizes["d"], sizes["n_heads"]
    if d % n_heads:
        raise ValueError(
            f"{owner}: `n_heads` must divide d = {d}, got {n_heads}; pass a divisor of d."
        )


# ------------------------------------------------------------------------------ orders
class OrderProblem(eqx.Module):
    """A smooth problem for measured orders: a control path θ(t) on ``path.interval`` and
    an initial state ``u0``, the path's controls holding ``ffn_copies`` FFNs one after the
    other (the untied Macaron layer takes two; :meth:`path_for` gives every scheme the
    FFNs it uses).

    Build one with :meth:`legendre`. Float64: the errors of an order-4 scheme reach 1e-12.
    """

    path: ControlPath
    u0: Float[Array, "n d"]
    ffn_copies: int = eqx.field(static=True, default=1)

    @classmethod
    def legendre(
        cls,
        d: int,
        n_tokens: int,
        *,
        n_heads: int = 2,
        path_size: int = 3,
        scale: float = 0.5,
        path_seed: int = 0,
        state_seed: int = 1,
        ffn_copies: int = 2,
    ) -> OrderProblem:
        """A random Legendre path θ(t) on [0, 1] (``path_size`` = K coefficients decaying
        as 1/(k+1), weights of scale ``scale``, ``n_heads`` heads, a GELU FFN) whose
        LayerNorm sets are fixed in t, so that a post-norm layer projects onto one
        manifold, and a random initial state of ``n_tokens`` × ``d`` projected onto S1;
        float64, drawn from ``path_seed`` and ``state_seed``.

        Example:
            >>> from transflow.schemes import OrderProblem
            >>> p = OrderProblem.legendre(4, 3, path_size=2)
            >>> p.u0.shape, str(p.u0.dtype), p.path.interval
            ((3, 4), 'float64', (0.0, 1.0))
        """
        owner = "OrderProblem.legendre"
        _check_layer_sizes(owner, d=d, n_tokens=n_tokens, n_heads=n_heads)
        check_number("path_size", path_size, owner, lower=0, integer=True, example="3")
        check_number("ffn_copies", ffn_copies, owner, lower=0, integer=True, example="2")
        check_number("scale", scale, owner, lower=0, example="0.5")
        for name, v in (("path_seed", path_seed), ("state_seed", state_seed)):
            check_number(name, v, owner, lower=0, strict=False, integer=True, example="3")
        with jax.enable_x64(True):

            def draw(k):
                return LayerControls.random(
                    d,
                    n_heads=n_heads,
                    activation="gelu",
                    scale=scale,
                    dtype=jnp.float64,
                    ffn_copies=ffn_copies,
                    key=k,
                )

            key = jax.random.key(path_seed)
            c = init_path("legendre", draw, path_size, key=key, smooth=False).coeffs

            def fixed(n):
                return type(n)(n.gain.at[1:].set(0.0), n.bias.at[1:].set(0.0), n.eps)

            coeffs = type(c)(c.attn, fixed(c.norm1), c.ffn, fixed(c.norm2))
            path = BasisExpansion(coeffs, "legendre")
            u0 = jax.random.normal(jax.random.key(state_seed), (n_tokens, d), jnp.float64)
            return cls(path, _project(u0, path(0.0).norm1, None), ffn_copies)

    def path_for(self, scheme: AbstractScheme) -> ControlPath:
        """The path with the FFNs ``scheme`` uses: all of them when it takes
        ``ffn_copies``, the first one for a scheme with one FFN (a tied layer)."""
        copies = scheme.ffn_copies
        if copies == self.ffn_copies:
            return self.path
        if copies != 1:
            raise ValueError(
                f"OrderProblem: `scheme` {type(scheme).__name__} takes {copies} FFNs, the "
                f"problem's path holds {self.ffn_copies}; build it with "
                f"OrderProblem.legendre(..., ffn_copies={copies})."
            )
        c = self.path.coeffs
        first = split_ffn(c.ffn, self.ffn_copies, "OrderProblem.path_for")[0]
        return type(self.path)(type(c)(c.attn, c.norm1, first, c.norm2), self.path.basis)


@dataclasses.dataclass(frozen=True)
class OrderMeasurement:
    """A measured order of convergence of one scheme on one :class:`OrderProblem`.

    ``declared``: the scheme's declared order; ``observed``: the log-log slope of the
    errors fitted on ``window`` (:func:`empirical_order`); ``n_steps``, ``errors``: every
    N measured with its max error at T; ``local_slopes``: the slopes between consecutive
    N (the asymptotic range made visible)."""

    declared: int
    observed: float
    window: list[int]
    n_steps: list[int]
    errors: list[float]
    local_slopes: list[float]

    def record(self) -> dict:
        """The measurement as a plain dict (for metrics.jsonl)."""
        return dataclasses.asdict(self)

    def holds(self, tol: float) -> bool:
        """Whether the fitted order is within ``tol`` of the declared one."""
        return abs(self.observed - self.declared) <= tol


def empirical_order(n_steps: Sequence[int], errors: Sequence[float]) -> float:
    """The least-squares slope of log(error) against log(1/N): the measured order.

    Example:
        >>> from transflow.schemes import empirical_order
        >>> round(empirical_order([8, 16, 32], [1e-2, 2.5e-3, 6.25e-4]), 6)
        2.0
    """
    ns = _steps("n_steps", n_steps, "empirical_order", distinct=2)
    err = np.asarray(errors, float)
    if err.shape != (len(ns),) or not np.all(np.isfinite(err)) or np.any(err <= 0):
        raise ValueError(
            f"empirical_order: `errors` must hold one finite error > 0 per step count "
            f"({len(ns)}), got {list(np.ravel(err))}; a zero error has no log-log slope."
        )
    h = 1.0 / np.asarray(ns, float)
    return float(np.polyfit(np.log(h), np.log(err), 1)[0])


def convergence_errors(
    scheme: AbstractScheme,
    problem: OrderProblem,
    reference: Float[Array, "n d"],
    n_steps: Sequence[int],
) -> list[float]:
    """Max error at T against ``reference`` after N uniform steps of ``scheme`` on
    ``problem``, for each N of ``n_steps``: one jitted step (the scheme's own step code)
    looped N times, so a new N costs no compilation. Float64."""
    _check_scheme(scheme, AbstractODEScheme, "convergence_errors")
    ns = _steps("n_steps", n_steps, "convergence_errors")
    path = problem.path_for(scheme)
    with jax.enable_x64(True):
        ref = jnp.asarray(reference)
        if ref.shape != problem.u0.shape:
            raise ValueError(
                f"convergence_errors: `reference` must have the shape of u0 "
                f"{tuple(problem.u0.shape)}, got {tuple(ref.shape)}."
            )
        step = jax.jit(lambda u, c, h: scheme.step(u, c, h))
        out = []
        for n in ns:
            cs = stage_controls(path, scheme, n)
            h = jnp.asarray(path.step_size(n), jnp.float64)
            u = problem.u0
            for i in range(n):
                u = step(u, jax.tree.map(lambda x, i=i: x[i], cs), h)
            out.append(float(jnp.max(jnp.abs(u - ref))))
    return out


def measure_order(
    scheme: AbstractScheme,
    problem: OrderProblem,
    *,
    window: Sequence[int],
    grid: Sequence[int] = (),
    reference: Float[Array, "n d"] | None = None,
) -> OrderMeasurement:
    """The order of ``scheme`` measured on ``problem``: errors at T on every N of
    ``grid`` ∪ ``window``, local slopes between consecutive N, and the slope fitted on
    ``window`` (declared before the run, the same for every scheme of an order class).
    ``reference``: u(T) of the scheme's continuous limit (default: a Dopri8 solve of its
    own vector field, :func:`~transflow.reference_solution`).

    Example:
        >>> from transflow import make_scheme
        >>> from transflow.schemes import OrderProblem, measure_order
        >>> p = OrderProblem.legendre(4, 3, path_size=2)
        >>> m = measure_order(make_scheme("strang"), p, window=[16, 32, 64])
        >>> m.declared, abs(m.observed - 2) < 0.1
        (2, True)
    """
    _check_scheme(scheme, AbstractODEScheme, "measure_order")
    win = _steps("window", window, "measure_order", distinct=2)
    ns = sorted(set(_steps("grid", grid, "measure_order")) | set(win))
    if reference is None:
        with jax.enable_x64(True):
            reference = reference_solution(problem.u0, problem.path_for(scheme), scheme)
    errs = convergence_errors(scheme, problem, reference, ns)
    local = [
        float(np.log(errs[i] / errs[i + 1]) / np.log(ns[i + 1] / ns[i])) for i in range(len(ns) - 1)
    ]
    observed = empirical_order(win, [errs[ns.index(n)] for n in win])
    return OrderMeasurement(declared_order(scheme), observed, win, ns, errs, local)


def measure_orders(
    schemes: Mapping[str, AbstractScheme],
    problem: OrderProblem,
    *,
    windows: Mapping[int, Sequence[int]],
    grid: Sequence[int] = (),
    reference_fields: Mapping[str, AbstractScheme] | None = None,
) -> dict[str, OrderMeasurement]:
    """:func:`measure_order` for each named scheme, on the window of its declared order
    (``windows[order]``). ``reference_fields[name]``: a scheme with the same continuous
    limit whose reference solve ``name`` shares (schemes mapped to the same object share
    one solve); checked: their vector fields agree to 1e-12 at the start, middle and end
    of the path.

    Example:
        >>> from transflow import make_scheme
        >>> from transflow.schemes import OrderProblem, measure_orders
        >>> p = OrderProblem.legendre(4, 3, path_size=2)
        >>> pre = make_scheme("prenorm")
        >>> ms = measure_orders({"heun": make_scheme("heun"), "prenorm": pre}, p,
        ...     windows={1: [64, 128], 2: [16, 32]}, reference_fields={"heun": pre})
        >>> [(n, m.declared, round(m.observed)) for n, m in ms.items()]
        [('heun', 2, 2), ('prenorm', 1, 1)]
    """
    fields = dict(reference_fields or {})
    unknown = sorted(set(fields) - set(schemes))
    if unknown:
        raise ValueError(
            f"measure_orders: `reference_fields` names {unknown}, which are not in "
            f"`schemes` ({sorted(schemes)})."
        )
    for name, s in schemes.items():
        _check_scheme(s, AbstractODEScheme, f"measure_orders[{name!r}]")
        if declared_order(s) not in windows:
            raise ValueError(
                f"measure_orders: `windows` has no window for order {declared_order(s)} "
                f"(scheme {name!r}); it has orders {sorted(windows)}."
            )
    refs: dict[int, Any] = {}
    out = {}
    for name, s in schemes.items():
        field_scheme = fields.get(name, s)
        if field_scheme is not s:
            _same_limit(name, s, field_scheme, problem)
        if id(field_scheme) not in refs:
            path = problem.path_for(s)
            with jax.enable_x64(True):
                refs[id(field_scheme)] = reference_solution(problem.u0, path, field_scheme)
        out[name] = measure_order(
            s,
            problem,
            window=windows[declared_order(s)],
            grid=grid,
            reference=refs[id(field_scheme)],
        )
    return out


def _same_limit(name: str, scheme, field_scheme, problem: OrderProblem) -> None:
    """ValueError unless the two schemes' vector fields agree along the problem's path."""
    _check_scheme(field_scheme, AbstractODEScheme, f"measure_orders: reference_fields[{name!r}]")
    path = problem.path_for(scheme)
    t0, t1 = path.interval
    with jax.enable_x64(True):
        for t in (t0, 0.5 * (t0 + t1), t1):
            a = scheme.vector_field(problem.u0, path(t))
            b = field_scheme.vector_field(problem.u0, path(t))
            gap = float(jnp.max(jnp.abs(a - b)))
            if not gap <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(a)))):
                raise ValueError(
                    f"measure_orders: `reference_fields[{name!r}]` "
                    f"({type(field_scheme).__name__}) has another continuous limit: the "
                    f"vector fields differ by {gap:.2e} at t = {t}; map {name!r} to a "
                    "scheme with the same field, or leave it out (its own field)."
                )


# ------------------------------------------------------------------------------ stability
def _default_rates() -> np.ndarray:
    """24 random complex rate pairs (z_a, z_g) of modulus ~ 1.5 (seed 0)."""
    rng = np.random.default_rng(0)
    return rng.normal(size=(24, 2)) * 1.5 + 1j * rng.normal(size=(24, 2)) * 1.5


def stability_function_error(scheme: AbstractScheme, rates=None) -> float:
    """max over the rate pairs (z_a, z_g) of |R_measured − R| / max(1, |R|): the
    amplification factor measured by running the scheme's step code on linear sub-fields
    (:func:`~transflow.amplification_factor`) against its declared stability function
    (:func:`~transflow.stability_function`). ``rates``: an array ``(k, 2)`` of complex
    rates (default: 24 random pairs of modulus ~ 1.5). Float64.

    Example:
        >>> from transflow import make_scheme
        >>> from transflow.schemes import stability_function_error
        >>> stability_function_error(make_scheme("rk4")) <= 1e-12
        True
    """
    _check_scheme(scheme, AbstractLinearStability, "stability_function_error")
    zs = _default_rates() if rates is None else np.asarray(rates, complex)
    if zs.ndim != 2 or zs.shape[1] != 2 or zs.shape[0] < 1 or not np.all(np.isfinite(zs)):
        raise ValueError(
            "stability_function_error: `rates` must be a finite (k, 2) array of complex "
            f"rate pairs (z_a, z_g), got shape {zs.shape}; e.g. rates=[[-0.5+0.1j, -0.2]]."
        )
    worst = 0.0
    with jax.enable_x64(True):
        for a, g in zs:
            r = complex(stability_function(scheme, a, g))
            worst = max(
                worst, abs(complex(amplification_factor(scheme, a, g)) - r) / max(1.0, abs(r))
            )
    return worst


def layer_stable_dt(
    scheme: AbstractScheme,
    controls: LayerControls,
    trajectory: Float[Array, "k n d"],
    *,
    margin: float = 0.05,
) -> dict:
    """The largest stable Δt* of a layer as trained, along ``trajectory``, confirmed by runs.

    :func:`~transflow.linearised_stability` in the form the scheme declares
    (``scheme.stability_form``: the pre-norm sub-fields, the post-norm ones, or the IMEX
    layer with only its FFN weights implicit), then, when Δt* is finite,
    :func:`~transflow.confirm_stable_dt` (bounded at 0.95 Δt*, growing at 1.05 Δt*).
    Returns ``dt_star``, ``layer`` (the form, in words), ``max_re_implicit`` (IMEX: the
    largest Re λ of the implicit matrices, else ``None``) and, with a finite Δt*,
    ``growth_below``/``growth_above`` and the confirmation's spectral radii and step
    counts.
    """
    _check_scheme(scheme, AbstractLinearStability, "layer_stable_dt")
    check_number("margin", margin, "layer_stable_dt", lower=0, example="0.05")
    form = scheme.stability_form
    r = linearised_stability(scheme, controls, trajectory, form=form, margin=margin)
    if form == "imex":
        c = scheme.implicit_branch_weight()
        layer = f"post-LN, FFN branch weight {c:g}, W_j implicit"
    else:
        layer = f"{form} sub-fields"
    rec = {"dt_star": r["dt"], "layer": layer, "max_re_implicit": r.get("max_re_implicit")}
    if np.isfinite(r["dt"]):
        # runs at 0.95 Δt* and 1.05 Δt*, the one above long enough to grow 1e4-fold at its
        # spectral radius (IMEX: ρ can leave 1 slowly)
        rec.update(confirm_stable_dt(scheme, r["j_attention"], r["j_ffn"], r["dt"]))
    return rec


def stability_survey(
    stable_dt: Sequence[str] = (),
    *,
    d: int = 8,
    n_tokens: int = 4,
    n_heads: int = 2,
    dt: float = 0.25,
    n_steps: int = 3,
) -> tuple[dict[str, float], dict[str, dict]]:
    """The stability of every registered scheme with a linear stability function
    (:data:`~transflow.SCHEME_NAMES`, the others have no linear test problem): its
    :func:`stability_function_error`, and for those named in ``stable_dt`` the largest
    stable Δt of a random layer as trained (:func:`layer_stable_dt`).

    The layer: :meth:`~transflow.LayerControls.random` of width ``d`` with ``n_heads``
    heads and a GELU FFN, float64, key 0; its trajectory: ``n_steps`` steps of Δt = ``dt``
    of the layer itself from a random state of ``n_tokens`` × ``d`` (key 1), the scheme's
    own steps, or the pre-norm layer's for a scheme whose ``stability_form`` is
    ``"prenorm"``. A name of ``stable_dt`` without a linear stability function has no Δt*
    and is refused. Returns ``(errors, stable)``, both by name in registry order.

    Example:
        >>> from transflow.schemes import stability_survey
        >>> errors, stable = stability_survey(d=4, n_tokens=2)  # stable_dt=["rk4"]: its Δt*
        >>> "lie" in errors, max(errors.values()) <= 1e-12, stable
        (False, True, {})
    """
    owner = "stability_survey"
    if isinstance(stable_dt, str | bytes) or not isinstance(stable_dt, Sequence):
        raise TypeError(
            f"{owner}: `stable_dt` must be a list of scheme names, got "
            f"{type(stable_dt).__name__} {stable_dt!r}; pass e.g. stable_dt=['prenorm', 'imex']."
        )
    unknown = [n for n in stable_dt if n not in SCHEME_NAMES]
    if unknown:
        raise ValueError(
            f"{owner}: `stable_dt` names {unknown}, which are not schemes; use names of "
            f"{SCHEME_NAMES}."
        )
    without = [n for n in stable_dt if not has(make_scheme(n), AbstractLinearStability)]
    if without:
        raise ValueError(
            f"{owner}: `stable_dt` names {without}, which have no linear stability function "
            "(capability AbstractLinearStability), so no largest stable Δt; leave them out."
        )
    _check_layer_sizes(owner, d=d, n_tokens=n_tokens, n_heads=n_heads, n_steps=n_steps)
    check_number("dt", dt, owner, lower=0, example="0.25")
    errors: dict[str, float] = {}
    stable: dict[str, dict] = {}
    with jax.enable_x64(True):
        th = LayerControls.random(
            d, n_heads=n_heads, activation="gelu", dtype=jnp.float64, key=jax.random.key(0)
        )
        u0 = jax.random.normal(jax.random.key(1), (n_tokens, d), jnp.float64)
        controls = stack_controls([th] * n_steps)

        def trajectory(scheme):  # as evolve(u0, controls, scheme, dt=dt) saving every step
            _, traj = scan_steps(
                lambda u, c: scheme.step(u, c, dt, grid=None, causal=False),
                u0,
                controls,
                n_steps,
                saveat=SaveAt(steps=True),
                remat=Remat(),
                controller=ConstantSteps(),
            )
            return jnp.concatenate([u0[None], traj])

        for name in SCHEME_NAMES:
            s = make_scheme(name)  # as trained (IMEX: ffn_branch_dt="dt")
            if not has(s, AbstractLinearStability):
                continue
            errors[name] = stability_function_error(s)
            if name in stable_dt:
                own = s.stability_form != "prenorm"
                path = trajectory(s if own else make_scheme("prenorm"))
                stable[name] = layer_stable_dt(s, th, path)
    return errors, stable


def implicit_solve_check(
    scheme: AbstractScheme,
    controls: LayerControls,
    u: Float[Array, "n d"],
    dt: float = 0.5,
    *,
    seed: int = 2,
) -> dict:
    """Whether the IMEX step solves its implicit FFN sub-steps: ``uses_lu`` (1 when the
    traced step has an LU factorisation and a triangular solve, else 0) and ``residual``,
    max |x − Δt (x W + b) − z| of one implicit sub-step x = (z + Δt b)(I − Δt W)⁻¹ on a
    random W, b, z of ``u``'s sizes (float64, keys ``seed``, ``seed + 1``, ``seed + 2``).

    Example:
        >>> import jax
        >>> from transflow import LayerControls, make_scheme
        >>> from transflow.schemes import implicit_solve_check
        >>> th = LayerControls.random(8, key=jax.random.key(0))
        >>> r = implicit_solve_check(make_scheme("imex"), th, jax.numpy.ones((4, 8)))
        >>> r["uses_lu"], r["residual"] <= 1e-12
        (1, True)
    """
    _check_scheme(scheme, AbstractImplicitFFN, "implicit_solve_check")
    check_number("dt", dt, "implicit_solve_check", lower=0, example="0.5")
    check_number("seed", seed, "implicit_solve_check", lower=0, strict=False, integer=True)
    if jnp.ndim(u) != 2:
        raise ValueError(
            f"implicit_solve_check: `u` must be a state (n, d), got shape {jnp.shape(u)}."
        )
    jaxpr = str(jax.make_jaxpr(lambda v: scheme.step(v, controls, dt))(u))
    uses_lu = int("lu" in jaxpr and "triangular_solve" in jaxpr)
    n, d = jnp.shape(u)
    with jax.enable_x64(True):
        w = jax.random.normal(jax.random.key(seed), (d, d), jnp.float64) / d**0.5
        b = jax.random.normal(jax.random.key(seed + 1), (d,), jnp.float64)
        z = jax.random.normal(jax.random.key(seed + 2), (n, d), jnp.float64)
        x = scheme.implicit_substep(z, w, b, dt)
        residual = float(jnp.max(jnp.abs(x - dt * (x @ w + b) - z)))
    return {"uses_lu": uses_lu, "residual": residual}


def step_cpu_seconds(
    scheme: AbstractScheme,
    controls: LayerControls,
    u: Float[Array, "n d"],
    dt: float = 0.5,
    *,
    reps: int = 200,
) -> float:
    """CPU seconds (``time.process_time``) of one jitted step, the mean of ``reps`` calls
    after a compiling one."""
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"step_cpu_seconds: `scheme` must be an AbstractScheme, got {scheme!r}.")
    check_number("dt", dt, "step_cpu_seconds", lower=0, example="0.5")
    check_number("reps", reps, "step_cpu_seconds", lower=0, integer=True, example="200")
    f = jax.jit(lambda v: scheme.step(v, controls, dt))
    f(u).block_until_ready()
    t = time.process_time()
    for _ in range(reps):
        f(u).block_until_ready()
    return (time.process_time() - t) / reps


def imex_step_check(
    scheme: AbstractScheme | None = None,
    explicit: AbstractScheme | None = None,
    *,
    d: int = 32,
    n_tokens: int = 16,
    n_heads: int = 2,
    dt: float = 0.5,
    reps: int = 200,
) -> dict:
    """The IMEX step's solve and its cost, on a random float32 layer of width ``d`` (keys
    0 and 1) and ``n_tokens`` tokens: :func:`implicit_solve_check` (``uses_lu``,
    ``residual``) and :func:`step_cpu_seconds` of ``scheme`` (default the IMEX layer as
    trained) against ``explicit`` (default the relaxed Lie step, the explicit step it
    relaxes), as ``imex_step_us``, ``explicit_step_us`` (µs per jitted step) and
    ``cost_ratio``.

    Example:
        >>> from transflow.schemes import imex_step_check
        >>> r = imex_step_check(d=8, n_tokens=4, reps=2)
        >>> r["uses_lu"], r["residual"] <= 1e-12, r["cost_ratio"] > 0
        (1, True, True)
    """
    owner = "imex_step_check"
    scheme = make_scheme("imex") if scheme is None else scheme
    explicit = make_scheme("relaxed") if explicit is None else explicit
    _check_scheme(scheme, AbstractImplicitFFN, owner)
    _check_layer_sizes(owner, d=d, n_tokens=n_tokens, n_heads=n_heads, reps=reps)
    check_number("dt", dt, owner, lower=0, example="0.5")
    th = LayerControls.random(d, n_heads=n_heads, dtype=jnp.float32, key=jax.random.key(0))
    u = jax.random.normal(jax.random.key(1), (n_tokens, d), jnp.float32)
    out = implicit_solve_check(scheme, th, u, dt)
    t_imex = step_cpu_seconds(scheme, th, u, dt, reps=reps)
    t_expl = step_cpu_seconds(explicit, th, u, dt, reps=reps)
    out.update(imex_step_us=1e6 * t_imex, explicit_step_us=1e6 * t_expl, cost_ratio=t_imex / t_expl)
    return out


# ------------------------------------------------------------------------------ tables
def order_table(measurements: Mapping[str, OrderMeasurement], *, tol: float) -> str:
    """The measured orders as a markdown table: per scheme the declared order, the window,
    the fitted slope (``(FAILED)`` when farther than ``tol`` from the declared order) and
    the local slopes N → 2N."""
    lines = [
        "| scheme | declared | window | slope on window | local slopes (N → 2N) |",
        "|---|---|---|---|---|",
    ]
    for name, m in measurements.items():
        ns = m.n_steps
        local = ", ".join(f"{ns[i]}–{ns[i + 1]}: {v:.2f}" for i, v in enumerate(m.local_slopes))
        lines.append(
            f"| {name} | {m.declared} | {m.window[0]}–{m.window[-1]} | "
            f"{m.observed:.3f}{'' if m.holds(tol) else ' (FAILED)'} | {local} |"
        )
    return "\n".join(lines)


def stable_dt_table(results: Mapping[str, dict]) -> str:
    """The results of :func:`layer_stable_dt` as a markdown table (``—`` where a value
    does not apply: no implicit matrices, or no finite Δt* to confirm)."""

    def num(v, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "| scheme | layer | Δt* | max Re λ(implicit W) | growth at 0.95 Δt* | growth at 1.05 Δt* |",
        "|---|---|---|---|---|---|",
    ]
    for name, st in results.items():
        lines.append(
            f"| {name} | {st['layer']} | {st['dt_star']:.4g} | "
            f"{num(st.get('max_re_implicit'), '.3f')} | {num(st.get('growth_below'), '.3g')} | "
            f"{num(st.get('growth_above'), '.3g')} |"
        )
    return "\n".join(lines)

"""Convergence studies: in Δt against diffrax references, in the grid (N_x, N_y), the
non-convergence of the full model (docs/spec/continuous-model.md Q9), and long-time token
trajectories.

Each study returns plain numbers (floats, lists) so experiments and figures can log them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._controls import (
    FFN_BRANCH_DT,
    AttentionParams,
    LayerControls,
    NormParams,
    stack_controls,
    unstack_controls,
)
from .._errors import (
    check_choice,
    check_flag,
    check_float_dtype,
    check_kind,
    check_number,
    check_sequence,
    check_sizes,
    check_step,
    check_temperature,
    check_values,
)
from .._grid import Grid
from .._operators import attention, project_s1
from .._paths import PiecewiseConstant
from ._controls import KernelAttention, KernelLinear, SmoothPath
from ._flows import euler_flow, projection_flow
from ._models import SubModel, full_model_flows
from ._reference import reference_error_estimate, reference_solve
from ._schemes import SplittingScheme, hybrid, integrate, lie, paper_lie, parallel, strang

__all__ = [
    "fit_slope",
    "ConvergenceResult",
    "default_submodel",
    "scheme_for",
    "dt_convergence",
    "convergence_study",
    "smooth_kernel_model",
    "grid_convergence",
    "full_model_controls",
    "full_model_refinement",
    "clustering_trajectory",
    "s2_active_fraction",
    "expected_order",
    "grid_refinement_study",
    "nonconvergence_study",
    "NONCONVERGENCE_CASES",
    "SCHEMES",
    "SUBMODELS",
]


def _hybrid(ffn_branch_dt: str):
    def build(ops):
        return hybrid([ops[0], [*[(op,) for op in ops[1:]], None]], ffn_branch_dt=ffn_branch_dt)

    return build


#: The one table of the sub-model splittings by name: name -> (the splitting of the
#: operators, the sub-flow method, whether the sub-flows may use the tangent part).
_SPLITTINGS: dict[str, tuple] = {
    "lie": (lie, "rk4", True),
    "strang": (strang, "rk4", True),
    "lie-paper": (lie, "euler", False),
    "parallel": (parallel, "rk4", True),
    "hybrid-2dt": (_hybrid("2dt"), "rk4", True),
    "hybrid-dt": (_hybrid("dt"), "rk4", True),
}

SCHEMES = tuple(_SPLITTINGS)
"""Scheme names of :func:`scheme_for`: ``lie``/``strang``/``parallel`` with RK4 sub-flows
(tangent attention for sub-model b), ``lie-paper`` with explicit Euler sub-steps and the
full F (the paper's step types), ``hybrid-2dt``/``hybrid-dt``: attention, then the other
operators averaged with the zero operator at speed 2 (consistent) or 1 (paper-literal)."""

SUBMODELS = ("a", "b", "c", "c_invariant")
"""Sub-model names of :func:`convergence_study`: ``c`` has an *active* S2 constraint (the
solution sits on ∂S2 a measured fraction of the time); ``c_invariant`` uses controls under
which S2 is forward invariant, so the constraint never acts (sub-model a in disguise)."""


def fit_slope(h: Sequence[float], err: Sequence[float]) -> float:
    """Least-squares slope of ``log err`` against ``log h`` (the observed order)."""
    h = np.asarray(check_values("h", h, "fit_slope", ndim=1), float)
    err = np.asarray(check_values("err", err, "fit_slope", ndim=1), float)
    if h.shape != err.shape or h.size < 2:
        raise ValueError(
            f"fit_slope: `h` and `err` must be >= 2 matching pairs, got {h.size} `h` and "
            f"{err.size} `err`."
        )
    for name, x in (("h", h), ("err", err)):
        if np.any(x <= 0):
            raise ValueError(f"fit_slope: `{name}` must be > 0 to fit a log-log slope, got {x}.")
    return float(np.polyfit(np.log(h), np.log(err), 1)[0])


@dataclasses.dataclass
class ConvergenceResult:
    """Errors of one scheme on one sub-model against the reference, and the fitted order.

    ``reference_error`` is the max-abs difference of the diffrax reference at the
    tolerance used (1e-12) and at 100× tighter; ``b_splitting`` the splitting of sub-model
    b (``"tangent"``/``"full"``, else ``None``); ``active_fraction`` for sub-model c the
    fraction of the horizon on which the S2 constraint is active
    (:func:`s2_active_fraction`), else ``None``.
    """

    submodel: str
    scheme: str
    declared_order: int
    dts: list[float]
    errors: list[float]
    slope: float
    reference_error: float
    b_splitting: str | None = None
    active_fraction: float | None = None

    def record(self) -> dict:
        return dataclasses.asdict(self)


def _check_seed(seed, owner: str) -> None:
    check_number("seed", seed, owner, lower=0, strict=False, integer=True, example="0")


def default_submodel(
    kind: str,
    *,
    n_tokens: int = 5,
    n_features: int = 4,
    seed: int = 0,
    constraint_active: bool = True,
    dtype=None,
) -> tuple[SubModel, jax.Array]:
    """A sub-model of docs/spec/continuous-model.md §8.10 with smooth random controls, and a
    consistent u0.

    - ``"a"``: attention + linear, ``θ(t) = θ_0 + sin(ωt) θ_1``;
    - ``"b"``: (a) + S1 with σ1(t) = 0.2 + 0.1 sin t, σ2(t) = 1 + 0.2 cos 2t; u0 ∈ S1(σ(0));
    - ``"c"``: attention + linear + S2, u0 > 0. With ``constraint_active=True`` (default)
      the controls have both signs: the solution reaches ∂S2 and the normal cone acts on
      part of the horizon (seed 0, T = 1: on 86% of the time some entry is held at 0, on
      average 18% of the entries; :func:`s2_active_fraction`). ``False``: W_V ≥ 0, W
      Metzler (off-diagonal ≥ 0), b ≥ 0, so S2 is forward invariant and the constraint is
      never active (the solution stays ≥ 0.114: sub-model a in disguise).
    """
    owner = "default_submodel"
    if kind not in ("a", "b", "c"):
        raise ValueError(f"{owner}: `kind` must be 'a', 'b' or 'c', got {kind!r}.")
    check_sizes(owner, n_tokens=n_tokens, n_features=n_features)
    _check_seed(seed, owner)
    check_flag("constraint_active", constraint_active, owner)
    check_float_dtype("dtype", dtype, owner)
    dtype = dtype or jnp.result_type(float)
    ks = jax.random.split(jax.random.key(seed), 8)
    d = n_features
    # cast: AttentionParams.random returns float64 weights under x64 whatever `dtype`
    cast = lambda tree: jax.tree.map(lambda x: x.astype(dtype), tree)
    p0 = cast(AttentionParams.random(d, key=ks[0], dtype=dtype))
    p1 = cast(AttentionParams.random(d, key=ks[1], scale=0.5, dtype=dtype))
    s = float(0.5 / np.sqrt(d))
    w0, w1 = (s * jax.random.normal(k, (d, d), dtype) for k in ks[2:4])
    b0, b1 = (0.1 * jax.random.normal(k, (d,), dtype) for k in ks[4:6])
    u0 = jax.random.normal(ks[6], (n_tokens, d), dtype)
    if kind == "c" and not constraint_active:
        p0 = AttentionParams.paper(p0.wq, p0.wk, 0.25 * jnp.abs(p0.wv))
        p1 = AttentionParams.paper(p1.wq, p1.wk, 0.5 * jnp.abs(p0.wv))
        # Metzler W (off-diagonal >= 0) and b >= 0: {u >= 0} is forward invariant.
        w0, b0 = jnp.abs(w0) - 2 * jnp.eye(d, dtype=dtype), jnp.abs(b0)
        w1, b1 = 0.5 * jnp.abs(w0) * (1 - jnp.eye(d, dtype=dtype)), 0.5 * b0
    else:
        p0 = AttentionParams.paper(p0.wq, p0.wk, p0.wv)
        p1 = AttentionParams.paper(p1.wq, p1.wk, p1.wv)
    attn = SmoothPath(p0, p1, omega=2.0)
    lin = SmoothPath((w0, b0), (w1, b1), omega=1.5)
    norm = None
    if kind == "b":

        def norm(t):
            return 0.2 + 0.1 * jnp.sin(t), 1.0 + 0.2 * jnp.cos(2 * t)

    model = SubModel(kind, attn, lin, norm)
    if kind == "b":
        u0 = model.project_s1(0.0, u0)
    if kind == "c":
        u0 = jnp.abs(u0) + (0.05 if constraint_active else 0.1)
    return model, u0


def s2_active_fraction(
    model: SubModel, u0: jax.Array, *, t1: float = 1.0, n_samples: int = 401, tol: float = 1e-9
) -> dict:
    """How much of the horizon the S2 constraint of sub-model c is active on.

    The reference solution is sampled at ``n_samples`` equispaced times in [0, t1]; an
    entry is *active* when it sits on ∂S2 (``u ≤ tol``) and the drive pushes outwards
    (``F < 0``), i.e. the normal cone changes the field there.

    Returns:
        ``{"time_fraction"``: fraction of the sample times with at least one active entry,
        ``"entry_fraction"``: mean fraction of active entries, ``"min_u"``: the smallest
        entry of the solution``}``.
    """
    owner = "s2_active_fraction"
    check_kind("model", model, SubModel, owner, "make it with default_submodel('c')")
    if model.kind != "c":
        raise ValueError(f"{owner}: `model` must be sub-model 'c', got kind {model.kind!r}.")
    u0 = check_values("u0", u0, owner, ndim=2)
    check_step("t1", t1, owner)
    check_sizes(owner, n_samples=n_samples)
    check_number("tol", tol, owner, lower=0, strict=False, example="1e-9")
    ts = jnp.linspace(0.0, t1, n_samples, dtype=u0.dtype)
    us = reference_solve(model.vector_field, u0, t1=t1, ts=ts)
    f = jax.vmap(model.drive)(ts, us)
    active = (us <= tol) & (f < 0)
    return {
        "time_fraction": float(jnp.mean(jnp.any(active, axis=(1, 2)))),
        "entry_fraction": float(jnp.mean(active)),
        "min_u": float(jnp.min(us)),
    }


def expected_order(submodel: str, scheme: str, b_splitting: str = "tangent") -> int | None:
    """The order the studies are expected to *observe* (the documented findings), or
    ``None`` where no order is claimed.

    Declared orders hold where the sub-flows are smooth enough: Strang is 2 on (a), on (b)
    with the tangent splitting and on ``c_invariant``; it is 1 on (b) with the full-F
    splitting and on (c) with an active constraint (docs/continuous.md). No order is
    claimed for ``lie-paper`` on a and c (pre-asymptotic at Δt ≥ 1/64: slopes 0.75 and
    0.88), for ``hybrid-dt`` (inconsistent: converges to another model) and for the
    hybrid schemes on (b) and (c), which average a projection with the zero operator.

    Example:
        >>> from transflow.continuous import expected_order
        >>> expected_order("b", "strang"), expected_order("b", "strang", "full")
        (2, 1)
    """
    check_choice("submodel", submodel, SUBMODELS)
    check_choice("scheme", scheme, SCHEMES)
    check_choice("b_splitting", b_splitting, ("tangent", "full"))
    if scheme in ("lie", "parallel"):
        return 1
    if scheme == "strang":
        if submodel == "c" or (submodel == "b" and b_splitting == "full"):
            return 1
        return 2
    if scheme == "lie-paper":
        return 1 if submodel == "b" else None
    if scheme == "hybrid-2dt":
        return 1 if submodel in ("a", "c_invariant") else None
    return None


def scheme_for(
    name: str, model: SubModel, *, b_splitting: str = "tangent"
) -> tuple[SplittingScheme, dict]:
    """The scheme ``name`` (one of :data:`SCHEMES`) for ``model`` and its sub-flows.

    Args:
        b_splitting: for sub-model b, ``"tangent"`` (default: the attention and linear
            sub-flows use the tangent part P_T F, order 2 with Strang) or ``"full"`` (they
            use F itself and the projection removes the normal part: the paper's reading,
            first order whatever the scheme). ``lie-paper`` always uses ``"full"``.
    """
    return _scheme_for(name, model, b_splitting, "scheme_for", "name")


def _scheme_for(name, model, b_splitting, owner: str, arg: str):
    check_kind("model", model, SubModel, owner, "make it with default_submodel(...)")
    if b_splitting not in ("tangent", "full"):
        raise ValueError(
            f"{owner}: `b_splitting` must be 'tangent' or 'full', got {b_splitting!r}."
        )
    if name not in _SPLITTINGS:
        raise ValueError(f"{owner}: `{arg}` must be one of {SCHEMES}, got {name!r}.")
    build, method, may_use_tangent = _SPLITTINGS[name]
    ops = model.operators
    if name == "strang" and model.kind in ("b", "c"):
        # the constraint outermost: every step ends with its (exact) projection
        ops = (ops[-1], *ops[:-1])
    return build(ops), model.flows(method, tangent=may_use_tangent and b_splitting == "tangent")


def dt_convergence(
    model: SubModel,
    u0: jax.Array,
    scheme_name: str,
    *,
    t1: float = 1.0,
    n_steps: Sequence[int] = (4, 8, 16, 32, 64),
    reference: tuple[jax.Array, float] | None = None,
    submodel: str | None = None,
    b_splitting: str = "tangent",
    active_fraction: float | None = None,
) -> ConvergenceResult:
    """Max-abs error at ``t1`` of ``scheme_name`` for each N in ``n_steps`` (Δt = t1/N)
    against a diffrax reference (Dopri8, tol 1e-12 with a 1e-14 check), and the fitted
    log–log slope (compare with the declared order, as diffrax's ``test_ode_order``)."""
    owner = "dt_convergence"
    scheme, flows = _scheme_for(scheme_name, model, b_splitting, owner, "scheme_name")
    u0 = check_values("u0", u0, owner, ndim=2)
    check_step("t1", t1, owner)
    n_steps = check_sequence("n_steps", n_steps, owner, example="(4, 8, 16)")
    if reference is not None:
        if not isinstance(reference, tuple | list) or len(reference) != 2:
            raise TypeError(
                f"{owner}: `reference` must be None or the pair (u(t1), error estimate) of "
                f"reference_error_estimate, got {type(reference).__name__}."
            )
        check_values("reference", reference[0], owner, shape=tuple(u0.shape))
        check_number("reference", reference[1], owner, lower=0, strict=False)
    if submodel is not None:
        check_choice("submodel", submodel, SUBMODELS)
    if active_fraction is not None:
        check_number("active_fraction", active_fraction, owner, lower=0, upper=1, strict=False)
    if reference is None:
        reference = reference_error_estimate(model.vector_field, u0, t1=t1)
    ref, ref_err = reference
    run = jax.jit(lambda v, n: integrate(scheme, flows, v, t1=t1, n_steps=n))
    errors = [float(jnp.max(jnp.abs(run(u0, n) - ref))) for n in n_steps]
    dts = [t1 / n for n in n_steps]
    slope = fit_slope(dts, errors) if all(e > 0 for e in errors) else float("nan")
    return ConvergenceResult(
        submodel or model.kind,
        scheme_name,
        scheme.order,
        dts,
        errors,
        slope,
        float(ref_err),
        b_splitting=b_splitting if model.kind == "b" else None,
        active_fraction=active_fraction,
    )


def convergence_study(
    kinds: Sequence[str] = ("a", "b", "c"),
    schemes: Sequence[str] = ("lie", "strang"),
    *,
    n_steps: Sequence[int] = (4, 8, 16, 32, 64),
    t1: float = 1.0,
    seed: int = 0,
    n_tokens: int = 5,
    n_features: int = 4,
    b_splitting: str | Sequence[str] = "tangent",
) -> list[ConvergenceResult]:
    """:func:`dt_convergence` for every (sub-model, scheme); sub-models from
    :data:`SUBMODELS`. One reference solve per sub-model; for ``c`` the fraction of time
    its constraint is active is measured (:func:`s2_active_fraction`).

    ``b_splitting``: ``"tangent"``, ``"full"`` or both (a list): sub-model b is run once
    per splitting (see :func:`scheme_for`).
    """
    owner = "convergence_study"
    for arg, names, choices in (("kinds", kinds, SUBMODELS), ("schemes", schemes, SCHEMES)):
        if not isinstance(names, list | tuple) or not names or any(n not in choices for n in names):
            raise ValueError(
                f"{owner}: `{arg}` must be a non-empty list of names from {choices}, got "
                f"{names!r:.60}."
            )
    splittings = [b_splitting] if isinstance(b_splitting, str) else list(b_splitting)
    for split in splittings:
        check_choice("b_splitting", split, ("tangent", "full"))
    check_sequence("n_steps", n_steps, owner, example="(4, 8, 16)")
    check_step("t1", t1, owner)
    _check_seed(seed, owner)
    check_sizes(owner, n_tokens=n_tokens, n_features=n_features)
    out = []
    for kind in kinds:
        base = "c" if kind.startswith("c") else kind
        model, u0 = default_submodel(
            base,
            constraint_active=kind == "c",
            seed=seed,
            n_tokens=n_tokens,
            n_features=n_features,
        )
        ref = reference_error_estimate(model.vector_field, u0, t1=t1)
        frac = s2_active_fraction(model, u0, t1=t1)["time_fraction"] if base == "c" else None
        for split in splittings if base == "b" else ["tangent"]:
            for name in schemes:
                out.append(
                    dt_convergence(
                        model,
                        u0,
                        name,
                        t1=t1,
                        n_steps=n_steps,
                        reference=ref,
                        submodel=kind,
                        b_splitting=split,
                        active_fraction=frac,
                    )
                )
    return out


# --------------------------------------------------------------------------- grid
def smooth_kernel_model(grid: Grid) -> tuple[SubModel, jax.Array]:
    """Sub-model (a) with smooth kernels on Ω_x = Ω_y = [0, 1] sampled on ``grid``, and
    the initial condition f(x, y) = sin(2πx + y) + ½ cos(πxy) on its nodes."""
    check_kind("grid", grid, Grid, "smooth_kernel_model", "pass e.g. Grid.interval(8, 8)")

    def wq(xi, y, t):
        return 2.0 * jnp.cos(jnp.pi * (xi - y)) + 0.5 * xi * y * (1 + 0 * t)

    def wk(xi, y, t):
        return 2.0 * jnp.sin(jnp.pi * (xi + y)) + 0 * t

    def wv(xi, y, t):
        return jnp.exp(-((xi - y) ** 2)) * (1 + 0.3 * jnp.sin(t))

    def wl(xi, y, t):
        return 0.5 * jnp.cos(2 * jnp.pi * xi * y) - 0.3 + 0 * t

    def bl(y, t):
        return 0.1 * jnp.sin(jnp.pi * y) * jnp.cos(t)

    attn = KernelAttention(wq, wk, wv).sample(grid)
    lin = KernelLinear(wl, bl).sample(grid)
    model = SubModel("a", attn, lin, grid=grid)
    u0 = grid.sample_function(
        lambda x, y: jnp.sin(2 * jnp.pi * x + y) + 0.5 * jnp.cos(jnp.pi * x * y)
    )
    return model, u0


def grid_convergence(
    sizes: Sequence[int] = (4, 12, 36),
    *,
    n_ref: int = 324,
    quantity: str = "attention",
    t1: float = 0.5,
    n_time_steps: int = 8,
) -> dict:
    """Error of the discrete operator (or evolution) vs a fine grid as N_x = N_y = N grows.

    Midpoint grids refined by factors of 3 are nested (the coarse nodes are fine nodes), so
    the error is the max-abs difference at the coarse nodes, without interpolation.

    Args:
        sizes: grid sizes N (each ``n_ref / N`` must be a power of 3).
        quantity: ``"attention"`` (𝒜u of the initial condition), ``"linear"`` (𝒲u + b)
            or ``"evolution"`` (u(t1) by Strang with RK4 sub-flows and ``n_time_steps``
            steps: the same Δt on every grid, so only the grid error remains).

    Returns:
        ``{"sizes", "errors", "slope"}`` with ``slope`` = −(fitted log–log slope), which is
        2 for the midpoint rule.
    """
    owner = "grid_convergence"
    if quantity not in ("attention", "linear", "evolution"):
        raise ValueError(
            f"{owner}: `quantity` must be 'attention', 'linear' or 'evolution', got {quantity!r}."
        )
    sizes = check_sequence("sizes", sizes, owner, example="(4, 12, 36)")
    check_sizes(owner, n_ref=n_ref, n_time_steps=n_time_steps)
    check_step("t1", t1, owner)
    for n in sizes:
        k = round(np.log(n_ref / n) / np.log(3))
        if n * 3**k != n_ref:
            raise ValueError(
                f"{owner}: `sizes` must divide `n_ref` by powers of 3 (nested midpoints); got "
                f"n_ref={n_ref}, N={n}."
            )

    @jax.jit
    def compute_on(grid):
        model, u0 = smooth_kernel_model(grid)
        if quantity == "attention":
            return model.attention_field(0.0, u0)
        if quantity == "linear":
            return model.linear_field(0.0, u0)
        return integrate(
            strang(model.operators), model.flows("rk4"), u0, t1=t1, n_steps=n_time_steps
        )

    def compute(n):
        return compute_on(Grid.interval(n, n))

    ref = compute(n_ref)
    errors = []
    for n in sizes:
        k = round(np.log(n_ref / n) / np.log(3))
        idx = 3**k * np.arange(n) + (3**k - 1) // 2
        errors.append(float(jnp.max(jnp.abs(compute(n) - ref[np.ix_(idx, idx)]))))
    return {"sizes": list(sizes), "errors": errors, "slope": -fit_slope(sizes, errors)}


def grid_refinement_study(
    quantities: Sequence[str] = ("attention", "linear", "evolution"),
    sizes: Sequence[int] = (4, 12, 36),
    *,
    n_ref: int = 324,
    t1: float = 0.5,
    n_time_steps: int = 8,
) -> list[dict]:
    """:func:`grid_convergence` for every quantity: one record per quantity with
    ``quantity``, ``n_ref``, ``sizes``, ``errors``, ``slope`` (2 for the midpoint rule)."""
    quantities_ok = ("attention", "linear", "evolution")
    if (
        not isinstance(quantities, list | tuple)
        or not quantities
        or any(q not in quantities_ok for q in quantities)
    ):
        raise ValueError(
            f"grid_refinement_study: `quantities` must be a non-empty list of names from "
            f"{quantities_ok}, got {quantities!r:.60}."
        )
    return [
        {
            "quantity": q,
            "n_ref": n_ref,
            **grid_convergence(sizes, n_ref=n_ref, quantity=q, t1=t1, n_time_steps=n_time_steps),
        }
        for q in quantities
    ]


# --------------------------------------------------------------------------- full model
def full_model_controls(
    n_layers: int = 2, d: int = 4, *, sigma1: float = 0.0, sigma2: float = 1.0, seed: int = 0
) -> LayerControls:
    """Random paper-form controls (J = 2, ε = 0) with LayerNorm set S1(σ1, σ2)."""
    owner = "full_model_controls"
    check_number("n_layers", n_layers, owner, lower=0, integer=True, example="2")
    check_number("d", d, owner, lower=0, integer=True, example="4")
    check_number("sigma1", sigma1, owner, example="0.0")
    check_number("sigma2", sigma2, owner, lower=0, example="1.0")
    layers = []
    for i in range(n_layers):
        c = LayerControls.random(d, key=jax.random.key(seed * 1000 + i))
        nrm = NormParams.scalar(sigma1, sigma2)
        layers.append(LayerControls(c.attn, nrm, c.ffn, nrm))
    return stack_controls(layers)


def _check_refinement(owner, refinements, n_tokens, ffn_branch_dt, seed) -> None:
    check_sequence("refinements", refinements, owner, example="(1, 2, 4, 8)")
    check_sizes(owner, n_tokens=n_tokens)
    check_choice("ffn_branch_dt", ffn_branch_dt, FFN_BRANCH_DT)
    _check_seed(seed, owner)


def full_model_refinement(
    *,
    sigma1: float = 0.0,
    sigma2: float = 1.0,
    refinements: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    n_layers: int = 2,
    n_tokens: int = 5,
    d: int = 4,
    ffn_branch_dt: str = "dt",
    seed: int = 0,
) -> dict:
    """The full model (paper Lie scheme) with piecewise-constant controls on [0, n_layers],
    each layer split into m sub-steps (Δt = 1/m), for m in ``refinements``.

    Returns a dict with

    - ``m``, ``dts``; ``states``: u(T) for each m;
    - ``diffs[i] = max|u_{m_{i+1}} − u_{m_i}|`` (successive refinements) and
      ``ratios[i] = diffs[i+1]/diffs[i]``: for a convergent order-p scheme the ratios tend
      to 2^{-p};
    - ``sensitivity[i] = max|u_T(θ) − u_T(θ')|`` where θ' replaces the controls of the last
      layer by independent ones: whether the Δt → 0 limit still depends on the dynamics;
    - ``fixed_point_residual[i] = max|g(u_T) − u_T|`` for the Δt-independent part of one
      step, g(u) = P_S1(½(u + ReLU u)) (σ1, σ2 of the model).

    With σ1 ≤ 0 < σ2 (S1 ∩ S2 = ∅, docs/spec/continuous-model.md Q9) each step applies g, an O(1)
    map, whatever Δt: the refinements collapse onto a fixed point of g and the sensitivity vanishes
    like Δt.
    """
    _check_refinement("full_model_refinement", refinements, n_tokens, ffn_branch_dt, seed)
    theta = full_model_controls(n_layers, d, sigma1=sigma1, sigma2=sigma2, seed=seed)
    other = full_model_controls(n_layers, d, sigma1=sigma1, sigma2=sigma2, seed=seed + 5)
    layers = unstack_controls(theta)
    mixed = stack_controls([*layers[:-1], unstack_controls(other)[-1]])
    scheme = paper_lie(2, ffn_branch_dt=ffn_branch_dt)
    u0 = jax.random.normal(jax.random.key(seed + 7), (n_tokens, d))
    out = []
    for th in (theta, mixed):
        flows = full_model_flows(PiecewiseConstant(th))
        run = jax.jit(lambda v, n, f=flows: integrate(scheme, f, v, t1=float(n_layers), n_steps=n))
        out.append([np.asarray(run(u0, n_layers * m)) for m in refinements])
    states, states_mixed = out
    diffs = [float(np.max(np.abs(b - a))) for a, b in zip(states[:-1], states[1:])]
    ratios = [b / a if a > 0 else float("inf") for a, b in zip(diffs[:-1], diffs[1:])]
    sens = [float(np.max(np.abs(a - b))) for a, b in zip(states, states_mixed)]

    def g(u):
        return np.asarray(project_s1(0.5 * (u + np.maximum(u, 0)), sigma1, sigma2))

    resid = [float(np.max(np.abs(g(u) - u))) for u in states]
    return {
        "m": list(refinements),
        "dts": [1.0 / m for m in refinements],
        "diffs": diffs,
        "ratios": ratios,
        "sensitivity": sens,
        "fixed_point_residual": resid,
        "states": states,
    }


NONCONVERGENCE_CASES = {
    "sigma1=0 (S1∩S2=∅)": (0.0, 1.0),
    "sigma1=1, sigma2=0.3 (S1∩S2≠∅)": (1.0, 0.3),
}
"""The two cases of :func:`nonconvergence_study`: ``(σ1, σ2)``. The first is the default
LayerNorm (S1 ∩ S2 = ∅, docs/spec/continuous-model.md Q9); the second a well-posed contrast (S1(1,
0.3) ⊂ S2 in d = 4)."""


def nonconvergence_study(
    refinements: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    *,
    n_layers: int = 2,
    n_tokens: int = 5,
    d: int = 4,
    ffn_branch_dt: str = "dt",
    seed: int = 0,
) -> dict[str, dict]:
    """:func:`full_model_refinement` for both :data:`NONCONVERGENCE_CASES`:
    ``{case name: result}`` (without the states), each result with ``sigma1``/``sigma2``.

    The criterion of the expected negative (docs/spec/continuous-model.md Q9), as numbers: for σ1 =
    0, ``max(ratios[:5])`` (> 2: erratic for Δt ≥ 1/32), ``fixed_point_residual[-1]``
    (collapse onto a fixed point of g) and ``sensitivity[-1]/sensitivity[0]`` (the limit
    forgets the controls); for the contrast case ``ratios[-4:]`` (→ ½, first order) and
    ``sensitivity[-1]`` (stays O(1)).
    """
    _check_refinement("nonconvergence_study", refinements, n_tokens, ffn_branch_dt, seed)
    check_sizes("nonconvergence_study", n_layers=n_layers, d=d)
    out = {}
    for name, (s1, s2) in NONCONVERGENCE_CASES.items():
        r = full_model_refinement(
            sigma1=s1,
            sigma2=s2,
            refinements=refinements,
            n_layers=n_layers,
            n_tokens=n_tokens,
            d=d,
            ffn_branch_dt=ffn_branch_dt,
            seed=seed,
        )
        r.pop("states")
        out[name] = {"sigma1": s1, "sigma2": s2, **r}
    return out


# --------------------------------------------------------------------------- clustering
def clustering_trajectory(
    *,
    n_tokens: int = 32,
    d: int = 4,
    t1: float = 30.0,
    dt: float = 0.1,
    temperature: float = 4.0,
    seed: int = 0,
) -> dict:
    """Tokens under attention + S1 projection with W_Q = W_K = W_V = I (the particle model
    of Geshkovski–Letrouit–Polyanskiy–Rigollet on the sphere S1(0, 1)), split by the Lie
    scheme (explicit Euler attention, then P_S1) over a long horizon.

    Returns ``{"times", "trajectory" (steps+1, n, d), "min_cosine", "t_cluster",
    "sphere_error"}``: ``min_cosine[k]`` is the smallest pairwise cosine between centred
    tokens at step k (→ 1 as they cluster); ``t_cluster`` the first time it exceeds 0.99
    (``None`` if never); ``sphere_error`` the largest deviation of a token's mean from 0
    and standard deviation from 1 over the trajectory (the iterates stay on S1(0, 1)).
    """
    owner = "clustering_trajectory"
    check_number("n_tokens", n_tokens, owner, lower=0, integer=True, example="32")
    check_number("d", d, owner, lower=0, integer=True, example="4")
    check_step("t1", t1, owner)
    check_step("dt", dt, owner)
    check_number("dt", dt, owner, upper=t1, strict=False, example=str(t1 / 10))
    check_temperature(owner, temperature)
    eye = jnp.eye(d)
    p = AttentionParams.paper(eye, eye, eye)
    n_steps = int(round(t1 / dt))
    flows = {
        "attention": euler_flow(lambda t, u: attention(u, p, temperature=temperature)),
        "s1": projection_flow(lambda t, u: project_s1(u, 0.0, 1.0)),
    }
    u0 = project_s1(jax.random.normal(jax.random.key(seed), (n_tokens, d)), 0.0, 1.0)
    _, traj = integrate(
        lie(("attention", "s1")), flows, u0, t1=t1, n_steps=n_steps, save_trajectory=True
    )
    traj = jnp.concatenate([u0[None], traj])
    unit = traj / jnp.linalg.norm(traj, axis=-1, keepdims=True)
    cos = jnp.einsum("tid,tjd->tij", unit, unit)
    min_cos = np.asarray(jnp.min(cos, axis=(1, 2)))
    times = np.linspace(0.0, t1, n_steps + 1)
    above = np.flatnonzero(min_cos > 0.99)
    sphere = max(
        float(jnp.max(jnp.abs(traj.mean(-1)))), float(jnp.max(jnp.abs(traj.std(-1) - 1.0)))
    )
    return {
        "times": times,
        "trajectory": np.asarray(traj),
        "min_cosine": min_cos,
        "t_cluster": float(times[above[0]]) if above.size else None,
        "sphere_error": sphere,
    }

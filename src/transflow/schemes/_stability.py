"""Linear stability of the schemes: amplification factors on the linear test problem,
step matrices of linearised dynamics, and the stable Δt of a layer's linearisation.

:func:`stability_function` is each scheme's amplification factor on u' = (λ_a + λ_g) u
with the two sub-fields as rates, :func:`amplification_factor` measures it by running the
scheme's own step code on linear sub-fields, and :func:`linear_step_matrix` is the step
matrix of linearised dynamics u' = u (J_a + J_g).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Complex, Float

from .._controls import LayerControls
from .._errors import check_choice, check_finite, check_number, check_step, check_values
from .._integrate import ReferenceTolerances, check_option, solve_ode
from ._base import (
    AbstractImplicitFFN,
    AbstractLinearStability,
    AbstractScheme,
    DenseOperators,
    ode_field,
    require,
)
from ._strang import StrangScheme

__all__ = [
    "amplification_factor",
    "confirm_stable_dt",
    "largest_stable_dt",
    "linear_run_growth",
    "linear_step_matrix",
    "linearised_stability",
    "perturbation_growth",
    "reference_solution",
    "spectral_radius",
    "stability_function",
    "sub_field_jacobians",
]


# ----------------------------------------------------------------------- linear stability
def _complex(z, name: str | None = None):
    """``z`` as a complex array; with ``name``, checked finite (one line naming it)."""
    z = jnp.asarray(z).astype(jnp.result_type(1j))
    return z if name is None else check_finite(name, z)


def _jacobians(owner: str, j_attention, j_ffn):
    """The sub-field Jacobians as arrays, checked: J_a a finite square (m, m) matrix, J_g
    (m, m) or a stack (J, m, m) of them."""
    ja = check_values("j_attention", j_attention, owner, ndim=2, square=True)
    m = ja.shape[0]
    jg = check_values("j_ffn", j_ffn, owner, ndim=(2, 3))
    if jg.shape[-2:] != (m, m):
        raise ValueError(
            f"{owner}: `j_ffn` must be ({m}, {m}) or (J, {m}, {m}) like `j_attention`, got "
            f"shape {tuple(jg.shape)}."
        )
    return ja, jg


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

    Each is the scheme's own :meth:`~transflow.schemes.AbstractLinearStability.
    stability_function`; a scheme without that capability (the paper's LieScheme applies
    Δt-independent projections, which a linear test problem lacks) is refused.

    Example:
        >>> from transflow import RungeKuttaScheme, stability_function
        >>> complex(stability_function(RungeKuttaScheme("heun"), -1.0, 0.0))
        (0.5+0j)
    """
    require(scheme, AbstractLinearStability, "stability_function")
    za, zg = _complex(z_attention, "z_attention"), _complex(z_ffn, "z_ffn")
    return scheme.stability_function(za, zg)


def _rot(z):
    """The real 2×2 matrix of multiplication by z = x + iy on row vectors (x, y)."""
    return jnp.array([[z.real, z.imag], [-z.imag, z.real]])


def linear_step_matrix(scheme: AbstractScheme, j_attention, j_ffn, dt):
    """The step matrix S of a scheme on linear sub-fields a(u) = u J_a, g(u) = u J_g.

    Runs the scheme's own step code (its ``linear_step_matrix``:
    :meth:`StrangScheme._compose` …) on the linear sub-fields, with the projections the
    identity; row convention ``u^{n+1} = u S``. For
    :class:`IMEXScheme`, J_g is the linear FFN part taken implicitly (one sub-step, no
    activation), or a stack ``(J, m, m)`` of the matrices of J implicit sub-steps (the
    trained layer's W_j, :func:`linearised_stability` with ``form="imex"``). For a
    parallel Runge–Kutta scheme S = R(Δt (J_a + J_g)).
    """
    require(scheme, AbstractLinearStability, "linear_step_matrix")
    ja, jg = _jacobians("linear_step_matrix", j_attention, j_ffn)
    dt = check_step("dt", dt, "linear_step_matrix")
    return scheme.linear_step_matrix(jnp.asarray(ja), jnp.asarray(jg), dt)


def _step_matrix(scheme, ja, jg, dt):
    """:func:`linear_step_matrix` without the checks (its arguments checked once by the
    caller; called in the loops of :func:`largest_stable_dt` and the runs)."""
    return scheme.linear_step_matrix(ja, jg, dt)


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
    require(scheme, AbstractLinearStability, "amplification_factor")
    za = _complex(z_attention, "z_attention")
    zg = _complex(z_ffn, "z_ffn")
    s = _step_matrix(scheme, _rot(za), _rot(zg), 1.0)
    return jax.lax.complex(s[0, 0], s[0, 1])


def reference_solution(
    u0: Float[Array, "n d"],
    path,
    scheme: AbstractScheme,
    tolerances: ReferenceTolerances | None = None,
    *,
    grid=None,
) -> Float[Array, "n d"]:
    """u(T) of the scheme's continuous limit u' = f(t, u) solved adaptively for order
    studies in float64: the integrator's :func:`~transflow._integrate.solve_ode` with
    ``tolerances.reference`` (a :class:`~transflow.ReferenceTolerances` passed whole;
    ``None``: ``ReferenceTolerances()``, diffrax's Dopri8 at rtol = atol = 1e-12 with PID
    step control), as :func:`transflow.continuous.solve_adaptive` solves it. ``f`` is the
    scheme's :meth:`~transflow.AbstractScheme.vector_field` along ``path``.

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
    u0 = check_values("u0", u0, "reference_solution", ndim=2)
    tolerances = check_option(
        "tolerances", tolerances, ReferenceTolerances, 'ReferenceTolerances("dopri8", 1e-12)'
    )
    field = ode_field(scheme, grid=grid, consumer="reference_solution")
    return solve_ode(field, u0, path.interval, path, tolerances.reference).u


# ------------------------------------------------------- stability of a layer's linearisation
def sub_field_jacobians(
    controls: LayerControls, u: Float[Array, "n d"], *, grid=None, form: str = "prenorm"
) -> tuple[Float[Array, "m m"], Float[Array, "m m"]]:
    """Jacobians (m = n·d, row convention: δa = δu J_a) of the pre-norm sub-fields
    a(u) = 𝒜(P_{S1}u) and g(u) = ℱ(P_{S1'}u) at ``u``: the linearised dynamics
    δu' = δu (J_a + J_g) of the layer around ``u``. ``form="postnorm"``: the post-norm
    layer's sub-fields 𝒜(u) and ℱ(u) (its projections follow the sub-flows)."""
    check_choice("form", form, ("prenorm", "postnorm"))
    u = check_values("u", u, "sub_field_jacobians", ndim=2, shape=(None, controls.d_model))
    ops = StrangScheme().sub_fields(controls, DenseOperators(grid), form)
    shape = u.shape

    def jac(fn):
        jc = jax.jacfwd(lambda v: fn(v.reshape(shape)).reshape(-1))(u.reshape(-1))
        return jc.T

    return jac(ops.attn), jac(ops.ffn)


def spectral_radius(m: Float[Array, "m m"]) -> float:
    """max |eigenvalue| (NumPy, float64)."""
    return _spectral_radius(check_values("m", m, "spectral_radius", ndim=2, square=True))


def _spectral_radius(m) -> float:
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
    require(scheme, AbstractLinearStability, "largest_stable_dt")
    ja, jg = _jacobians("largest_stable_dt", j_attention, j_ffn)
    ja, jg = np.asarray(ja, np.float64), np.asarray(jg, np.float64)
    check_step("dt_max", dt_max, "largest_stable_dt")
    check_number("n_grid", n_grid, "largest_stable_dt", lower=0, integer=True, example="200")
    check_number("rtol", rtol, "largest_stable_dt", lower=0, upper=1, example="1e-6")
    with jax.enable_x64(True):
        step_matrix = jax.jit(lambda a, g, h: _step_matrix(scheme, a, g, h))
        ja_j, jg_j = jnp.asarray(ja), jnp.asarray(jg)

    def rho(h):
        with jax.enable_x64(True):
            return _spectral_radius(step_matrix(ja_j, jg_j, jnp.asarray(h, jnp.float64)))

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


#: The readings of :func:`linearised_stability` (``form``).
_FORMS = ("prenorm", "postnorm", "imex")


def linearised_stability(
    scheme: AbstractScheme,
    controls: LayerControls,
    trajectory: Float[Array, "k n d"],
    *,
    margin: float = 0.05,
    grid=None,
    form: str | None = None,
    **kwargs: Any,
) -> dict:
    """The largest stable Δt of ``scheme`` on a layer's linearised dynamics along a trajectory.

    At every state u_k the layer is linearised and shifted into the frame of its least
    stable mode, σ = max Re λ(J) + ``margin`` · ρ(J) for the linearised field J, so that
    the exact linear flow decays (a random layer has growing modes; without the shift no
    Δt would be stable, and the scheme's error in them is not an instability). Δt*_k is
    :func:`largest_stable_dt` of the scheme's step matrix (:func:`linear_step_matrix`) on
    the shifted Jacobians; the result is the smallest over the trajectory with its
    ``"index"``, the shift σ and the shifted ``"j_attention"``, ``"j_ffn"`` (to confirm
    by a run, :func:`confirm_stable_dt`). ``kwargs`` go to :func:`largest_stable_dt`.

    ``form`` says how the layer is read (default: the scheme's declared
    ``stability_form``: ``"imex"`` for an :class:`IMEXScheme`, the ``form`` of a
    :class:`StrangScheme`, ``"prenorm"`` otherwise):

    - ``"prenorm"`` / ``"postnorm"`` (any scheme): the sub-field Jacobians J_a, J_g of
      :func:`sub_field_jacobians` in that form, J = J_a + J_g, each shifted by −σ/2 (for
      an IMEX scheme the whole FFN Jacobian J_g is taken implicitly). The result also
      has the ``"eigenvalues"`` of the shifted J.
    - ``"imex"`` (an :class:`IMEXScheme` only): the IMEX layer as it is trained (post-LN,
      its own ``ffn_branch_dt``, only the FFN weights W_j implicit). J_a is the Jacobian
      of the post-LN attention sub-field 𝒜(u), the implicit matrices are I_n ⊗ W_j of the
      FFN sub-steps (``scheme.implicit_weights``: W_j, or W_eff for the dissipative
      parameterization; ``"j_ffn"`` is their stack), the projections and activations
      linearised as the identity (as in :func:`stability_function`).
      J = J_a + c Σ_j I_n ⊗ W_j (c = ½ for ``"dt"``: the FFN branch is averaged with the
      skip connection; 1 for ``"2dt"``), shifted **on the explicit part only**
      (J_a − σ I), so that the implicit factors (I − s W_j)⁻¹ are those of the trained
      W_j. The result also has ``"max_re_implicit"``, the largest Re λ of the W_j.
    """
    trajectory = check_values("trajectory", trajectory, "linearised_stability", ndim=3)
    check_number("margin", margin, "linearised_stability", lower=0, strict=False, example="0.05")
    if form is None:
        require(scheme, AbstractLinearStability, "linearised_stability")
        form = scheme.stability_form
    if form not in _FORMS:
        raise ValueError(
            f"linearised_stability: `form` {form!r} is unknown; valid: "
            f"{', '.join(map(repr, _FORMS))} (None: the scheme's stability_form)."
        )
    if form == "imex":
        linearise = _imex_linearisation(scheme, controls, grid, margin)
    else:
        linearise = _sub_field_linearisation(controls, grid, margin, form)
    best: dict = {"dt": float("inf")}
    for k, u in enumerate(trajectory):
        rec = linearise(u)
        dt = largest_stable_dt(scheme, rec["j_attention"], rec["j_ffn"], **kwargs)
        if dt < best["dt"]:
            best = {"dt": dt, "index": k, **rec}
    return best


def _shift(lin: np.ndarray, margin: float) -> tuple[np.ndarray, float]:
    """The eigenvalues of ``lin`` and the shift σ = max Re λ + ``margin`` · ρ."""
    lam = np.linalg.eigvals(lin)
    return lam, float(np.max(lam.real)) + margin * float(np.max(np.abs(lam)))


def _sub_field_linearisation(controls, grid, margin: float, form: str):
    """u ↦ the shifted sub-field Jacobians at u (``form="prenorm"``/``"postnorm"``)."""

    def at(u) -> dict:
        ja, jg = sub_field_jacobians(controls, u, grid=grid, form=form)
        ja, jg = np.asarray(ja, np.float64), np.asarray(jg, np.float64)
        lam, sigma = _shift(ja + jg, margin)
        half = 0.5 * sigma * np.eye(ja.shape[0])
        return {
            "shift": sigma,
            "eigenvalues": lam - sigma,
            "j_attention": ja - half,
            "j_ffn": jg - half,
        }

    return at


def _imex_linearisation(scheme: AbstractScheme, controls, grid, margin: float):
    """u ↦ the IMEX layer as trained at u: shifted J_a and the stack of I_n ⊗ W_j."""
    require(scheme, AbstractImplicitFFN, 'linearised_stability(form="imex")')
    c = scheme.implicit_branch_weight()
    ws = [np.asarray(w, np.float64) for w in scheme.implicit_weights(controls)]
    max_re = float(max(np.max(np.linalg.eigvals(w).real) for w in ws))

    def at(u) -> dict:
        ja, _ = sub_field_jacobians(controls, u, grid=grid, form="postnorm")
        ja = np.asarray(ja, np.float64)
        big = np.stack([np.kron(np.eye(u.shape[0]), w) for w in ws])
        _, sigma = _shift(ja + c * big.sum(0), margin)
        ja_s = ja - sigma * np.eye(ja.shape[0])
        return {"shift": sigma, "max_re_implicit": max_re, "j_attention": ja_s, "j_ffn": big}

    return at


def linear_run_growth(
    scheme: AbstractScheme, j_attention, j_ffn, dt: float, n_steps: int, *, seed: int = 0
) -> float:
    """‖u_N‖ / ‖u_0‖ after ``n_steps`` steps of the scheme on u' = u (J_a + J_g) from a
    random u_0 (the run that confirms a stable Δt: bounded below it, growing above)."""
    require(scheme, AbstractLinearStability, "linear_run_growth")
    ja, jg = _jacobians("linear_run_growth", j_attention, j_ffn)
    check_step("dt", dt, "linear_run_growth")
    check_number("n_steps", n_steps, "linear_run_growth", lower=0, integer=True, example="2000")
    return _run_growth(scheme, ja, jg, dt, n_steps, seed)


def _run_growth(scheme, j_attention, j_ffn, dt, n_steps: int, seed: int = 0) -> float:
    with jax.enable_x64(True):
        s = _step_matrix(scheme, jnp.asarray(j_attention), jnp.asarray(j_ffn), dt)
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
    owner = "confirm_stable_dt"
    require(scheme, AbstractLinearStability, owner)
    ja, jg = _jacobians(owner, j_attention, j_ffn)
    check_step("dt_star", dt_star, owner)
    check_number("factor", factor, owner, lower=0, upper=1, example="0.05")
    check_number("min_steps", min_steps, owner, lower=0, integer=True, example="2000")
    check_number(
        "max_steps",
        max_steps,
        owner,
        lower=min_steps,
        strict=False,
        integer=True,
        example=str(10 * min_steps),
    )
    check_number("growth", growth, owner, lower=1, example="1e4")
    with jax.enable_x64(True):
        ja, jg = jnp.asarray(ja, jnp.float64), jnp.asarray(jg, jnp.float64)
        lo, hi = (1.0 - factor) * dt_star, (1.0 + factor) * dt_star
        rho_lo = _spectral_radius(_step_matrix(scheme, ja, jg, lo))
        rho_hi = _spectral_radius(_step_matrix(scheme, ja, jg, hi))
    n_hi = min_steps
    if rho_hi > 1.0:
        n_hi = int(min(max_steps, max(min_steps, np.ceil(np.log(growth) / np.log(rho_hi)))))
    return {
        "growth_below": _run_growth(scheme, ja, jg, lo, min_steps),
        "growth_above": _run_growth(scheme, ja, jg, hi, n_hi),
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
    x = check_values("x", x, "perturbation_growth")
    check_number("n_iter", n_iter, "perturbation_growth", lower=0, integer=True, example="20")
    v = jax.random.normal(key, jnp.shape(x), jnp.result_type(x))
    v = v / jnp.linalg.norm(v)
    _, vjp = jax.vjp(fn, x)

    def body(v, _):
        jv = jax.jvp(fn, (x,), (v,))[1]
        w = vjp(jv)[0]
        return w / jnp.linalg.norm(w), None

    v, _ = jax.lax.scan(body, v, None, length=n_iter)
    return jnp.linalg.norm(jax.jvp(fn, (x,), (v,))[1])

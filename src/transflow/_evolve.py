"""``evolve``: a splitting scheme run over stacked controls or a control path.

The problem (``u0``, the controls or a :class:`~transflow.continuous.ControlPath`, the
scheme, Δt, the grid, masks, a closing norm) is stated here and handed to the integrator
(``transflow._integrate``): N_t uniform steps of ``scheme.step`` as one ``lax.scan``
(:func:`~transflow._integrate.scan_steps`), or, with ``stepsize_controller=Adaptive(...)``,
the adaptive solve of the scheme's continuous limit
(:func:`transflow.continuous.solve_adaptive`, the ``Adaptive`` passed whole). :func:`evolve_path`
is a path run with N uniform steps sampled at chosen points.

Layering: this module imports the schemes, the integrator, the control paths
(``transflow._paths``) and the adaptive solve (``transflow._solve``); none of those
imports it back (tests/test_structure.py).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from jaxtyping import Array, Bool, Float

from ._controls import LayerControls, NormParams, num_steps
from ._errors import as_input, check_choice, check_finite, check_step, param_dtype
from ._grid import Grid
from ._integrate import Adaptive, ConstantSteps, Remat, SaveAt, check_option, scan_steps
from ._operators import Implementation
from ._paths import ControlPath, PiecewiseConstant
from ._solve import solve_adaptive
from .schemes._base import AbstractAttentionChoice, AbstractScheme, _project, check_masks, require
from .schemes._lie import LieScheme

__all__ = ["evolve", "evolve_path"]


def evolve(
    u0: Float[Array, "n d"],
    controls: LayerControls | ControlPath,
    scheme: AbstractScheme | None = None,
    *,
    dt: float | Array | None = None,
    grid: Grid | None = None,
    causal: bool = False,
    final_norm: NormParams | None = None,
    saveat: SaveAt | None = None,
    remat: Remat | None = None,
    stepsize_controller: ConstantSteps | Adaptive | None = None,
    n_steps: int | None = None,
    attention_implementation: Implementation | None = None,
    key_padding_mask: Bool[Array, " n"] | None = None,
    attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
):
    """Evolve ``u0`` over N_t time steps with stacked controls (``lax.scan``) or a path.

    The problem is given by ``u0``, ``controls``, ``scheme``, ``dt``, ``grid``, ``causal``,
    ``final_norm`` and the masks; how it is computed by three option objects, as diffrax
    groups them (docs/model.md): ``saveat`` (:class:`~transflow.SaveAt`), ``remat``
    (:class:`~transflow.Remat`) and ``stepsize_controller``
    (:class:`~transflow.ConstantSteps`, the default, or :class:`~transflow.Adaptive`).

    Args:
        u0: initial condition f on the grid, shape ``(n_tokens, d)``.
        controls: :class:`LayerControls` stacked over time (:func:`stack_controls`), or a
            :class:`~transflow.continuous.ControlPath` θ(t): with ``ConstantSteps`` it is
            sampled at the midpoints of ``n_steps`` uniform steps of Δt = (t1 − t0)/N
            (as :func:`transflow.continuous.evolve_path`); with ``Adaptive`` its interval
            is solved adaptively.
        scheme: the splitting scheme (default: the paper's :class:`LieScheme`).
        dt: time step Δt of stacked controls (``None``: the paper's 1). A path sets its
            own Δt, so ``dt`` must stay ``None`` with a path.
        grid: the grid; ``None`` is the paper's index grid.
        causal: restrict attention to x̃ ≤ x (decoders).
        final_norm: an optional closing projection after the last step (e.g. the
            ``norm`` of a ``torch.nn.TransformerEncoder``).
        saveat: :class:`~transflow.SaveAt`; ``SaveAt(steps=True)`` also returns the
            states after every step, ``(N_t, n, d)``. ``None``: the final state only.
        remat: :class:`~transflow.Remat`, rematerialisation for reverse mode (the forward
            value is the same for all): ``Remat()`` (``None``, every sub-step state
            stored, O(N_t)), ``Remat("step")`` (``jax.checkpoint`` per step),
            ``Remat("nested", chunk=k)`` (two-level checkpointing, the N_t steps in
            ⌊N_t/k⌋ chunks of k plus a remainder; ≈ N_t/k + k stored states, ≈ 2√N_t at
            the default k = ⌈√N_t⌉, for about one extra forward pass).
        stepsize_controller: :class:`~transflow.ConstantSteps` (default ``None``:
            ``ConstantSteps()``; the loop's ``unroll`` option) or
            :class:`~transflow.Adaptive` (the continuous limit of a consistent scheme
            solved by :func:`transflow.continuous.solve_adaptive`; returns the final state
            and takes neither ``SaveAt(steps=True)``, ``Remat`` modes other than
            ``"none"``, ``causal`` nor masks).
        n_steps: the number of uniform steps N of a path with ``ConstantSteps``. Stacked
            controls have N_t = their leading axis (``n_steps``, if given, must match).
        attention_implementation: overrides the scheme's ``implementation`` field
            (``"auto"``, ``"dense"`` or ``"chunked"``, see :func:`transflow.attention`);
            ``None`` keeps the scheme's choice.
        key_padding_mask: ``(n,)`` bool, **True = padded** (torch's polarity): the padded
            tokens get zero weight in every step's attention integral; padded rows evolve
            but never influence kept rows (docs/masks.md).
        attention_mask: ``(n, n)`` or ``(1|H, n, n)``: bool **True = may attend**, or an
            additive float; the same mask in every step. ``None`` (default) for both
            masks is the unmasked computation, unchanged.

    Returns:
        u at T = N_t Δt, or ``(u_T, trajectory)`` with ``SaveAt(steps=True)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, Remat, SaveAt, stack_controls, evolve
        >>> keys = jax.random.split(jax.random.key(0), 3)
        >>> theta = stack_controls([LayerControls.random(8, key=k) for k in keys])
        >>> u0 = jnp.ones((4, 8)) + jnp.arange(8.0)
        >>> evolve(u0, theta).shape
        (4, 8)
        >>> bool(jnp.allclose(evolve(u0, theta, remat=Remat("nested")), evolve(u0, theta)))
        True
        >>> u_T, traj = evolve(u0, theta, saveat=SaveAt(steps=True))
        >>> traj.shape
        (3, 4, 8)
        >>> evolve(u0, theta, remat=True)
        Traceback (most recent call last):
        ...
        TypeError: `remat` must be a transflow.Remat or None, got True; e.g. remat=Remat('step') ...
    """
    dt = dt if dt is None else check_step("dt", dt, "evolve")
    saving = check_option("saveat", saveat, SaveAt, "SaveAt(steps=True)")
    remat = check_option("remat", remat, Remat, "Remat('step') (jax.checkpoint per step)")
    controller = _controller(stepsize_controller)
    scheme = LieScheme() if scheme is None else scheme
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    if attention_implementation is not None:
        check_choice(
            "attention_implementation", attention_implementation, ("auto", "dense", "chunked")
        )
        require(scheme, AbstractAttentionChoice, "attention_implementation")
        scheme = dataclasses.replace(scheme, implementation=attention_implementation)
    path = _as_path(controls)
    if isinstance(controller, Adaptive):
        return _evolve_adaptive(
            u0,
            controls,
            path is not None,
            scheme,
            controller,
            dt=dt,
            grid=grid,
            causal=causal,
            final_norm=final_norm,
            saving=saving.steps,
            remat=remat,
            n_steps=n_steps,
            masked=key_padding_mask is not None or attention_mask is not None,
        )
    if path is not None:
        if n_steps is None:
            raise ValueError(
                "`n_steps` is required when `controls` is a ControlPath with ConstantSteps: "
                "the path is sampled at the midpoints of n_steps uniform steps; e.g. "
                "evolve(u0, path, scheme, n_steps=16), or "
                "stepsize_controller=Adaptive() for an adaptive solve."
            )
        if dt is not None:
            raise ValueError(
                f"`dt` must be None when `controls` is a ControlPath (Δt = (t1 − t0)/n_steps "
                f"= {path.step_size(n_steps)!r}), got dt={dt!r}; drop dt."
            )
        dt = path.step_size(n_steps)
        controls = path.sample(n_steps, "midpoint")
    elif n_steps is not None and n_steps != num_steps(controls):
        raise ValueError(
            f"`n_steps` is for a ControlPath; stacked controls have N_t = "
            f"{num_steps(controls)} (their leading axis), got n_steps={n_steps!r}; drop "
            f"n_steps or pass a path (transflow.continuous.PiecewiseConstant(controls))."
        )
    dt = 1.0 if dt is None else dt
    u0 = as_input(
        "u0",
        u0,
        param_dtype(controls),
        ndim=2,
        shape=(grid.n_tokens if grid is not None else None, controls.d_model),
    )
    heads = getattr(controls.attn, "n_heads", None)  # CvT: ConvAttentionParams (no masks)
    masks = check_masks(scheme, u0, heads, key_padding_mask, attention_mask)
    u0 = check_finite("u0", u0)

    def step(u, theta):
        return scheme.step(u, theta, dt, grid=grid, causal=causal, **masks)

    u_T, traj = scan_steps(
        step, u0, controls, num_steps(controls), saveat=saving, remat=remat, controller=controller
    )
    if final_norm is not None:
        u_T = _project(u_T, final_norm, grid)
        if saving.steps:
            traj = traj.at[-1].set(u_T)
    return (u_T, traj) if saving.steps else u_T


def evolve_path(
    u0: Float[Array, "n d"],
    path: ControlPath,
    scheme: AbstractScheme | None = None,
    n_steps: int = 1,
    *,
    grid: Grid | None = None,
    where: Literal["midpoint", "left"] = "midpoint",
    **evolve_kwargs,
):
    """``u0`` evolved over the path's interval with ``n_steps`` uniform steps.

    Equivalent to ``evolve(u0, path.sample(n_steps, where), scheme,
    dt=path.step_size(n_steps), grid=grid, **evolve_kwargs)``, and with ``where="midpoint"``
    to ``evolve(u0, path, scheme, n_steps=n_steps, ...)``. ``evolve_kwargs`` take the
    execution options of :func:`transflow.evolve` (``saveat``, ``remat``,
    ``stepsize_controller=ConstantSteps(...)``); for an adaptive solve call
    ``evolve(u0, path, scheme, stepsize_controller=Adaptive(...))`` or
    :func:`transflow.continuous.solve_adaptive`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme
        >>> from transflow.continuous import evolve_path, init_path
        >>> draw = lambda k: LayerControls.random(4, key=k)
        >>> path = init_path("linear", draw, 3, key=jax.random.key(0), t1=2.0)
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> [evolve_path(u0, path, PreNormScheme(), n).shape for n in (2, 16)]
        [(3, 4), (3, 4)]
    """
    if _as_path(path) is None:
        raise TypeError(f"`path` must be a ControlPath, got {type(path).__name__}.")
    if isinstance(evolve_kwargs.get("stepsize_controller"), Adaptive):
        raise ValueError(
            "evolve_path runs n_steps uniform steps, so `stepsize_controller` must be "
            "ConstantSteps(...), got Adaptive(...); for the adaptive solve call "
            "transflow.evolve(u0, path, scheme, stepsize_controller=Adaptive(...))."
        )
    return evolve(
        u0,
        path.sample(n_steps, where),
        scheme,
        dt=path.step_size(n_steps),
        grid=grid,
        **evolve_kwargs,
    )


def _controller(stepsize_controller):
    if stepsize_controller is None:
        return ConstantSteps()
    if not isinstance(stepsize_controller, ConstantSteps | Adaptive):
        raise TypeError(
            f"`stepsize_controller` must be transflow.ConstantSteps(...) (uniform steps) or "
            f"transflow.Adaptive(rtol=..., atol=..., solver=...) (an adaptive diffrax solve), "
            f"got {type(stepsize_controller).__name__}."
        )
    return stepsize_controller


def _as_path(controls):
    """``controls`` if it is a ``transflow.continuous.ControlPath``, else ``None``."""
    return controls if isinstance(controls, ControlPath) else None


def _evolve_adaptive(
    u0,
    controls,
    is_path,
    scheme,
    controller,
    *,
    dt,
    grid,
    causal,
    final_norm,
    saving,
    remat,
    n_steps,
    masked,
):
    """``evolve`` with ``stepsize_controller=Adaptive(...)``: ``solve_adaptive``."""
    name = f"stepsize_controller={controller!r}"
    refused = [
        (saving, "saveat=SaveAt(steps=True)", "the adaptive steps are not layers; use SaveAt()"),
        (remat.mode != "none", f"remat={remat!r}", "use Adaptive(adjoint=...) instead"),
        (n_steps is not None, f"n_steps={n_steps!r}", "the solver chooses its steps"),
        (causal, "causal=True", "wrap the scheme in CausalScheme"),
        (masked, "masks", "the adaptive solve takes no masks"),
        (is_path and dt is not None, f"dt={dt!r}", "a path sets its own interval"),
    ]
    for bad, what, fix in refused:
        if bad:
            raise ValueError(f"`{what}` is not supported with `{name}`: {fix}.")
    if is_path:
        path = controls
    else:
        tau = 1.0 if dt is None else dt
        if isinstance(tau, bool) or not isinstance(tau, int | float):
            raise ValueError(
                f"`dt` must be a Python number with Adaptive and stacked controls (the "
                f"layers become PiecewiseConstant(controls, tau=dt)), got {type(dt).__name__}."
            )
        path = PiecewiseConstant(controls, tau=float(tau))
    u0 = as_input("u0", u0, param_dtype(controls), ndim=2)
    u0 = check_finite("u0", u0)
    u_T = solve_adaptive(u0, path, scheme, controller, grid=grid).u
    if final_norm is not None:
        u_T = _project(u_T, final_norm, grid)
    return u_T

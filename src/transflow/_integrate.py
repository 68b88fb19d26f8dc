"""The integrator: how a one-step map or a vector field is advanced in time.

The lowest layer of the time stepping. It knows nothing of schemes, models or paths: it
advances a state ``u`` with

- :func:`scan_steps`: a fixed-step scan ``u_{n+1} = step(u_n, θ_n)`` over a pytree of
  stacked per-step inputs (one ``lax.scan``; unrolled, rolled or chunked, with
  rematerialisation), or
- :func:`solve_ode`: an adaptive solve of ``u' = f(t, u, args)`` with diffrax (Tsit5,
  Dopri5 or Dopri8, a PID step-size controller, a choice of adjoint), or
- :func:`solve_steps`: uniform steps of a one-step map inside diffrax, so that its
  gradient goes through a diffrax adjoint (checkpointed, or the continuous adjoint),

and holds the option objects that say how, grouped as diffrax groups its options (every
caller passes them whole; this module and ``transflow.continuous._reference``, an
independent reference, are the only callers of ``diffrax.diffeqsolve``):

- :class:`SaveAt`: what is returned (the final state only, or also every step's state);
- :class:`Remat`: rematerialisation in reverse mode (what reverse-mode AD stores);
- a step-size controller: :class:`ConstantSteps` (N uniform steps, the layer loop's
  options) or :class:`Adaptive` (the adaptive solve's solver, tolerances and adjoint);
- :class:`ReferenceTolerances`: a reference solve and the looser solves that check it.

:func:`transflow.evolve` (schemes and controls) and
:func:`transflow.continuous.solve_adaptive` (a scheme's continuous limit) are built on it;
see docs/model.md.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

__all__ = [
    "AUTO_UNROLL_STEPS",
    "SOLVERS",
    "Adaptive",
    "AdaptiveResult",
    "ReferenceTolerances",
    "ConstantSteps",
    "Remat",
    "RematMode",
    "SaveAt",
    "check_option",
    "scan_steps",
    "solve_ode",
    "solve_steps",
]

#: The rematerialisation modes of :class:`Remat`: ``"none"``, ``"step"``
#: (``jax.checkpoint`` per step) or ``"nested"`` (two-level √N_t checkpointing).
RematMode = Literal["none", "step", "nested"]

AUTO_UNROLL_STEPS = 8
"""``ConstantSteps(unroll="auto")`` unrolls the layer loop up to this many steps."""

#: Adaptive diffrax solvers of :func:`solve_ode` and their new vector-field evaluations
#: per step (all FSAL: the tableau's stages minus the shared first one; one more
#: evaluation at the start). Tsit5/Dopri5: order 5 (7 stages), Dopri8: order 8 (14 stages).
SOLVERS = {"tsit5": 6, "dopri5": 6, "dopri8": 13}

_MODES = ("none", "step", "nested")


def _check_unroll_option(owner: str, unroll) -> None:
    if isinstance(unroll, str) and unroll == "auto":
        return
    if isinstance(unroll, bool) or (isinstance(unroll, int) and unroll >= 1):
        return
    raise ValueError(
        f"{owner}`unroll` must be 'auto', True, False or a positive int (steps per loop "
        f"iteration), got {unroll!r}; e.g. unroll='auto'."
    )


class SaveAt(eqx.Module):
    """What :func:`transflow.evolve` returns (cf. ``diffrax.SaveAt``).

    Attributes:
        steps: ``False`` (default): the state at T = N_t Δt only. ``True``: also the
            state after every step, ``(u_T, trajectory)`` with trajectory of shape
            ``(N_t, n, d)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SaveAt, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> u_T, traj = evolve(jnp.ones((2, 4)), theta, saveat=SaveAt(steps=True))
        >>> traj.shape
        (3, 2, 4)
    """

    steps: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not isinstance(self.steps, bool):
            raise ValueError(
                f"SaveAt: `steps` must be True (every step's state) or False (the final state "
                f"only), got {self.steps!r}."
            )


class Remat(eqx.Module):
    """Rematerialisation of :func:`transflow.evolve` in reverse mode.

    The forward value is the same for every mode; only what reverse-mode AD stores (and
    recomputes) changes.

    Attributes:
        mode: ``"none"`` (default): every sub-step state is stored (O(N_t)). ``"step"``:
            ``jax.checkpoint`` per step, one state per step (O(N_t), a smaller constant).
            ``"nested"``: two-level checkpointing over chunks of k steps, ≈ N_t/k + k
            stored states (≈ 2√N_t at the default k), for about one extra forward pass.
        chunk: the steps per chunk k of ``mode="nested"``; ``None`` (default) for
            ⌈√N_t⌉. Only with ``mode="nested"``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, Remat, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(4)])
        >>> u0 = jnp.ones((2, 4)) + jnp.arange(4.0)
        >>> a = evolve(u0, theta, remat=Remat("nested", chunk=2))
        >>> bool(jnp.allclose(a, evolve(u0, theta), atol=1e-6))  # the same forward value
        True
        >>> Remat("step", chunk=2)
        Traceback (most recent call last):
        ...
        ValueError: Remat: `chunk` is the steps per chunk of mode='nested', got chunk=2 with ...
    """

    mode: RematMode = eqx.field(static=True, default="none")
    chunk: int | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if self.mode not in _MODES:
            raise ValueError(
                f"Remat: `mode` must be one of {_MODES} ('nested': √N_t checkpointing), got "
                f"{self.mode!r}; e.g. Remat('step')."
            )
        if self.chunk is None:
            return
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 1:
            raise ValueError(
                f"Remat: `chunk` must be a positive int (steps per chunk) or None (⌈√N_t⌉), "
                f"got {self.chunk!r}; e.g. Remat('nested', chunk=4)."
            )
        if self.mode != "nested":
            raise ValueError(
                f"Remat: `chunk` is the steps per chunk of mode='nested', got "
                f"chunk={self.chunk!r} with mode={self.mode!r}; drop chunk or use "
                f"Remat('nested', chunk={self.chunk!r})."
            )


class ConstantSteps(eqx.Module):
    """Uniform steps of the splitting scheme (cf. ``diffrax.ConstantStepSize``); the default.

    With stacked controls: the N_t = leading-axis steps of size ``dt``. With a
    :class:`~transflow.continuous.ControlPath`: ``evolve(..., n_steps=N)`` samples the path
    at the N step midpoints and steps with Δt = (t1 − t0)/N
    (:func:`transflow.continuous.evolve_path`).

    Attributes:
        unroll: the layer loop. ``"auto"`` (default): unrolled for N_t ≤
            ``AUTO_UNROLL_STEPS`` (8) steps, a rolled ``lax.scan`` above. ``True``/``False``
            or a positive int (steps per loop iteration) choose explicitly; values and
            gradients are the same. Unrolling saves the scan's stacked residual buffers
            (about 8-10 % of a training step, docs/performance.md) for a compile time that
            grows with N_t, hence the bound.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import ConstantSteps, LayerControls, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> u0 = jnp.ones((2, 4)) + jnp.arange(4.0)
        >>> a = evolve(u0, theta, stepsize_controller=ConstantSteps(unroll=False))
        >>> bool(jnp.allclose(a, evolve(u0, theta), atol=1e-6))
        True
    """

    unroll: bool | int | Literal["auto"] = eqx.field(static=True, default="auto")

    def __check_init__(self):
        _check_unroll_option("ConstantSteps: ", self.unroll)


class Adaptive(eqx.Module):
    """Solve the continuous limit ``u' = f(t, u)`` adaptively (cf. ``diffrax.PIDController``).

    The options of every adaptive solve, passed whole from the caller to the integrator
    (:func:`solve_ode`); its fields hold the one default of each.
    ``evolve(u0, controls, scheme, stepsize_controller=Adaptive(...))`` runs
    :func:`transflow.continuous.solve_adaptive` on the scheme's vector field
    (:func:`transflow.continuous.vector_field`), over the path's interval for a
    :class:`~transflow.continuous.ControlPath`, or over [0, N_t Δt] for stacked controls
    (read as the piecewise-constant path ``PiecewiseConstant(controls, tau=dt)``). Only
    consistent schemes have a vector field (:class:`~transflow.PreNormScheme`,
    :class:`~transflow.continuous.RelaxedLieScheme`); the paper's
    :class:`~transflow.LieScheme` is refused. ``evolve`` returns the final state; for the
    step and evaluation counts call ``solve_adaptive`` itself.

    Attributes:
        rtol, atol: the tolerances of the PID step-size controller.
        solver: ``"tsit5"`` (default), ``"dopri5"`` or ``"dopri8"``
            (:data:`transflow.continuous.SOLVERS`).
        dt0: the first step (``None``: a quarter of the interval).
        max_steps: the solver's step limit.
        adjoint: how reverse mode differentiates the solve: ``"recursive"`` (default,
            backpropagation through the solver's steps), ``"backsolve"`` (the continuous
            adjoint) or a diffrax adjoint object. This replaces :class:`Remat`, which must
            stay ``Remat()`` with ``Adaptive``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import Adaptive, LayerControls, PreNormScheme, evolve
        >>> from transflow.continuous import init_path, solve_adaptive
        >>> path = init_path("linear", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> u0 = jax.random.normal(jax.random.key(1), (3, 4))
        >>> options = Adaptive(rtol=1e-4, atol=1e-4)
        >>> u_T = evolve(u0, path, PreNormScheme(), stepsize_controller=options)
        >>> bool(jnp.array_equal(u_T, solve_adaptive(u0, path, PreNormScheme(), options).u))
        True
    """

    rtol: float = eqx.field(static=True, default=1e-5)
    atol: float = eqx.field(static=True, default=1e-5)
    solver: str = eqx.field(static=True, default="tsit5")
    dt0: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=4096)
    adjoint: Any = eqx.field(static=True, default="recursive")

    def __check_init__(self):
        _check_tol("rtol", self.rtol)
        _check_tol("atol", self.atol)
        if self.solver not in SOLVERS:
            raise ValueError(
                f"Adaptive: `solver` must be one of {sorted(SOLVERS)}, got {self.solver!r}; "
                f"e.g. Adaptive(solver='tsit5')."
            )
        dt0 = self.dt0
        if dt0 is not None and (
            isinstance(dt0, bool) or not isinstance(dt0, int | float) or not dt0 > 0
        ):
            raise ValueError(
                f"Adaptive: `dt0` must be a positive number (the first step) or None (a "
                f"quarter of the interval), got {dt0!r}."
            )
        steps = self.max_steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(
                f"Adaptive: `max_steps` must be a positive int (the solver's step limit), got "
                f"{steps!r}; e.g. Adaptive(max_steps=4096)."
            )
        _adjoint(self.adjoint)  # 'recursive', 'backsolve' or a diffrax adjoint


class ReferenceTolerances(eqx.Module):
    """A continuous-limit reference solve and the two looser solves that estimate its
    error, as one object, passed whole from the config to the solve
    (:func:`transflow.reference_solution`; the depth study's reference,
    ``experiments/tasks/depth.py``).

    Every solve is ``Adaptive(rtol=tol, atol=tol, solver=solver)``:
    :attr:`reference` at ``rtol``, :attr:`check` at ``check_rtol`` and :attr:`coarse` at
    ``coarse_rtol`` (a tolerance of 0: that solve is skipped, its property is ``None``).
    The defaults, Dopri8 at 1e-12 with no checks, are the float64 reference of the order
    studies.

    Example:
        >>> from transflow import ReferenceTolerances
        >>> ref = ReferenceTolerances("dopri5", 1e-8, 1e-7, 1e-6)
        >>> ref.reference.rtol, ref.refined(1).check.atol, ref.refined(1).solver
        (1e-08, 1e-08, 'dopri5')
        >>> ReferenceTolerances().reference.solver, ReferenceTolerances().check
        ('dopri8', None)
    """

    solver: str = eqx.field(static=True, default="dopri8")
    rtol: float = eqx.field(static=True, default=1e-12)
    check_rtol: float = eqx.field(static=True, default=0.0)
    coarse_rtol: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        Adaptive(rtol=self.rtol, atol=self.rtol, solver=self.solver)  # its own checks
        for name in ("check_rtol", "coarse_rtol"):
            tol = getattr(self, name)
            if isinstance(tol, bool) or not isinstance(tol, int | float) or tol < 0:
                raise ValueError(
                    f"ReferenceTolerances: `{name}` must be a number >= 0 (0: that check is "
                    f"skipped), got {tol!r}; e.g. {name}=1e-7."
                )

    def _solve(self, tol) -> Adaptive | None:
        return Adaptive(rtol=tol, atol=tol, solver=self.solver) if tol else None

    @property
    def reference(self) -> Adaptive:
        """The reference solve."""
        return self._solve(self.rtol)

    @property
    def check(self) -> Adaptive | None:
        """The looser solve whose distance to the reference estimates its error."""
        return self._solve(self.check_rtol)

    @property
    def coarse(self) -> Adaptive | None:
        """The coarser solve (with :attr:`check`, the decay per decade of tolerance)."""
        return self._solve(self.coarse_rtol)

    def refined(self, level: int) -> ReferenceTolerances:
        """Every tolerance divided by ``10**level`` (0 stays 0)."""
        tols = (t / 10**level if t else t for t in (self.rtol, self.check_rtol, self.coarse_rtol))
        return ReferenceTolerances(self.solver, *tols)


# ------------------------------------------------------------------ checks of the options


def check_option(name: str, value, cls: type, example: str):
    """``value`` if it is a ``cls`` (``None``: the default ``cls()``), else a TypeError
    naming the argument: the one check of an option object at a public function."""
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise TypeError(
            f"`{name}` must be a transflow.{cls.__name__} or None, got {value!r}; e.g. "
            f"{name}={example} (the legacy keyword spellings are gone, see CHANGELOG.md)."
        )
    return value


def _check_tol(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(
            f"`{name}` must be a positive number (a tolerance of the adaptive solve), got "
            f"{value!r}; e.g. {name}=1e-5."
        )
    return float(value)


def _diffrax_solver(name: str):
    import diffrax

    if name not in SOLVERS:
        raise ValueError(f"`solver` must be one of {sorted(SOLVERS)}, got {name!r}.")
    return {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}[name]()


def _adjoint(adjoint):
    import diffrax

    if isinstance(adjoint, diffrax.AbstractAdjoint):
        return adjoint
    table = {
        "recursive": diffrax.RecursiveCheckpointAdjoint,
        "backsolve": diffrax.BacksolveAdjoint,
    }
    if adjoint not in table:
        raise ValueError(
            "`adjoint` must be 'recursive' (backpropagation through the solver's steps), "
            f"'backsolve' (the continuous adjoint, solved backwards) or a diffrax adjoint, "
            f"got {adjoint!r}."
        )
    return table[adjoint]()


# ------------------------------------------------------------------------- fixed steps


def _chunk_size(n: int, chunk: int | None) -> int:
    return max(1, math.isqrt(n - 1) + 1 if n > 1 else 1) if chunk is None else min(chunk, n)


def _unroll(unroll, n_steps: int):
    """The ``lax.scan`` unroll of ``ConstantSteps(unroll)`` for ``n_steps`` steps."""
    if isinstance(unroll, str) and unroll == "auto":
        return True if n_steps <= AUTO_UNROLL_STEPS else 1
    return unroll


def _scan_nested(step, u0, xs, n: int, k: int, unroll: bool | int = 1):
    """``lax.scan(step, u0, xs)`` as a checkpointed scan over chunks of k steps."""
    n_chunks, rem = divmod(n, k)

    @jax.checkpoint
    def run_chunk(u, chunk):
        return jax.lax.scan(step, u, chunk, unroll=unroll)

    head = jax.tree.map(lambda x: x[: n_chunks * k].reshape(n_chunks, k, *x.shape[1:]), xs)
    u, traj = jax.lax.scan(run_chunk, u0, head)
    if traj is not None:
        traj = traj.reshape(n_chunks * k, *traj.shape[2:])
    if rem:
        tail = jax.tree.map(lambda x: x[n_chunks * k :], xs)
        u, tail_traj = jax.lax.scan(step, u, tail, unroll=unroll)
        if traj is not None:
            traj = jnp.concatenate([traj, tail_traj])
    return u, traj


def scan_steps(
    step: Callable[[Any, Any], Any],
    u0,
    xs,
    n_steps: int,
    *,
    saveat: SaveAt | None = None,
    remat: Remat | None = None,
    controller: ConstantSteps | None = None,
):
    """``u_{n+1} = step(u_n, xs[n])`` for n < ``n_steps`` as one ``lax.scan``.

    Args:
        step: the one-step map ``(u, x) -> u_next``.
        u0: the initial state.
        xs: a pytree of per-step inputs with a leading axis of length ``n_steps``.
        n_steps: that length (static).
        saveat: ``SaveAt(steps=True)`` also returns the state after every step
            (``None``: ``SaveAt()``).
        remat: what reverse mode stores (``None``: ``Remat()``).
        controller: the loop's ``unroll`` (``None``: ``ConstantSteps()``).

    Returns:
        ``(u_T, trajectory)``; trajectory is ``None`` unless ``saveat.steps``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow._integrate import Remat, SaveAt, scan_steps
        >>> u, traj = scan_steps(lambda u, x: u + x, 0.0, jnp.arange(5.0), 5,
        ...                      saveat=SaveAt(steps=True), remat=Remat("nested", chunk=2))
        >>> float(u), traj.tolist()
        (10.0, [0.0, 1.0, 3.0, 6.0, 10.0])
    """
    save = saveat is not None and saveat.steps
    remat = Remat() if remat is None else remat
    controller = ConstantSteps() if controller is None else controller

    def body(u, x):
        u_next = step(u, x)
        return u_next, (u_next if save else None)

    unroll = _unroll(controller.unroll, n_steps)
    if remat.mode == "nested":
        chunk = _chunk_size(n_steps, remat.chunk)
        return _scan_nested(jax.checkpoint(body), u0, xs, n_steps, chunk, unroll)
    body = jax.checkpoint(body) if remat.mode == "step" else body
    return jax.lax.scan(body, u0, xs, unroll=unroll)


# -------------------------------------------------------------------------- adaptive


class AdaptiveResult(eqx.Module):
    """What :func:`solve_ode` (and :func:`transflow.continuous.solve_adaptive`) returns.

    Attributes:
        u: the state at the end of the interval.
        num_steps: the solver's steps (accepted + rejected).
        num_accepted_steps, num_rejected_steps: the split.
        nfev: vector-field evaluations, ``1 + s · num_steps`` (FSAL solvers: s =
            :data:`SOLVERS` new stages per attempted step, 6 for Tsit5/Dopri5 and 13 for
            Dopri8, one evaluation at the start).
    """

    u: Array
    num_steps: Array
    num_accepted_steps: Array
    num_rejected_steps: Array
    nfev: Array


def solve_ode(
    f: Callable[[Any, Any, Any], Any],
    u0,
    interval: tuple[float, float],
    args: Any = None,
    controller: Adaptive | None = None,
) -> AdaptiveResult:
    """``u' = f(t, u, args)`` on ``interval`` with diffrax and a PID step-size controller.

    Args:
        f: the vector field; ``args`` is passed through (differentiated by the adjoint).
        u0: the initial state.
        interval: ``(t0, t1)``.
        controller: an :class:`Adaptive`, whole: the solver, the PID controller's
            tolerances, the first step, the step limit and the adjoint (``None``:
            ``Adaptive()``).

    Returns:
        An :class:`AdaptiveResult` (the final state and the evaluation counts).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow._integrate import Adaptive, solve_ode
        >>> res = solve_ode(lambda t, u, a: -a * u, jnp.ones(2), (0.0, 1.0), 2.0,
        ...                 Adaptive(rtol=1e-8, atol=1e-8))
        >>> bool(jnp.allclose(res.u, jnp.exp(-2.0), rtol=1e-6)), int(res.nfev) > 1
        (True, True)
    """
    import diffrax

    controller = check_option("controller", controller, Adaptive, "Adaptive(rtol=1e-6)")
    t0, t1 = interval
    dtype = jnp.result_type(u0)
    dt0 = (t1 - t0) / 4 if controller.dt0 is None else controller.dt0
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        _diffrax_solver(controller.solver),
        t0=jnp.asarray(t0, dtype),
        t1=jnp.asarray(t1, dtype),
        dt0=jnp.asarray(dt0, dtype),
        y0=u0,
        args=args,
        stepsize_controller=diffrax.PIDController(rtol=controller.rtol, atol=controller.atol),
        adjoint=_adjoint(controller.adjoint),
        max_steps=controller.max_steps,
    )
    n = sol.stats["num_steps"]
    return AdaptiveResult(
        sol.ys[-1],
        n,
        sol.stats["num_accepted_steps"],
        sol.stats["num_rejected_steps"],
        1 + SOLVERS[controller.solver] * n,
    )


def solve_steps(
    step: Callable[[Any, Any, Any, Any], Any],
    f: Callable[[Any, Any, Any], Any],
    u0,
    interval: tuple[float, float],
    n_steps: int,
    args: Any = None,
    *,
    adjoint: Any = "recursive",
):
    """``n_steps`` uniform steps ``u ← step(t, t + Δt, u, args)`` inside diffrax, so that
    reverse mode goes through a diffrax adjoint.

    The forward value is the one-step map's (Δt = (t1 − t0)/N, the step times
    ``linspace(t0, t1, N + 1)`` in ``u0``'s dtype); ``adjoint`` says how its gradient is
    taken: ``"recursive"`` (or ``diffrax.RecursiveCheckpointAdjoint(checkpoints=k)``:
    backpropagation through the steps with k stored states), ``"backsolve"`` (or a
    ``diffrax.BacksolveAdjoint`` with its own solver and steps: the continuous adjoint of
    ``u' = f(t, u, args)`` solved backwards) or another diffrax adjoint. ``f`` is the
    vector field the step is consistent with; only a continuous adjoint evaluates it.
    Arrays travel in ``args`` (never closed over, as ``BacksolveAdjoint`` needs).

    Returns:
        The state after the N steps.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow._integrate import solve_steps
        >>> euler = lambda t0, t1, u, a: u - (t1 - t0) * a * u  # explicit Euler on u' = −a u
        >>> u = solve_steps(euler, lambda t, u, a: -a * u, jnp.ones(1), (0.0, 1.0), 4, 2.0)
        >>> float(u[0])  # (1 − 2/4)^4
        0.0625
    """
    import diffrax

    t0, t1 = interval
    ts = jnp.asarray(np.linspace(t0, t1, n_steps + 1), jnp.result_type(u0))
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(f),
        _step_solver(step),
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=u0,
        args=args,
        stepsize_controller=diffrax.StepTo(ts=ts),
        adjoint=_adjoint(adjoint),
        max_steps=n_steps + 2,
    )
    return sol.ys[-1]


def _step_solver(step):
    return _step_solver_class()(step)


@functools.cache
def _step_solver_class():
    """A diffrax solver whose step is the one-step map ``step_fn(t0, t1, y0, args)``
    (first order, fixed steps; ``func`` is the term's vector field, for the adjoint).
    ``step_fn`` is a field, so that the arrays of a module passed as the map are traced."""
    import diffrax

    class StepSolver(diffrax.AbstractSolver):
        step_fn: Callable
        term_structure = diffrax.AbstractTerm
        interpolation_cls = diffrax.LocalLinearInterpolation

        def order(self, terms):
            return 1

        def init(self, terms, t0, t1, y0, args):
            return None

        def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
            y1 = self.step_fn(t0, t1, y0, args)
            return y1, None, dict(y0=y0, y1=y1), None, diffrax.RESULTS.successful

        def func(self, terms, t0, y0, args):
            return terms.vf(t0, y0, args)

    return StepSolver

"""How :func:`transflow.evolve` computes, grouped as diffrax groups its options.

The problem (``u0``, the controls, the scheme, Δt, the grid, masks) stays in ``evolve``'s
arguments; *how* it is computed is given by three small immutable objects:

- :class:`SaveAt`: what is returned (the final state only, or also every step's state);
- :class:`Remat`: rematerialisation in reverse mode (what reverse-mode AD stores);
- a step-size controller: :class:`ConstantSteps` (N uniform steps of the scheme, the
  layer loop's options) or :class:`Adaptive` (the continuous limit of a consistent
  scheme solved by diffrax with a PID controller, :func:`transflow.continuous.solve_adaptive`).

The legacy keywords (``save_trajectory``, ``remat=True/"step"/...``, ``remat_chunk``,
``unroll``) keep working and give identical results; see docs/model.md.
"""

from __future__ import annotations

from typing import Any, Literal

import equinox as eqx

__all__ = ["Adaptive", "ConstantSteps", "Remat", "SaveAt"]

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
            ``(N_t, n, d)`` (the legacy ``save_trajectory=True``).

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

    Legacy spellings: ``remat=False`` is ``Remat()``, ``remat=True``/``"step"`` is
    ``Remat("step")``, ``remat="nested", remat_chunk=k`` is ``Remat("nested", chunk=k)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, Remat, evolve, stack_controls
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(4)])
        >>> u0 = jnp.ones((2, 4)) + jnp.arange(4.0)
        >>> a = evolve(u0, theta, remat=Remat("nested", chunk=2))
        >>> bool(jnp.array_equal(a, evolve(u0, theta, remat="nested", remat_chunk=2)))
        True
        >>> Remat("step", chunk=2)
        Traceback (most recent call last):
        ...
        ValueError: Remat: `chunk` is the steps per chunk of mode='nested', got chunk=2 with ...
    """

    mode: Literal["none", "step", "nested"] = eqx.field(static=True, default="none")
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
            gradients are the same (the legacy ``unroll=`` keyword of ``evolve``).

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
        >>> u_T = evolve(u0, path, PreNormScheme(), stepsize_controller=Adaptive(rtol=1e-4,
        ...                                                                     atol=1e-4))
        >>> ref = solve_adaptive(u0, path, PreNormScheme(), rtol=1e-4, atol=1e-4).u
        >>> bool(jnp.array_equal(u_T, ref))
        True
    """

    rtol: float = eqx.field(static=True, default=1e-5)
    atol: float = eqx.field(static=True, default=1e-5)
    solver: str = eqx.field(static=True, default="tsit5")
    dt0: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=4096)
    adjoint: Any = eqx.field(static=True, default="recursive")

    def __check_init__(self):
        from .continuous._depth import SOLVERS, _adjoint, _check_tol

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

"""One call for the whole analysis of a model on an input (used by ``experiment=analyze``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import check_values
from ._across_depth import (
    _check_study_input,
    check_refinement_options,
    control_increments,
    increment_scaling,
    refinement_study,
)
from ._flow import as_flow, model_output
from ._geometry import _check_diagnostic_options, step_diagnostics

__all__ = ["analyze", "project_2d"]


def project_2d(states) -> np.ndarray:
    """Project token states ``(..., n, d)`` on the first two principal components of all
    of them together (one common basis, so trajectories are comparable across steps).

    Example:
        >>> import numpy as np
        >>> from transflow.analysis import project_2d
        >>> project_2d(np.random.default_rng(0).normal(size=(3, 5, 4))).shape
        (3, 5, 2)
    """
    s = np.asarray(check_values("states", states, "project_2d", ndim=(2, 3)), dtype=np.float64)
    flat = s.reshape(-1, s.shape[-1])
    mean = flat.mean(0)
    x = flat - mean
    # The top-2 principal directions from the smaller Gram matrix (eigh of d×d or m×m):
    # much cheaper than a full SVD of the (m, d) matrix for ViT-sized states.
    if x.shape[1] <= x.shape[0]:
        w, v = np.linalg.eigh(x.T @ x)
        basis = v[:, ::-1][:, :2]
    else:
        w, v = np.linalg.eigh(x @ x.T)
        top = v[:, ::-1][:, :2]
        basis = x.T @ top
        basis /= np.maximum(np.linalg.norm(basis, axis=0), np.finfo(float).tiny)
    if basis.shape[1] < 2:
        basis = np.pad(basis, ((0, 0), (0, 2 - basis.shape[1])))
    return (s - mean) @ basis


def analyze(
    model,
    x,
    *,
    refine_inputs=None,
    factors: Sequence[int] = (1, 2, 4),
    interpolation: str = "constant",
    threshold: float = 0.99,
    evaluate: Callable[[Any], dict] | None = None,
    keep_cosine: bool = True,
    progress: Callable | None = None,
) -> dict[str, Any]:
    """Trajectory, token geometry, sub-step budgets, control smoothness and refinement.

    Args:
        model: any model transflow builds (see :data:`SUPPORTED_MODELS`).
        x: one input; the trajectory and the per-step diagnostics are computed on it.
        refine_inputs: the input (or a batch of inputs) of the refinement study; default
            ``x``.
        factors: refinement factors (``()`` skips the refinement study).
        interpolation: of the controls under refinement (:func:`refine`).
        threshold: cosine threshold of the cluster count.
        evaluate: ``evaluate(refined_model) -> dict`` per factor (e.g. accuracy).
        keep_cosine: keep the cosine matrix of every step.
        progress: a progress-bar wrapper (e.g. ``ctx.progress``).

    Returns:
        ``diagnostics`` (:func:`step_diagnostics` with the step states), ``projection``
        (the states projected to 2-D, ``(N_t + 1, n, 2)``), ``trajectory_output_error``
        (max |u^{N_t} − model output|), ``increments`` (:func:`control_increments`),
        ``scaling`` (:func:`increment_scaling`, ``None`` below 3 layers), ``refinement``
        (:func:`refinement_study`, ``None`` without factors) and ``seconds`` per part.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import analyze
        >>> theta = stack_controls([LayerControls.random(8, scale=0.5, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> res = analyze(SplitTransformer(theta), jax.random.normal(jax.random.key(9), (5, 8)))
        >>> res["projection"].shape, res["trajectory_output_error"] < 1e-5
        ((4, 5, 2), True)
    """
    owner = "analyze"
    _check_diagnostic_options(
        owner, threshold=threshold, keep_cosine=keep_cosine, progress=progress
    )
    factors = check_refinement_options(
        owner, factors, interpolation, evaluate, progress, nonempty=False
    )
    if refine_inputs is not None:
        _check_study_input(refine_inputs, "refine_inputs", owner)
    seconds = {}
    t0 = time.perf_counter()
    diag = step_diagnostics(
        model, x, threshold=threshold, keep_cosine=keep_cosine, keep_states=True, progress=progress
    )
    seconds["diagnostics"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = np.asarray(model_output(model, x))
    err = float(np.max(np.abs(diag["states"][-1] - out)))
    seconds["output"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    incs = control_increments(model)
    n_steps = as_flow(model, x).num_steps
    scaling = increment_scaling(model) if n_steps >= 3 else None
    seconds["controls"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = None
    if factors:
        ref = refinement_study(
            model,
            x if refine_inputs is None else refine_inputs,
            factors,
            interpolation=interpolation,
            evaluate=evaluate,
            progress=progress,
        )
    seconds["refinement"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    projection = project_2d(diag["states"])
    seconds["projection"] = time.perf_counter() - t0
    return {
        "diagnostics": diag,
        "projection": projection,
        "trajectory_output_error": err,
        "increments": incs,
        "scaling": scaling,
        "refinement": ref,
        "seconds": seconds,
    }

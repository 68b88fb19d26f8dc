"""Task ``depth_adjoint``: the continuous adjoint against backpropagation through the
solver, in float64 (a side study of the depth page, docs/depth.md; part of
``experiment=depth`` before the study runner).

:func:`~transflow.continuous.compare_adjoints` (``BacksolveAdjoint`` against
``RecursiveCheckpointAdjoint``) on an adaptive pre-LN solve with a rough Legendre path
(K = 2, d = 4, 3 tokens, T = 1, float64, rtol = atol = ``task.adjoint_rtol``) whose FFN has
the activation ``task.adjoint_activation`` (the vector field is C¹ for a smooth one).
Claim: relative difference of the two gradients <= 1e-6. With ``task.adjoint_relu_rtol``
> 0 the same check with a ReLU FFN (only Lipschitz: kink-limited) is reported as the
contrast, not claimed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHOICES", "Config", "adjoint_check", "run"]

#: The FFN activations of transflow (LayerControls.activation).
CHOICES = {
    "adjoint_activation": (
        "tanh", "relu", "relu6", "identity", "gelu", "gelu_tanh", "gelu_fast", "quick_gelu",
        "silu", "mish", "sigmoid", "leaky_relu",
    ),
}  # fmt: skip

#: The claimed bound on the relative difference of the two gradients.
MAX_RELATIVE_DIFFERENCE = 1e-6


@dataclass
class Config:
    """The float64 continuous-adjoint check (``task.<field>=...``)."""

    adjoint_activation: str = "tanh"  # the FFN activation of the random path (C¹ field)
    adjoint_rtol: float = 1e-10
    adjoint_relu_rtol: float = 1e-12  # also measured with ReLU (kink-limited); 0: skip


def adjoint_check(activation: str = "tanh", tol: float = 1e-10, solver: str = "tsit5") -> dict:
    """The two gradients of the problem of the module docstring with the given FFN
    ``activation`` and tolerance: their relative difference and the solver's steps."""
    import jax
    import jax.numpy as jnp

    from transflow import Adaptive, LayerControls, PreNormScheme
    from transflow.continuous import compare_adjoints, init_path

    with jax.enable_x64(True):
        path = init_path(
            "legendre",
            lambda k: LayerControls.random(4, activation=activation, dtype=jnp.float64, key=k),
            2,
            key=jax.random.key(3),
            smooth=False,
        )
        u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
        solve = Adaptive(rtol=tol, atol=tol, solver=solver, max_steps=100_000)
        r = compare_adjoints(u0, path, PreNormScheme(), solve)
        return {
            "activation": activation,
            "rtol": tol,
            "solver": solver,
            "relative_difference": r["relative_difference"],
            "num_steps": r["num_steps"],
        }


def run(cfg: Config, ctx) -> dict:
    """Run the adjoint check (and the ReLU contrast); claim and report the difference."""
    adj = adjoint_check(cfg.adjoint_activation, cfg.adjoint_rtol)
    ctx.log({"kind": "adjoint", **adj})
    rel, relu_rel = adj["relative_difference"], None
    if cfg.adjoint_relu_rtol:  # the kink-limited contrast (not a claim)
        relu = adjoint_check("relu", cfg.adjoint_relu_rtol)
        ctx.log({"kind": "adjoint", **relu})
        relu_rel = relu["relative_difference"]
    ctx.claim("adjoint_relative_difference", rel, MAX_RELATIVE_DIFFERENCE, op="<=")
    ctx.report(
        "## Results\n\nContinuous adjoint vs backprop through the solver "
        f"(float64, {cfg.adjoint_activation} FFN, rtol = atol = {cfg.adjoint_rtol:g}, "
        f"{adj['num_steps']} steps): relative difference {rel:.2e}"
        + (
            ""
            if relu_rel is None
            else f" (ReLU FFN, {cfg.adjoint_relu_rtol:g}: {relu_rel:.2e}, kink-limited)"
        )
        + "."
    )
    return {"adjoint_relative_difference": rel, "adjoint_relative_difference_relu": relu_rel}

"""Controls across depth: smoothness of t ↦ θ(t) and depth refinement of a model.

Smoothness. A trained network "discretizes a continuous control" when its per-layer
controls θⁿ are samples of a regular θ(t) at tⁿ = nΔt. Sander, Ablin and Peyré ("Do
residual neural networks discretize neural ordinary differential equations?", NeurIPS
2022) test this for ResNets through the scaling of the increments with depth: for a
Lipschitz θ(t), max_n ‖θⁿ⁺¹ − θⁿ‖ = O(1/N_t); for i.i.d. layers (the initialization) it
does not decrease; for a Brownian-like θ it decreases as N_t^{-1/2}. Here, for the
controls of a transformer (:class:`~transflow.LayerControls`: attention kernels, norm
parameters, FFN kernels and biases):

- :func:`control_increments`: ‖θⁿ⁺¹ − θⁿ‖_F / ‖θⁿ‖_F per parameter block;
- :func:`increment_scaling`: one model, subsampled at strides s = 1, 2, 4, …: the
  subsequence θ^0, θ^s, θ^{2s}, … is the same θ(t) sampled with N_t/s points, so
  δ(s) = max_n ‖θ^{n+s} − θⁿ‖/‖θⁿ‖ ∝ s^β with β = 1 for a smooth control, β ≈ ½ for a
  random walk, β ≈ 0 for independent layers;
- :func:`depth_scaling`: the study of Sander et al. proper, over models of several depths
  (trained separately): δ(N_t) ∝ N_t^{−β}.

Refinement. :func:`refine` runs the same controls with Δt/k and k·N_t steps;
:func:`refinement_study` measures how the output changes with k and fits the order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._controls import num_steps
from .._errors import (
    check_callable,
    check_choice,
    check_same_shape,
    check_sequence,
    check_step,
    check_values,
)
from ..models._encoder import SplitTransformer
from ._flow import _kinds, _text_kinds, _unsupported, model_output

__all__ = [
    "control_blocks",
    "control_increments",
    "increment_scaling",
    "depth_scaling",
    "refine",
    "refine_controls",
    "refinement_study",
    "control_path",
    "fit_order",
]

Interpolation = Literal["constant", "linear"]


def _controls_of(model):
    FlowModel, VisionTransformer, CausalDecoder, CvtStageModel = _kinds()
    if isinstance(model, FlowModel):
        return model.layer_controls()[0]  # a ControlPath: sampled at its n_steps
    if isinstance(model, SplitTransformer | CvtStageModel):
        return model.controls
    if isinstance(model, VisionTransformer):
        return model.encoder.controls
    if isinstance(model, CausalDecoder):
        return model.decoder.controls
    TextEncoder, RMSDecoder = _text_kinds()
    if isinstance(model, TextEncoder):
        return model.encoder.controls
    if isinstance(model, RMSDecoder):
        return model.decoder.controls
    raise _unsupported(model)


def control_blocks(model) -> dict[str, np.ndarray]:
    """The stacked controls of ``model`` as named blocks, each ``(N_t, …)`` (NumPy).

    Names are the pytree paths, e.g. ``attn.wq``, ``ffn.weights[0]``, ``norm2.gain``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import control_blocks
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> blocks = control_blocks(SplitTransformer(theta))
        >>> blocks["attn.wq"].shape, "ffn.weights[1]" in blocks
        ((3, 4, 4), True)
    """
    controls = _controls_of(model)
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(controls):
        name = jax.tree_util.keystr(path).lstrip(".")
        out[name] = np.asarray(leaf)
    return out


def _squares(block: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """(‖θ^{n+s} − θⁿ‖², ‖θⁿ‖²) of one block, summed in float64 without a float64 copy."""
    a = block.reshape(block.shape[0], -1)
    d = a[stride:] - a[:-stride]
    return np.sum(d * d, axis=1, dtype=np.float64), np.sum(a * a, axis=1, dtype=np.float64)


def _ratio(num_sq: np.ndarray, den_sq) -> np.ndarray:
    num, den = np.sqrt(num_sq), np.sqrt(np.asarray(den_sq, np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(num > 0, np.inf, 0.0))


def _increments(blocks: dict[str, np.ndarray], stride: int, *, scaled: bool):
    """Per block and for the whole θ (``"all"``, the Euclidean norm over every block):
    ‖θ^{n+s} − θⁿ‖ / ‖θⁿ‖ (``scaled=False``) or / rms_n ‖θⁿ‖ (``scaled=True``: one scale
    for every n, so the scaling in s is exact)."""
    out, tot_d, tot_n = {}, 0.0, 0.0
    for k, v in blocks.items():
        dsq, nsq = _squares(v, stride)
        out[k] = _ratio(dsq, np.mean(nsq) if scaled else nsq[:-stride])
        tot_d, tot_n = tot_d + dsq, tot_n + nsq
    out["all"] = _ratio(tot_d, np.mean(tot_n) if scaled else tot_n[:-stride])
    return out


def control_increments(model) -> dict[str, np.ndarray]:
    """Relative increments ‖θⁿ⁺¹ − θⁿ‖_F / ‖θⁿ‖_F, n = 0 … N_t − 2, per parameter block.

    Also ``"all"``: the same for the concatenation of every block (each block weighted by
    its Frobenius norm, i.e. the plain Euclidean norm of the whole θⁿ).

    Example:
        >>> import jax
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import control_increments
        >>> layer = LayerControls.random(4, key=jax.random.key(0))
        >>> inc = control_increments(SplitTransformer(stack_controls([layer] * 3)))
        >>> inc["all"].tolist()  # constant controls: no increments
        [0.0, 0.0]
    """
    return _increments(control_blocks(model), 1, scaled=False)


def _fit_exponent(xs, ys) -> float:
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ok = (xs > 0) & (ys > 0) & np.isfinite(ys)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(xs[ok]), np.log(ys[ok]), 1)[0])


def increment_scaling(model, strides: Sequence[int] | None = None) -> dict[str, Any]:
    """The Sander–Ablin–Peyré scaling test on one model, by subsampling its depth.

    δ(s) = max_n ‖θ^{n+s} − θⁿ‖ / rms_n ‖θⁿ‖ (whole θ; one scale for all n) for strides
    s = 1, 2, 4, … < N_t; the
    fitted exponent β of δ(s) ∝ s^β is 1 for a smooth (Lipschitz) control, ≈ ½ for a
    random walk and ≈ 0 for independent layers. Needs N_t ≥ 3 for two strides.

    Returns:
        ``{"strides", "max_increment", "mean_increment", "beta"}``; per block too under
        ``"blocks"`` (block → max increment per stride).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import increment_scaling
        >>> a, b = (LayerControls.random(4, key=jax.random.key(i)) for i in range(2))
        >>> smooth = [jax.tree.map(lambda p, q, t=t: (1 - t) * p + t * q, a, b)
        ...           for t in jnp.linspace(0, 1, 9)]  # θ(t) linear in t: smooth
        >>> res = increment_scaling(SplitTransformer(stack_controls(smooth)))
        >>> res["strides"], round(res["beta"], 6)
        ([1, 2, 4, 8], 1.0)
    """
    blocks = control_blocks(model)
    n = next(iter(blocks.values())).shape[0]
    if strides is not None:
        check_sequence("strides", strides, "increment_scaling", example="[1, 2, 4]")
    if strides is None:
        strides = [2**k for k in range(max(int(math.log2(max(n - 1, 1))) + 1, 1)) if 2**k < n]
    strides = [int(s) for s in strides]
    if not strides or min(strides) < 1 or max(strides) >= n:
        raise ValueError(
            f"`strides` must be integers in [1, N_t - 1] = [1, {n - 1}], got {strides}; the "
            "model needs at least 2 layers."
        )
    incs = [_increments(blocks, s, scaled=True) for s in strides]
    mx = [float(np.max(i["all"])) for i in incs]
    mean = [float(np.mean(i["all"])) for i in incs]
    per_block = {k: [float(np.max(i[k])) for i in incs] for k in blocks}
    return {
        "strides": strides,
        "max_increment": mx,
        "mean_increment": mean,
        "beta": _fit_exponent(strides, mx),
        "blocks": per_block,
    }


def depth_scaling(models: Sequence[Any]) -> dict[str, Any]:
    """Sander et al.'s study over models of several depths N_t (e.g. trained separately).

    δ(N_t) = max_n ‖θⁿ⁺¹ − θⁿ‖ / rms_n ‖θⁿ‖; fits δ ∝ N_t^{−β} (β = 1: the networks discretize
    one smooth control θ(t); β ≈ 0: no continuous-depth limit).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import depth_scaling
        >>> a, b = (LayerControls.random(4, key=jax.random.key(i)) for i in range(2))
        >>> def model(n):  # θ(t) = (1 - t) a + t b sampled at the step midpoints
        ...     ts = (jnp.arange(n) + 0.5) / n
        ...     return SplitTransformer(stack_controls([jax.tree.map(
        ...         lambda p, q, t=t: (1 - t) * p + t * q, a, b) for t in ts]))
        >>> round(depth_scaling([model(4), model(8), model(16)])["beta"], 1)
        1.0
    """
    if not isinstance(models, list | tuple) or len(models) < 2:
        raise ValueError(
            f"depth_scaling: `models` must be a list of >= 2 models of different depths (the "
            f"exponent is a fit), got {type(models).__name__} of length "
            f"{len(models) if isinstance(models, list | tuple) else '-'}."
        )
    depths, mx = [], []
    for m in models:
        blocks = control_blocks(m)
        n = next(iter(blocks.values())).shape[0]
        if n < 2:
            raise ValueError(f"every model needs >= 2 layers for an increment, got N_t = {n}.")
        depths.append(n)
        mx.append(float(np.max(_increments(blocks, 1, scaled=True)["all"])))
    return {"depths": depths, "max_increment": mx, "beta": -_fit_exponent(depths, mx)}


# ----------------------------------------------------------------------------- refinement
def _check_factor(factor) -> int:
    if isinstance(factor, bool) or not isinstance(factor, int | np.integer) or factor < 1:
        raise ValueError(
            f"`factor` must be an integer >= 1 (the number of fine steps per step), got "
            f"{factor!r}; use refine(model, 2) for Δt/2."
        )
    return int(factor)


def control_path(controls, dt: float = 1.0, interpolation: Interpolation = "constant"):
    """Stacked controls θⁿ of N_t steps of size Δt as a control path θ(t) on [0, N_t Δt].

    ``"constant"``: :class:`~transflow.continuous.PiecewiseConstant` (θⁿ on [tⁿ, tⁿ⁺¹));
    ``"linear"``: :class:`~transflow.continuous.PiecewiseLinear` through θⁿ at the step
    midpoints t^{n+½}, constant before the first and after the last midpoint.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.analysis import control_path
        >>> p = control_path(jnp.array([0.0, 1.0]), interpolation="linear")
        >>> p.interval, float(p(1.0)), p.sample(4).tolist()
        ((0.0, 2.0), 0.5, [0.0, 0.25, 0.75, 1.0])
    """
    from ..continuous import PiecewiseConstant, PiecewiseLinear

    if interpolation not in ("constant", "linear"):
        raise ValueError(f"`interpolation` must be 'constant' or 'linear', got {interpolation!r}.")
    check_step("dt", dt, "control_path")
    n = num_steps(controls)
    if interpolation == "constant":
        return PiecewiseConstant(controls, tau=float(dt))
    knots = tuple(float((j + 0.5) * dt) for j in range(n))
    return PiecewiseLinear(controls, knots, 0.0, float(n * dt))


def refine_controls(controls, factor: int, interpolation: Interpolation = "constant"):
    """Stacked controls θⁿ (N_t steps) → the k·N_t controls of :func:`refine`: the
    :func:`control_path` of the controls sampled at the midpoints of k·N_t steps.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.analysis import refine_controls
        >>> refine_controls(jnp.array([0.0, 1.0]), 2, "linear").tolist()
        [0.0, 0.25, 0.75, 1.0]
        >>> refine_controls(jnp.array([0.0, 1.0]), 2).tolist()
        [0.0, 0.0, 1.0, 1.0]
    """
    factor = _check_factor(factor)
    path = control_path(controls, 1.0, interpolation)
    return path.sample(factor * num_steps(controls))


def refine(model, factor: int, *, interpolation: Interpolation = "constant"):
    """The same model with time step Δt/``factor`` and ``factor``·N_t steps.

    The controls are a function of time θ(t) on [0, T], T = N_t Δt, and the refined model
    is the same scheme on the finer time grid:

    - ``"constant"``: θ(t) = θⁿ on [tⁿ, tⁿ⁺¹) (the paper's piecewise-constant control):
      fine step m uses θ^{⌊m/factor⌋}. The continuous problem is unchanged, only the
      time step: as factor → ∞ the output converges to the solution of the continuous
      equation with the network's own control (first order for the Lie scheme).
    - ``"linear"``: θ(t) interpolated linearly between the midpoints t^{n+½} of the steps
      (held constant before the first and after the last midpoint). This changes the
      control itself into a continuous one, the reading in which the network
      discretizes a smooth θ(t) (Sander et al.); the limit differs from the constant one.

    What it does to the identification (docs/spec/continuous-model.md §3.5–3.6): one step at Δt is
    one layer with weights I + Δt·W_j (FFN), attention residual x + Δt·SA(x) (Δt·W_V), biases
    Δt·b_j; the projections (LayerNorm, ReLU) do not depend on Δt. The refined model is a
    transformer with factor·N_t layers whose FFN weights are I + (Δt/factor)·W_j, whose
    attention output is scaled by Δt/factor and whose LayerNorms are repeated unchanged;
    with ``"constant"`` factor consecutive layers share θⁿ. It is *not* the trained
    network for factor > 1; ``refine(model, 1)`` is the model itself (either
    interpolation). Lifting FFN sub-steps (``d_ff ≠ d``) in the Lie scheme do not depend
    on Δt, so for them the refinement is not consistent (the ½-relaxation moves the state
    by O(1) per fine step) and the outputs need not converge; pre-LN schemes scale the
    whole FFN update by Δt and refine consistently.

    A :class:`~transflow.control.FlowModel` whose controls are a
    :class:`~transflow.continuous.ControlPath` is already continuous in t: it is evaluated
    with factor·``n_steps`` steps (``interpolation`` does not apply).

    Args:
        model: a :class:`~transflow.SplitTransformer`, ViT, causal decoder or
            :class:`~transflow.control.FlowModel` (CvT stages have no Δt field: not
            supported).
        factor: integer ≥ 1.
        interpolation: ``"constant"`` or ``"linear"``.

    Returns:
        A model of the same type.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import refine
        >>> theta = stack_controls([LayerControls.random(4, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> fine = refine(SplitTransformer(theta), 4)
        >>> fine.num_layers, fine.dt
        (12, 0.25)
    """
    factor = _check_factor(factor)
    if interpolation not in ("constant", "linear"):
        raise ValueError(f"`interpolation` must be 'constant' or 'linear', got {interpolation!r}.")
    FlowModel, VisionTransformer, CausalDecoder, CvtStageModel = _kinds()
    TextEncoder, RMSDecoder = _text_kinds()
    if factor == 1 and isinstance(
        model,
        SplitTransformer | FlowModel | VisionTransformer | CausalDecoder | TextEncoder | RMSDecoder,
    ):
        return model

    if isinstance(model, FlowModel) and model.is_path:  # θ(t) is already a function of t
        return dataclasses.replace(model, n_steps=factor * model.n_steps)

    def fine(obj):
        return dataclasses.replace(
            obj,
            controls=refine_controls(obj.controls, factor, interpolation),
            dt=obj.dt / factor,
        )

    if isinstance(model, SplitTransformer | FlowModel):
        return fine(model)
    if isinstance(model, VisionTransformer):
        return dataclasses.replace(model, encoder=fine(model.encoder))
    if isinstance(model, CausalDecoder | RMSDecoder):
        return dataclasses.replace(model, decoder=fine(model.decoder))
    if isinstance(model, TextEncoder):
        return dataclasses.replace(model, encoder=fine(model.encoder))
    if isinstance(model, CvtStageModel):
        raise TypeError(
            "refine: a CvtStageModel runs its steps at Δt = 1 (no `dt` field), so it cannot "
            "be refined; refine the other supported models: SplitTransformer, "
            "VisionTransformer, CausalDecoder, FlowModel, TextEncoder, RMSDecoder."
        )
    raise _unsupported(model)


def fit_order(factors: Sequence[int], differences: Sequence[float]) -> float:
    """Fitted order p of ‖out_{2k} − out_k‖ ∝ k^{−p} (log-log least squares).

    Example:
        >>> from transflow.analysis import fit_order
        >>> round(fit_order([1, 2, 4], [1.0, 0.5, 0.25]), 6)
        1.0
    """
    factors = check_values("factors", factors, "fit_order", ndim=1)
    # a NaN or 0 difference (a failed or exact refinement) is left out of the fit
    differences = check_values("differences", differences, "fit_order", ndim=1, finite=False)
    check_same_shape(("factors", "differences"), factors, differences, "fit_order")
    if np.any(factors <= 0):
        raise ValueError(f"fit_order: `factors` must be numbers > 0, got {factors}.")
    if np.any(differences < 0):
        raise ValueError(
            f"fit_order: `differences` must be norms >= 0 (zeros are left out of the fit), got "
            f"{differences}."
        )
    return -_fit_exponent(factors, differences)


def refinement_study(
    model,
    x,
    factors: Sequence[int] = (1, 2, 4, 8),
    *,
    interpolation: Interpolation = "constant",
    evaluate: Callable[[Any], dict] | None = None,
    progress: Callable | None = None,
) -> dict[str, Any]:
    """Outputs of ``refine(model, k)`` on ``x`` for each factor k: change and order.

    Args:
        model, x: a supported model and one input (or a batch: then ``x`` has one more
            leading axis and the model is ``jax.vmap``-ed).
        factors: increasing refinement factors (1 first, for the change from the model).
        interpolation: as in :func:`refine`.
        evaluate: optional ``evaluate(refined_model) -> dict`` of numbers (e.g. test
            accuracy of a classifier) recorded per factor.

    Returns:
        ``factors``; ``change``: ‖out_k − out_{k₀}‖/‖out_{k₀}‖ with k₀ = factors[0];
        ``successive``: ‖out_{k_{i+1}} − out_{k_i}‖/‖out_{k₀}‖ (length len − 1);
        ``ratios``: successive[i]/successive[i+1] (≥ 2^p for order p when factors double);
        ``order``: the fitted order from ``successive`` against the factors;
        ``evaluate``: the list of ``evaluate`` records (if given).
    """
    factors = check_refinement_options(
        "refinement_study", factors, interpolation, evaluate, progress, nonempty=True
    )
    if len(factors) < 2 or any(b <= a for a, b in zip(factors, factors[1:])):
        raise ValueError(
            f"refinement_study: `factors` must be >= 2 increasing integers, got {factors}; "
            "pass e.g. factors=(1, 2, 4)."
        )
    _check_study_input(x)
    batched = jnp.ndim(x) == _input_rank(model) + 1
    f = _batched_output if batched else _single_output
    outs, evals = [], []
    it = factors if progress is None else progress(factors, total=len(factors), desc="refine")
    for k in it:
        m = refine(model, k, interpolation=interpolation)
        outs.append(np.asarray(f(m, jnp.asarray(x)), dtype=np.float64))
        if evaluate is not None:
            evals.append(evaluate(m))
    ref = np.linalg.norm(outs[0])
    change = [float(np.linalg.norm(o - outs[0]) / ref) for o in outs]
    succ = [float(np.linalg.norm(b - a) / ref) for a, b in zip(outs, outs[1:])]
    ratios = [a / b if b > 0 else float("inf") for a, b in zip(succ, succ[1:])]
    out = {
        "factors": factors,
        "interpolation": interpolation,
        "change": change,
        "successive": succ,
        "ratios": ratios,
        "order": fit_order(factors[:-1], succ),
    }
    if evaluate is not None:
        out["evaluate"] = evals
    return out


def check_refinement_options(owner, factors, interpolation, evaluate, progress, *, nonempty):
    """The options of a refinement study (:func:`refinement_study`, ``analyze``), each
    refused in one line naming it; returns the factors as a list."""
    factors = check_sequence("factors", factors, owner, example="(1, 2, 4)", nonempty=nonempty)
    check_choice("interpolation", interpolation, ("constant", "linear"))
    if evaluate is not None:
        check_callable("evaluate", evaluate, owner, "evaluate=lambda model: {...}")
    if progress is not None:
        check_callable("progress", progress, owner, "progress=None")
    return factors


def _check_study_input(x, name: str = "x", owner: str = "refinement_study") -> None:
    """``x`` (one input or a batch of them): an array; floats must be finite."""
    if not isinstance(x, jax.Array | np.ndarray):
        try:
            x = np.asarray(x)
        except (TypeError, ValueError):
            x = np.asarray(None)
    if x.dtype.kind not in "biuf":
        raise TypeError(
            f"{owner}: `{name}` must be an array (one input or a batch), got "
            f"{type(x).__name__} {x!r:.40}; pass e.g. `jnp.asarray(...)`."
        )
    if jnp.issubdtype(x.dtype, jnp.floating):
        check_values(name, x, owner)


def _input_rank(model) -> int:
    FlowModel, VisionTransformer, CausalDecoder, CvtStageModel = _kinds()
    if isinstance(model, (CausalDecoder, *_text_kinds())):
        return 1
    if isinstance(model, VisionTransformer | CvtStageModel):
        return 3
    if isinstance(model, FlowModel):
        return len(getattr(model.embed, "image_shape", (0,)))
    return 2


@eqx.filter_jit
def _batched_output(m, x):
    return jax.vmap(lambda xx: model_output(m, xx))(x)


@eqx.filter_jit
def _single_output(m, x):
    return model_output(m, x)

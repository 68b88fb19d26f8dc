"""Every model transflow builds, read as one flow: u⁰ = f(x), N_t steps of a scheme, u^{N_t}.

:func:`as_flow` turns a model and one input into a :class:`Flow` (initial condition,
stacked controls θⁿ, scheme, Δt, token grid, causal flag, closing projection);
:func:`iter_steps` streams the states step by step (one step's sub-step states at a time),
and :func:`trajectory` collects them. The step function is the scheme's own ``step``, so
the last state is the model's output up to round-off (a test checks ≤ 1e-12 in float64).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._controls import NormParams, num_steps
from .._errors import check_flag, check_kind, check_step, check_values
from .._grid import Grid
from ..models._encoder import SplitTransformer
from ..schemes._base import AbstractScheme, _project

__all__ = [
    "Flow",
    "StepRecord",
    "SUPPORTED_MODELS",
    "as_flow",
    "iter_steps",
    "trajectory",
    "model_output",
]

#: The model types the analysis accepts, by name (used in error messages; the classes are
#: resolved lazily to avoid import cycles with transflow.control and transflow.vision).
SUPPORTED_MODELS = (
    "transflow.SplitTransformer (also from_torch / from_hf layers and stacks)",
    "transflow.vision.VisionTransformer (from_hf(ViTModel))",
    "transflow.vision.CvtStageModel (from_hf(CvtStage); no refine)",
    "transflow.interop.CausalDecoder (from_hf(GPT2Model / GPT2LMHeadModel))",
    "transflow.interop.TextEncoder (from_hf(BertModel / RobertaModel / DistilBertModel))",
    "transflow.interop.RMSDecoder (from_hf(LlamaModel / MistralModel / Qwen2Model))",
    "transflow.control.FlowModel (make_vit / make_seq, trained by experiment=train_digits)",
)


@dataclasses.dataclass(frozen=True)
class Flow:
    """A model read as an evolution: ``u0`` → N_t steps of ``scheme`` → (``final_norm``).

    Attributes:
        u0: the initial condition f(x), shape ``(n_tokens, d)``.
        controls: stacked :class:`~transflow.LayerControls` (leading axis N_t).
        scheme: the splitting scheme of one step.
        dt: the time step Δt.
        grid: the token/feature grid (``None``: the index grid).
        causal: causal attention.
        final_norm: the closing projection after the last step (``NormParams``: onto S1;
            ``RMSNormParams``: the RMSNorm of a Llama-family decoder), or ``None``.
    """

    u0: Float[Array, "n d"]
    controls: Any
    scheme: AbstractScheme
    dt: float
    grid: Grid | None
    causal: bool
    final_norm: NormParams | None

    def __post_init__(self):
        owner = "Flow"
        check_values("u0", self.u0, owner, ndim=2)
        try:  # a stack of layers (leading axis N_t)
            num_steps(self.controls)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{owner}: `controls` is not a stack of layers: {e}") from None
        check_kind("scheme", self.scheme, AbstractScheme, owner, "pass e.g. LieScheme()")
        check_step("dt", self.dt, owner)
        if self.grid is not None:
            check_kind("grid", self.grid, Grid, owner, "pass e.g. Grid.index(n, d) or None")
        check_flag("causal", self.causal, owner)
        if self.final_norm is not None:
            from .._llama_ops import RMSNormParams

            check_kind("final_norm", self.final_norm, NormParams | RMSNormParams, owner, "or None")

    @property
    def num_steps(self) -> int:
        return num_steps(self.controls)

    def layer(self, i: int):
        return jax.tree.map(lambda a: a[i], self.controls)


def _unsupported(model) -> TypeError:
    return TypeError(
        f"`model` of type {type(model).__module__}.{type(model).__name__} is not supported by "
        f"transflow.analysis; supported: {'; '.join(SUPPORTED_MODELS)}."
    )


def _kinds():
    from ..models import CausalDecoder, CvtStageModel, FlowModel, VisionTransformer

    return FlowModel, VisionTransformer, CausalDecoder, CvtStageModel


def _text_kinds():
    """The encoder–decoder zoo's models: (TextEncoder, RMSDecoder)."""
    from ..models import RMSDecoder, TextEncoder

    return TextEncoder, RMSDecoder


def _all_kinds() -> tuple[type, ...]:
    return (SplitTransformer, *_kinds(), *_text_kinds())


def _check_window(model, n: int) -> None:
    w = model.sliding_window
    if w is not None and n > w:
        raise ValueError(
            f"transflow.analysis: this RMSDecoder has a sliding window of {w} tokens and the "
            f"input has {n}: the band mask is not streamed; use at most {w} tokens."
        )


def _check_input(x, grid, causal, owner: str) -> None:
    """``x`` (an array of numbers, finite if floats), ``grid`` (a Grid or None), ``causal``."""
    if grid is not None:
        check_kind("grid", grid, Grid, owner, "pass e.g. Grid.index(n, d) or None")
    check_flag("causal", causal, owner)
    if not isinstance(x, jax.Array | np.ndarray):
        given = x
        try:
            x = np.asarray(x)
        except (TypeError, ValueError):
            x = np.asarray(None)
        if x.dtype == object:
            raise TypeError(
                f"{owner}: `x` must be an array (features, an image or token ids), got "
                f"{type(given).__name__} {given!r:.40}; pass e.g. `jnp.asarray(...)`."
            )
    if jnp.issubdtype(x.dtype, jnp.floating):
        check_values("x", x, owner)
    elif not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(
            f"{owner}: `x` must be features or images (floats) or token ids (integers), got "
            f"dtype {x.dtype}."
        )


def as_flow(model, x, *, grid: Grid | None = None, causal: bool = False) -> Flow:
    """Read ``model`` applied to one input ``x`` as a :class:`Flow`.

    ``x`` is what the model takes: a sequence ``(n, d)`` for a
    :class:`~transflow.SplitTransformer`, an image for a ViT or the digits model, token ids
    for a decoder. ``grid`` and ``causal`` are passed on as the model's own call would
    (they only apply to a bare :class:`~transflow.SplitTransformer`; the wrapped models
    fix their own).

    Raises:
        TypeError: ``model`` is not a model transflow builds (the message lists them).
    """
    _check_input(x, grid, causal, "as_flow")
    FlowModel, VisionTransformer, CausalDecoder, CvtStageModel = _kinds()
    if isinstance(model, SplitTransformer):
        u0 = model._check(jnp.asarray(x), grid)
        return Flow(u0, model.controls, model.scheme, model.dt, grid, causal, model.final_norm)
    if isinstance(model, VisionTransformer):
        enc = model.encoder
        u0 = model.initial_condition(jnp.asarray(x))
        return Flow(u0, enc.controls, enc.scheme, enc.dt, grid, causal, enc.final_norm)
    if isinstance(model, CausalDecoder):
        dec = model.decoder
        u0 = model.initial_condition(jnp.asarray(x))
        return Flow(u0, dec.controls, dec.scheme, dec.dt, None, True, dec.final_norm)
    if isinstance(model, FlowModel):
        u0 = model.embed(jnp.asarray(x))
        controls, dt = model.step_controls()  # a ControlPath: read at its n_steps
        return Flow(u0, controls, model.scheme, dt, model.embed.grid(), False, None)
    if isinstance(model, CvtStageModel):
        u0, hw = model.initial_condition(jnp.asarray(x))
        return Flow(u0, model.controls, model.scheme(hw), 1.0, None, False, None)
    TextEncoder, RMSDecoder = _text_kinds()
    if isinstance(model, TextEncoder):
        enc = model.encoder
        u0 = model.initial_condition(jnp.asarray(x))
        return Flow(u0, enc.controls, enc.scheme, enc.dt, None, False, enc.final_norm)
    if isinstance(model, RMSDecoder):
        dec = model.decoder
        _check_window(model, jnp.shape(x)[0])
        if dec.final_norm is not None:
            raise ValueError("an RMSDecoder whose decoder has its own final_norm is not supported.")
        u0 = model.initial_condition(jnp.asarray(x))
        return Flow(u0, dec.controls, dec.scheme, dec.dt, None, True, model.final_norm)
    raise _unsupported(model)


def model_output(model, x, *, grid: Grid | None = None, causal: bool = False):
    """The final state u^{N_t} computed by the model's own forward pass (no streaming).

    For a :class:`~transflow.control.FlowModel` this is ``model.features(x)`` (before the
    read-out), for a CvT stage the token state before it is reshaped into a feature map;
    otherwise ``model(x)``. Compiled with ``equinox.filter_jit``.
    """
    if not isinstance(model, _all_kinds()):
        raise _unsupported(model)
    _check_input(x, grid, causal, "model_output")
    return _output(model, jnp.asarray(x), grid, causal)


@eqx.filter_jit
def _output(model, x, grid, causal):
    FlowModel, VisionTransformer, CausalDecoder, CvtStageModel = _kinds()
    if isinstance(model, SplitTransformer):
        return model(jnp.asarray(x), grid=grid, causal=causal)
    if isinstance(model, VisionTransformer):
        return model(jnp.asarray(x), grid=grid, causal=causal)
    if isinstance(model, CausalDecoder):
        return model(jnp.asarray(x))
    if isinstance(model, FlowModel):
        return model.features(jnp.asarray(x))
    if isinstance(model, CvtStageModel):
        from .._evolve import evolve

        u0, hw = model.initial_condition(jnp.asarray(x))
        return evolve(u0, model.controls, model.scheme(hw))
    TextEncoder, RMSDecoder = _text_kinds()
    if isinstance(model, RMSDecoder):
        _check_window(model, x.shape[0])
    if isinstance(model, TextEncoder | RMSDecoder):
        return model(jnp.asarray(x))
    raise _unsupported(model)


@eqx.filter_jit
def _step(scheme, u, theta, dt, grid, causal):
    return scheme.step(u, theta, dt, grid=grid, causal=causal, return_substeps=True)


@eqx.filter_jit
def _plain_step(scheme, u, theta, dt, grid, causal):
    return scheme.step(u, theta, dt, grid=grid, causal=causal)


@eqx.filter_jit
def _close(u, norm, grid):
    if isinstance(norm, NormParams):
        return _project(u, norm, grid)
    from .._llama_ops import project_sphere  # RMSNormParams: the closing RMSNorm

    return project_sphere(u, norm.gain, eps=norm.eps)


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step n → n+1 of a streamed flow.

    Attributes:
        index: n + 1 (1-based step number; the state after it is u^{n+1}).
        before: u^n.
        after: u^{n+1} (with the closing projection applied after the last step).
        substeps: the sub-step states of this step by name, in the scheme's order (plus
            ``"final_norm"`` after the last step of a model with a closing projection),
            or ``None`` when not asked for.
        controls: θⁿ.
    """

    index: int
    before: Float[Array, "n d"]
    after: Float[Array, "n d"]
    substeps: dict[str, Array] | None
    controls: Any


def iter_steps(flow: Flow, *, substeps: bool = True) -> Iterator[StepRecord]:
    """Stream the steps of ``flow``: one :class:`StepRecord` at a time.

    Only the current step's states are alive (the caller drops them), so memory does not
    grow with depth. One compiled step function serves every layer (the layers share
    shapes).
    """
    check_kind("flow", flow, Flow, "iter_steps", "make it with as_flow(model, x)")
    check_flag("substeps", substeps, "iter_steps")
    return _iter_steps(flow, substeps)


def _iter_steps(flow: Flow, substeps: bool) -> Iterator[StepRecord]:
    n_steps = flow.num_steps
    u = flow.u0
    step = _step if substeps else _plain_step
    for i in range(n_steps):
        theta = flow.layer(i)
        out = step(flow.scheme, u, theta, flow.dt, flow.grid, flow.causal)
        u_next, subs = out if substeps else (out, None)
        if subs is not None:  # jit returns dicts with sorted keys: restore the scheme's order
            subs = {name: subs[name] for name in flow.scheme.substep_names(theta)}
        if i == n_steps - 1 and flow.final_norm is not None:
            u_next = _close(u_next, flow.final_norm, flow.grid)
            if subs is not None:
                subs["final_norm"] = u_next
        yield StepRecord(i + 1, u, u_next, subs, theta)
        u = u_next


def trajectory(model, x, *, substeps: bool = False, grid: Grid | None = None, causal: bool = False):
    """The states of ``model`` on one input ``x`` after every step (or every sub-step).

    Args:
        model: any model transflow builds (see :data:`SUPPORTED_MODELS`).
        x: one input of the model (sequence, image or token ids).
        substeps: also return every sub-step state.
        grid, causal: as in the model's call (bare :class:`~transflow.SplitTransformer`).

    Returns:
        ``substeps=False``: an array of shape ``(N_t + 1, n, d)``: the initial condition
        u⁰ = f(x) first, then u¹ … u^{N_t}; the last entry is the model's output (with the
        closing projection of models that have one, e.g. a ViT's final LayerNorm).

        ``substeps=True``: an ordered ``dict`` label → state: ``"input"`` (u⁰), then
        ``"<n>/<name>"`` for step n = 1 … N_t and every sub-step name of the scheme (e.g.
        ``"1/attention"``, ``"1/ln1"``, ``"1/ffn1"`` …), then ``"final_norm"`` when the model
        has a closing projection. The first value is u⁰, the last the model's output.
        Lifting FFN sub-steps have the hidden width (``(n, d_ff)``), so the values are not
        stacked. This holds every sub-step of every layer in memory: use
        :func:`iter_steps` or :func:`transflow.analysis.step_diagnostics` to stream.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import trajectory
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> model = SplitTransformer(theta)
        >>> u = jax.random.normal(jax.random.key(9), (5, 8))
        >>> traj = trajectory(model, u)
        >>> traj.shape, bool(jnp.allclose(traj[-1], model(u), atol=1e-6))
        ((4, 5, 8), True)
        >>> list(trajectory(model, u, substeps=True))[:3]
        ['input', '1/attention', '1/ln1']
    """
    check_flag("substeps", substeps, "trajectory")
    flow = as_flow(model, x, grid=grid, causal=causal)
    if not substeps:
        states = [flow.u0]
        for rec in iter_steps(flow, substeps=False):
            states.append(rec.after)
        return jnp.stack(states)
    out: dict[str, Array] = {"input": flow.u0}
    for rec in iter_steps(flow, substeps=True):
        for name, s in rec.substeps.items():
            out["final_norm" if name == "final_norm" else f"{rec.index}/{name}"] = s
    return out

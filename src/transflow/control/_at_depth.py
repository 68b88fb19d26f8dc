"""Trained models at any depth: evaluation with any N_t or adaptively, random-depth training.

- :func:`at_depth`: a :class:`FlowModel` evaluated with N uniform steps. A path model
  samples its θ(t) at the N step midpoints; a per-layer model is read as the
  piecewise-constant path of its layers (:class:`~transflow.continuous.PiecewiseConstant`,
  i.e. ``analysis.refine`` for N = k·N_t).
- :func:`adaptive_logits`: the continuous limit of a path model (consistent schemes only)
  solved with diffrax's Tsit5/Dopri5 and a PID controller, with the evaluation count.
- :func:`depth_accuracy`: test accuracy at several depths and adaptively.
- :func:`depth_loss`: a training loss that draws the number of steps per batch from a
  set of depths (one jitted program: ``lax.switch`` over the depths), plus an optional
  smoothness penalty λ ∫‖θ'(t)‖² dt, and a choice of how its gradient is computed
  (``gradient=``, :data:`GRADIENTS`).
- :func:`kink_straddles`: the fraction of Runge–Kutta steps whose stages lie on both
  sides of a kink of the FFN activation (a pre-activation that changes sign between
  the stage states): where a ReLU field is not C¹ inside a step.
- :func:`flow_logits`: a batch of logits of a model whose N steps run inside
  ``diffrax.diffeqsolve`` (the integrator's :func:`~transflow._integrate.solve_steps`:
  one diffrax step = one step of the model's scheme), so that
  the gradient is taken by checkpointed backpropagation (``RecursiveCheckpointAdjoint``
  with a fixed number of checkpoints) or by the continuous adjoint (``BacksolveAdjoint``):
  memory that does not grow with N.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._activations import activation_fn
from .._errors import (
    check_callable,
    check_choice,
    check_flag,
    check_number,
    check_sequence,
    check_values,
    is_array,
)
from .._integrate import Adaptive, check_option, solve_steps
from .._paths import READINGS, PiecewiseConstant, Reading
from .._solve import solve_adaptive, vector_field
from ..models._flow import FlowModel
from ..schemes._base import DenseOperators, _ffn_substep, check_consistent
from ..schemes._registry import stage_controls
from ..schemes._runge_kutta import TABLEAUS, RungeKuttaScheme
from ._train import cross_entropy_loss

__all__ = [
    "GRADIENTS",
    "at_depth",
    "adaptive_logits",
    "depth_accuracy",
    "depth_loss",
    "flow_logits",
    "kink_straddles",
]

#: How a training gradient is computed (:func:`flow_logits`, :func:`depth_loss`):
#: ``"backprop"`` (the model's own ``evolve``: reverse mode through its scan, with the
#: model's ``remat``; memory grows with N), ``"checkpointed"`` (the same steps inside
#: diffrax, ``RecursiveCheckpointAdjoint(checkpoints)``: the exact discrete gradient with
#: a fixed number of stored states, recomputing the rest) and ``"adjoint"`` (the same
#: forward steps, the gradient by the continuous adjoint ODE solved backwards with N
#: steps of ``adjoint_solver``, ``BacksolveAdjoint``; an O(Δt) approximation of the
#: gradient whose memory does not depend on N).
GRADIENTS = ("backprop", "checkpointed", "adjoint")


def _check_model(model) -> FlowModel:
    if not isinstance(model, FlowModel):
        raise TypeError(f"`model` must be a transflow.control.FlowModel, got {type(model)}.")
    return model


def _check_x(x, owner: str):
    """A batch or an example: images (floats, finite) or token ids (integers)."""
    if not is_array(x):
        x = np.asarray(x)
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"{owner}: `x` must hold at least one entry, got shape {x.shape}.")
    if jnp.issubdtype(x.dtype, jnp.floating):
        # a traced x (a training step's batch, the vmapped solve of depth_accuracy) was
        # checked where it entered: only its type is checked here, for free
        return x if isinstance(x, jax.core.Tracer) else check_values("x", x, owner)
    if not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(
            f"{owner}: `x` must be images (floats) or token ids (integers), got dtype {x.dtype}."
        )
    return x


_SOLVERS = ("euler", "heun", "tsit5")


def _check_adjoint_solver(adjoint_solver, owner: str) -> None:
    if adjoint_solver not in _SOLVERS:
        raise ValueError(
            f"{owner}: `adjoint_solver` must be one of {_SOLVERS}, got {adjoint_solver!r}."
        )


def at_depth(model: FlowModel, n_steps: int, reading: Reading = "right") -> FlowModel:
    """``model`` evaluated with ``n_steps`` uniform steps over the same time interval.

    ``reading``: how each step reads θ(t) (:meth:`transflow.continuous.ControlPath.read`):
    ``"right"`` (default) θ at the step midpoint, right-continuous; ``"left"`` the left
    limit there; ``"average"`` the step's mean of θ. They differ only where θ jumps at a
    midpoint, as a per-layer model of L layers does at N = L/2, L/4, …: "right" runs the
    layer after each boundary, "left" the one before, "average" the mean of the two. The
    default model keeps its path (or per-layer controls); another reading returns the
    model with the read controls stacked (one set per step).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import at_depth, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, key=jax.random.key(0))  # per-layer
        >>> deep = at_depth(m, 8)
        >>> type(deep.controls).__name__, deep.layer_controls()[1]
        ('PiecewiseConstant', 0.25)
    """
    model = _check_model(model)
    if isinstance(n_steps, bool) or not isinstance(n_steps, int | np.integer) or n_steps < 1:
        raise ValueError(f"`n_steps` must be an integer >= 1, got {n_steps!r}.")
    if reading not in READINGS:
        raise ValueError(f"`reading` must be one of {READINGS}, got {reading!r}.")
    if reading != "right":
        path = _path_of(model)
        n = int(n_steps)
        nodes = model.theta_at == "nodes"
        controls = (
            stage_controls(path, model.scheme, n, reading) if nodes else path.read(n, reading)
        )
        return dataclasses.replace(model, controls=controls, dt=path.step_size(n), n_steps=None)
    if model.is_path:
        return dataclasses.replace(model, n_steps=int(n_steps))
    path = PiecewiseConstant(model.controls, tau=float(model.dt))
    return dataclasses.replace(model, controls=path, n_steps=int(n_steps))


def _path_of(model: FlowModel):
    return model.controls if model.is_path else PiecewiseConstant(model.controls, tau=model.dt)


def adaptive_logits(
    model: FlowModel,
    x,
    stepsize_controller: Adaptive | None = None,
    *,
    split: bool = False,
):
    """``(logits, nfev)`` of one example with the continuous limit solved adaptively.

    The model's scheme must be consistent (:class:`~transflow.PreNormScheme` or
    :class:`~transflow.continuous.RelaxedLieScheme`); ``stepsize_controller`` is the
    solve's :class:`~transflow.Adaptive` (``None``: ``Adaptive()``), passed whole to
    :func:`transflow.continuous.solve_adaptive` (``split``: piece by piece between the
    jumps of a per-layer or piecewise-linear path).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import Adaptive, PreNormScheme
        >>> from transflow.control import adaptive_logits, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, path="linear", scheme=PreNormScheme(),
        ...              key=jax.random.key(0))
        >>> logits, nfev = adaptive_logits(m, jnp.zeros((8, 8)), Adaptive(rtol=1e-4, atol=1e-4))
        >>> logits.shape, int(nfev) >= 7
        ((10,), True)
    """
    model = _check_model(model)
    controller = check_option("stepsize_controller", stepsize_controller, Adaptive, "Adaptive()")
    check_flag("split", split, "adaptive_logits")
    check_consistent(model.scheme, "adaptive_logits")
    x = jnp.asarray(
        _check_x(x, "adaptive_logits")
    )  # images in the model's dtype; token ids stay integers
    u0 = model.embed(x.astype(model.head_w.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x)
    res = solve_adaptive(
        u0, _path_of(model), model.scheme, controller, grid=model.embed.grid(), split=split
    )
    return model.readout(res.u), res.nfev


@eqx.filter_jit
def _adaptive_batch(model, x, controller, split):
    return jax.vmap(lambda xx: adaptive_logits(model, xx, controller, split=split))(x)


@eqx.filter_jit
def _logits_batch(model, x):
    return jax.vmap(model)(x)


def depth_accuracy(
    model: FlowModel,
    x,
    y,
    depths: Sequence[int] = (4, 8, 16, 32, 64),
    *,
    adaptive: Adaptive | None = Adaptive(),  # noqa: B008 (immutable)
    batch_size: int = 128,
    split: bool = False,
    reading: Reading = "right",
) -> dict[str, Any]:
    """Test accuracy of ``model`` at every depth N in ``depths`` and adaptively.

    Returns ``{"depths", "accuracy", "loss", "outputs"}`` (``loss``: the mean softmax
    cross-entropy in nats, over tokens too for per-token outputs; ``outputs``: the logits
    per depth, NumPy) and, when ``adaptive`` is an :class:`~transflow.Adaptive` (default
    ``Adaptive()``; consistent schemes only; ``None``: no adaptive solve),
    ``adaptive_accuracy``, ``adaptive_loss``, ``adaptive_nfev_mean``/``max`` and
    ``adaptive_outputs``; ``split``: the adaptive solve piece by piece between the jumps
    of θ (:func:`transflow.continuous.solve_adaptive`); ``reading``: how each depth N reads
    θ(t) (:func:`at_depth`; the adaptive solve does not depend on it). ``depths`` may be
    empty beside an adaptive solve (the adaptive solve alone).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import depth_accuracy, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, key=jax.random.key(0))
        >>> r = depth_accuracy(m, jnp.zeros((3, 8, 8)), jnp.zeros(3, jnp.int32), (2, 4),
        ...                    adaptive=None)
        >>> r["depths"], len(r["accuracy"])
        ([2, 4], 2)
    """
    owner = "depth_accuracy"
    model = _check_model(model)
    if reading not in READINGS:
        raise ValueError(f"`reading` must be one of {READINGS}, got {reading!r}.")
    if adaptive is not None:
        adaptive = check_option("adaptive", adaptive, Adaptive, "Adaptive(rtol=1e-5, atol=1e-5)")
    # no depth at all is allowed beside an adaptive solve (the adaptive solve alone)
    depths = check_sequence(
        "depths", depths, owner, example="(4, 8, 16)", nonempty=adaptive is None
    )
    check_number("batch_size", batch_size, owner, lower=0, integer=True, example="128")
    check_flag("split", split, owner)
    x = _check_x(x, owner)
    y = np.asarray(y)
    if y.ndim < 1 or y.shape[0] != x.shape[0] or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"{owner}: `y` must hold integer labels, one per example of `x` ({x.shape[0]}), "
            f"got {y.dtype} of shape {y.shape}."
        )

    def batched(fn):
        outs = [fn(jnp.asarray(x[i : i + batch_size])) for i in range(0, len(x), batch_size)]
        return jax.tree.map(lambda *a: np.concatenate([np.asarray(b) for b in a]), *outs)

    def nll(logits):
        z = logits - logits.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return float(-np.mean(np.take_along_axis(logp, y[..., None].astype(int), -1)))

    out: dict[str, Any] = {
        "depths": [int(n) for n in depths],
        "accuracy": [],
        "loss": [],
        "outputs": [],
    }
    for n in depths:
        m = at_depth(model, int(n), reading)
        logits = batched(lambda xb, m=m: _logits_batch(m, xb))
        out["accuracy"].append(float(np.mean(np.argmax(logits, -1) == y)))
        out["loss"].append(nll(np.asarray(logits, np.float64)))
        out["outputs"].append(logits)
    if adaptive is not None:
        logits, nfev = batched(lambda xb: _adaptive_batch(model, xb, adaptive, split))
        out["adaptive_accuracy"] = float(np.mean(np.argmax(logits, -1) == y))
        out["adaptive_loss"] = nll(np.asarray(logits, np.float64))
        out["adaptive_nfev_mean"] = float(np.mean(nfev))
        out["adaptive_nfev_max"] = int(np.max(nfev))
        out["adaptive_outputs"] = logits
    return out


def depth_loss(
    depths: Sequence[int],
    *,
    smoothness: float = 0.0,
    loss_fn=cross_entropy_loss,
    gradient: str = "backprop",
    checkpoints: int = 4,
    adjoint_solver: str = "euler",
):
    """A loss ``(model, x, y, key) -> (loss, accuracy)`` at a random depth per batch.

    Each call draws N uniformly from ``depths`` with ``key`` and evaluates
    ``loss_fn(at_depth(model, N), x, y)`` (every depth is compiled once, as a branch of
    ``lax.switch``); ``smoothness`` = λ adds λ ∫‖θ'(t)‖² dt of the model's control path.
    One depth (``depths=[4]``) is plain training at that depth. With several depths the
    steps run as a rolled ``lax.scan`` (``FlowModel.unroll=False``): the switch then
    compiles one step body per depth instead of every unrolled step, which halved the
    compile time of digits training with depths {4, 8, 16} (17 → 9 s CPU) and did not
    slow a step (24.5 → 23.6 ms). ``gradient`` (with
    ``checkpoints``, ``adjoint_solver``) is how the gradient goes through the steps
    (:data:`GRADIENTS`, :func:`flow_logits`); with ``"checkpointed"`` or ``"adjoint"``,
    ``loss_fn`` is the mean softmax cross-entropy of :func:`flow_logits`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import depth_loss, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, path="legendre", key=jax.random.key(0))
        >>> loss, acc = depth_loss([2, 4], smoothness=0.1)(
        ...     m, jnp.zeros((2, 8, 8)), jnp.zeros(2, jnp.int32), jax.random.key(1))
        >>> loss.shape
        ()
    """
    owner = "depth_loss"
    depths = [int(n) for n in check_sequence("depths", depths, owner, example="[4, 8, 16]")]
    check_number("smoothness", smoothness, owner, lower=0, strict=False, example="0.0")
    check_callable("loss_fn", loss_fn, owner, "cross_entropy_loss")
    _check_gradient(gradient, checkpoints)
    _check_adjoint_solver(adjoint_solver, owner)
    if gradient != "backprop":
        loss_fn = _flow_loss(gradient, checkpoints, adjoint_solver)

    def loss(model, x, y, key=None):
        params, static = eqx.partition(model, eqx.is_array)

        def branch(n):
            def run(p):
                m = at_depth(eqx.combine(p, static), n)
                if len(depths) > 1:  # rolled loops: one compiled step per branch
                    m = dataclasses.replace(m, unroll=False)
                return loss_fn(m, x, y)

            return run

        if len(depths) == 1 or key is None:
            value, acc = branch(depths[0])(params)
        else:
            i = jax.random.randint(key, (), 0, len(depths))
            value, acc = jax.lax.switch(i, [branch(n) for n in depths], params)
        if smoothness and model.is_path:
            value = value + smoothness * model.controls.smoothness()
        return value, acc

    return loss


class _SchemeStep(eqx.Module):
    """One step of ``scheme`` on a batch of states from t0 to t1, with θ the path at the
    step's midpoint (``nodes=None``) or at each stage node t0 + c(t1 − t0), read from
    inside the step (:meth:`~transflow.continuous.ControlPath.at_nodes`): the one-step map
    of :func:`~transflow._integrate.solve_steps`, whose ``args`` are ``(path, grid)``
    (arrays travel as arguments, never closed over, as ``BacksolveAdjoint`` needs)."""

    scheme: Any
    nodes: tuple[float, ...] | None = eqx.field(static=True, default=None)

    def __call__(self, t0, t1, y0, args):
        path, grid = args
        if self.nodes is None:
            theta = path(t0 + 0.5 * (t1 - t0))
        else:
            sets = [
                path.left_limit(t1) if c == 1.0 else path(t0 + c * (t1 - t0)) for c in self.nodes
            ]
            theta = jax.tree.map(lambda *xs: jnp.stack(xs), *sets)
        return jax.vmap(lambda u: self.scheme.step(u, theta, t1 - t0, grid=grid))(y0)


def _step_nodes(model: FlowModel) -> tuple[float, ...] | None:
    """The stage nodes at which :func:`flow_logits` reads a path model's θ (as its
    ``step_controls`` do), or ``None`` for the step midpoint."""
    nodes = tuple(float(c) for c in model.scheme.nodes)
    return nodes if model.is_path and model.theta_at == "nodes" and nodes != (0.5,) else None


def _check_gradient(gradient, checkpoints=1) -> None:
    if gradient not in GRADIENTS:
        raise ValueError(
            f"`gradient` must be one of {GRADIENTS}, got {gradient!r}; 'checkpointed' and "
            "'adjoint' keep the memory of a gradient independent of the number of steps."
        )
    if isinstance(checkpoints, bool) or not isinstance(checkpoints, int) or checkpoints < 1:
        raise ValueError(
            f"`checkpoints` (states stored by the checkpointed gradient) must be an integer "
            f">= 1, got {checkpoints!r}."
        )


def flow_logits(
    model: FlowModel,
    x,
    *,
    gradient: str = "checkpointed",
    checkpoints: int = 4,
    adjoint_solver: str = "euler",
):
    """Logits of a batch ``x`` with the model's N steps run inside ``diffrax.diffeqsolve``.

    The forward value is the model's (``jax.vmap(model)(x)``: N steps of its scheme, θ
    read as the model reads it (``theta_at``), up to round-off); ``gradient`` chooses how
    reverse mode goes through the steps (:data:`GRADIENTS`): ``"checkpointed"`` stores
    ``checkpoints`` states and recomputes the others (the exact gradient of the N steps),
    ``"adjoint"`` solves the continuous adjoint backwards with N steps of
    ``adjoint_solver`` (``"euler"``, ``"heun"`` or ``"tsit5"``, fixed steps; the adjoint
    needs a consistent scheme, as :func:`~transflow.continuous.vector_field`), and
    ``"backprop"`` is ``jax.vmap(model)(x)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import PreNormScheme
        >>> from transflow.control import flow_logits, make_vit
        >>> m = make_vit(d=8, n_steps=3, n_heads=1, path="linear", scheme=PreNormScheme(),
        ...              key=jax.random.key(0))
        >>> x = jax.random.uniform(jax.random.key(1), (2, 8, 8))
        >>> a = flow_logits(m, x, gradient="adjoint")
        >>> a.shape, bool(jnp.allclose(a, jax.vmap(m)(x), atol=1e-5))
        ((2, 10), True)
    """
    import diffrax

    model = _check_model(model)
    _check_gradient(gradient, checkpoints)
    solvers = {"euler": diffrax.Euler, "heun": diffrax.Heun, "tsit5": diffrax.Tsit5}
    _check_adjoint_solver(adjoint_solver, "flow_logits")
    x = _check_x(x, "flow_logits")
    if gradient == "backprop":
        return _logits_batch_plain(model, x)
    path = _path_of(model)
    n = model.n_steps if model.is_path else _leading_size(model.controls)
    t0, t1 = path.interval
    grid = model.embed.grid()
    u0 = jax.vmap(model.embed)(jnp.asarray(x))
    if gradient == "checkpointed":
        adjoint = diffrax.RecursiveCheckpointAdjoint(checkpoints=checkpoints)
    else:
        check_consistent(model.scheme)
        adjoint = diffrax.BacksolveAdjoint(
            solver=solvers[adjoint_solver](),
            stepsize_controller=diffrax.ConstantStepSize(),
            dt0=-float(t1 - t0) / n,  # a Python float: the adjoint's options are static
            max_steps=n + 2,
        )

    def rhs(t, u, args):
        f = vector_field(model.scheme, args[0], grid=args[1])
        return jax.vmap(lambda ui: f(t, ui))(u)

    u_T = solve_steps(
        _SchemeStep(model.scheme, _step_nodes(model)),
        rhs,
        u0,
        (t0, t1),
        n,
        (path, grid),
        adjoint=adjoint,
    )
    return jax.vmap(model.readout)(u_T)


def _leading_size(tree) -> int:
    return int(jax.tree.leaves(eqx.filter(tree, eqx.is_array))[0].shape[0])


def _logits_batch_plain(model, x):
    return jax.vmap(model)(x)


def _flow_loss(gradient, checkpoints, adjoint_solver):
    import optax

    def loss_fn(model, x, y, key=None):
        logits = flow_logits(
            model, x, gradient=gradient, checkpoints=checkpoints, adjoint_solver=adjoint_solver
        )
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        acc = jnp.mean(jnp.argmax(logits, axis=-1).astype(y.dtype) == y)
        return loss, acc

    return loss_fn


def _preactivation_signs(v, c, ops):
    """``pre > 0`` for every activated FFN pre-activation of state ``v`` (controls ``c``,
    pre-LN: the FFN reads ``P_{S1'}(v)``), flattened (tokens × units × sub-steps)."""
    ffn = c.ffn
    act = activation_fn(ffn.activation)
    z = ops.project(v, c.norm2)
    signs = []
    last = ffn.num_substeps - 1
    for j in range(ffn.num_substeps):
        z = _ffn_substep(z, ffn, j, 1.0, ops.linear)
        if j < last or ffn.activation_on_last:
            signs.append((z > 0).reshape(-1))
            z = act(z)
    return jnp.concatenate(signs)


def kink_straddles(
    model: FlowModel,
    x,
    n_steps: int,
    *,
    method: str = "heun",
    reading: Reading = "right",
) -> dict[str, Any]:
    """How often the stages of an explicit Runge–Kutta step straddle a kink of the FFN.

    ``model`` is stepped N = ``n_steps`` times (its controls read at the steps as by
    :func:`at_depth` with ``reading``, one set per step as the model runs them) by the
    Runge–Kutta ``method`` (a name of :data:`transflow.TABLEAUS`) on the pre-LN field
    f(v) = 𝒜(P_{S1}v) + ℱ(P_{S1'}v) (:class:`~transflow.RungeKuttaScheme`,
    ``field="parallel"``: for ``"heun"`` the steps of ``RungeKuttaScheme("heun")``,
    stages v₁ = u_n and v₂ = u_n + Δt f(v₁)). A step **straddles a kink** when some FFN
    pre-activation (any token, unit or activated sub-step of ``P_{S1'}v`` through the
    FFN) has another sign at one stage state than at the first: with ReLU, f is then not
    C¹ on the segment the step samples, and the step's local error is O(Δt²) instead of
    the order-2 method's O(Δt³). The signs are counted whatever the activation (with
    GELU they mark where ReLU's kink would be; the field is smooth there).

    Returns ``{"fraction", "per_step", "features"}``: the fraction of (example, step)
    pairs that straddle, its value per step (mean over the examples, length N) and the
    final states (examples × tokens × d: the model's own features at that depth when
    its scheme is ``RungeKuttaScheme(method)``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import RungeKuttaScheme
        >>> from transflow.control import kink_straddles, make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, scheme=RungeKuttaScheme("heun"),
        ...              key=jax.random.key(0))
        >>> r = kink_straddles(m, jax.random.normal(jax.random.key(1), (4, 8, 8)), 4)
        >>> 0.0 <= r["fraction"] <= 1.0, r["per_step"].shape
        (True, (4,))
    """
    owner = "kink_straddles"
    model = _check_model(model)
    x = _check_x(x, owner)
    check_number("n_steps", n_steps, owner, lower=0, integer=True, example="8")
    check_choice("method", method, tuple(TABLEAUS))
    if reading not in READINGS:
        raise ValueError(f"`reading` must be one of {READINGS}, got {reading!r}.")
    scheme = RungeKuttaScheme(method)
    # θ read as the model reads it with this scheme (theta_at): one set per stage node, or
    # one set per step (midpoint, or the average reading) used by every stage
    deep = at_depth(dataclasses.replace(model, scheme=scheme), int(n_steps), reading)
    controls, dt = deep.step_controls()
    tab = scheme.tableau
    staged = model.theta_at == "nodes" and tab.nodes != (0.5,) and reading != "average"
    grid = model.embed.grid()
    ops = DenseOperators(grid)

    def one(xx):
        def step(u, c):
            ks, signs = [], []
            for i, row in enumerate(tab.a):
                j = tab.nodes.index(tab.c[i])
                ci = jax.tree.map(lambda a, j=j: a[j], c) if staged else c
                f = scheme.sub_fields(ci, ops, "prenorm")
                v = u
                for aij, kj in zip(row, ks):
                    if aij:
                        v = v + (dt * aij) * kj
                signs.append(_preactivation_signs(v, ci, ops))
                ks.append(f.attn(v) + f.ffn(v))
            out = u
            for bi, ki in zip(tab.b, ks):
                if bi:
                    out = out + (dt * bi) * ki
            crossed = jnp.any(jnp.stack([jnp.any(s != signs[0]) for s in signs[1:]]))
            return out, crossed

        return jax.lax.scan(step, model.embed(xx), controls)

    features, crossed = jax.jit(jax.vmap(one))(jnp.asarray(x))
    crossed = np.asarray(crossed, np.float64)  # examples × steps
    return {
        "fraction": float(crossed.mean()),
        "per_step": crossed.mean(0),
        "features": np.asarray(features),
    }

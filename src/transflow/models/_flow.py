"""A small continuous model for training: embedding f → split-scheme evolution → read-out.

Training is the optimal-control problem of docs/spec/continuous-model.md §5,

    min_θ (1/B) Σ_i ℓ(R(u_i(T)), v_i)   s.t.   u_i(T) = evolution of f(u_i) over [0, T],

where the embedding f produces the initial condition u(x, y, 0) on the token grid, the
controls θ(t) are the stacked :class:`~transflow.LayerControls`, and the read-out R maps the
final state to logits. Embedding and read-out are part of f and ℓ (docs/spec/continuous-model.md §5,
[R]).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .._activations import activation_fn
from .._controls import LayerControls, stack_controls
from .._errors import (
    as_input,
    check_array,
    check_builder,
    check_number,
    check_step,
    check_values,
)
from .._evolve import evolve
from .._grid import Grid
from .._integrate import ConstantSteps, Remat, RematMode
from .._paths import ControlPath, init_path
from ..schemes._base import AbstractScheme
from ..schemes._lie import LieScheme
from ..schemes._registry import stage_controls
from ._vit import patchify as vision_patchify

ThetaAt = Literal["nodes", "midpoint"]
THETA_AT: tuple[str, ...] = ("nodes", "midpoint")
"""Where a path model's step reads θ(t) (:class:`FlowModel`'s ``theta_at``)."""

__all__ = ["PatchEmbedding", "TokenEmbedding", "FlowModel", "patchify", "make_vit", "make_seq"]

Pool = Literal["cls", "mean", "tokens"]


def patchify(image: Float[Array, "h w"], patch: int) -> Float[Array, "n p2"]:
    """Cut an ``(h, w)`` image into non-overlapping ``patch × patch`` patches, row-major.

    Returns ``(h/patch · w/patch, patch²)``: token i is patch (i // (w/patch), i % (w/patch)).
    """
    check_array("image", image, ndim=2)
    check_number("patch", patch, "patchify", lower=0, integer=True, example="2")
    h, w = image.shape
    if h % patch or w % patch:
        raise ValueError(f"`patch`={patch} must divide the image shape {(h, w)}.")
    return vision_patchify(image[None], patch)  # one channel: entries (row, column)


class PatchEmbedding(eqx.Module):
    """ViT-style initial condition f for images (docs/spec/continuous-model.md §4.2, [R]).

    ``f = [x_cls ; P E + b] + E_pos``: the image is cut into patches on a 2-D token grid
    (row-major), each patch is mapped linearly to d features, an optional learned class
    token is prepended and a learned position embedding is added.

    Attributes:
        weight: ``(patch², d)`` patch embedding E.
        bias: ``(d,)``.
        cls_token: ``(d,)`` or ``None`` (mean-pool read-out).
        pos: ``(n_tokens, d)`` position embedding (n_tokens includes the class token).
        image_shape, patch: static geometry.
    """

    weight: Float[Array, "p2 d"]
    bias: Float[Array, " d"]
    cls_token: Float[Array, " d"] | None
    pos: Float[Array, "n d"]
    image_shape: tuple[int, int] = eqx.field(static=True)
    patch: int = eqx.field(static=True)

    def __check_init__(self):
        owner = "PatchEmbedding"
        check_number("patch", self.patch, owner, lower=0, integer=True, example="2")
        shape = self.image_shape
        if (
            not isinstance(shape, tuple | list)
            or len(shape) != 2
            or any(
                isinstance(s, bool) or not isinstance(s, int | np.integer) or s < self.patch
                for s in shape
            )
            or any(s % self.patch for s in shape)
        ):
            raise ValueError(
                f"{owner}: `image_shape` must be (h, w) with sides divisible by patch = "
                f"{self.patch}, got {shape!r:.40}."
            )
        p2, d = check_values("weight", self.weight, owner, ndim=2).shape
        if p2 != self.patch * self.patch:
            raise ValueError(
                f"{owner}: `weight` must have patch² = {self.patch**2} rows, got {p2}."
            )
        check_values("bias", self.bias, owner, shape=(d,))
        if self.cls_token is not None:
            check_values("cls_token", self.cls_token, owner, shape=(d,))
        n = (shape[0] // self.patch) * (shape[1] // self.patch) + (self.cls_token is not None)
        check_values("pos", self.pos, owner, shape=(n, d))

    @property
    def token_shape(self) -> tuple[int, int]:
        return self.image_shape[0] // self.patch, self.image_shape[1] // self.patch

    def grid(self) -> Grid:
        """The token grid Ω_x: the 2-D patch grid (``Grid.image``), plus a node for the
        class token when there is one (all quadrature weights 1, the paper's Δx = 1)."""
        h, w = self.token_shape
        d = self.weight.shape[-1]
        g = Grid.image(h, w, d, dtype=self.weight.dtype)
        if self.cls_token is None:
            return g
        nodes = jnp.concatenate([jnp.full((1, 2), -1.0, g.x_nodes.dtype), g.x_nodes])
        return Grid(nodes, jnp.ones(h * w + 1, g.x_weights.dtype), g.y_nodes, g.y_weights)

    def __call__(self, image: Float[Array, "h w"]) -> Float[Array, "n d"]:
        image = as_input("image", image, self.weight.dtype, ndim=2)
        if tuple(image.shape) != tuple(self.image_shape):
            raise ValueError(
                f"PatchEmbedding: `image` must have shape {self.image_shape}, got "
                f"{tuple(image.shape)}."
            )
        tokens = patchify(image.astype(self.weight.dtype), self.patch) @ self.weight + self.bias
        if self.cls_token is not None:
            tokens = jnp.concatenate([self.cls_token[None], tokens])
        return tokens + self.pos


class TokenEmbedding(eqx.Module):
    """Initial condition f for integer sequences: ``f = E[token] + E_pos`` on a 1-D grid.

    Attributes:
        table: ``(vocab, d)`` token embedding.
        pos: ``(length, d)`` learned position embedding.
    """

    table: Float[Array, "vocab d"]
    pos: Float[Array, "n d"]

    def __check_init__(self):
        table = check_values("table", self.table, "TokenEmbedding", ndim=2)
        check_values("pos", self.pos, "TokenEmbedding", shape=(None, table.shape[1]))

    def grid(self) -> Grid:
        """The 1-D index token grid (Δx = Δy = 1)."""
        return Grid.index(self.pos.shape[0], self.pos.shape[1], dtype=self.pos.dtype)

    def __call__(self, tokens: Int[Array, " n"]) -> Float[Array, "n d"]:
        tokens = as_input("tokens", tokens, ndim=1, floating=False)
        if tokens.shape != self.pos.shape[:1]:
            raise ValueError(
                f"TokenEmbedding: `tokens` must have shape ({self.pos.shape[0]},), got "
                f"{tuple(tokens.shape)}."
            )
        return self.table[tokens] + self.pos


class FlowModel(eqx.Module):
    """Embedding → N_t steps of a splitting scheme → linear read-out.

    ``model(x)`` acts on one example (batch with ``jax.vmap``):

    1. ``u0 = embed(x)``, shape ``(n_tokens, d)`` (the initial condition f);
    2. ``uT = evolve(u0, controls, scheme, dt=dt, grid=embed.grid())`` with the chosen
       rematerialisation (``"none"``, ``"step"`` = ``jax.checkpoint`` per step,
       ``"nested"`` = √N_t two-level checkpointing; ``remat`` of :func:`transflow.evolve`); the
       forward value is the same for all three; ``unroll`` is :func:`transflow.evolve`'s
       layer loop (``"auto"``, ``True``, ``False`` or steps per iteration);
    3. ``pool`` reads out the class token (``"cls"``), the token mean
       ``∫_Ω_x u(x,·,T) dx / |Ω_x|`` (``"mean"``) or every token (``"tokens"``), followed
       by the linear head ``z @ head_w + head_b``.

    With the paper's :class:`~transflow.LieScheme` every step ends with the projection
    onto S1 (LayerNorm), so the read-out needs no extra normalisation.

    ``controls`` is either the stacked per-layer :class:`~transflow.LayerControls` (N_t =
    their number, step ``dt``) or a :class:`~transflow.continuous.ControlPath` θ(t),
    read on ``n_steps`` uniform steps of its interval (``dt`` is then the path's
    ``step_size(n_steps)``); :func:`transflow.control.at_depth` evaluates either kind with
    any number of steps. ``theta_at`` says where a step reads θ(t): ``"nodes"`` (default)
    at the scheme's stage nodes (:func:`transflow.stage_controls`: θ at the midpoint for a
    one-node scheme, at t_n and t_n + Δt for Heun, …; keeps a Runge–Kutta scheme's order
    for a smooth θ), ``"midpoint"`` θ at the step midpoint for every stage (θ frozen over
    the step: second order at most, so RK4 falls to order 2 on a time-varying θ; the
    reading of transflow ≤ 0.x's path models and of the depth study, which declares it).
    The two agree for one-node schemes and for stacked per-layer controls.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import make_vit
        >>> model = make_vit(d=16, n_steps=2, n_heads=2, key=jax.random.key(0))
        >>> model(jnp.zeros((8, 8))).shape
        (10,)
    """

    embed: PatchEmbedding | TokenEmbedding
    controls: LayerControls | ControlPath
    head_w: Float[Array, "d c"]
    head_b: Float[Array, " c"]
    scheme: AbstractScheme = LieScheme()
    dt: float = eqx.field(static=True, default=1.0)
    pool: Pool = eqx.field(static=True, default="mean")
    remat: RematMode = eqx.field(static=True, default="step")
    n_steps: int | None = eqx.field(static=True, default=None)
    unroll: bool | int | str = eqx.field(static=True, default="auto")
    theta_at: ThetaAt = eqx.field(static=True, default="nodes")

    def __check_init__(self):
        check_step("dt", self.dt, "FlowModel")
        if self.theta_at not in THETA_AT:
            raise ValueError(
                f"FlowModel: `theta_at` must be one of {THETA_AT}, got {self.theta_at!r}."
            )
        if isinstance(self.controls, ControlPath):
            n = self.n_steps
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(
                    f"FlowModel: a ControlPath needs `n_steps` (an int >= 1, the time steps "
                    f"it is evaluated with), got {n!r}."
                )
        elif self.n_steps is not None:
            raise ValueError(
                "FlowModel: `n_steps` is for ControlPath controls; stacked controls have "
                f"one step per layer. Got n_steps={self.n_steps!r}; use at_depth() instead."
            )
        if self.pool not in ("cls", "mean", "tokens"):
            raise ValueError(f"`pool` must be 'cls', 'mean' or 'tokens', got {self.pool!r}.")
        if self.remat not in ("none", "step", "nested"):
            raise ValueError(f"`remat` must be 'none', 'step' or 'nested', got {self.remat!r}.")
        if self.pool == "cls" and not (
            isinstance(self.embed, PatchEmbedding) and self.embed.cls_token is not None
        ):
            raise ValueError("`pool='cls'` needs a PatchEmbedding with a class token.")

    @property
    def is_path(self) -> bool:
        """Whether the controls are a :class:`~transflow.continuous.ControlPath`."""
        return isinstance(self.controls, ControlPath)

    def layer_controls(self) -> tuple[LayerControls, float]:
        """``(stacked controls, Δt)`` of the steps the model runs."""
        if self.is_path:
            return self.controls.sample(self.n_steps), self.controls.step_size(self.n_steps)
        return self.controls, self.dt

    def step_controls(self) -> tuple[LayerControls, float]:
        """``(controls, Δt)`` that the evolution runs: :meth:`layer_controls`, except that
        a path model with ``theta_at="nodes"`` reads θ at its scheme's stage nodes
        (:func:`transflow.stage_controls`; stacked ``(N, n_nodes, …)`` for a Runge–Kutta
        scheme)."""
        if self.is_path and self.theta_at == "nodes":
            path = self.controls
            return stage_controls(path, self.scheme, self.n_steps), path.step_size(self.n_steps)
        return self.layer_controls()

    def discretized(self) -> FlowModel:
        """The same model with stacked controls (a path sampled at its ``n_steps``)."""
        if not self.is_path:
            return self
        controls, dt = self.step_controls()
        return dataclasses.replace(self, controls=controls, dt=dt, n_steps=None)

    def features(self, x) -> Float[Array, "n d"]:
        """The final state u(·, ·, T) for one example."""
        u0 = self.embed(x)
        controls, dt = self.step_controls()
        return evolve(
            u0,
            controls,
            self.scheme,
            remat=Remat(self.remat),
            stepsize_controller=ConstantSteps(unroll=self.unroll),
            dt=dt,
            grid=self.embed.grid(),
        )

    def readout(self, u: Float[Array, "n d"]) -> Float[Array, "*n c"]:
        """The pooled linear read-out of a final state ``u``."""
        if self.pool == "cls":
            z = u[0]
        elif self.pool == "mean":
            w = self.embed.grid().x_weights
            z = (w @ u) / jnp.sum(w)
        else:
            z = u
        return z @ self.head_w + self.head_b

    def __call__(self, x) -> Float[Array, "*n c"]:
        return self.readout(self.features(x))


def _controls(d, n_steps, n_heads, d_ff, dtype, key, ffn_copies=1, activation="relu"):
    keys = jax.random.split(key, n_steps)
    kw = dict(n_heads=n_heads, d_ff=d_ff, dtype=dtype, ffn_copies=ffn_copies)
    kw["activation"] = activation  # a static field of the FFN: the draws do not depend on it
    stacked = stack_controls([LayerControls.random(d, **kw, key=k) for k in keys])
    # LayerControls.random scales by a NumPy float64 scalar, which promotes float32 kernels
    # to float64 when x64 is on; cast back so the model has the dtype that was asked for.
    return jax.tree.map(lambda x: x.astype(dtype), stacked)


def make_vit(
    *,
    d: int = 32,
    n_steps: int = 4,
    n_heads: int = 2,
    d_ff: int | None = None,
    patch: int = 2,
    image_shape: tuple[int, int] = (8, 8),
    n_classes: int = 10,
    pool: Pool = "mean",
    scheme: AbstractScheme | None = None,
    dt: float = 1.0,
    remat: RematMode = "step",
    path: str | None = None,
    path_size: int | None = None,
    smooth_init: bool = True,
    activation: str = "relu",
    theta_at: ThetaAt = "nodes",
    dtype=jnp.float32,
    key: PRNGKeyArray,
) -> FlowModel:
    """A small ViT-style continuous classifier for (8×8) images.

    ``d_ff=None`` uses the paper's square FFN (W_j : Ω_y → Ω_y, residual sub-steps);
    an integer uses lifting maps to a hidden domain of that width (docs/spec/continuous-model.md Q6
    extension). ``pool="cls"`` adds a class token; ``"mean"`` averages the final state over Ω_x.

    ``path=None`` gives today's stacked per-layer controls. A name of
    :data:`~transflow.continuous.PATH_KINDS` gives a
    :class:`~transflow.continuous.ControlPath` on ``[0, n_steps·dt]`` with ``path_size``
    = K pieces/knots/basis functions/frequencies (default ``n_steps``), evaluated with
    ``n_steps`` steps; ``smooth_init`` starts it constant in t (see
    :func:`~transflow.continuous.init_path`). ``activation``: the FFN's activation
    (:class:`~transflow.FFNParams`; ``"relu"``, the paper's projection onto S2, or a smooth
    one such as ``"gelu"``); the random draws do not depend on it. ``theta_at``: where a
    path model's step reads θ(t) (:class:`FlowModel`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import make_vit
        >>> m = make_vit(d=8, n_steps=2, n_heads=1, path="legendre", path_size=3,
        ...              key=jax.random.key(0))
        >>> type(m.controls).__name__, m.n_steps, m(jnp.zeros((8, 8))).shape
        ('BasisExpansion', 2, (10,))
    """
    check_builder(
        "make_vit",
        dt=dt,
        key=key,
        d=d,
        n_steps=n_steps,
        n_heads=n_heads,
        d_ff=d_ff,
        patch=patch,
        n_classes=n_classes,
        path_size=path_size,
    )
    activation_fn(activation)  # refuses an unknown name, naming `activation`
    if len(tuple(image_shape)) != 2 or any(s < patch or s % patch for s in image_shape):
        raise ValueError(
            f"make_vit: `image_shape` must be (h, w) with sides divisible by patch = {patch}, "
            f"got {image_shape!r}."
        )
    h, w = image_shape
    n_tok = (h // patch) * (w // patch) + (pool == "cls")
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    p2 = patch * patch
    embed = PatchEmbedding(
        weight=jax.random.normal(k1, (p2, d), dtype) / float(np.sqrt(p2)),
        bias=jnp.zeros((d,), dtype),
        cls_token=0.02 * jax.random.normal(k2, (d,), dtype) if pool == "cls" else None,
        pos=0.02 * jax.random.normal(k3, (n_tok, d), dtype),
        image_shape=(h, w),
        patch=patch,
    )
    controls = _layer_or_path_controls(
        d,
        n_steps,
        n_heads,
        d_ff,
        dtype,
        k4,
        path,
        path_size,
        dt,
        smooth_init,
        _ffn_copies(scheme),
        activation,
    )
    head_w = jax.random.normal(k5, (d, n_classes), dtype) / float(np.sqrt(d))
    return FlowModel(
        embed,
        controls,
        head_w,
        jnp.zeros((n_classes,), dtype),
        LieScheme() if scheme is None else scheme,
        dt,
        pool,
        remat,
        None if path is None else n_steps,
        theta_at=theta_at,
    )


def _one_layer(d, n_heads, d_ff, dtype, key, ffn_copies=1, activation="relu"):
    """One layer's controls (as ``_controls`` draws them, without the layer axis)."""
    one = _controls(d, 1, n_heads, d_ff, dtype, key, ffn_copies, activation)
    return jax.tree.map(lambda a: a[0], one)


def _ffn_copies(scheme) -> int:
    """How many FFNs the controls of ``scheme`` hold (:attr:`AbstractScheme.ffn_copies`)."""
    return 1 if scheme is None else int(scheme.ffn_copies)


def _layer_or_path_controls(
    d,
    n_steps,
    n_heads,
    d_ff,
    dtype,
    key,
    path,
    path_size,
    dt,
    smooth,
    ffn_copies=1,
    activation="relu",
):
    """Per-layer controls (``path=None``) or a control path of kind ``path`` on [0, n_steps·dt]
    with ``path_size`` (default ``n_steps``) knots/basis functions, drawn layer-like
    (``ffn_copies`` FFNs per layer: the scheme's, :func:`_ffn_copies`)."""
    if path is None:
        return _controls(d, n_steps, n_heads, d_ff, dtype, key, ffn_copies, activation)
    return init_path(
        path,
        lambda k: _one_layer(d, n_heads, d_ff, dtype, k, ffn_copies, activation),
        n_steps if path_size is None else path_size,
        key=key,
        t0=0.0,
        t1=n_steps * dt,
        smooth=smooth,
    )


def make_seq(
    *,
    vocab: int,
    length: int,
    n_out: int | None = None,
    d: int = 32,
    n_steps: int = 2,
    n_heads: int = 2,
    d_ff: int | None = None,
    scheme: AbstractScheme | None = None,
    dt: float = 1.0,
    remat: RematMode = "step",
    dtype=jnp.float32,
    key: PRNGKeyArray,
) -> FlowModel:
    """A continuous sequence-to-sequence model (per-token read-out) on a 1-D token grid."""
    check_builder(
        "make_seq",
        dt=dt,
        key=key,
        vocab=vocab,
        length=length,
        n_out=n_out,
        d=d,
        n_steps=n_steps,
        n_heads=n_heads,
        d_ff=d_ff,
    )
    k1, k2, k3, k4 = jax.random.split(key, 4)
    n_out = vocab if n_out is None else n_out
    embed = TokenEmbedding(
        jax.random.normal(k1, (vocab, d), dtype), jax.random.normal(k2, (length, d), dtype)
    )
    controls = _controls(d, n_steps, n_heads, d_ff, dtype, k3, _ffn_copies(scheme))
    head_w = jax.random.normal(k4, (d, n_out), dtype) / float(np.sqrt(d))
    return FlowModel(
        embed,
        controls,
        head_w,
        jnp.zeros((n_out,), dtype),
        LieScheme() if scheme is None else scheme,
        dt,
        "tokens",
        remat,
    )

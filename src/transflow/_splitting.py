"""Operator-splitting schemes: one time step of the continuous model = one layer.

The continuous model (docs/spec/continuous-model.md §2.5, sign convention of the toolkit)

    0 ∈ u_t − 𝒜(t; u) − Σ_j (𝒲_j(t) u + b_j(t)) + N_{S1(σ1, σ2)}(u) + N_{S2}(u)

is split into M = 4 + J sub-problems per time step (docs/spec/continuous-model.md §3.2,
:class:`LieScheme`):

1. attention, explicit Euler:       u¹ = u⁰ + Δt 𝒜(u⁰)
2. projection onto S1:              u² = P_{S1}(u¹)           (implicit; Δt-independent)
3..2+J. FFN sub-steps:              Z ← Z + Δt(Z W_j + b_j), then P_{S2} for j < J
3+J. relaxation (skip connection):  u^{3+J} = ½ (u^{2+J} + u²)
4+J. projection onto S1:            u^{n+1} = P_{S1}(u^{3+J})

With Δt = 1 this is exactly one post-LN Transformer encoder layer (docs/spec/continuous-model.md
§3.5).

A scheme is a small immutable object with a ``step`` method; schemes carry options (such
as the FFN branch time step of docs/spec/continuous-model.md §3.2) but no state.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Literal

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float

from ._controls import FFNParams, LayerControls, NormParams, num_steps
from ._errors import as_input, check_choice, check_finite, param_dtype
from ._execution import Adaptive, ConstantSteps, Remat, SaveAt
from ._grid import Grid
from ._operators import Implementation, activation_fn, attention, project_s1, wmul

if TYPE_CHECKING:
    from .continuous._paths import ControlPath

__all__ = ["AbstractScheme", "LieScheme", "PreNormScheme", "RematMode", "evolve", "ffn_branch"]

Substeps = dict[str, Float[Array, "n d"]]

#: Rematerialisation of :func:`evolve` in reverse mode: ``"none"``, ``"step"``
#: (``jax.checkpoint`` per step) or ``"nested"`` (two-level √N_t checkpointing).
RematMode = Literal["none", "step", "nested"]


def _project(v, norm: NormParams, grid: Grid | None, eps_scale: float = 1.0):
    return project_s1(
        v,
        norm.bias,
        norm.gain,
        eps=norm.eps * eps_scale,
        y_weights=None if grid is None else grid.y_weights,
    )


def _ffn_substep(z: Float[Array, "n d"], ffn: FFNParams, j: int, dt: float | Array):
    """FFN sub-step ``j`` without its activation: ``Z + dt (Z W_j + b_j)`` (residual) or
    ``Z W_j + b_j`` (lifting). Shared by :func:`ffn_branch` and ``transflow.continuous``."""
    lin = wmul(z, ffn.weights[j]) + ffn.biases[j]
    return z + dt * lin if ffn.residual[j] else lin


def _masks(key_padding_mask, attention_mask) -> dict:
    """The mask keywords that are set (none: the unmasked call, unchanged)."""
    out = {}
    if key_padding_mask is not None:
        out["key_padding_mask"] = key_padding_mask
    if attention_mask is not None:
        out["attention_mask"] = attention_mask
    return out


def check_masks(scheme, u, n_heads, key_padding_mask, attention_mask) -> dict:
    """Validate per-sequence masks for ``u`` before any compilation; the set keywords."""
    masks = _masks(key_padding_mask, attention_mask)
    if not masks:
        return masks
    import inspect

    from ._masks import check_attention_mask, check_key_padding_mask

    n = u.shape[0]
    check_key_padding_mask(key_padding_mask, n)
    check_attention_mask(attention_mask, n, n, n_heads)
    params = inspect.signature(scheme.step).parameters
    missing = [k for k in masks if k not in params]
    if missing:
        raise TypeError(
            f"{type(scheme).__name__}.step does not take {missing[0]}=; masks are supported "
            "by LieScheme, PreNormScheme and CausalScheme (and schemes whose step accepts "
            "key_padding_mask/attention_mask)."
        )
    return masks


def ffn_branch(
    z: Float[Array, "n d"], ffn: FFNParams, dt: float | Array = 1.0, *, record: bool = False
):
    """Run the J FFN sub-steps on ``z``; returns the branch output (and sub-step states).

    Residual sub-steps are explicit Euler steps ``Z + dt (Z W + b)``; lifting sub-steps
    are ``Z W + b``. The activation (for ReLU: the projection onto S2) follows every
    sub-step but the last, or every sub-step if ``ffn.activation_on_last``.
    """
    act = activation_fn(ffn.activation)
    J = ffn.num_substeps
    states = []
    for j in range(J):
        z = _ffn_substep(z, ffn, j, dt)
        if j < J - 1 or ffn.activation_on_last:
            z = act(z)
        states.append(z)
    return (z, states) if record else z


class AbstractScheme(eqx.Module):
    """A splitting scheme: maps (u at tⁿ, controls θⁿ, Δt) to u at tⁿ⁺¹."""

    def step(
        self,
        u: Float[Array, "n d"],
        controls: LayerControls,
        dt: float | Array = 1.0,
        *,
        grid: Grid | None = None,
        causal: bool = False,
        return_substeps: bool = False,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ):
        """One step. Schemes that take masks accept ``key_padding_mask`` (True = padded)
        and ``attention_mask`` (True = may attend, or additive float) and pass them to
        every attention sub-step (see :func:`transflow.attention`); a scheme without
        these keywords is refused by :func:`evolve` when masks are given."""
        raise NotImplementedError

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        raise NotImplementedError


class LieScheme(AbstractScheme):
    """The paper's sequential (Lie) splitting, M = 4 + J sub-steps (docs/spec/continuous-model.md
    §3.2).

    Options:
        ffn_branch_dt: ``"dt"`` (paper-literal: the FFN sub-steps use Δt) or ``"2dt"``
            (the consistent parallel reading of the ½ relaxation, docs/spec/continuous-model.md §3.2
            / Q10: the FFN branch of a K = 2 parallel splitting runs with 2Δt). Irrelevant for
            lifting sub-steps, which have no Δt.
        hardmax, temperature: attention kernel options (see :func:`attention_weights`).
        implementation: how the attention operator is evaluated, ``"auto"`` (default),
            ``"dense"`` or ``"chunked"`` (memory linear in the token grid); see
            :func:`transflow.attention`. The same operator up to round-off.

    The closing projection uses ``ε/4`` when the layer's ``eps = ε > 0``: by LN's scale
    invariance LN_ε(w) = LN_{ε/4}(½ w) (docs/spec/continuous-model.md §8.7), so the scheme
    reproduces PyTorch's post-LN layer for every ε. With ε = 0 (the paper) both are the same
    projection.

    Sub-step names (``return_substeps=True``): ``attention``, ``ln1``, ``ffn1`` …
    ``ffnJ``, ``relax``, ``ln2``.
    """

    ffn_branch_dt: Literal["dt", "2dt"] = eqx.field(static=True, default="dt")
    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)
    implementation: Implementation = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_choice("ffn_branch_dt", self.ffn_branch_dt, ("dt", "2dt"))
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("attention", "ln1", *(f"ffn{j + 1}" for j in range(J)), "relax", "ln2")

    def attention_substep(
        self,
        u,
        attn,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        """Sub-step 1, explicit Euler on attention: ``u + Δt 𝒜(u)`` (masks: see
        :func:`transflow.attention`)."""
        return u + dt * attention(
            u,
            attn,
            grid=grid,
            causal=causal,
            hardmax=self.hardmax,
            temperature=self.temperature,
            implementation=self.implementation,
            **_masks(key_padding_mask, attention_mask),
        )

    @staticmethod
    def norm_substep(v, norm: NormParams, *, grid=None, closing: bool = False):
        """Sub-steps 2 (``closing=False``) and 4+J (``closing=True``, with ε/4): P_S1."""
        return _project(v, norm, grid, eps_scale=0.25 if closing else 1.0)

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        c = controls
        u1 = self.attention_substep(
            u,
            c.attn,
            dt,
            grid=grid,
            causal=causal,
            **_masks(key_padding_mask, attention_mask),
        )
        u2 = self.norm_substep(u1, c.norm1, grid=grid)
        ffn_dt = dt if self.ffn_branch_dt == "dt" else 2 * dt
        z, states = ffn_branch(u2, c.ffn, ffn_dt, record=True)
        u5 = 0.5 * (z + u2)
        u6 = self.norm_substep(u5, c.norm2, grid=grid, closing=True)
        if not return_substeps:
            return u6
        names = self.substep_names(c)
        return u6, dict(zip(names, (u1, u2, *states, u5, u6)))


class PreNormScheme(AbstractScheme):
    """Pre-LN layers (ViT, GPT-2, ``norm_first=True``): an extension, not paper-exact.

    Explicit Euler on the composite operators (docs/spec/continuous-model.md §4.2):

        u¹ = u⁰ + Δt 𝒜(P_{S1}(u⁰)),     u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹)),

    where ℱ is the FFN map (its sub-steps at unit step, additive recombination) and the
    projections use each layer's ``norm1``/``norm2``. There is no closing projection.

    Sub-step names: ``ln1``, ``attention``, ``ln2``, ``ffn1`` … ``ffnJ``, ``residual``.
    ``implementation`` selects the attention evaluation as in :class:`LieScheme`.
    """

    hardmax: bool = eqx.field(static=True, default=False)
    temperature: float = eqx.field(static=True, default=1.0)
    implementation: Implementation = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))

    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        J = controls.ffn.num_substeps
        return ("ln1", "attention", "ln2", *(f"ffn{j + 1}" for j in range(J)), "residual")

    def step(
        self,
        u,
        controls,
        dt=1.0,
        *,
        grid=None,
        causal=False,
        return_substeps=False,
        key_padding_mask=None,
        attention_mask=None,
    ):
        def attend(p1):
            return attention(
                p1,
                controls.attn,
                grid=grid,
                causal=causal,
                hardmax=self.hardmax,
                temperature=self.temperature,
                implementation=self.implementation,
                **_masks(key_padding_mask, attention_mask),
            )

        return pre_ln_step(self, attend, u, controls, dt, grid=grid, record=return_substeps)


def pre_ln_step(scheme, attend, u, controls, dt, *, grid: Grid | None, record: bool):
    """The pre-LN step of :class:`PreNormScheme` with the attention operator ``attend``.

    ``u¹ = u + Δt attend(P_{S1}(u))``, ``u^{n+1} = u¹ + Δt ℱ(P_{S1'}(u¹))`` with the
    projections weighted by ``grid.y_weights``. Shared by every pre-LN scheme (the CvT
    scheme passes its convolutional attention); ``record=True`` also returns the sub-step
    states named by ``scheme.substep_names``.
    """
    c = controls
    p1 = _project(u, c.norm1, grid)
    u1 = u + dt * attend(p1)
    p2 = _project(u1, c.norm2, grid)
    z, states = ffn_branch(p2, c.ffn, 1.0, record=True)
    u2 = u1 + dt * z
    if not record:
        return u2
    return u2, dict(zip(scheme.substep_names(c), (p1, u1, p2, *states, u2)))


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
    remat: Remat | bool | RematMode = False,
    stepsize_controller: ConstantSteps | Adaptive | None = None,
    n_steps: int | None = None,
    attention_implementation: Implementation | None = None,
    key_padding_mask: Bool[Array, " n"] | None = None,
    attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    save_trajectory: bool | None = None,
    remat_chunk: int | None = None,
    unroll: bool | int | Literal["auto"] | None = None,
):
    """Evolve ``u0`` over N_t time steps with stacked controls (``lax.scan``) or a path.

    The problem is given by ``u0``, ``controls``, ``scheme``, ``dt``, ``grid``, ``causal``,
    ``final_norm`` and the masks; how it is computed by three option objects, as diffrax
    groups them (docs/model.md): ``saveat`` (:class:`~transflow.SaveAt`), ``remat``
    (:class:`~transflow.Remat`) and ``stepsize_controller``
    (:class:`~transflow.ConstantSteps`, the default, or :class:`~transflow.Adaptive`). The
    legacy keywords ``save_trajectory``, ``remat=True/"step"/"nested"``, ``remat_chunk``
    and ``unroll`` are still accepted and give identical results; giving a legacy keyword
    together with the object that replaces it is a ``ValueError``.

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
        remat: rematerialisation for reverse mode, a :class:`~transflow.Remat` (see there;
            the forward value is the same for all) or the legacy spelling:
            ``False``/``"none"`` = ``Remat()`` (every sub-step state stored, O(N_t)),
            ``True``/``"step"`` = ``Remat("step")`` (``jax.checkpoint`` per step),
            ``"nested"`` = ``Remat("nested")`` (two-level checkpointing, the N_t steps
            in ⌊N_t/k⌋ chunks of k plus a remainder; ≈ N_t/k + k stored states, ≈ 2√N_t
            at the default k = ⌈√N_t⌉, for about one extra forward pass).
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
        save_trajectory: legacy for ``saveat=SaveAt(steps=save_trajectory)``.
        remat_chunk: legacy for ``remat=Remat("nested", chunk=remat_chunk)`` (steps per
            chunk k of ``remat="nested"``; ``None`` for ⌈√N_t⌉).
        unroll: legacy for ``stepsize_controller=ConstantSteps(unroll=unroll)``. The
            layer loop: ``"auto"`` (the default): unrolled for N_t ≤
            ``AUTO_UNROLL_STEPS`` (8) steps, a rolled ``lax.scan`` above. Unrolling saves
            the scan's stacked residual buffers (zero-filled and sliced on every call),
            about 8-10 % of a training step (docs/performance.md), for a compile time that
            grows with N_t, hence the bound. ``True``/``False`` or a positive int (steps
            per loop iteration) choose explicitly; values and gradients are the same.

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
        >>> u_T, traj = evolve(u0, theta, saveat=SaveAt(steps=True))  # = save_trajectory=True
        >>> traj.shape
        (3, 4, 8)
        >>> evolve(u0, theta, saveat=SaveAt(), save_trajectory=True)
        Traceback (most recent call last):
        ...
        ValueError: `save_trajectory=True` and `saveat=SaveAt()` both set what evolve returns;
        pass only saveat=SaveAt(steps=True).
    """
    saving = _saving(saveat, save_trajectory)
    mode, chunk_option = _remat_option(remat, remat_chunk)
    controller = _controller(stepsize_controller, unroll)
    scheme = LieScheme() if scheme is None else scheme
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    if attention_implementation is not None:
        check_choice(
            "attention_implementation", attention_implementation, ("auto", "dense", "chunked")
        )
        if not hasattr(scheme, "implementation"):
            raise TypeError(
                f"`attention_implementation` needs a scheme with an `implementation` field "
                f"(LieScheme, PreNormScheme); got {type(scheme).__name__}."
            )
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
            saving=saving,
            mode=mode,
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
    save_trajectory = saving
    u0 = as_input(
        "u0",
        u0,
        param_dtype(controls),
        ndim=2,
        shape=(grid.n_tokens if grid is not None else None, controls.d_model),
    )
    n_steps = num_steps(controls)
    chunk = _chunk_size(n_steps, chunk_option)
    unroll = _check_unroll(controller.unroll, n_steps)
    heads = getattr(controls.attn, "n_heads", None)  # CvT: ConvAttentionParams (no masks)
    masks = check_masks(scheme, u0, heads, key_padding_mask, attention_mask)
    u0 = check_finite("u0", u0)

    def body(u, theta):
        u_next = scheme.step(u, theta, dt, grid=grid, causal=causal, **masks)
        return u_next, (u_next if save_trajectory else None)

    if mode == "nested":
        u_T, traj = _scan_nested(jax.checkpoint(body), u0, controls, n_steps, chunk, unroll)
    else:
        step = jax.checkpoint(body) if mode == "step" else body
        u_T, traj = jax.lax.scan(step, u0, controls, unroll=unroll)
    if final_norm is not None:
        u_T = _project(u_T, final_norm, grid)
        if save_trajectory:
            traj = traj.at[-1].set(u_T)
    return (u_T, traj) if save_trajectory else u_T


def _saving(saveat, save_trajectory) -> bool:
    """``SaveAt.steps`` from the new object or the legacy keyword (not both)."""
    if saveat is not None and not isinstance(saveat, SaveAt):
        raise TypeError(
            f"`saveat` must be a transflow.SaveAt (e.g. SaveAt(steps=True)) or None, got "
            f"{type(saveat).__name__}."
        )
    if save_trajectory is None:
        return False if saveat is None else saveat.steps
    if saveat is not None:
        raise ValueError(
            f"`save_trajectory={save_trajectory!r}` and `saveat={saveat!r}` both set what "
            f"evolve returns; pass only saveat=SaveAt(steps={bool(save_trajectory)!r})."
        )
    if not isinstance(save_trajectory, bool):
        raise ValueError(
            f"`save_trajectory` must be True or False, got {save_trajectory!r}; prefer "
            f"saveat=SaveAt(steps=True)."
        )
    return save_trajectory


def _remat_option(remat, remat_chunk) -> tuple[str, int | None]:
    """(mode, chunk) from a :class:`Remat` or the legacy ``remat``/``remat_chunk``."""
    if isinstance(remat, Remat):
        if remat_chunk is not None:
            raise ValueError(
                f"`remat_chunk={remat_chunk!r}` and `remat={remat!r}` both set the "
                f"rematerialisation; pass only remat=Remat('nested', chunk={remat_chunk!r})."
            )
        return remat.mode, remat.chunk
    return _remat_mode(remat), remat_chunk


def _controller(stepsize_controller, unroll):
    """The step-size controller from the new object or the legacy ``unroll`` (not both)."""
    if stepsize_controller is None:
        if unroll is None:
            return ConstantSteps()
        _check_unroll(unroll, 1)  # the legacy message, before any object is built
        return ConstantSteps(unroll=unroll)
    if not isinstance(stepsize_controller, ConstantSteps | Adaptive):
        raise TypeError(
            f"`stepsize_controller` must be transflow.ConstantSteps(...) (uniform steps) or "
            f"transflow.Adaptive(rtol=..., atol=..., solver=...) (an adaptive diffrax solve), "
            f"got {type(stepsize_controller).__name__}."
        )
    if unroll is not None:
        raise ValueError(
            f"`unroll={unroll!r}` and `stepsize_controller={stepsize_controller!r}` both set "
            f"how the steps are taken; pass only "
            f"stepsize_controller=ConstantSteps(unroll={unroll!r})."
        )
    return stepsize_controller


def _as_path(controls):
    """``controls`` if it is a ``transflow.continuous.ControlPath``, else ``None``."""
    from .continuous._paths import ControlPath

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
    mode,
    n_steps,
    masked,
):
    """``evolve`` with ``stepsize_controller=Adaptive(...)``: :func:`solve_adaptive`."""
    from .continuous._controls import PiecewiseConstant
    from .continuous._depth import solve_adaptive

    name = f"stepsize_controller={controller!r}"
    refused = [
        (saving, "saveat=SaveAt(steps=True)", "the adaptive steps are not layers; use SaveAt()"),
        (mode != "none", f"remat={mode!r}", "use Adaptive(adjoint=...) instead"),
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
    u_T = solve_adaptive(
        u0,
        path,
        scheme,
        grid=grid,
        solver=controller.solver,
        rtol=controller.rtol,
        atol=controller.atol,
        dt0=controller.dt0,
        max_steps=controller.max_steps,
        adjoint=controller.adjoint,
    ).u
    if final_norm is not None:
        u_T = _project(u_T, final_norm, grid)
    return u_T


def _remat_mode(remat) -> str:
    if remat is True or remat is False:
        return "step" if remat else "none"
    if remat in ("none", "step", "nested"):
        return remat
    raise ValueError(
        f"`remat` must be False/'none', True/'step' or 'nested' (√N_t checkpointing), got "
        f"{remat!r}."
    )


def _chunk_size(n: int, chunk: int | None) -> int:
    if chunk is None:
        return max(1, math.isqrt(n - 1) + 1 if n > 1 else 1)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(
            f"`remat_chunk` must be a positive int (steps per chunk) or None (⌈√N_t⌉), "
            f"got {chunk!r}."
        )
    return min(chunk, n)


AUTO_UNROLL_STEPS = 8
"""``evolve(..., unroll="auto")`` unrolls the layer loop up to this many steps."""


def _check_unroll(unroll, n_steps: int):
    if isinstance(unroll, str) and unroll == "auto":
        return True if n_steps <= AUTO_UNROLL_STEPS else 1
    if isinstance(unroll, bool) or (isinstance(unroll, int) and unroll >= 1):
        return unroll
    raise ValueError(
        f"`unroll` must be 'auto', True, False or a positive int (steps per loop iteration), got "
        f"{unroll!r}."
    )


def _scan_nested(step, u0, controls, n: int, k: int, unroll: bool | int = 1):
    """``lax.scan(step, u0, controls)`` as a checkpointed scan over chunks of k steps."""
    n_chunks, rem = divmod(n, k)

    @jax.checkpoint
    def run_chunk(u, thetas):
        return jax.lax.scan(step, u, thetas, unroll=unroll)

    head = jax.tree.map(lambda x: x[: n_chunks * k].reshape(n_chunks, k, *x.shape[1:]), controls)
    u, traj = jax.lax.scan(run_chunk, u0, head)
    if traj is not None:
        traj = traj.reshape(n_chunks * k, *traj.shape[2:])
    if rem:
        tail = jax.tree.map(lambda x: x[n_chunks * k :], controls)
        u, tail_traj = jax.lax.scan(step, u, tail, unroll=unroll)
        if traj is not None:
            traj = jax.numpy.concatenate([traj, tail_traj])
    return u, traj

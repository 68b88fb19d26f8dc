"""The scheme abstraction: what every splitting scheme declares, and the shared sub-steps.

A scheme (:class:`AbstractScheme`) is a small immutable object for one time step of the
continuous model, i.e. one layer, as diffrax keeps its solvers: its ``step`` (one call
signature for every scheme: :meth:`AbstractScheme.step` hands the state, the controls,
Δt, the grid, causality and the masks to the family's :meth:`~AbstractScheme.advance`),
its ``substep_names``, whether it is ``consistent`` (has a continuous limit), and then its
``vector_field`` (∂/∂Δt of the step at Δt = 0); families with a declared order of
convergence carry an ``order`` (:func:`transflow.declared_order`).

The sub-steps every family is written in live here once: the attention sub-step
(:func:`attend`), the projection onto S1 (``_project``), the FFN branch
(:func:`ffn_branch`) and the mask keywords.
"""

import abc
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .._controls import FFNParams, LayerControls, NormParams
from .._errors import (
    check_array,
    check_choice,
    check_flag,
    check_kind,
    check_number,
    check_temperature,
)
from .._grid import Grid
from .._operators import Implementation, activation_fn, attention, project_s1, wmul

__all__ = [
    "AbstractAttentionChoice",
    "AbstractCausal",
    "AbstractImplicitFFN",
    "AbstractLinearStability",
    "AbstractMaskable",
    "AbstractODEScheme",
    "AbstractOperators",
    "AbstractPostNorm",
    "AbstractScheme",
    "AbstractShardable",
    "AbstractWrapper",
    "AttentionOptions",
    "CAPABILITIES",
    "DenseOperators",
    "MissingCapability",
    "check_consistent",
    "check_masks",
    "ffn_branch",
    "has",
    "require",
]

Substeps = dict[str, Float[Array, "n d"]]


def _project(v, norm: NormParams, grid: Grid | None, eps_scale: float = 1.0):
    return project_s1(
        v,
        norm.bias,
        norm.gain,
        eps=norm.eps * eps_scale,
        y_weights=None if grid is None else grid.y_weights,
    )


def _linear(z, w, b):
    """An FFN map ``z W + b`` on one device."""
    return wmul(z, w) + b


def _ffn_substep(z: Float[Array, "n d"], ffn: FFNParams, j: int, dt: float | Array, linear=_linear):
    """FFN sub-step ``j`` without its activation: ``Z + dt (Z W_j + b_j)`` (residual) or
    ``Z W_j + b_j`` (lifting), the map ``linear`` (default: on one device). Shared by
    :func:`ffn_branch` and ``transflow.continuous``."""
    lin = linear(z, ffn.weights[j], ffn.biases[j])
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
    check_array("u", u, ndim=2)
    masks = _masks(key_padding_mask, attention_mask)
    if not masks:
        return masks
    if n_heads is not None:  # None: controls without heads (CvT), refused below
        check_number("n_heads", n_heads, "check_masks", lower=0, integer=True, example="4")
    from .._masks import check_attention_mask, check_key_padding_mask

    n = u.shape[0]
    check_key_padding_mask(key_padding_mask, n)
    check_attention_mask(attention_mask, n, n, n_heads)
    require(scheme, AbstractMaskable, f"{next(iter(masks))}=")
    return masks


def check_tau(owner: str, tau) -> None:
    """ValueError unless ``tau`` (the relaxation time of relaxed projections) is > 0."""
    if isinstance(tau, bool) or not isinstance(tau, int | float) or not 0 < tau < float("inf"):
        raise ValueError(
            f"{owner}: `tau` (the relaxation time of the projections) must be a finite number > 0, "
            f"got {tau!r}; tau = dt gives the paper's exact projections."
        )


def attend(scheme, v, attn, *, grid, causal, masks, **chosen):
    """The attention operator 𝒜(v) of a scheme's controls with the scheme's kernel options
    (``hardmax``, ``temperature``, ``implementation``): the one attention call of every
    family's sub-steps. ``chosen``: an ``implementation`` and its ``query_block``,
    ``key_block`` in place of the scheme's."""
    kernel = {"implementation": scheme.implementation, **chosen}
    return attention(
        v,
        attn,
        grid=grid,
        causal=causal,
        hardmax=scheme.hardmax,
        temperature=scheme.temperature,
        **kernel,
        **masks,
    )


def _exact(u, p):
    """The exact projection sub-step ``P(u)`` (the paper's; see :meth:`LieScheme.toward`)."""
    return p


def ffn_branch(
    z: Float[Array, "n d"], ffn: FFNParams, dt: float | Array = 1.0, *, record: bool = False
):
    """Run the J FFN sub-steps on ``z``; returns the branch output (and sub-step states).

    Residual sub-steps are explicit Euler steps ``Z + dt (Z W + b)``; lifting sub-steps
    are ``Z W + b``. The activation (for ReLU: the projection onto S2) follows every
    sub-step but the last, or every sub-step if ``ffn.activation_on_last``.

    Shapes and dtypes are checked (free at trace time); values are not: this operator
    runs inside every step of a loop, whose entry point checks them once.
    """
    check_array("z", z, ndim=2, shape=(None, ffn.weights[0].shape[0]))
    return _ffn_branch(z, ffn, dt, _exact, record)


def _ffn_branch(z, ffn: FFNParams, dt, toward, record: bool, linear=_linear, substeps=None):
    """:func:`ffn_branch` whose activation sub-steps are ``toward(z, act(z))`` and whose
    maps are ``linear`` (an :class:`AbstractOperators`'s); ``substeps``: a range of the
    sub-steps to run (default all), an FFN of its own (the untied Macaron layer)."""
    act = activation_fn(ffn.activation)
    js = range(ffn.num_substeps) if substeps is None else substeps
    states = []
    for j in js:
        z = _ffn_substep(z, ffn, j, dt, linear)
        if j < js[-1] or ffn.activation_on_last:
            z = toward(z, act(z))
        states.append(z)
    return (z, states) if record else z


class AbstractOperators(eqx.Module):
    """The sub-operations a scheme's :meth:`~AbstractScheme.advance` is written in, and
    the context they run in (``grid``, ``causal``, the set ``masks``).

    :class:`DenseOperators` (one device, :meth:`AbstractScheme.step`) is the default;
    :func:`transflow.parallel.shard_evolve` passes its sharded ones (the ring attention,
    the LayerNorm as ``psum`` reductions, the FFN maps on column blocks) to the same
    ``advance`` of a scheme that declares :class:`AbstractShardable`: the scheme's step
    is written once."""

    grid: eqx.AbstractVar[Grid | None]
    causal: eqx.AbstractVar[bool]
    masks: eqx.AbstractVar[dict]

    @abc.abstractmethod
    def attention(self, scheme, v, attn):
        """The attention operator 𝒜(v) with the kernel options of ``scheme``."""

    @abc.abstractmethod
    def project(self, v, norm: NormParams, eps_scale: float = 1.0):
        """The projection onto S1 of ``norm`` (ε scaled by ``eps_scale``)."""

    @abc.abstractmethod
    def linear(self, z, w, b):
        """An FFN map ``z W + b``."""

    def with_causal(self) -> "AbstractOperators":
        """The same operators with causal attention (:class:`CausalScheme`)."""
        return dataclasses.replace(self, causal=True)


class DenseOperators(AbstractOperators):
    """The operators on one device: :func:`transflow.attention` (with ``implementation``,
    ``query_block``, ``key_block`` when set, else the scheme's own options),
    :func:`transflow.project_s1` weighted by ``grid`` and :func:`transflow.wmul`."""

    grid: Grid | None = None
    causal: bool = eqx.field(static=True, default=False)
    masks: dict = eqx.field(default_factory=dict)
    implementation: Implementation | None = eqx.field(static=True, default=None)
    query_block: int = eqx.field(static=True, default=512)
    key_block: int = eqx.field(static=True, default=512)

    def __check_init__(self):
        owner = "DenseOperators"
        if self.grid is not None:
            check_kind("grid", self.grid, Grid, owner, "pass e.g. Grid.index(n, d) or None")
        check_flag("causal", self.causal, owner)
        if not isinstance(self.masks, dict):
            raise TypeError(
                f"{owner}: `masks` must be a dict of mask keywords, got "
                f"{type(self.masks).__name__}."
            )
        if self.implementation is not None:
            check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))
        for name in ("query_block", "key_block"):
            check_number(name, getattr(self, name), owner, lower=0, integer=True, example="512")

    def attention(self, scheme, v, attn):
        chosen = {}  # the scheme's own implementation, at the default blocks
        if self.implementation is not None:
            chosen = {"implementation": self.implementation, "query_block": self.query_block}
            chosen["key_block"] = self.key_block
        return attend(
            scheme, v, attn, grid=self.grid, causal=self.causal, masks=self.masks, **chosen
        )

    def project(self, v, norm: NormParams, eps_scale: float = 1.0):
        return _project(v, norm, self.grid, eps_scale)

    def linear(self, z, w, b):
        return _linear(z, w, b)


class AbstractScheme(eqx.Module):
    """A splitting scheme: maps (u at tⁿ, controls θⁿ, Δt) to u at tⁿ⁺¹.

    A family implements :meth:`advance` and :meth:`substep_names` and declares ``nodes``
    (the times ``t_n + c Δt`` of a step where θ(t) is sampled; ``(0.5,)``: the midpoint).
    What a consumer may do with a scheme is declared by the capability classes it
    inherits (docs/scheme-capabilities.md): :class:`AbstractODEScheme` (a vector field and
    an ``order``), :class:`AbstractLinearStability`, :class:`AbstractShardable`,
    :class:`AbstractMaskable`, :class:`AbstractCausal`, :class:`AbstractAttentionChoice`,
    :class:`AbstractPostNorm`, :class:`AbstractImplicitFFN`; :func:`require` refuses a
    scheme without the one a consumer needs. Every concrete scheme is final.
    """

    nodes: eqx.AbstractVar[tuple[float, ...]]

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
        """One step. A scheme that takes masks (:class:`AbstractMaskable`) accepts
        ``key_padding_mask`` (True = padded) and ``attention_mask`` (True = may attend, or
        additive float) and passes them to every attention sub-step (see
        :func:`transflow.attention`); any other scheme is refused when masks are given.

        Written once for every family: the family's :meth:`advance` computes the next
        state and the sub-step states; ``return_substeps=True`` names them by
        :meth:`substep_names`."""
        masks = _masks(key_padding_mask, attention_mask)
        if masks:
            require(self, AbstractMaskable, "masks (key_padding_mask=, attention_mask=)")
        ops = DenseOperators(grid, causal, masks)
        out, states = self.advance(u, controls, dt, ops=ops)
        if not return_substeps:
            return out
        return out, dict(zip(self.substep_names(controls), states))

    @abc.abstractmethod
    def advance(self, u, controls, dt, *, ops: AbstractOperators) -> tuple:
        """The family's step: ``(u at tⁿ⁺¹, the sub-step states)``, written in the
        operators ``ops`` (:class:`AbstractOperators`: the attention, projection and FFN
        maps, and the grid, causality and masks of the call)."""

    @abc.abstractmethod
    def substep_names(self, controls: LayerControls) -> tuple[str, ...]:
        """The names of the sub-step states :meth:`advance` returns."""

    @property
    def ffn_copies(self) -> int:
        """How many FFNs the scheme's controls hold one after the other in ``ffn`` (1; 2 for
        the untied Macaron layer, whose two half-steps have their own FFN). The model
        builders draw the controls with ``LayerControls.random(..., ffn_copies=...)``."""
        return 1

    @property
    def consistent(self) -> bool:
        """Whether ``step(u, θ, Δt) = u + Δt f(u, θ) + O(Δt²)`` for a vector field f: the
        scheme has the capability :class:`AbstractODEScheme` (not the paper's
        :class:`LieScheme`: its projections do not depend on Δt)."""
        return has(self, AbstractODEScheme)


# ------------------------------------------------------------------------------ capabilities
class AbstractODEScheme(AbstractScheme):
    """Capability: consistent with an ODE, ``step(u, θ, Δt) = u + Δt f(u, θ) + O(Δt²)``;
    declares its ``order`` of convergence in Δt and has a :meth:`vector_field` (used by
    :func:`transflow.vector_field`, the adaptive solve and :func:`transflow.declared_order`)."""

    order: eqx.AbstractVar[int]

    def vector_field(
        self, u: Float[Array, "n d"], controls: LayerControls, *, grid: Grid | None = None
    ) -> Float[Array, "n d"]:
        """``f(u, θ) = ∂/∂Δt step(u, θ, Δt) at Δt = 0`` (one forward-mode JVP of one step).

        The continuous right-hand side of a consistent scheme
        (:func:`transflow.continuous.vector_field` evaluates it along a path).
        """
        return step_derivative(self, u, controls, grid)


class AbstractLinearStability(AbstractScheme):
    """Capability: a linear stability function, the amplification factor on the linear test
    problem u' = (λ_a + λ_g) u (:func:`transflow.stability_function`), and the step matrix
    of linear sub-fields (:func:`transflow.linear_step_matrix`) from the scheme's own step
    code."""

    @abc.abstractmethod
    def stability_function(self, z_attention, z_ffn):
        """R(z_a, z_g) (complex rates Δt λ_a, Δt λ_g)."""

    @abc.abstractmethod
    def linear_step_matrix(self, j_attention, j_ffn, dt):
        """The step matrix S on a(u) = u J_a, g(u) = u J_g (row convention)."""

    @property
    def stability_form(self) -> str:
        """How the layer's linearisation is read (the default ``form`` of
        :func:`transflow.linearised_stability`): ``"prenorm"``, the pre-norm sub-fields
        a, g (here); ``"postnorm"`` for a post-norm layer; ``"imex"`` for an IMEX one."""
        return "prenorm"


class AbstractImplicitFFN(AbstractLinearStability):
    """Capability: the FFN sub-steps are taken implicitly (an IMEX step); the linearised
    stability reads the layer as trained (:func:`transflow.linearised_stability`,
    ``form="imex"``)."""

    @abc.abstractmethod
    def implicit_weights(self, controls: LayerControls) -> tuple:
        """The matrices the implicit FFN sub-steps take."""

    @abc.abstractmethod
    def implicit_branch_weight(self) -> float:
        """c in J = J_a + c Σ_j I_n ⊗ W_j: the weight of the FFN branch in one step."""

    @abc.abstractmethod
    def implicit_substep(self, z, w, b, s):
        """One implicit FFN sub-step ``(z + s b)(I − s W)⁻¹`` (the linear solve)."""

    @property
    def stability_form(self) -> str:
        return "imex"


class AbstractShardable(AbstractScheme):
    """Capability: :meth:`advance` is written in its :class:`AbstractOperators` only (the
    attention, the projections, the FFN maps and pointwise maps), so
    :func:`transflow.parallel.shard_evolve` with ``method="ring"`` runs the scheme's own
    step on token and feature shards with the ring's collectives, and ``method="gspmd"``
    with an ``attention_implementation``."""


class AbstractMaskable(AbstractScheme):
    """Capability: every attention sub-step takes ``key_padding_mask`` and
    ``attention_mask`` (from :class:`AbstractOperators`'s ``masks``)."""


class AbstractCausal(AbstractScheme):
    """Capability: every attention sub-step is causal (x̃ ≤ x) whatever its caller passes
    (:class:`~transflow.CausalScheme`; :class:`~transflow.models.CausalDecoder` needs it)."""


class AbstractAttentionChoice(AbstractScheme):
    """Capability: the attention evaluation is a field, ``implementation`` (``"auto"``,
    ``"dense"``, ``"chunked"``), that ``evolve(..., attention_implementation=...)`` sets."""

    implementation: eqx.AbstractVar[Implementation]


class AbstractPostNorm(AbstractScheme):
    """Capability: every step closes with a projection (or a relaxation) onto S1 of
    ``norm2``, so a trajectory's states lie on (or near) that set (post-LN; the analysis of
    trajectories measures the distance to it)."""


class AbstractWrapper(AbstractScheme):
    """A scheme that wraps another (``inner``) and has the capabilities listed in
    ``forwards`` exactly when ``inner`` has them (:func:`has`)."""

    inner: eqx.AbstractVar[AbstractScheme]
    forwards: eqx.AbstractClassVar[tuple[type, ...]]


#: Every capability a scheme can declare, with what a scheme without it is not (the
#: refusal of :func:`require`; docs/scheme-capabilities.md is generated from these).
CAPABILITIES: dict[type, str] = {
    AbstractODEScheme: "consistent with an ODE",
    AbstractLinearStability: "reducible to the linear test problem",
    AbstractImplicitFFN: "an IMEX step with implicit FFN sub-steps",
    AbstractShardable: "written in the operators the ring shards",
    AbstractMaskable: "able to take attention masks",
    AbstractCausal: "causal whatever its caller passes",
    AbstractAttentionChoice: "given a selectable attention `implementation`",
    AbstractPostNorm: "closed by a projection onto S1",
}


class MissingCapability(TypeError):
    """A scheme lacks the capability a consumer needs (one line naming both)."""


def has(scheme, capability: type) -> bool:
    """Whether ``scheme`` has ``capability``: it inherits the capability class, or it is an
    :class:`AbstractWrapper` that forwards it and whose inner scheme has it."""
    if isinstance(scheme, capability):
        return True
    if isinstance(scheme, AbstractWrapper) and capability in scheme.forwards:
        return has(scheme.inner, capability)
    return False


def require(scheme, capability: type, consumer: str) -> None:
    """TypeError unless ``scheme`` is a scheme with ``capability`` (one line naming the
    scheme, the capability and the consumer)."""
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    if not has(scheme, capability):
        lacking = _lacking(scheme, capability)
        raise MissingCapability(
            f"{consumer}: {_describe(scheme)} lacks the capability {capability.__name__} "
            f"({type(lacking).__name__} is not {CAPABILITIES[capability]}); "
            f"{_HINTS.get(capability, 'use a scheme that declares it')} "
            "(docs/scheme-capabilities.md)."
        )


#: How to get a capability a scheme lacks (the fix of :func:`require`'s message).
_HINTS = {
    AbstractODEScheme: "the paper's LieScheme applies Δt-independent projections; use "
    "RelaxedLieScheme(tau=...) (the relaxed post-LN reading) or PreNormScheme",
}


def _lacking(scheme, capability):
    """The scheme (``scheme`` or the inner scheme of a wrapper) without ``capability``."""
    if isinstance(scheme, AbstractWrapper) and capability in scheme.forwards:
        return _lacking(scheme.inner, capability)
    return scheme


def _describe(scheme) -> str:
    if isinstance(scheme, AbstractWrapper):
        return f"{type(scheme).__name__}({_describe(scheme.inner)})"
    return type(scheme).__name__


def ode_field(scheme, *, grid: Grid | None = None, consumer: str = "vector_field"):
    """The ODE right-hand side of a consistent scheme in the integrator's form,
    ``f(t, u, path) = scheme.vector_field(u, path(t), grid=grid)`` (the control path is the
    solve's ``args``): the one vector field of :func:`transflow.continuous.vector_field`,
    the adaptive solve and :func:`transflow.reference_solution`. A scheme without
    :class:`AbstractODEScheme` is refused (one line naming ``consumer``)."""
    check_consistent(scheme, consumer)

    def field(t, u, path):
        return scheme.vector_field(u, path(t), grid=grid)

    return field


def step_derivative(scheme, u, controls, grid):
    """``∂/∂Δt scheme.step(u, θ, Δt)`` at Δt = 0 (one forward-mode JVP of one step)."""

    def step(dt):
        return scheme.step(u, controls, dt, grid=grid)

    zero = jnp.zeros((), u.dtype)
    return jax.jvp(step, (zero,), (jnp.ones_like(zero),))[1]


class AttentionOptions(AbstractAttentionChoice):
    """The attention kernel options every family with an attention sub-step carries,
    declared once (keyword-only, so each family's own fields keep their positions):
    ``hardmax``, ``temperature`` (see :func:`transflow.attention_weights`) and
    ``implementation`` (``"auto"``, ``"dense"`` or ``"chunked"``, see
    :func:`transflow.attention`; the same operator up to round-off)."""

    hardmax: bool = eqx.field(static=True, default=False, kw_only=True)
    temperature: float = eqx.field(static=True, default=1.0, kw_only=True)
    implementation: Implementation = eqx.field(static=True, default="auto", kw_only=True)

    def __check_init__(self):
        check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))
        check_flag("hardmax", self.hardmax, type(self).__name__)
        check_temperature(type(self).__name__, self.temperature)


def check_consistent(scheme, consumer: str = "vector_field") -> None:
    """TypeError unless ``scheme`` is a scheme with a vector field (:class:`AbstractODEScheme`)."""
    if not isinstance(consumer, str) or not consumer:
        raise TypeError(
            f"check_consistent: `consumer` must name the caller (a str), got {consumer!r:.40}."
        )
    require(scheme, AbstractODEScheme, consumer)

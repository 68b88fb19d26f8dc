"""Schemes by name (:func:`make_scheme`), their declared orders and stage controls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from ._base import AbstractODEScheme, AbstractScheme, has
from ._imex import IMEXScheme
from ._lie import LieScheme, RelaxedLieScheme
from ._prenorm import PreNormScheme
from ._runge_kutta import RungeKuttaScheme
from ._strang import StrangScheme

__all__ = [
    "SCHEME_NAMES",
    "declared_order",
    "make_scheme",
    "register_scheme",
    "scheme_options",
    "stage_controls",
]


class _Entry(NamedTuple):
    constructor: Callable[..., AbstractScheme]
    options: frozenset[str]


#: The one table of schemes by name: name -> (constructor, the options a training task
#: passes it). :data:`SCHEME_NAMES`, :func:`make_scheme`, the training tasks' ``scheme``
#: option and the docs' capability matrix read it; :func:`register_scheme` adds to it.
_REGISTRY: dict[str, _Entry] = {}


def register_scheme(
    name: str, constructor: Callable[..., AbstractScheme], *, options: tuple[str, ...] = ()
) -> None:
    """Register ``constructor`` (keyword options -> an :class:`AbstractScheme`) as scheme
    ``name``: :func:`make_scheme` and the training tasks (``scheme=name``) then build it.
    ``options``: which task options (``ffn_branch_dt``, ``tau``) the constructor takes.

    Example:
        >>> from transflow import RungeKuttaScheme, make_scheme, register_scheme
        >>> register_scheme("doc_midpoint", lambda **o: RungeKuttaScheme("midpoint", **o))
        >>> make_scheme("doc_midpoint").order
        2
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_scheme: `name` must be a non-empty string, got {name!r}.")
    if not callable(constructor):
        raise TypeError(
            f"register_scheme({name!r}): `constructor` must be callable (keyword options -> "
            f"a scheme), got {type(constructor).__name__}."
        )
    entry = _Entry(constructor, frozenset(options))
    old = _REGISTRY.get(name)
    if old is not None and old != entry:
        raise ValueError(
            f"register_scheme: the name {name!r} is taken (by {old.constructor!r}); choose "
            "another name."
        )
    _REGISTRY[name] = entry


_TASK = ("ffn_branch_dt", "tau")
for _name, _make, _opts in (
    ("lie", LieScheme, ("ffn_branch_dt",)),
    ("prenorm", PreNormScheme, ()),
    ("relaxed", RelaxedLieScheme, _TASK),
    ("macaron", lambda **o: StrangScheme(substep="euler", **o), ()),
    ("macaron_untied", lambda **o: StrangScheme(substep="euler", untied=True, **o), ()),
    ("strang", lambda **o: StrangScheme(substep="heun", **o), ()),
    ("macaron_post", lambda **o: StrangScheme(form="postnorm", substep="euler", **o), ()),
    ("strang_post", lambda **o: StrangScheme(form="postnorm", substep="heun", **o), ()),
    ("heun", lambda **o: RungeKuttaScheme("heun", **o), ()),
    ("midpoint", lambda **o: RungeKuttaScheme("midpoint", **o), ()),
    ("rk4", lambda **o: RungeKuttaScheme("rk4", **o), ()),
    ("ode_rk2", lambda **o: RungeKuttaScheme("heun", field="layer", **o), ()),
    ("imex", IMEXScheme, _TASK),
    ("imex_dissipative", lambda **o: IMEXScheme(parameterization="dissipative", **o), _TASK),
):
    register_scheme(_name, _make, options=_opts)

#: Names of the schemes transflow registers (:func:`make_scheme`, the training tasks'
#: ``scheme`` option); :func:`register_scheme` adds more.
SCHEME_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def make_scheme(name: str, **options: Any) -> AbstractScheme:
    """A scheme by name (:data:`SCHEME_NAMES` and those of :func:`register_scheme`), with
    its keyword options.

    ``lie``: the paper's post-LN layer; ``prenorm``: pre-LN (Lie splitting, Euler
    sub-flows); ``relaxed``: :class:`~transflow.continuous.RelaxedLieScheme`;
    ``macaron``/``macaron_post``: :class:`StrangScheme` with Euler sub-flows (Macaron-Net;
    pre-/post-norm; the two half-steps share one FFN); ``macaron_untied``: the same
    pre-norm layer with two FFNs, as Macaron-Net trains it (``StrangScheme(untied=True)``,
    controls with ``ffn_copies=2``); ``strang``/``strang_post``: with Heun sub-flows (order 2
    in pre-norm form, 1 in post-norm form);
    ``heun``/``midpoint``/``rk4``: :class:`RungeKuttaScheme` on f = a + g; ``ode_rk2``: the
    ODE Transformer's RK2 block (Heun on the pre-LN block's increment); ``imex``:
    :class:`IMEXScheme`; ``imex_dissipative``: with W_eff = W − Wᵀ − W Wᵀ implicit
    (``IMEXScheme(parameterization="dissipative")``, Re λ(W_eff) ≤ 0).

    Example:
        >>> from transflow import make_scheme
        >>> make_scheme("rk4").order, make_scheme("macaron").order
        (4, 1)
        >>> make_scheme("rk5")
        Traceback (most recent call last):
        ...
        ValueError: `scheme` must be one of ('lie', 'prenorm', ...), got 'rk5'. ...
    """
    _check_name(name)
    try:
        return _REGISTRY[name].constructor(**options)
    except TypeError as e:
        raise TypeError(f"scheme {name!r}: an option it does not take ({e}).") from None


def scheme_options(name: str) -> frozenset[str]:
    """The task options (``ffn_branch_dt``, ``tau``) the scheme ``name`` takes
    (:func:`register_scheme`'s ``options``)."""
    _check_name(name)
    return _REGISTRY[name].options


def _check_name(name) -> None:
    """ValueError unless ``name`` is a registered scheme."""
    if name not in _REGISTRY:
        names = tuple(_REGISTRY)
        shown = f"('{names[0]}', '{names[1]}', ...)"
        raise ValueError(
            f"`scheme` must be one of {shown}, got {name!r}. All names: {', '.join(names)}."
        )


def declared_order(scheme: AbstractScheme) -> int | None:
    """The order of convergence a scheme declares in Δt (:class:`AbstractODEScheme`'s
    ``order``); ``None`` for a scheme not consistent with an ODE (the paper's exact
    post-LN :class:`~transflow.LieScheme`)."""
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    return int(scheme.order) if has(scheme, AbstractODEScheme) else None


def stage_controls(path, scheme: AbstractScheme, n_steps: int, reading: str = "right"):
    """The controls of ``n_steps`` uniform steps of ``path`` for ``scheme``.

    A scheme with one node at the midpoint (``scheme.nodes == (0.5,)``: every scheme but
    the Runge–Kutta ones) gets one set per step, ``path.read(n_steps, reading)`` (θ at
    the step midpoints for the default ``"right"``); a Runge–Kutta scheme gets θ at every
    node ``t_n + c Δt`` stacked as ``(n_steps, len(nodes), ...)``
    (:meth:`~transflow.continuous.ControlPath.at_nodes`: read from inside each step, so
    a per-layer path's jumps at the step ends are not crossed), which keeps the method's
    order for a smooth θ(t). ``reading="average"`` gives every scheme one set per step
    (θ's mean over the step, used by all stages). Run them with
    ``evolve(u0, stage_controls(path, s, n), s, dt=path.step_size(n))``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, RungeKuttaScheme, stage_controls
        >>> from transflow.continuous import init_path
        >>> path = init_path("legendre", lambda k: LayerControls.random(4, key=k), 2,
        ...                  key=jax.random.key(0))
        >>> stage_controls(path, RungeKuttaScheme("rk4"), 8).attn.wq.shape
        (8, 3, 4, 4)
    """
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    nodes = tuple(scheme.nodes)
    if nodes == (0.5,) or reading == "average":
        return path.read(n_steps, reading)
    return path.at_nodes(n_steps, nodes, reading)

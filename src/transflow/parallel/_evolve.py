"""Sharded evolution of a batch of sequences over a device mesh.

Two partitionings of the same scheme (same maths as :func:`transflow.evolve`):

- ``method="gspmd"``: plain :func:`jax.jit` with :class:`~jax.sharding.NamedSharding` on
  the inputs and outputs and a :func:`jax.lax.with_sharding_constraint` on the state
  after every time step; XLA's SPMD partitioner inserts the collectives (all-gathers of
  keys/values for the token axis, reductions over Ω_y for the feature axis). The
  controls are split Megatron-style over the feature axis (column blocks of W_Q, W_K,
  W_V and the FFN weights, row blocks of W_O). Works for any assignment, including
  tuples of mesh axes per logical axis.
- ``method="ring"``: :func:`jax.shard_map` with hand-written collectives
  (:mod:`transflow.parallel._ring`): sequence parallel attention as a ring of
  :func:`jax.lax.ppermute` with an online softmax (no device ever holds all keys or an
  ``n × n`` score matrix), heads and FFN width split over the feature axis, LayerNorm
  as ``psum`` reductions. For long grids. These sharded operators
  (:class:`~transflow.parallel._ring.RingOperators`) run the scheme's own ``advance``, so
  every scheme that declares :class:`~transflow.schemes.AbstractShardable` runs (the
  others are refused in one line naming the scheme and the capability).

Both are validated against single-device :func:`transflow.evolve` (tests/test_parallel.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
from jaxtyping import Array, Bool, Float

from .._controls import LayerControls, NormParams, num_steps
from .._errors import (
    as_input,
    check_array,
    check_choice,
    check_finite,
    check_kind,
    check_number,
    check_same_shape,
    check_step,
    check_values,
    is_array,
    param_dtype,
)
from .._grid import Grid
from .._operators import _head_scale
from ..models._encoder import SplitTransformer
from ..schemes._base import (
    AbstractMaskable,
    AbstractScheme,
    AbstractShardable,
    DenseOperators,
    _project,
    require,
)
from ..schemes._lie import LieScheme
from . import _ring
from ._mesh import ShardAxes, as_axes, axis_size

__all__ = [
    "shard_evolve",
    "lower_shard_evolve",
    "memory_report",
    "controls_specs",
    "to_host",
    "max_rel_diff",
]

Method = Literal["gspmd", "ring"]


# --------------------------------------------------------------------------- helpers
def controls_specs(controls: LayerControls, axes: ShardAxes) -> LayerControls:
    """:class:`PartitionSpec` of every leaf of stacked controls (leading time axis, and
    the stage axis of staged controls, :func:`~transflow.stage_controls`).

    The feature axis splits the heads (columns of ``wq, wk, wv`` and their biases, rows
    of ``wo``), the model width (``bo`` and per-feature σ1, σ2) and every FFN width
    (columns of ``weights[j]`` and ``biases[j]``). Everything else is replicated.
    """
    check_kind("controls", controls, LayerControls, "controls_specs", "stack_controls([...])")
    check_kind("axes", axes, ShardAxes, "controls_specs", "as_axes({'features': 'f'})")
    return _specs(controls, axes, lead=controls.attn.wq.ndim - 2)


def _specs(tree, axes: ShardAxes, lead: int):
    """:func:`controls_specs` of a tree whose leaves carry ``lead`` leading (time, stage)
    axes before a layer's own: the split axis is counted from the end."""
    f = axes.features

    def rule(path, leaf):
        names = [k.name for k in path if isinstance(k, jax.tree_util.GetAttrKey)]
        last = names[-1] if names else ""
        nd = leaf.ndim
        if f is None:
            return P(*([None] * nd))
        if last in ("wq", "wk", "wv", "weights"):
            return P(*([None] * (nd - 1)), f)
        if last == "wo":
            return P(*([None] * (nd - 2)), f, None)
        if last in ("bq", "bk", "bv", "bo", "biases"):
            return P(*([None] * (nd - 1)), f)
        if last in ("gain", "bias") and nd == lead + 1:
            return P(*([None] * lead), f)
        return P(*([None] * nd))

    return jax.tree_util.tree_map_with_path(rule, tree)


def _is_spec(x):
    return isinstance(x, P)


def _place(x, sharding: NamedSharding):
    """Put a (host or device) array on ``sharding``; works on several processes too."""
    if isinstance(x, jax.Array) and x.sharding == sharding:
        return x
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def to_host(x: jax.Array) -> np.ndarray:
    """The full value of a (possibly multi-process) sharded array as a NumPy array."""
    if not is_array(x):
        raise TypeError(
            f"to_host: `x` must be an array (jax.Array or numpy.ndarray), got "
            f"{type(x).__name__} {x!r:.40}."
        )
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def max_rel_diff(a, b) -> float:
    """``max |a − b| / max |b|``: the norm-wise relative difference used by the checks."""
    a = np.asarray(check_values("a", a, "max_rel_diff"), np.float64)
    b = np.asarray(check_values("b", b, "max_rel_diff"), np.float64)
    check_same_shape(("a", "b"), a, b, "max_rel_diff")
    scale = np.max(np.abs(b))
    return float(np.max(np.abs(a - b)) / (scale if scale > 0 else 1.0))


def _resolve(model_or_controls, scheme, dt, final_norm):
    if isinstance(model_or_controls, SplitTransformer):
        m = model_or_controls
        if scheme is not None or dt is not None or final_norm is not None:
            raise ValueError(
                "`scheme`, `dt` and `final_norm` come from the SplitTransformer; pass them "
                "only with stacked LayerControls."
            )
        return m.controls, m.scheme, m.dt, m.final_norm
    if not isinstance(model_or_controls, LayerControls):
        raise TypeError(
            "`model_or_controls` must be a SplitTransformer or stacked LayerControls, got "
            f"{type(model_or_controls).__name__}."
        )
    num_steps(model_or_controls)
    return (
        model_or_controls,
        LieScheme() if scheme is None else scheme,
        1.0 if dt is None else dt,
        final_norm,
    )


_PROGRAMS: dict = {}
_MAX_PROGRAMS = 64


def _cached(key, build):
    """The jitted program for ``key`` (its static options), built once and reused, so
    repeated :func:`shard_evolve` calls hit ``jax.jit``'s compilation cache."""
    try:
        hash(key)
    except TypeError:  # e.g. a traced or array-valued dt: no reuse
        return build()
    if key not in _PROGRAMS:
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = build()
    return _PROGRAMS[key]


def _check_divisible(what: str, size: int, axis_desc, parts: int):
    if parts > 1 and size % parts:
        raise ValueError(
            f"{what} = {size} is not divisible by the {parts} devices of mesh axis "
            f"{axis_desc!r}; choose a mesh shape that divides it."
        )


def _check_implementation(impl: str, scheme) -> None:
    check_choice("attention_implementation", impl, ("auto", "dense", "chunked"))
    require(scheme, AbstractShardable, "shard_evolve(attention_implementation=...)")


def _batch_masks(kpm, am, B, n, H, axes, method, P_f, scheme):
    """Validate batched masks; returns ``(masks, specs)`` dicts keyed by the step keyword.

    ``key_padding_mask`` ``(B, n)`` → spec ``P(batch, tokens)``; ``attention_mask``
    ``(B, n, n)``/``(B, 1|H, n, n)`` → ``(B, 1|H, n, n)`` with spec
    ``P(batch, heads, tokens, None)`` (heads split with the features only when the mask
    has one slice per head and the ring splits heads).
    """
    from .._masks import check_attention_mask, check_key_padding_mask

    masks, specs = {}, {}
    if kpm is not None:
        check_array("key_padding_mask", kpm, ndim=2, shape=(B, n), floating=False)
        check_key_padding_mask(kpm[0], n)
        masks["key_padding_mask"] = kpm
        specs["key_padding_mask"] = P(axes.batch, axes.tokens)
    if am is not None:
        if not is_array(am) or len(am.shape) not in (3, 4) or am.shape[0] != B:
            raise ValueError(
                f"`attention_mask` has shape {tuple(getattr(am, 'shape', ()))}; expected "
                f"({B}, {n}, {n}) or ({B}, 1 or {H}, {n}, {n}) (one mask per example)."
            )
        check_attention_mask(am[0], n, n, H)
        am = am[:, None] if am.ndim == 3 else am
        heads = axes.features if (method == "ring" and P_f > 1 and am.shape[1] == H) else None
        masks["attention_mask"] = am
        specs["attention_mask"] = P(axes.batch, heads, axes.tokens, None)
    if masks:
        require(scheme, AbstractMaskable, f"shard_evolve({next(iter(masks))}=...)")
    return masks, specs


# --------------------------------------------------------------------------- programs
def _gspmd_program(scheme, dt, causal, mesh, axes, *, implementation, blocks, d_total):
    state_sh = NamedSharding(mesh, axes.spec())

    def run(u, controls, grid, final_norm, masks=None):
        masks = masks or {}
        if implementation is None:
            step = lambda x, theta, mk: scheme.step(x, theta, dt, grid=grid, causal=causal, **mk)
        else:  # the scheme's own advance with the chosen attention evaluation

            def step(x, theta, mk):
                ops = DenseOperators(grid, causal, mk, implementation, *blocks)
                return scheme.advance(x, theta, dt, ops=ops)[0]

        def body(u, theta):
            un = jax.vmap(lambda x, mk: step(x, theta, mk))(u, masks)
            return jax.lax.with_sharding_constraint(un, state_sh), None

        u = jax.lax.with_sharding_constraint(u, state_sh)
        u, _ = jax.lax.scan(body, u, controls)
        if final_norm is not None:
            u = jax.vmap(lambda x: _project(x, final_norm, grid))(u)
        return u

    return run


def _ring_program(scheme, dt, causal, mesh, axes, *, n_heads, d_total, specs):
    t = axes.tokens
    f = axes.features
    P_t = axis_size(mesh, t)
    P_f = axis_size(mesh, f)

    def local(u, controls, extras, final_norm, masks):
        def ops(mk):  # the sharded operators the scheme's own advance runs in
            return _ring.RingOperators(
                t_axis=t if P_t > 1 else None,
                f_axis=f if P_f > 1 else None,
                n_token_shards=P_t,
                n_heads_local=n_heads // P_f,
                d_total=d_total,
                head_scale=extras["head_scale"],
                q_weights=extras.get("q_weights"),
                x_weights=extras.get("x_weights"),
                y_weights=extras.get("y_weights"),
                causal=causal,
                masks=mk,
            )

        def body(u, theta):
            one = lambda x, mk: scheme.advance(x, theta, dt, ops=ops(mk))[0]
            return jax.vmap(one)(u, masks), None

        u, _ = jax.lax.scan(body, u, controls)
        if final_norm is not None:
            u = jax.vmap(lambda x: ops({}).project(x, final_norm))(u)
        return u

    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(
            axes.spec(),
            specs["controls"],
            specs["extras"],
            specs["final_norm"],
            specs["masks"],
        ),
        out_specs=axes.spec(),
        check_vma=False,
    )


def _prepare(
    model_or_controls,
    u_batch,
    mesh,
    axes,
    *,
    method: str,
    scheme,
    dt,
    grid: Grid | None,
    causal: bool,
    final_norm,
    attention_implementation: str | None = None,
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask=None,
    attention_mask=None,
):
    dt = dt if dt is None else check_step("dt", dt, "shard_evolve")
    _check_blocks(query_block=query_block, key_block=key_block)
    controls, scheme, dt, final_norm = _resolve(model_or_controls, scheme, dt, final_norm)
    axes = as_axes(axes)
    check_choice("method", method, ("gspmd", "ring"))
    if not isinstance(scheme, AbstractScheme):
        raise TypeError(f"`scheme` must be an AbstractScheme, got {type(scheme).__name__}.")
    d = controls.d_model
    shape = (None, None if grid is None else grid.n_tokens, d)
    u_batch = as_input(
        "u_batch", u_batch, param_dtype(controls), ndim=3, shape=shape, nonempty=(0, 1)
    )
    u_batch = check_finite("u_batch", u_batch)
    B, n, _ = u_batch.shape
    for field, size in (("batch size", B), ("n_tokens", n), ("n_features", d)):
        key = {"batch size": "batch", "n_tokens": "tokens", "n_features": "features"}[field]
        _check_divisible(
            f"u_batch's {field}", size, getattr(axes, key), axis_size(mesh, getattr(axes, key))
        )
    P_f = axis_size(mesh, axes.features)
    H = controls.attn.n_heads
    if P_f > 1:
        _check_divisible("n_heads", H, axes.features, P_f)
        for j, w in enumerate(controls.ffn.weights):
            _check_divisible(f"FFN width weights[{j}].shape[-1]", w.shape[-1], axes.features, P_f)
    masks, mask_specs = _batch_masks(
        key_padding_mask, attention_mask, B, n, H, axes, method, P_f, scheme
    )
    specs = controls_specs(controls, axes)
    fn_specs = None if final_norm is None else _specs(final_norm, axes, lead=0)
    shard = lambda tree, spec: jax.tree.map(
        lambda x, s: _place(x, NamedSharding(mesh, s)), tree, spec, is_leaf=_is_spec
    )
    state_sh = NamedSharding(mesh, axes.spec())
    u_p = _place(u_batch, state_sh)
    c_p = shard(controls, specs)
    fn_p = None if final_norm is None else shard(final_norm, fn_specs)
    mk_p = shard(masks, mask_specs)

    if method == "gspmd":
        rep = NamedSharding(mesh, P())
        grid_p = None if grid is None else jax.tree.map(lambda x: _place(x, rep), grid)
        if attention_implementation is not None:
            _check_implementation(attention_implementation, scheme)
        key = (
            "gspmd",
            scheme,
            dt,
            causal,
            mesh,
            axes,
            attention_implementation,
            query_block,
            key_block,
            d,
            tuple(sorted(masks)),
        )
        fn = _cached(
            key,
            lambda: jax.jit(
                _gspmd_program(
                    scheme,
                    dt,
                    causal,
                    mesh,
                    axes,
                    implementation=attention_implementation,
                    blocks=(query_block, key_block),
                    d_total=d,
                ),
                out_shardings=state_sh,
            ),
        )
        return fn, (u_p, c_p, grid_p, fn_p, mk_p)

    if attention_implementation is not None:
        raise ValueError(
            "`attention_implementation` applies to method='gspmd'; method='ring' is "
            "itself a blockwise online-softmax attention over the token shards."
        )
    require(scheme, AbstractShardable, "shard_evolve(method='ring')")
    order = list(mesh.axis_names)
    for field in ("tokens", "features"):
        names = axes.names(field)
        if len(names) > 1 and [order.index(a) for a in names] != sorted(
            order.index(a) for a in names
        ):
            raise ValueError(
                f"method='ring' needs the mesh axes of `{field}` in the mesh's order "
                f"{tuple(order)}, got {names!r}; reorder them or use method='gspmd'."
            )
    dtype = u_batch.dtype
    s, w = _head_scale(controls.attn, grid, None, dtype)
    extras = {"head_scale": jnp.broadcast_to(jnp.asarray(s, dtype), (H,))}
    extra_specs = {"head_scale": P(axes.features)}
    if w is not None:
        extras["q_weights"] = w
        extra_specs["q_weights"] = P(axes.features, None)
    if grid is not None:
        extras["x_weights"] = grid.x_weights.astype(dtype)
        extra_specs["x_weights"] = P(axes.tokens)
        extras["y_weights"] = grid.y_weights
        extra_specs["y_weights"] = P(axes.features)
    ex_p = shard(extras, extra_specs)
    all_specs = {
        "controls": specs,
        "extras": extra_specs,
        "final_norm": fn_specs,
        "masks": mask_specs,
    }
    key = (
        "ring",
        scheme,
        dt,
        causal,
        mesh,
        axes,
        H,
        d,
        tuple(jax.tree.leaves(all_specs, is_leaf=_is_spec)),
        jax.tree.structure(all_specs, is_leaf=_is_spec),
    )
    fn = _cached(
        key,
        lambda: jax.jit(
            _ring_program(scheme, dt, causal, mesh, axes, n_heads=H, d_total=d, specs=all_specs)
        ),
    )
    return fn, (u_p, c_p, ex_p, fn_p, mk_p)


# --------------------------------------------------------------------------- public
def shard_evolve(
    model_or_controls: SplitTransformer | LayerControls,
    u_batch: Float[Array, "batch n d"],
    mesh,
    axes: ShardAxes | Mapping[str, Any] | None = None,
    *,
    method: Method = "gspmd",
    scheme: AbstractScheme | None = None,
    dt: float | None = None,
    grid: Grid | None = None,
    causal: bool = False,
    final_norm: NormParams | None = None,
    attention_implementation: Literal["auto", "dense", "chunked"] | None = None,
    query_block: int = 512,
    key_block: int = 512,
    key_padding_mask: Bool[Array, "batch n"] | None = None,
    attention_mask: Bool[Array, "batch *h n n"] | Float[Array, "batch *h n n"] | None = None,
) -> Float[Array, "batch n d"]:
    """Evolve a batch of sequences with the splitting scheme, sharded over ``mesh``.

    Computes ``vmap(evolve)(u_batch)`` — the same N_t steps of the same scheme as
    :func:`transflow.evolve` — with the state ``u[b, x, y]`` split over the mesh axes
    named in ``axes`` (see :class:`ShardAxes`). The result is a global
    :class:`jax.Array` with sharding ``NamedSharding(mesh, axes.spec())``; its values equal
    the single-device evolution up to the round-off of the reordered reductions
    (float64 ≤ 1e-12, float32 ≤ 1e-5 relative; tests/test_parallel.py).

    Args:
        model_or_controls: a :class:`~transflow.SplitTransformer` (its scheme, Δt and
            final norm are used) or stacked :class:`~transflow.LayerControls`.
        u_batch: initial states ``(batch, n_tokens, d_model)`` (NumPy or JAX). On several
            processes every process passes the same full value.
        mesh: a :class:`jax.sharding.Mesh` (:func:`make_mesh`).
        axes: which mesh axes split ``batch``, ``tokens``, ``features``.
        method: ``"gspmd"`` (compiler-partitioned ``jit``) or ``"ring"`` (``shard_map``
            ring attention with online softmax; one mesh axis per logical axis).
        scheme, dt, final_norm: as in :func:`transflow.evolve` (with stacked controls only;
            defaults: :class:`~transflow.LieScheme`, 1, none).
        grid, causal: as in :func:`transflow.evolve`.
        attention_implementation: ``None`` (default) runs the scheme's own ``step``
            (any :class:`~transflow.AbstractScheme`); ``"dense"``, ``"chunked"`` or
            ``"auto"`` run the scheme's own ``advance`` (a scheme that declares
            :class:`~transflow.schemes.AbstractShardable`) with
            ``transflow.attention(..., implementation=...)`` and the block sizes
            ``query_block``, ``key_block`` (``method="gspmd"`` only).
        key_padding_mask: ``(batch, n)`` bool, True = padded (per example, as
            :func:`transflow.evolve`); sharded like the state's batch and token axes. In
            ``"ring"`` the padding of each key block travels with its keys and values.
        attention_mask: ``(batch, n, n)`` or ``(batch, 1|H, n, n)``, bool True = may
            attend or additive float; rows follow the token sharding (``"ring"``: each
            device holds its query rows and reads the column block of the visiting keys).

    Raises:
        ValueError: when a sharded size (batch, n_tokens, d_model, n_heads, an FFN width)
            is not divisible by its number of devices, naming the size and the mesh axis.
        TypeError: (:class:`~transflow.schemes.MissingCapability`) when the scheme lacks
            the capability the call needs (``method="ring"`` or an
            ``attention_implementation``: :class:`~transflow.schemes.AbstractShardable`;
            masks: :class:`~transflow.schemes.AbstractMaskable`).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, stack_controls
        >>> from transflow.parallel import make_mesh, shard_evolve
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(2)])
        >>> mesh = make_mesh((1, 1), ("t", "f"))
        >>> u = jax.random.normal(jax.random.key(9), (2, 4, 8))
        >>> shard_evolve(theta, u, mesh, {"tokens": "t", "features": "f"}).shape
        (2, 4, 8)
    """
    fn, args = _prepare(
        model_or_controls,
        u_batch,
        mesh,
        axes,
        method=method,
        scheme=scheme,
        dt=dt,
        grid=grid,
        causal=causal,
        final_norm=final_norm,
        attention_implementation=attention_implementation,
        query_block=query_block,
        key_block=key_block,
        key_padding_mask=key_padding_mask,
        attention_mask=attention_mask,
    )
    return fn(*args)


def _check_blocks(**blocks) -> None:
    for name, size in blocks.items():
        check_number(name, size, "shard_evolve", lower=0, integer=True, example="512")


def lower_shard_evolve(model_or_controls, u_batch, mesh, axes=None, **kwargs):
    """The lowered (not yet compiled) program of :func:`shard_evolve` (same arguments)."""
    opts = dict(method="gspmd", scheme=None, dt=None, grid=None, causal=False, final_norm=None)
    opts.update(kwargs)
    fn, args = _prepare(model_or_controls, u_batch, mesh, axes, **opts)
    return fn.lower(*args)


def memory_report(model_or_controls, u_batch, mesh, axes=None, **kwargs) -> dict[str, int]:
    """Per-device memory of the compiled :func:`shard_evolve` program, in bytes.

    From ``lower(...).compile().memory_analysis()`` (XLA's buffer assignment of the SPMD
    program, which is the program of *one* device): ``temp`` (intermediates: the
    activations, scores and collectives' buffers), ``argument``, ``output``, ``alias``,
    ``generated_code``, and ``total = temp + argument + output − alias``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, stack_controls
        >>> from transflow.parallel import make_mesh, memory_report
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(0))])
        >>> rep = memory_report(theta, jax.numpy.ones((1, 16, 8)), make_mesh((1,), ("t",)),
        ...                     {"tokens": "t"})
        >>> rep["temp"] > 0
        True
    """
    compiled = lower_shard_evolve(model_or_controls, u_batch, mesh, axes, **kwargs).compile()
    ma = compiled.memory_analysis()
    if ma is None:
        raise RuntimeError("this backend does not report a compiled memory analysis.")
    out = {
        "temp": int(ma.temp_size_in_bytes),
        "argument": int(ma.argument_size_in_bytes),
        "output": int(ma.output_size_in_bytes),
        "alias": int(ma.alias_size_in_bytes),
        "generated_code": int(ma.generated_code_size_in_bytes),
    }
    out["total"] = out["temp"] + out["argument"] + out["output"] - out["alias"]
    return out

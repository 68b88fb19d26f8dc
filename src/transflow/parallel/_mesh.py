"""Device meshes and the assignment of the model's axes to mesh axes.

The state of a batch of sequences is ``u[b, x_i, y_k]``: batch × token grid × feature grid.
Sharding assigns each of the three logical axes to zero, one or several named axes of a
:class:`jax.sharding.Mesh` (:class:`ShardAxes`), which gives the
:class:`~jax.sharding.PartitionSpec` ``P(batch, tokens, features)`` of the state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import check_number

__all__ = ["ShardAxes", "make_mesh", "as_axes", "state_spec", "axis_size"]

AxisAssignment = str | tuple[str, ...] | None


def _norm(value: Any, field: str) -> AxisAssignment:
    if value is None or value == () or value == []:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return value[0] if len(value) == 1 else tuple(value)
    raise TypeError(
        f"ShardAxes: `{field}` must be None, a mesh axis name or a tuple of names, got {value!r}."
    )


@dataclasses.dataclass(frozen=True)
class ShardAxes:
    """Which mesh axes split the batch, the token grid (x) and the feature grid (y).

    Each field is ``None`` (replicated), one mesh axis name, or a tuple of names (the
    logical axis is split over their product). A mesh axis may be used by one field only.

    - ``batch``: data parallel; every example is evolved independently.
    - ``tokens``: sequence parallel over the token grid Ω_x. The attention integral
      ``∫ γ(x, x̃) V(x̃) dx̃`` couples all tokens: keys/values are all-gathered (``"gspmd"``)
      or passed around a ring of devices with an online softmax (``"ring"``).
    - ``features``: the feature grid Ω_y is split. Heads and the FFN width are split;
      the projection onto S1 (LayerNorm) becomes a cross-shard reduction of the mean
      and the variance over Ω_y.

    Example:
        >>> from transflow.parallel import ShardAxes
        >>> ShardAxes(tokens="t", features="f").spec()
        P(None, 't', 'f')
    """

    batch: AxisAssignment = None
    tokens: AxisAssignment = None
    features: AxisAssignment = None

    def __post_init__(self):
        for f in ("batch", "tokens", "features"):
            object.__setattr__(self, f, _norm(getattr(self, f), f))
        seen: dict[str, str] = {}
        for f in ("batch", "tokens", "features"):
            for name in self.names(f):
                if name in seen:
                    raise ValueError(
                        f"ShardAxes: mesh axis {name!r} is assigned to both `{seen[name]}` and "
                        f"`{f}`; each mesh axis can split one logical axis only."
                    )
                seen[name] = f

    def names(self, field: str) -> tuple[str, ...]:
        v = getattr(self, field)
        return () if v is None else ((v,) if isinstance(v, str) else tuple(v))

    def spec(self):
        """The :class:`~jax.sharding.PartitionSpec` of a batched state ``(B, n, d)``."""
        from jax.sharding import PartitionSpec as P

        return P(self.batch, self.tokens, self.features)

    def label(self) -> str:
        """A short name such as ``"tokens×features"`` (replicated axes omitted)."""
        used = [f for f in ("batch", "tokens", "features") if getattr(self, f) is not None]
        return "×".join(used) if used else "replicated"


def as_axes(axes: ShardAxes | Mapping[str, AxisAssignment] | None) -> ShardAxes:
    """Accept a :class:`ShardAxes`, a mapping ``{"tokens": "t", ...}`` or ``None``."""
    if axes is None:
        return ShardAxes()
    if isinstance(axes, ShardAxes):
        return axes
    if isinstance(axes, Mapping):
        unknown = set(axes) - {"batch", "tokens", "features"}
        if unknown:
            raise ValueError(
                f"`axes` keys must be among ('batch', 'tokens', 'features'), got {sorted(unknown)}."
            )
        return ShardAxes(**{k: v for k, v in axes.items()})
    raise TypeError(f"`axes` must be a ShardAxes or a mapping, got {type(axes).__name__}.")


def make_mesh(
    shape: Sequence[int], axis_names: Sequence[str], *, devices: Sequence[Any] | None = None
):
    """A :class:`jax.sharding.Mesh` of the given shape with *auto* (compiler-propagated) axes.

    ``jax.make_mesh`` in recent JAX defaults to ``AxisType.Explicit`` (sharding in types);
    transflow uses ``AxisType.Auto`` so that ``jax.jit`` with ``NamedSharding`` lets the
    SPMD partitioner propagate shardings through the operators.

    Args:
        shape: devices per mesh axis, e.g. ``(2, 4)``; the product must equal the number
            of ``devices`` (default: all of ``jax.devices()``, over every process).
        axis_names: one name per axis, e.g. ``("t", "f")``.
        devices: the devices to use (default: all).

    Example:
        >>> from transflow.parallel import make_mesh
        >>> mesh = make_mesh((1,), ("t",))
        >>> dict(mesh.shape)
        {'t': 1}
    """
    import jax
    from jax.sharding import AxisType

    shape, axis_names = tuple(shape), tuple(axis_names)
    for size in shape:
        check_number("shape", size, "make_mesh", lower=0, integer=True, example="(1,)")
    for name in axis_names:
        if not isinstance(name, str):
            raise TypeError(
                f"make_mesh: `axis_names` must be strings, got {axis_names!r}; e.g. ('t',)."
            )
    if len(shape) != len(axis_names):
        raise ValueError(
            f"`shape` {shape} and `axis_names` {axis_names} must have the same length."
        )
    if len(set(axis_names)) != len(axis_names):
        raise ValueError(f"`axis_names` must be distinct, got {axis_names}.")
    if any(s < 1 for s in shape):
        raise ValueError(f"`shape` entries must be >= 1, got {shape}.")
    devs = list(jax.devices() if devices is None else devices)
    need = int(np.prod(shape))
    if need != len(devs):
        raise ValueError(
            f"`shape` {shape} needs {need} devices, but {len(devs)} are available "
            f"({devs[0].platform if devs else 'none'}). On CPU set "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts, or pass "
            "`devices=`."
        )
    return jax.make_mesh(shape, axis_names, axis_types=(AxisType.Auto,) * len(shape), devices=devs)


def axis_size(mesh, names: AxisAssignment | tuple[str, ...]) -> int:
    """Number of devices along one mesh axis name or the product over several."""
    if names is None:
        return 1
    names = (names,) if isinstance(names, str) else tuple(names)
    for n in names:
        if n not in mesh.shape:
            raise ValueError(
                f"mesh axis {n!r} is not in the mesh; its axes are {tuple(mesh.axis_names)}."
            )
    return int(np.prod([mesh.shape[n] for n in names]))


def state_spec(axes: ShardAxes):
    return axes.spec()

"""Slices: a piecewise-linear model restricted to a line or a plane of its input space."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import check_values
from ._programs import RestrictedProgram
from ._pwl import (
    AbstractAffineLogits,
    AbstractAttention,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractExactProgram,
    AbstractIntervalForward,
    AbstractPiecewiseLinear,
    AbstractProvenance,
    gamma,
    to_fraction_array,
)

__all__ = ["AbstractRestricted", "Restricted", "restrict"]


class AbstractRestricted(AbstractPiecewiseLinear):
    """``t ↦ f(origin + directions @ t)`` for ``t ∈ R^r`` (r = 1 or 2); built by
    :func:`restrict`. Its activation pattern is f's pattern at ``origin + directions @ t``,
    so its linear regions are f's regions cut by the line (plane).

    A slice has exactly the capabilities of f: :func:`restrict` returns an instance of the
    final class ``Restricted`` made of this class and, for every capability of f, the
    abstract part that implements it for a slice (one class per set of capabilities)."""

    f: AbstractPiecewiseLinear
    origin: Float[Array, " d"]
    directions: Float[Array, "d r"]

    @property
    def in_dim(self) -> int:
        return int(self.directions.shape[1])

    def point(self, t: Float[Array, " r"]) -> Float[Array, " d"]:
        """The input point ``origin + directions @ t`` of f."""
        return self.origin + self.directions @ jnp.asarray(t, self.origin.dtype)

    def __call__(self, t):
        return self.f(self.point(t))

    def layer_logits(self, t):
        return self.f.layer_logits(self.point(t))

    def output_and_logits(self, t):
        return self.f.output_and_logits(self.point(t))


Restricted = AbstractRestricted  # every slice is an instance (the name of earlier versions)


class _AbstractRestrictedAffineLogits(AbstractRestricted, AbstractAffineLogits):
    """A slice of a model with affine logits: its logits are affine too."""


class _AbstractRestrictedBoundedEval(AbstractRestricted, AbstractBoundedEval):
    def eval_bounded(self, t, et=None, pattern=None):
        """f's bounded evaluation plus the round-off of forming the point."""
        t = jnp.asarray(t, self.origin.dtype)
        D = self.directions
        aD = jnp.abs(D)
        x = self.origin + D @ t
        ex = gamma(D.shape[1] + 1, D.dtype) * (jnp.abs(self.origin) + aD @ jnp.abs(t))
        if et is not None:
            ex = ex + aD @ et
        return self.f.eval_bounded(x, ex, pattern)


class _AbstractRestrictedIntervalForward(AbstractRestricted, AbstractIntervalForward):
    def interval_forward(self, ctx, t):
        """``x = origin + directions @ t`` on 1-D intervals, then f's interval pass."""
        D = np.asarray(self.directions, np.float64)
        x = ctx.lin(t, D.T, np.asarray(self.origin, np.float64))
        return self.f.interval_forward(ctx, x)


class _AbstractRestrictedExactEval(AbstractRestricted, AbstractExactEval):
    def exact_params(self):
        return (
            self.f.exact_params(),
            to_fraction_array(self.origin),
            to_fraction_array(self.directions),
        )

    def exact_eval(self, params, t, pattern=None):
        fp, o, D = params
        x = o + D.dot(np.asarray(t, dtype=object))
        return self.f.exact_eval(fp, x, pattern)


class _AbstractRestrictedExactProgram(_AbstractRestrictedExactEval, AbstractExactProgram):
    def exact_program(self) -> RestrictedProgram:
        return RestrictedProgram(self, self.f.exact_program())


class _AbstractRestrictedAttention(AbstractRestricted, AbstractAttention):
    @property
    def hardmax(self) -> bool:
        return self.f.hardmax


class _AbstractRestrictedProvenance(AbstractRestricted, AbstractProvenance):
    def outside_certificate(self) -> tuple[str, ...]:
        return self.f.outside_certificate()


# capability of f -> the part that gives a slice the same capability (a part that
# refines another comes first, for a consistent method resolution order)
_PARTS = (
    (AbstractAffineLogits, _AbstractRestrictedAffineLogits),
    (AbstractBoundedEval, _AbstractRestrictedBoundedEval),
    (AbstractIntervalForward, _AbstractRestrictedIntervalForward),
    (AbstractExactProgram, _AbstractRestrictedExactProgram),
    (AbstractExactEval, _AbstractRestrictedExactEval),
    (AbstractAttention, _AbstractRestrictedAttention),
    (AbstractProvenance, _AbstractRestrictedProvenance),
)
_CLASSES: dict[tuple, type] = {}


def _restricted_class(f: AbstractPiecewiseLinear) -> type:
    """The final slice class with the capabilities of ``f`` (one per set, cached)."""
    parts = tuple(part for cap, part in _PARTS if isinstance(f, cap))
    cls = _CLASSES.get(parts)
    if cls is None:
        cls = type(
            "Restricted",
            parts or (AbstractRestricted,),
            {"__module__": __name__, "__doc__": AbstractRestricted.__doc__},
        )
        _CLASSES[parts] = cls
    return cls


def restrict(f, origin, directions) -> AbstractRestricted:
    """The piecewise-linear function ``t ↦ f(origin + t·directions)`` on a line (one
    direction) or a plane (two directions), so that an input of any dimension can be
    counted with :func:`count_linear_regions` (e.g. the plane through three data points:
    ``origin = p0``, ``directions = [p1 − p0, p2 − p0]``, t in the unit square or triangle).

    Args:
        f: an :class:`AbstractPiecewiseLinear` (a :class:`MaxoutNetwork`, a hardmax
            :class:`MaxoutTransformer`, …) or a ``torch.nn.Sequential`` of ``Linear`` and
            ``ReLU``/``LeakyReLU`` layers (converted by :meth:`MaxoutNetwork.from_torch`).
        origin: ``(d,)``.
        directions: ``(d,)`` or ``(r, d)`` with r ∈ {1, 2}: one direction per row.

    Example:
        >>> import numpy as np
        >>> from transflow.expressivity import MaxoutNetwork, restrict
        >>> net = MaxoutNetwork([np.array([[[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])],
        ...                     [np.zeros((1, 2))])          # relu(x1 + x2) on R^3
        >>> g = restrict(net, np.zeros(3), np.array([1.0, 0.0, 0.0]))
        >>> g.in_dim, float(g(np.array([2.0]))[0])
        (1, 2.0)
    """
    if not isinstance(f, AbstractPiecewiseLinear):
        try:
            import torch
        except ImportError:  # pragma: no cover
            torch = None
        if torch is not None and isinstance(f, torch.nn.Module):
            from ._maxout import MaxoutNetwork

            f = MaxoutNetwork.from_torch(f)
        else:
            raise TypeError(
                "restrict: `f` must be a piecewise-linear model of transflow.expressivity "
                "(MaxoutNetwork, hardmax MaxoutTransformer, ...) or a torch.nn.Sequential of "
                f"Linear/ReLU layers, got {type(f).__name__}."
            )
    d = f.in_dim
    o = np.asarray(check_values("origin", origin, "restrict"), np.float64)
    D = np.atleast_2d(np.asarray(check_values("directions", directions, "restrict"), np.float64))
    if o.shape != (d,):
        raise ValueError(f"restrict: `origin` must have shape ({d},) (f.in_dim), got {o.shape}.")
    if D.ndim != 2 or D.shape[1] != d or D.shape[0] not in (1, 2):
        raise ValueError(
            f"restrict: `directions` must have shape ({d},), (1, {d}) or (2, {d}) (one or two "
            f"directions of f's input space), got {np.shape(directions)}."
        )
    if np.linalg.matrix_rank(D) < D.shape[0]:
        raise ValueError("restrict: the `directions` must be linearly independent (non-zero).")
    dtype = _dtype_of(f)
    return _restricted_class(f)(f, jnp.asarray(o, dtype), jnp.asarray(D.T, dtype))


def _dtype_of(f):
    """The dtype of f's first array (a model's arrays share one dtype)."""
    import equinox as eqx
    import jax

    leaves = [leaf for leaf in jax.tree.leaves(f) if eqx.is_array(leaf)]
    return leaves[0].dtype if leaves else jnp.float64

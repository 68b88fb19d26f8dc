"""The interface the linear-region counter needs from a piecewise-linear model.

A model of this module is a composition of *max-groups*: at decision layer ``l`` it
computes a table of competing quantities ``logits_l(x)`` of shape ``(G_l, K_l)`` (``G_l``
independent groups with ``K_l`` competitors each) and continues with the winner of every
group. The **activation pattern** at ``x`` is the winner index of every group of every
layer (the lowest index on ties, as :func:`jax.numpy.argmax`):

- a maxout unit ``max_j z_j`` is one group with ``K = rank`` competitors;
- a ReLU ``max(u, 0)`` is a group with competitors ``(0, u)``, so winner 1 ⇔ ``u > 0``;
- a hardmax attention head is one group per query token with the scores over the keys
  as competitors (one group per head when every query token has the same query).

Given the pattern of layers ``< l`` the logits of layer ``l`` are affine in ``x`` (for the
constructions here, whose attention queries are constant), so every activation region is
a convex polyhedron, and the model restricted to one region is affine.

Certified counting (:func:`count_linear_regions`) needs more, declared as
**capabilities**: abstract classes a model inherits (the counters dispatch on them and
never probe for a method), for example

- :class:`AbstractBoundedEval`: the forward pass in floating point with a *running
  round-off bound* next to every quantity (``|computed − exact| ≤ bound``, the standard
  bound ``γ_n Σ|w||x|`` of a sum of n products, propagated through every operation),
  optionally with the pattern frozen;
- :class:`AbstractExactEval`: the same forward pass in exact rational arithmetic
  (:class:`fractions.Fraction`; every float weight is a dyadic rational), for the few
  places where round-off exceeds a logit gap.

A model is one final class: :class:`AbstractPiecewiseLinear` plus the capabilities it has
(docs/expressivity.md, "Adding an architecture").
"""

import abc
import math
import weakref
from fractions import Fraction

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from equinox import AbstractVar
from jaxtyping import Array, Float, Int

__all__ = [
    "AbstractAffineLogits",
    "AbstractAttention",
    "AbstractBoundedEval",
    "AbstractExactEval",
    "AbstractExactProgram",
    "AbstractIntervalForward",
    "AbstractPiecewiseLinear",
    "AbstractProvenance",
]


def unit_roundoff(dtype) -> float:
    """u = 2^-53 (float64) or 2^-24 (float32)."""
    return float(np.finfo(np.dtype(dtype)).eps) / 2


def gamma(n: int, dtype) -> float:
    """``γ_n = n u / (1 − n u)`` (Higham), inflated by 1 % to cover the round-off of the
    bound computation itself."""
    u = unit_roundoff(dtype)
    return 1.01 * n * u / (1.0 - n * u)


def safe_float(q) -> float:
    """``float(q)`` of an exact rational, ``±inf`` where it exceeds the float64 range
    (``float`` of a huge Fraction raises ``OverflowError``; counts never depend on it)."""
    try:
        return float(q)
    except OverflowError:
        return math.inf if q > 0 else -math.inf


_SPARSE: dict[int, tuple] = {}


def odot(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``X @ W`` of exact object arrays (over the last axis of X), skipping the zero
    weights: the constructions' matrices are sparse, and every skipped product saves a
    rational multiplication (the nonzero structure of W is cached while W lives)."""
    ent = _SPARSE.get(id(W))
    if ent is None or ent[0]() is not W:
        if len(_SPARSE) > 4096:
            _SPARSE.clear()
        cols = []
        for j in range(W.shape[1]):
            rows = [i for i in range(W.shape[0]) if W[i, j] != 0]
            cols.append((rows, [W[i, j] for i in rows]))
        ent = (weakref.ref(W), cols)
        _SPARSE[id(W)] = ent
    X = np.asarray(X, dtype=object)
    out = np.empty(X.shape[:-1] + (W.shape[1],), dtype=object)
    zero = X[..., 0] - X[..., 0]  # zeros of the element type
    for j, (rows, vals) in enumerate(ent[1]):
        acc = zero
        for i, w in zip(rows, vals):
            acc = acc + X[..., i] * w
        out[..., j] = acc
    return out


def to_fraction_array(a) -> np.ndarray:
    """An object array of exact :class:`Fraction` values of a float array."""
    a = np.asarray(a, np.float64)
    out = np.empty(a.shape, dtype=object)
    flat = out.reshape(-1)
    for i, v in enumerate(a.reshape(-1)):
        flat[i] = Fraction(float(v))
    return out


def exact_argmax(v: np.ndarray) -> np.ndarray:
    """Row-wise argmax of an object array of Fractions (lowest index on ties)."""
    v = np.asarray(v, dtype=object)
    out = np.zeros(v.shape[:-1], dtype=np.int64)
    for idx in np.ndindex(*v.shape[:-1]):
        row = list(v[idx])
        best = 0
        for j in range(1, len(row)):
            if row[j] > row[best]:
                best = j
        out[idx] = best
    return out


class AbstractPiecewiseLinear(eqx.Module):
    """A continuous piecewise-linear map ``R^d -> R^{d_out}`` built from max-groups.

    Subclasses implement :meth:`__call__` (one input ``x`` of shape ``(d,)``),
    :meth:`layer_logits` and :attr:`in_dim`. :meth:`pattern` is derived from them.

    What a counter may do with a model is declared by the **capabilities** it inherits
    (abstract classes of this module; a counter never probes for a method):

    - :class:`AbstractAffineLogits`: with the pattern frozen every logit is affine in x
      (activation regions are convex polyhedra; the 2-D counters and the affine 1-D paths
      need it);
    - :class:`AbstractBoundedEval`: :meth:`~AbstractBoundedEval.eval_bounded`, the float
      forward pass with running round-off bounds (the certified 1-D point walk);
    - :class:`AbstractExactEval`: :meth:`~AbstractExactEval.exact_params` and
      :meth:`~AbstractExactEval.exact_eval` in exact rational arithmetic (every exact path);
    - :class:`AbstractIntervalForward`: the forward pass on many 1-D intervals (the
      layerwise certified 1-D counter, with :class:`AbstractExactEval` for its holes);
    - :class:`AbstractExactProgram`: an exact integer affine program (fast exact 2-D
      partition and exact 1-D segments; otherwise three exact evaluations per polygon);
    - :class:`AbstractAttention`: attention read with ``hardmax`` or softmax (a softmax
      model is smooth and refused by the counters);
    - :class:`AbstractProvenance`: what a certificate does not cover (conversions).
    """

    @property
    @abc.abstractmethod
    def in_dim(self) -> int:
        """Input dimension d."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, " d"]) -> Float[Array, " d_out"]:
        """Evaluate the map at one point."""

    @abc.abstractmethod
    def layer_logits(self, x: Float[Array, " d"]) -> tuple[Float[Array, "G K"], ...]:
        """The competing quantities of every decision layer along the forward pass at x."""

    def output_and_logits(
        self, x: Float[Array, " d"]
    ) -> tuple[Float[Array, " d_out"], tuple[Float[Array, "G K"], ...]]:
        """``(f(x), layer_logits(x))``; subclasses may share one forward pass."""
        return self(x), self.layer_logits(x)

    def pattern(self, x: Float[Array, " d"]) -> Int[Array, " P"]:
        """The activation pattern at ``x``: winner per group, all layers, concatenated."""
        return jnp.concatenate(
            [jnp.argmax(z, axis=-1).astype(jnp.int32).ravel() for z in self.layer_logits(x)]
        )

    @property
    def affine_logits(self) -> bool:
        """True if the model declares :class:`AbstractAffineLogits`: with the pattern frozen
        every logit is affine in x (then activation regions are convex polyhedra).
        Input-dependent hardmax queries make them quadratic."""
        return isinstance(self, AbstractAffineLogits)


# --------------------------------------------------------------------------- capabilities
class AbstractAffineLogits(AbstractPiecewiseLinear):
    """Capability: with the activation pattern frozen, every logit is affine in x, so every
    activation region is a convex polyhedron (the 2-D counters and the affine 1-D paths
    need it). A model without it (e.g. input-dependent attention queries: quadratic
    scores) is counted in 1-D by :func:`exact_regions_1d` and refused in 2-D."""


class AbstractBoundedEval(AbstractPiecewiseLinear):
    """Capability: the float forward pass with a rigorous running round-off bound (the
    certified 1-D point walk of ``_certify`` needs it)."""

    @abc.abstractmethod
    def eval_bounded(self, x, ex=None, pattern=None):
        """``(y, y_err, logits, logit_errs, pattern)``: the forward pass with a rigorous
        running round-off bound on every output and logit (``ex``: a bound on the error of
        the input itself). With ``pattern`` (the flat winner vector of :meth:`pattern`),
        the winners are frozen to it (the affine map of that activation region)."""


class AbstractExactEval(AbstractPiecewiseLinear):
    """Capability: the forward pass in exact rational arithmetic (every exact path: the
    exact rational walk, :func:`exact_regions_1d`, the generic exact 2-D program)."""

    @abc.abstractmethod
    def exact_params(self):
        """The model's parameters as exact rationals (object arrays), for :meth:`exact_eval`."""

    @abc.abstractmethod
    def exact_eval(self, params, x, pattern=None):
        """``(y, logits, pattern)`` in exact rational arithmetic at a rational point ``x``
        (object array of Fractions); ``pattern`` freezes the winners as in
        :meth:`AbstractBoundedEval.eval_bounded`."""


class AbstractIntervalForward(AbstractPiecewiseLinear):
    """Capability: the forward pass on many 1-D intervals at once, for the fast layerwise
    certified counter (:mod:`transflow.expressivity._layerwise`; its holes are recounted
    exactly, so the counter takes it only with :class:`AbstractExactEval`)."""

    @abc.abstractmethod
    def interval_forward(self, ctx, x):
        """``x`` is an ``IntervalAffine`` of shape ``(N, d)`` (affine in the line parameter t
        on every interval, with rigorous error bounds); the model computes with
        ``ctx.lin``, ``ctx.add``, ``ctx.const``, ``ctx.scores``, calls
        ``ctx.decide(logits, values)`` at every decision layer (same order and group layout
        as :meth:`layer_logits`), moves earlier quantities with ``ctx.carry`` and returns
        the output ``(N, d_out)``."""


class AbstractExactProgram(AbstractExactEval):
    """Capability: an exact integer affine program (``transflow.expressivity._programs``)
    for the exact 2-D partition and the exact 1-D segments (one exact affine step per
    polygon and layer). Without it, the 2-D counter uses three exact evaluations per
    polygon and layer, and the 1-D holes the exact rational walk."""

    @abc.abstractmethod
    def exact_program(self):
        """The model's :class:`transflow.expressivity._programs.ExactProgram`."""


class AbstractAttention(AbstractPiecewiseLinear):
    """Capability: a model whose attention is read with hardmax (``hardmax`` True: piecewise
    linear) or with softmax (``hardmax`` False: smooth, no linear regions; the counters
    refuse it)."""

    hardmax: AbstractVar[bool]


class AbstractProvenance(AbstractPiecewiseLinear):
    """Capability: the model says what a region certificate about it does **not** cover
    (a conversion in float64 before the model was stored)."""

    @abc.abstractmethod
    def outside_certificate(self) -> tuple[str, ...]:
        """Sentences naming what lies outside the certificate (empty: nothing)."""


CAPABILITIES = (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractIntervalForward,
    AbstractExactProgram,
    AbstractAttention,
    AbstractProvenance,
)

_NEEDS = {
    AbstractAffineLogits: "affine logits with the pattern frozen",
    AbstractBoundedEval: "eval_bounded",
    AbstractExactEval: "exact_params/exact_eval",
    AbstractIntervalForward: "interval_forward",
    AbstractExactProgram: "exact_program",
    AbstractAttention: "hardmax",
    AbstractProvenance: "outside_certificate",
}


def lacks(f, capability, who: str, why: str) -> str:
    """The one-line refusal of ``who`` for a model without ``capability``."""
    return (
        f"{who}: {type(f).__name__} does not inherit {capability.__name__} "
        f"({_NEEDS[capability]}), which {why}; add it to the model's bases and implement it."
    )

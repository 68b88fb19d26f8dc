"""A model behind a chosen subset of its capabilities (tests only).

``only(f, *capabilities)`` is f (same function, same patterns) declared with only the
given capabilities of ``transflow.expressivity``, each delegated to f: how a test takes a
path of a counter that f's full set of capabilities would not take (the point walk of a
model without interval_forward, the exact walk of a model without an exact program, no
exact evaluation at all). The counters dispatch on the capabilities a model inherits, so
this is a new architecture, with no edit of the counters.
"""

from __future__ import annotations

from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractExactProgram,
    AbstractIntervalForward,
    AbstractPiecewiseLinear,
)

__all__ = ["only"]


class _AbstractOnly(AbstractPiecewiseLinear):
    f: AbstractPiecewiseLinear

    @property
    def in_dim(self):
        return self.f.in_dim

    def __call__(self, x):
        return self.f(x)

    def layer_logits(self, x):
        return self.f.layer_logits(x)

    def output_and_logits(self, x):
        return self.f.output_and_logits(x)


class _AbstractOnlyAffine(_AbstractOnly, AbstractAffineLogits):
    pass


class _AbstractOnlyBounded(_AbstractOnly, AbstractBoundedEval):
    def eval_bounded(self, x, ex=None, pattern=None):
        return self.f.eval_bounded(x, ex, pattern)


class _AbstractOnlyInterval(_AbstractOnly, AbstractIntervalForward):
    def interval_forward(self, ctx, x):
        return self.f.interval_forward(ctx, x)


class _AbstractOnlyExact(_AbstractOnly, AbstractExactEval):
    def exact_params(self):
        return self.f.exact_params()

    def exact_eval(self, params, x, pattern=None):
        return self.f.exact_eval(params, x, pattern)


class _AbstractOnlyProgram(_AbstractOnlyExact, AbstractExactProgram):
    def exact_program(self):
        return self.f.exact_program()


_PARTS = {
    AbstractAffineLogits: _AbstractOnlyAffine,
    AbstractBoundedEval: _AbstractOnlyBounded,
    AbstractIntervalForward: _AbstractOnlyInterval,
    AbstractExactProgram: _AbstractOnlyProgram,
    AbstractExactEval: _AbstractOnlyExact,
}
_CLASSES: dict = {}


def only(f: AbstractPiecewiseLinear, *capabilities) -> AbstractPiecewiseLinear:
    """f with only ``capabilities`` (each must be one of f's)."""
    for cap in capabilities:
        assert isinstance(f, cap), (type(f).__name__, cap.__name__)
    parts = tuple(part for cap, part in _PARTS.items() if cap in capabilities)
    cls = _CLASSES.get(parts)
    if cls is None:
        cls = _CLASSES[parts] = type("Only", parts or (_AbstractOnly,), {"__module__": __name__})
    return cls(f)

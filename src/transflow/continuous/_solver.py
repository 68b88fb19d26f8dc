"""A splitting scheme as a :class:`diffrax.AbstractSolver`.

:class:`SplittingSolver` runs one step of a :class:`SplittingScheme` per diffrax step, so
``diffrax.diffeqsolve`` (fixed step sizes, ``SaveAt``, adjoints) works unchanged. The
``terms`` argument of ``diffeqsolve`` is used only for :meth:`func` (e.g. an initial step
size guess); the step itself uses the scheme's sub-flows, like diffrax's own
``SemiImplicitEuler`` (a two-term Lie splitting) uses its terms one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import diffrax
import equinox as eqx

from ._schemes import Flow, SplittingScheme

__all__ = ["SplittingSolver"]


class SplittingSolver(diffrax.AbstractSolver):
    """Use a splitting scheme (with its sub-flows) as a fixed-step diffrax solver.

    Attributes:
        scheme: the :class:`SplittingScheme`; :meth:`order` is its declared order.
        flows: ``{operator name: flow}`` (see :meth:`SubModel.flows`).

    Example:
        >>> import diffrax, jax.numpy as jnp
        >>> from transflow.continuous import SplittingSolver, linear_flow_exact, strang
        >>> a, b = -jnp.eye(2), jnp.array([[0.0, 1.0], [-1.0, 0.0]])
        >>> solver = SplittingSolver(strang(["a", "b"]),
        ...                          {"a": linear_flow_exact(a), "b": linear_flow_exact(b)})
        >>> term = diffrax.ODETerm(lambda t, u, args: u @ (a + b))
        >>> sol = diffrax.diffeqsolve(term, solver, 0.0, 1.0, 0.125, jnp.ones((1, 2)))
        >>> sol.ys.shape
        (1, 1, 2)
    """

    scheme: SplittingScheme
    flows: Mapping[str, Flow] = eqx.field(static=True)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable[..., diffrax.LocalLinearInterpolation]] = (
        diffrax.LocalLinearInterpolation
    )

    def __check_init__(self):
        missing = [op for op in self.scheme.operators if op not in self.flows]
        if missing:
            raise ValueError(
                f"SplittingSolver: `flows` lacks {missing} needed by scheme "
                f"{self.scheme.name!r}; got {sorted(self.flows)}."
            )

    def order(self, terms):
        return self.scheme.order

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump, args, terms
        y1 = self.scheme.step(self.flows, t0, t1 - t0, y0)
        return y1, None, dict(y0=y0, y1=y1), None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

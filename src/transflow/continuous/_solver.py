"""A splitting scheme as a :class:`diffrax.AbstractSolver`, with sub-flows derived from the
diffrax terms it is given.

:class:`SplittingSolver` runs one step of a :class:`SplittingScheme` per diffrax step, so
``diffrax.diffeqsolve`` (fixed step sizes, ``SaveAt``) works unchanged. The ``terms`` of
``diffeqsolve`` are the split operators: a :class:`diffrax.MultiTerm` whose k-th term is
the operator ``operators[k]`` of the scheme (or one term for one operator). Each sub-flow
is built from its term (:func:`flows_from_terms`), like diffrax's own ``SemiImplicitEuler``
(a two-term Lie splitting) uses its terms one by one:

- a :class:`diffrax.ODETerm` ``f`` is solved by ``sub_solver`` (``"rk4"``: ``n_sub``
  classical Runge–Kutta steps, order 4; ``"euler"``: one explicit Euler step, order 1);
- a :class:`ProjectionTerm` (the normal cone N_S of a closed set S) is solved exactly by
  the projection onto S (its flow for any positive time, docs/spec/continuous-model.md §3.3 / §8.3).

The solver's :meth:`~SplittingSolver.order` is the order of what it runs: the scheme's
declared order capped by the order of its sub-flows (an Euler sub-flow makes Strang first
order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Literal

import diffrax
import equinox as eqx
import jax.numpy as jnp

from .._errors import check_callable, check_kind, check_number
from ._flows import make_flow, projection_flow
from ._schemes import Flow, SplittingScheme

__all__ = ["ProjectionTerm", "SplittingSolver", "flows_from_terms"]

SUB_SOLVER_ORDER = {"euler": 1, "rk4": 4}


class ProjectionTerm(diffrax.AbstractTerm):
    """The normal cone N_S(t) of a closed set as a diffrax term, for splitting solvers.

    Its sub-flow (:func:`flows_from_terms`) over ``[t0, t1]`` is ``project(t1, y, args)``
    whatever the duration. As a vector field it contributes nothing (``vf = 0``): the
    normal cone vanishes in the interior of S, so :meth:`SplittingSolver.func` (used for
    initial step-size guesses) is the sum of the smooth terms.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import ProjectionTerm
        >>> term = ProjectionTerm(lambda t, y, args: jnp.maximum(y, 0.0))
        >>> term.project(0.0, jnp.array([-1.0, 2.0]), None).tolist()
        [0.0, 2.0]
    """

    project: Callable

    def __check_init__(self):
        check_callable("project", self.project, "ProjectionTerm", "lambda t, y, args: ...")

    def vf(self, t, y, args):
        return jnp.zeros_like(y)

    def contr(self, t0, t1, **kwargs):
        return t1 - t0

    def prod(self, vf, control):
        return vf * control


def flows_from_terms(
    operators: Sequence[str],
    terms: diffrax.AbstractTerm,
    args=None,
    *,
    sub_solver: Literal["euler", "rk4"] = "rk4",
    n_sub: int = 1,
) -> dict[str, Flow]:
    """Sub-flows ``{operators[k]: flow}`` from the k-th term of ``terms``.

    Args:
        operators: the operator names, one per term, in the order of ``terms.terms``.
        terms: a :class:`diffrax.MultiTerm` (or a single term for one operator) of
            :class:`diffrax.ODETerm` and :class:`ProjectionTerm` instances.
        args: the ``args`` passed to every term.
        sub_solver, n_sub: how an ``ODETerm`` is solved (see the module docstring).

    Example:
        >>> import diffrax, jax.numpy as jnp
        >>> from transflow.continuous import flows_from_terms
        >>> fl = flows_from_terms(["decay"], diffrax.ODETerm(lambda t, y, a: -y),
        ...                       sub_solver="euler")
        >>> float(fl["decay"](0.0, 0.5, jnp.ones(()), 1.0))
        0.5
    """
    owner = "flows_from_terms"
    if not isinstance(operators, list | tuple) or not all(isinstance(o, str) for o in operators):
        raise TypeError(
            f"{owner}: `operators` must be a list of operator names (str), got "
            f"{operators!r:.40}; pass e.g. ['attention', 'linear']."
        )
    check_kind("terms", terms, diffrax.AbstractTerm, owner, "pass diffrax.MultiTerm(...)")
    check_number("n_sub", n_sub, owner, lower=0, integer=True, example="1")
    ops = tuple(operators)
    parts = terms.terms if isinstance(terms, diffrax.MultiTerm) else (terms,)
    if len(parts) != len(ops):
        raise ValueError(
            f"`terms` must hold one term per operator {ops} ({len(ops)}), got {len(parts)} "
            "terms; pass diffrax.MultiTerm(*terms) in the order of `operators`."
        )
    if sub_solver not in SUB_SOLVER_ORDER:
        raise ValueError(f"`sub_solver` must be 'euler' or 'rk4', got {sub_solver!r}.")
    flows: dict[str, Flow] = {}
    for name, term in zip(ops, parts):
        inner, direction = _unwrap(term)
        if isinstance(inner, ProjectionTerm):
            flows[name] = projection_flow(
                lambda t, y, p=inner.project, s=direction: p(s * t, y, args)
            )
        elif isinstance(inner, diffrax.ODETerm):
            # the (possibly direction-wrapped) term's own vector field
            field = lambda t, y, vf=term.vf: vf(t, y, args)  # noqa: E731
            flows[name] = make_flow(field, sub_solver, n_sub)
        else:
            raise TypeError(
                f"term for operator {name!r} must be a diffrax.ODETerm or a ProjectionTerm, "
                f"got {type(inner).__name__}."
            )
    return flows


def _unwrap(term):
    """The user's term inside diffrax's direction wrapper, and the time direction."""
    direction = 1
    while not isinstance(term, ProjectionTerm | diffrax.ODETerm) and isinstance(
        getattr(term, "term", None), diffrax.AbstractTerm
    ):
        direction = direction * getattr(term, "direction", 1)
        term = term.term
    return term, direction


class SplittingSolver(diffrax.AbstractSolver):
    """A splitting scheme as a fixed-step diffrax solver; its sub-flows come from ``terms``.

    Attributes:
        scheme: the :class:`SplittingScheme`.
        operators: the operator name of each term of the ``MultiTerm`` given to
            ``diffeqsolve`` (default: ``scheme.operators``, in that order).
        sub_solver: ``"rk4"`` (order 4) or ``"euler"`` (order 1) for ``ODETerm``\\ s.
        n_sub: RK4/Euler sub-steps per sub-flow.

    :meth:`order` is ``min(scheme.order, order of the sub-flows)``: what the solver runs.

    Example:
        >>> import diffrax, jax.numpy as jnp
        >>> from transflow.continuous import SplittingSolver, strang
        >>> a, b = -jnp.eye(2), jnp.array([[0.0, 1.0], [-1.0, 0.0]])
        >>> terms = diffrax.MultiTerm(diffrax.ODETerm(lambda t, u, args: u @ a),
        ...                           diffrax.ODETerm(lambda t, u, args: u @ b))
        >>> solver = SplittingSolver(strang(["a", "b"]))
        >>> euler = SplittingSolver(strang(["a", "b"]), sub_solver="euler")
        >>> solver.order(terms), euler.order(terms)
        (2, 1)
        >>> sol = diffrax.diffeqsolve(terms, solver, 0.0, 1.0, 0.125, jnp.ones((1, 2)))
        >>> sol.ys.shape
        (1, 1, 2)
    """

    scheme: SplittingScheme
    operators: tuple[str, ...] | None = eqx.field(static=True, default=None)
    sub_solver: Literal["euler", "rk4"] = eqx.field(static=True, default="rk4")
    n_sub: int = eqx.field(static=True, default=1)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar[Callable[..., diffrax.LocalLinearInterpolation]] = (
        diffrax.LocalLinearInterpolation
    )

    def __check_init__(self):
        check_number("n_sub", self.n_sub, "SplittingSolver", lower=0, integer=True, example="1")
        if self.sub_solver not in SUB_SOLVER_ORDER:
            raise ValueError(
                f"SplittingSolver: `sub_solver` must be 'euler' or 'rk4', got {self.sub_solver!r}."
            )
        if self.operators is not None:
            missing = [op for op in self.scheme.operators if op not in self.operators]
            if missing:
                raise ValueError(
                    f"SplittingSolver: `operators` lacks {missing} needed by scheme "
                    f"{self.scheme.name!r}; got {list(self.operators)}."
                )

    @property
    def operator_names(self) -> tuple[str, ...]:
        return self.scheme.operators if self.operators is None else tuple(self.operators)

    def order(self, terms):
        parts = terms.terms if isinstance(terms, diffrax.MultiTerm) else (terms,)
        smooth = [p for p in parts if not isinstance(_unwrap(p)[0], ProjectionTerm)]
        sub = SUB_SOLVER_ORDER[self.sub_solver] if smooth else self.scheme.order
        return min(self.scheme.order, sub)

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        flows = flows_from_terms(
            self.operator_names, terms, args, sub_solver=self.sub_solver, n_sub=self.n_sub
        )
        y1 = self.scheme.step(flows, t0, t1 - t0, y0)
        return y1, None, dict(y0=y0, y1=y1), None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

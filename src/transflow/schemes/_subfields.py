"""The sub-fields a(u) = 𝒜(P_{S1} u) and g(u) = ℱ(P_{S1'} u) of the pre-norm form, and the
post-norm form's projections, as the operators (real or linear test ones) that the
Strang and Runge–Kutta steps are written in. Shared by :mod:`._strang`,
:mod:`._runge_kutta` and the linear stability analysis (:mod:`._stability`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
from jaxtyping import Array

from .._controls import LayerControls
from .._errors import check_choice
from ._base import AbstractScheme, _project, attend, ffn_branch

__all__ = ["Field"]

Field = Callable[[Array], Array]


class _Ops(NamedTuple):
    """The sub-operators a scheme's step is written in (real ones or linear test ones).

    ``attn``/``ffn``: the sub-fields a, g; ``proj_attn``/``proj_ffn``: the projections the
    post-norm form applies after a sub-flow (identity in the linear test problem).
    """

    attn: Field
    ffn: Field
    proj_attn: Field
    proj_ffn: Field


def _identity(u):
    return u


def _is_staged(controls) -> bool:
    """Whether ``controls`` carry a leading stage axis (θ at each node of the step)."""
    return controls.attn.wq.ndim == 3


def _at(controls, i: int):
    return jax.tree.map(lambda x: x[i], controls) if _is_staged(controls) else controls


class _ExplicitBase(AbstractScheme):
    """The real sub-operators of the pre-/post-norm forms (subclasses hold the options
    ``hardmax``, ``temperature``, ``implementation``)."""

    def _ops(self, c: LayerControls, grid, causal, masks, form: str) -> _Ops:
        def attention_op(v):
            return attend(self, v, c.attn, grid=grid, causal=causal, masks=masks)

        def p1(v):
            return _project(v, c.norm1, grid)

        def p2(v):
            return _project(v, c.norm2, grid)

        if form == "prenorm":
            return _Ops(
                lambda v: attention_op(p1(v)),
                lambda v: ffn_branch(p2(v), c.ffn, 1.0),
                _identity,
                _identity,
            )
        return _Ops(attention_op, lambda v: ffn_branch(v, c.ffn, 1.0), p1, p2)


def _check_options(self) -> None:
    check_choice("implementation", self.implementation, ("auto", "dense", "chunked"))

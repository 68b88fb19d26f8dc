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

from .._controls import FFNParams, LayerControls
from .._errors import check_same_shape, check_values
from ._base import (
    AbstractLinearStability,
    AbstractMaskable,
    AbstractODEScheme,
    AbstractShardable,
    AttentionOptions,
    _exact,
    _ffn_branch,
)

__all__ = ["AbstractExplicitScheme", "Field", "SubFields", "linear_sub_fields"]

Field = Callable[[Array], Array]


class SubFields(NamedTuple):
    """The sub-operators a scheme's step is written in (real ones or linear test ones).

    ``attn``/``ffn``: the sub-fields a, g; ``proj_attn``/``proj_ffn``: the projections the
    post-norm form applies after a sub-flow (identity in the linear test problem);
    ``ffn2``: the second FFN sub-field of the untied Macaron layer (``None``: ``ffn``).
    """

    attn: Field
    ffn: Field
    proj_attn: Field
    proj_ffn: Field
    ffn2: Field | None = None


def _identity(u):
    return u


def _is_staged(controls) -> bool:
    """Whether ``controls`` carry a leading stage axis (θ at each node of the step)."""
    return controls.attn.wq.ndim == 3


def _at(controls, i: int):
    return jax.tree.map(lambda x: x[i], controls) if _is_staged(controls) else controls


class AbstractExplicitScheme(
    AttentionOptions,
    AbstractODEScheme,
    AbstractLinearStability,
    AbstractShardable,
    AbstractMaskable,
):
    """An explicit family written in the sub-fields a, g (Strang, Runge–Kutta, or a new
    one): :meth:`sub_fields` gives the real sub-operators of the pre-/post-norm forms from
    the :class:`AbstractOperators` its ``advance`` receives, :func:`linear_sub_fields` the
    linear ones of the stability analysis. It declares :class:`AbstractODEScheme`,
    :class:`AbstractLinearStability`, :class:`AbstractShardable` and
    :class:`AbstractMaskable`: a subclass implements ``advance``, ``substep_names``,
    ``order``, ``nodes``, ``stability_function`` and ``linear_step_matrix``."""

    def sub_fields(self, c: LayerControls, ops, form: str, parts=None) -> SubFields:
        """The sub-operators of controls ``c`` in the operators ``ops``; ``parts``: the
        sub-steps of ``c.ffn`` each FFN sub-field runs (default: one field, all of them;
        two for the untied Macaron layer, :func:`split_substeps`)."""
        parts = (None,) if parts is None else parts

        def attention_op(v):
            return ops.attention(self, v, c.attn)

        def p1(v):
            return ops.project(v, c.norm1)

        def p2(v):
            return ops.project(v, c.norm2)

        pre = form == "prenorm"

        def ffn_field(part):
            return lambda v: _ffn_branch(
                p2(v) if pre else v, c.ffn, 1.0, _exact, False, ops.linear, part
            )

        fields = [ffn_field(part) for part in parts]
        second = fields[1] if len(fields) > 1 else None
        if pre:
            return SubFields(lambda v: attention_op(p1(v)), fields[0], _identity, _identity, second)
        return SubFields(attention_op, fields[0], p1, p2, second)


def linear_sub_fields(ja, jg) -> SubFields:
    """The linear sub-fields a(u) = u J_a, g(u) = u J_g, the projections the identity."""
    ja = check_values("ja", ja, "linear_sub_fields", square=True)
    jg = check_values("jg", jg, "linear_sub_fields", square=True)
    check_same_shape(("ja", "jg"), ja, jg, "linear_sub_fields")
    return SubFields(lambda u: u @ ja, lambda u: u @ jg, _identity, _identity)


def split_substeps(ffn: FFNParams, copies: int, owner: str) -> tuple[range, ...]:
    """The sub-steps of each of the ``copies`` FFNs that ``ffn`` holds one after the other
    (``LayerControls.random(..., ffn_copies=copies)``); each keeps the activation rule of
    an FFN (after every sub-step but its own last)."""
    J = ffn.num_substeps
    if J % copies or J // copies < 2:
        raise ValueError(
            f"{owner}: the controls' FFN must hold {copies} FFNs of at least 2 sub-steps "
            f"each, one after the other ({copies} x J sub-steps), got {J} sub-step(s). Draw "
            f"them with LayerControls.random(..., ffn_copies={copies}) (the model builders do "
            "this for the scheme's `ffn_copies`)."
        )
    k = J // copies
    return tuple(range(i * k, (i + 1) * k) for i in range(copies))


def split_ffn(ffn: FFNParams, copies: int, owner: str) -> tuple[FFNParams, ...]:
    """The ``copies`` FFNs of :func:`split_substeps` as :class:`FFNParams`."""
    return tuple(
        FFNParams(
            ffn.weights[r.start : r.stop],
            ffn.biases[r.start : r.stop],
            ffn.residual[r.start : r.stop],
            ffn.activation,
            ffn.activation_on_last,
        )
        for r in split_substeps(ffn, copies, owner)
    )

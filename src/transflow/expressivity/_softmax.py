"""Softmax attention as an approximate max: the sharp constant and the propagated bound
(docs/spec/maxout-expressivity.md §3.6)."""

from __future__ import annotations

import math

import numpy as np

from .._errors import check_number, check_step, check_values
from ._maxout import MaxoutNetwork

__all__ = ["lambert_w", "softmax_max_constant", "softmax_gap_error", "softmax_error_bound"]


def lambert_w(z: float) -> float:
    """Principal branch ``W(z)`` of the Lambert-W function (``W e^W = z``) for ``z ≥ 0``.

    Halley iteration from ``log1p(z)``; converges to float64 round-off.

    Example:
        >>> from transflow.expressivity import lambert_w
        >>> round(lambert_w(1.0), 12)     # the omega constant
        0.56714329041
    """
    z = float(z)
    if not (z >= 0 and math.isfinite(z)):
        raise ValueError(f"lambert_w: `z` must be a finite number >= 0, got {z!r}.")
    w = math.log1p(z)
    for _ in range(100):
        ew = math.exp(w)
        f = w * ew - z
        wp1 = w + 1.0
        step = f / (ew * wp1 - (w + 2.0) * f / (2.0 * wp1))
        w -= step
        if abs(step) <= 1e-16 * max(1.0, abs(w)):
            break
    return w


def softmax_max_constant(n_tokens: int) -> float:
    """The sharp constant ``c_T = W((T−1)/e)`` of a softmax max-head over T keys.

    For scores ``s_1 ≥ … `` with values equal to the scores,
    ``max_t s_t − Σ_t softmax(λ s)_t s_t ≤ c_T / λ``, attained when the T−1 other
    scores sit at the common gap ``Δ = (1 + W((T−1)/e))/λ`` (docs/spec/maxout-expressivity.md §3.6).
    """
    check_number("n_tokens", n_tokens, "softmax_max_constant", lower=0, integer=True, example="4")
    return lambert_w((n_tokens - 1) / math.e)


def softmax_gap_error(gap, lam: float, n_tokens: int):
    """Error of a softmax max-head when the T−1 other scores sit ``gap`` below the max:
    ``Δ (T−1) e^{−λΔ} / (1 + (T−1) e^{−λΔ})`` (vectorised over ``gap``)."""
    g = np.asarray(check_values("gap", gap, "softmax_gap_error"), np.float64)
    if np.any(g < 0):
        raise ValueError(f"softmax_gap_error: `gap` must be >= 0 (below the max), got {gap!r}.")
    check_step("lam", lam, "softmax_gap_error")
    check_number("n_tokens", n_tokens, "softmax_gap_error", lower=0, integer=True, example="4")
    a = (n_tokens - 1) * np.exp(-lam * g)
    return g * a / (1.0 + a)


def softmax_error_bound(net: MaxoutNetwork, lam: float, n_tokens: int) -> float:
    """Sup-norm bound on ``|y − ỹ|`` for the softmax transformer at scale λ
    (docs/spec/maxout-expressivity.md §3.6).

    ``δ_ℓ ≤ Lip_ℓ δ_{ℓ−1} + c_T/λ`` with ``δ_0 = 0`` and ``Lip_ℓ = max_{i,j} ||w^ℓ_{ij}||_1``,
    then ``|y − ỹ|_∞ ≤ ||A||_∞ δ_L``. Valid when the gating bounds cover the perturbed
    pieces, ``B_ℓ ≥ B_ℓ^{IBP} + Lip_ℓ δ_{ℓ−1}`` (see :meth:`MaxoutTransformer.softmax_error_bound`,
    which checks this).
    """
    if not (lam > 0 and math.isfinite(lam)):
        raise ValueError(f"softmax_error_bound: `lam` must be a finite number > 0, got {lam!r}.")
    c = softmax_max_constant(n_tokens) / lam
    delta = 0.0
    for lip in net.lipschitz():
        delta = lip * delta + c
    a_inf = float(np.abs(np.asarray(net.readout_weight)).sum(-1).max())
    return a_inf * delta


def softmax_deltas(net: MaxoutNetwork, lam: float, n_tokens: int) -> list[float]:
    """The per-layer bounds δ_0 = 0, δ_1, …, δ_L of :func:`softmax_error_bound`."""
    c = softmax_max_constant(n_tokens) / lam
    out = [0.0]
    for lip in net.lipschitz():
        out.append(lip * out[-1] + c)
    return out

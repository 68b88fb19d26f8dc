"""Token geometry and operator budgets along a flow, streamed step by step.

Per state u (one sequence, ``(n, d)``):

- pairwise cosine similarity of the tokens u(x_i, ·) (raw, not centred: on S1(0, σ2) the
  tokens lie on a sphere of radius σ2·√d and the cosine is the particle-view angle of
  Geshkovski, Letrouit, Polyanskiy, Rigollet);
- the number of clusters at a threshold τ: connected components of the graph
  "cos(u_i, u_j) ≥ τ" (single linkage);
- the effective rank exp(H(p)) of u, p_k = s_k/Σ s_k over its singular values
  (Roy & Vetterli, 2007): 1 when every token is a multiple of one vector, up to min(n, d);
- the distance to S1(σ1, σ2): by Theorem 3.1 the L²(Ω_y) distance of a token with mean α
  and standard deviation s to S1(σ1, σ2), per |Ω_y|, is √((α − σ1)² + (s − σ2)²); we report
  its root mean square over the tokens (0 exactly on S1);

and per sub-step the Frobenius norm of the increment it makes, ‖s_k − s_parent‖, where
the parent is the state the operator acts on (the previous sub-step in the Lie scheme; in
pre-LN schemes the residual stream for the attention and FFN updates, whose increments
are Δt·𝒜 and Δt·ℱ). Lifting sub-steps (``d_ff ≠ d``) change the width and have no
increment (NaN).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import check_callable, check_flag, check_number, check_values
from ..schemes._base import AbstractPostNorm, has
from ._flow import Flow, as_flow, iter_steps

__all__ = [
    "cosine_matrix",
    "count_clusters",
    "effective_rank",
    "distance_to_s1",
    "substep_parents",
    "step_diagnostics",
    "STEP_QUANTITIES",
]

#: The per-step quantities of :func:`step_diagnostics` (one value per state, step 0 … N_t).
STEP_QUANTITIES = (
    "mean_cosine",
    "min_cosine",
    "n_clusters",
    "effective_rank",
    "distance_s1",
    "state_norm",
)


def cosine_matrix(u: Float[Array, "n d"]) -> Float[Array, "n n"]:
    """Pairwise cosine similarity of the tokens (rows) of ``u``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.analysis import cosine_matrix
        >>> cosine_matrix(jnp.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])).tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    u = check_values("u", u, "cosine_matrix", ndim=2)
    norms = jnp.linalg.norm(u, axis=-1, keepdims=True)
    v = u / jnp.where(norms > 0, norms, 1.0)
    return jnp.clip(v @ v.T, -1.0, 1.0)


def count_clusters(u_or_cos, threshold: float = 0.99, *, is_cosine: bool = False) -> int:
    """Number of token clusters: connected components of ``cos(u_i, u_j) ≥ threshold``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.analysis import count_clusters
        >>> count_clusters(jnp.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]]), 0.99)
        2
    """
    from scipy.sparse.csgraph import connected_components

    check_number(
        "threshold", threshold, "count_clusters", lower=-1, upper=1, strict=False, example="0.99"
    )
    u_or_cos = check_values("u_or_cos", u_or_cos, "count_clusters", ndim=2)
    cos = np.asarray(u_or_cos if is_cosine else cosine_matrix(u_or_cos))
    n, _ = connected_components(cos >= threshold, directed=False)
    return int(n)


def effective_rank(u: Float[Array, "n d"]) -> Float[Array, ""]:
    """exp of the entropy of the normalized singular values of ``u`` (Roy & Vetterli).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.analysis import effective_rank
        >>> round(float(effective_rank(jnp.eye(3))), 4), round(float(effective_rank(
        ...     jnp.ones((4, 3)))), 4)
        (3.0, 1.0)
    """
    u = check_values("u", u, "effective_rank", ndim=2)
    s = jnp.linalg.svd(u, compute_uv=False)
    p = s / jnp.maximum(jnp.sum(s), jnp.finfo(s.dtype).tiny)
    h = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0))
    return jnp.exp(h)


def distance_to_s1(u: Float[Array, "n d"], sigma1=0.0, sigma2=1.0) -> Float[Array, ""]:
    """Root-mean-square over tokens of the distance to S1(σ1, σ2), per |Ω_y|.

    For a token with mean α and (population) standard deviation s over the features, the
    distance to the closest point of S1(σ1, σ2) (Theorem 3.1) is
    ``√d · √((α − σ1)² + (s − σ2)²)``; dividing by √d = √|Ω_y| makes it comparable across
    widths. Zero exactly on S1 (e.g. after a LayerNorm with scalar gain σ2 and bias σ1).

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow import project_s1
        >>> from transflow.analysis import distance_to_s1
        >>> u = jnp.arange(12.0).reshape(3, 4)
        >>> v = project_s1(u)
        >>> float(distance_to_s1(v)) < 1e-6, round(float(distance_to_s1(2 * v)), 5)
        (True, 1.0)
    """
    u = check_values("u", u, "distance_to_s1", ndim=2)
    check_number("sigma1", sigma1, "distance_to_s1", example="0.0", traced_ok=True)
    check_number(
        "sigma2", sigma2, "distance_to_s1", lower=0, strict=False, example="1.0", traced_ok=True
    )
    alpha = jnp.mean(u, axis=-1)
    s = jnp.sqrt(jnp.mean((u - alpha[:, None]) ** 2, axis=-1))
    return jnp.sqrt(jnp.mean((alpha - sigma1) ** 2 + (s - sigma2) ** 2))


def substep_parents(names: tuple[str, ...]) -> dict[str, str]:
    """The state each sub-step acts on (its increment is ``state − parent``).

    ``"input"`` is the state at the start of the step. Lie scheme (``attention, ln1,
    ffn1 … ffnJ, relax, ln2``): the previous sub-step. Pre-norm schemes (``ln1, attention,
    ln2, ffn1 … ffnJ, residual``; Llama's ``rms1, attention, rms2, gate, ffn, residual``):
    the projections and the attention update act on the
    residual stream (``ln1``, ``attention`` ← input; ``ln2``, ``residual`` ← attention), the
    first FFN sub-step on ``ln2``. Other schemes: the previous sub-step.

    Example:
        >>> from transflow.analysis import substep_parents
        >>> substep_parents(("ln1", "attention", "ln2", "ffn1", "ffn2", "residual"))["residual"]
        'attention'
    """
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise TypeError(
            f"substep_parents: `names` must be a tuple of sub-step names (str), got "
            f"{names!r:.60}; pass e.g. scheme.substep_names(theta)."
        )
    names = tuple(names)
    prenorm = len(names) >= 4 and names[1] == "attention" and names[-1] == "residual"
    if prenorm:  # ln1/rms1, attention, ln2/rms2, FFN sub-steps, residual
        n1, n2 = names[0], names[2]
        out = {n1: "input", "attention": "input", n2: "attention", "residual": "attention"}
        prev = n2
        for name in names[3:-1]:
            out[name] = prev
            prev = name
        return out
    out, prev = {}, "input"
    for name in names:
        out[name] = prev
        prev = name
    return out


def _s1_reference(flow: Flow, s1) -> Callable[[int], tuple[Any, Any]]:
    """(σ1, σ2) for the state after step n (n = 0: the initial condition)."""
    if s1 != "auto":
        sig = (float(s1[0]), float(s1[1]))
        return lambda n: sig
    if not has(flow.scheme, AbstractPostNorm):
        return lambda n: (0.0, 1.0)
    c = flow.controls

    def ref(n: int):
        if n == flow.num_steps and flow.final_norm is not None:
            norm = flow.final_norm
            return jnp.mean(norm.bias), jnp.mean(norm.gain)
        if n == 0:
            return jnp.mean(c.norm1.bias[0]), jnp.mean(c.norm1.gain[0])
        return jnp.mean(c.norm2.bias[n - 1]), jnp.mean(c.norm2.gain[n - 1])

    return ref


@eqx.filter_jit
def _state_stats(u, sigma1, sigma2):
    cos = cosine_matrix(u)
    n = u.shape[0]
    off = ~jnp.eye(n, dtype=bool)
    denom = max(n * (n - 1), 1)
    mean_cos = jnp.sum(jnp.where(off, cos, 0.0)) / denom
    min_cos = jnp.min(jnp.where(off, cos, jnp.inf)) if n > 1 else jnp.asarray(1.0, u.dtype)
    return (
        cos,
        mean_cos,
        min_cos,
        effective_rank(u),
        distance_to_s1(u, sigma1, sigma2),
        jnp.linalg.norm(u),
    )


@jax.jit
def _fro(a, b):
    return jnp.linalg.norm(a - b)


def _check_diagnostic_options(owner: str, *, threshold, keep_cosine, progress) -> None:
    """The options :func:`step_diagnostics` and :func:`transflow.analysis.analyze` share."""
    check_number("threshold", threshold, owner, lower=-1, upper=1, strict=False, example="0.99")
    check_flag("keep_cosine", keep_cosine, owner)
    if progress is not None:
        check_callable("progress", progress, owner, "progress=None")


def step_diagnostics(
    model,
    x,
    *,
    threshold: float = 0.99,
    s1="auto",
    keep_cosine: bool = True,
    keep_states: bool = False,
    progress: Callable | None = None,
    grid=None,
    causal: bool = False,
) -> dict[str, Any]:
    """Token geometry after every step and the increment of every sub-step, streamed.

    Only one step's sub-step states are alive at a time, so memory does not grow with
    depth (apart from the ``(N_t + 1, n, n)`` cosine matrices with ``keep_cosine``).

    Args:
        model, x: any model transflow builds and one input (see
            :func:`transflow.analysis.trajectory`).
        threshold: cosine threshold τ of :func:`count_clusters`.
        s1: ``(σ1, σ2)`` of the set S1 to measure the distance to, or ``"auto"``: for the
            paper's Lie scheme the set of the projection that closes each step (mean of
            the LayerNorm bias and gain; u⁰: the first step's first projection; a closing
            ``final_norm``: its own), otherwise S1(0, 1).
        keep_cosine: also return the cosine matrix of every state.
        keep_states: also return the step states u⁰ … u^{N_t} (``"states"``, the
            trajectory of :func:`transflow.analysis.trajectory`; no sub-step states).
        progress: an optional wrapper ``progress(iterable, total=, desc=)`` (a progress
            bar, e.g. ``ctx.progress``).

    Returns:
        A dict of NumPy arrays over the states u⁰ … u^{N_t} (length N_t + 1): ``step``,
        ``mean_cosine``, ``min_cosine``, ``n_clusters``, ``effective_rank``,
        ``distance_s1``, ``state_norm``; ``increments``: sub-step name → ``(N_t,)`` norms
        of its increments (``"final_norm"`` too when present, NaN elsewhere);
        ``substep_names``; ``threshold``; ``cosine`` ``(N_t + 1, n, n)`` with
        ``keep_cosine``; ``states`` ``(N_t + 1, n, d)`` with ``keep_states``.

    Example:
        >>> import jax
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> from transflow.analysis import step_diagnostics
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(3)])
        >>> d = step_diagnostics(SplitTransformer(theta), jax.random.normal(
        ...     jax.random.key(9), (5, 8)))
        >>> d["min_cosine"].shape, sorted(d["increments"])[:2]
        ((4,), ['attention', 'ffn1'])
        >>> bool(d["distance_s1"][1:].max() < 1e-6)  # the Lie step ends on S1
        True
    """
    _check_diagnostic_options(
        "step_diagnostics", threshold=threshold, keep_cosine=keep_cosine, progress=progress
    )
    check_flag("keep_states", keep_states, "step_diagnostics")
    if not (isinstance(s1, str) and s1 == "auto"):
        if not isinstance(s1, tuple | list) or len(s1) != 2:
            raise TypeError(
                f"step_diagnostics: `s1` must be 'auto' or a pair (sigma1, sigma2), got "
                f"{s1!r:.40}; pass e.g. s1=(0.0, 1.0)."
            )
        check_number("s1", s1[0], "step_diagnostics", example="(0.0, 1.0)")
        check_number("s1", s1[1], "step_diagnostics", lower=0, example="(0.0, 1.0)")
    flow = as_flow(model, x, grid=grid, causal=causal)
    ref = _s1_reference(flow, s1)
    n_steps = flow.num_steps
    rows: dict[str, list] = {k: [] for k in STEP_QUANTITIES}
    cosines, states_kept = [], []

    def record(u, n):
        cos, mean_c, min_c, erank, dist, norm = _state_stats(u, *ref(n))
        cos = np.asarray(cos)
        rows["mean_cosine"].append(float(mean_c))
        rows["min_cosine"].append(float(min_c))
        rows["n_clusters"].append(count_clusters(cos, threshold, is_cosine=True))
        rows["effective_rank"].append(float(erank))
        rows["distance_s1"].append(float(dist))
        rows["state_norm"].append(float(norm))
        if keep_cosine:
            cosines.append(cos)
        if keep_states:
            states_kept.append(np.asarray(u))

    record(flow.u0, 0)
    increments: dict[str, np.ndarray] = {}
    names: tuple[str, ...] = ()
    steps = iter_steps(flow, substeps=True)
    if progress is not None:
        steps = progress(steps, total=n_steps, desc="diagnostics")
    for rec in steps:
        subs = rec.substeps
        names = tuple(k for k in subs if k != "final_norm")
        parents = substep_parents(names)
        states = {"input": rec.before, **subs}
        if "final_norm" in subs:
            parents["final_norm"] = names[-1]
        for name, parent in parents.items():
            a, b = states[name], states[parent]
            val = float(_fro(a, b)) if a.shape == b.shape else float("nan")
            increments.setdefault(name, np.full(n_steps, np.nan))[rec.index - 1] = val
        record(rec.after, rec.index)
    out: dict[str, Any] = {"step": np.arange(n_steps + 1)}
    out.update({k: np.asarray(v) for k, v in rows.items()})
    out["increments"] = increments
    out["substep_names"] = names + (("final_norm",) if "final_norm" in increments else ())
    out["threshold"] = float(threshold)
    if keep_cosine:
        out["cosine"] = np.stack(cosines)
    if keep_states:
        out["states"] = np.stack(states_kept)
    return out

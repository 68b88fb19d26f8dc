"""Splitting schemes as data, each with its declared order.

A model is split into named sub-problems ("operators") ``u_t + A_k(t; u) ∋ 0``
(docs/spec/continuous-model.md §3.1). Each operator comes with a *flow*
``flow(t0, t1, u, speed) -> u``: an (exact or approximate) solution of ``v_t = speed · f_k(t, v)``
from ``t0`` to ``t1`` starting at ``u`` (see :mod:`transflow.continuous._flows`). A scheme is pure
data: an ordered tuple of :class:`Stage`\\ s, each running its operators over a sub-interval
    ``[t + a Δt, t + b Δt]``
of the step.

- :func:`lie`: sequential splitting, every operator over the full step; order 1.
- :func:`strang`: symmetric splitting ``A_1(Δt/2) … A_{K-1}(Δt/2) A_K(Δt) A_{K-1}(Δt/2) …
  A_1(Δt/2)``; order 2 when every sub-flow is at least second-order accurate.
- :func:`parallel`: all operators from the same state with ``v_t = K f_k(t, v)`` and the
  average of the K results (docs/spec/continuous-model.md §3.1); order 1.
- :func:`hybrid`: sequential stages, some of which are parallel groups. With
  ``ffn_branch_dt="2dt"`` a parallel group of K branches runs each branch at speed K
  (the consistent parallel splitting); ``"dt"`` runs them at speed 1 (paper-literal, spec
  §3.2 / Q10), which converges to the model with the group's operators scaled by 1/K.
- :func:`paper_lie`: the paper's M = 4 + J Lie scheme of the full model
    (docs/spec/continuous-model.md §3.2) as
  data: attention, P_S1, the FFN branch (FFN sub-steps and P_S2) averaged with the zero
  operator, P_S1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._controls import FFN_BRANCH_DT, FfnBranchDt
from .._errors import check_choice, check_kind, check_number, check_times, check_values

__all__ = [
    "Flow",
    "Stage",
    "SplittingScheme",
    "lie",
    "strang",
    "parallel",
    "hybrid",
    "paper_lie",
    "integrate",
]

Flow = Callable[[Array, Array, Array, float], Array]
"""``flow(t0, t1, u, speed)``: the sub-flow of one operator from ``t0`` to ``t1``."""


class Stage(eqx.Module):
    """One stage of a splitting step: branches run from the same state and are averaged.

    Attributes:
        branches: a tuple of branches; each branch is a tuple of operator names applied in
            order. One branch = a sequential stage. An empty branch is the zero operator
            (the identity map), as in the paper's skip-connection relaxation.
        start, end: the stage covers ``[t + start·Δt, t + end·Δt]``.
        speed: the speed of every branch of a parallel stage: ``None`` means K (the
            number of branches; consistent parallel splitting ``v_t = K f_k``), a number
            fixes it (``1.0``: the paper-literal FFN branch). Sequential stages use 1.
    """

    branches: tuple[tuple[str, ...], ...] = eqx.field(static=True)
    start: float = eqx.field(static=True, default=0.0)
    end: float = eqx.field(static=True, default=1.0)
    speed: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not self.branches:
            raise ValueError("Stage: `branches` must hold at least one branch, got ().")
        check_number("start", self.start, "Stage", lower=0, upper=1, strict=False, example="0.0")
        check_number("end", self.end, "Stage", lower=0, upper=1, strict=False, example="1.0")
        if not self.start < self.end:
            raise ValueError(
                f"Stage: `end` must be > `start` = {self.start} (need 0 <= start < end <= 1, "
                f"fractions of the step), got {self.end}."
            )
        if self.speed is not None:
            check_number("speed", self.speed, "Stage", lower=0, example="2.0 (or None)")
        if not (0.0 <= self.start < self.end <= 1.0):
            raise ValueError(
                f"Stage: need 0 <= start < end <= 1 (fractions of the step), got "
                f"start={self.start}, end={self.end}."
            )

    @property
    def is_parallel(self) -> bool:
        return len(self.branches) > 1


class SplittingScheme(eqx.Module):
    """A splitting scheme as data: named stages and a declared order of convergence.

    Example:
        >>> from transflow.continuous import strang
        >>> s = strang(("a", "b"))
        >>> s.order, s.describe()
        (2, 'a[0,0.5] -> b[0,1] -> a[0.5,1]')
    """

    name: str = eqx.field(static=True)
    order: int = eqx.field(static=True)
    stages: tuple[Stage, ...] = eqx.field(static=True)

    def __check_init__(self):
        owner = "SplittingScheme"
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"{owner}: `name` must be a non-empty str, got {self.name!r}.")
        check_number("order", self.order, owner, lower=0, integer=True, example="2")
        if not isinstance(self.stages, tuple) or not self.stages:
            raise ValueError(
                f"{owner}: `stages` must be a non-empty tuple of Stage, got {self.stages!r:.40}."
            )
        for i, st in enumerate(self.stages):
            check_kind(f"stages[{i}]", st, Stage, owner)

    @property
    def operators(self) -> tuple[str, ...]:
        """The operator names the scheme needs, in order of first use."""
        seen: dict[str, None] = {}
        for st in self.stages:
            for br in st.branches:
                for op in br:
                    seen.setdefault(op, None)
        return tuple(seen)

    def describe(self) -> str:
        def one(st: Stage) -> str:
            iv = f"[{st.start:g},{st.end:g}]"
            if not st.is_parallel:
                return " -> ".join(f"{op}{iv}" for op in st.branches[0])
            brs = " | ".join("(" + " -> ".join(b) + ")" if b else "0" for b in st.branches)
            sp = "K" if st.speed is None else f"{st.speed:g}"
            return f"avg{{{brs}}}{iv}@speed={sp}"

        return " -> ".join(one(st) for st in self.stages)

    def step(
        self,
        flows: Mapping[str, Flow],
        t: Float[Array, ""] | float,
        dt: Float[Array, ""] | float,
        u: Float[Array, "n d"],
    ) -> Float[Array, "n d"]:
        """One step from ``t`` to ``t + dt``; ``flows[name]`` solves operator ``name``."""
        missing = [op for op in self.operators if op not in flows]
        if missing:
            raise KeyError(
                f"scheme {self.name!r} needs flows for {missing}; got flows for {sorted(flows)}."
            )
        for st in self.stages:
            t0, t1 = t + st.start * dt, t + st.end * dt
            K = len(st.branches)
            speed = 1.0 if K == 1 else (float(K) if st.speed is None else st.speed)
            outs = []
            for br in st.branches:
                v = u
                for op in br:
                    v = flows[op](t0, t1, v, speed)
                outs.append(v)
            u = outs[0] if K == 1 else sum(outs[1:], outs[0]) / K
        return u


def lie(operators: Sequence[str]) -> SplittingScheme:
    """Sequential (Lie) splitting: each operator over the full step, in order. Order 1."""
    ops = _names(operators)
    return SplittingScheme("lie", 1, tuple(Stage(((op,),)) for op in ops))


def strang(operators: Sequence[str]) -> SplittingScheme:
    """Symmetric (Strang) splitting. Order 2 with second-order (or exact) sub-flows.

    ``A_1[t, t+Δt/2] … A_{K-1}[t, t+Δt/2] A_K[t, t+Δt] A_{K-1}[t+Δt/2, t+Δt] …
    A_1[t+Δt/2, t+Δt]``: each sub-flow covers the time interval it stands for, so the
    step is its own adjoint (symmetric) also for time-dependent operators.
    """
    ops = _names(operators)
    if len(ops) == 1:
        return SplittingScheme("strang", 2, (Stage(((ops[0],),)),))
    first = tuple(Stage(((op,),), 0.0, 0.5) for op in ops[:-1])
    mid = (Stage(((ops[-1],),)),)
    last = tuple(Stage(((op,),), 0.5, 1.0) for op in reversed(ops[:-1]))
    return SplittingScheme("strang", 2, first + mid + last)


def parallel(operators: Sequence[str]) -> SplittingScheme:
    """Parallel splitting (docs/spec/continuous-model.md §3.1): ``v_k' = K f_k(t, v_k)``, average
    the K results."""
    ops = _names(operators)
    return SplittingScheme("parallel", 1, (Stage(tuple((op,) for op in ops)),))


def hybrid(
    groups: Sequence[Sequence[str | None] | str],
    *,
    ffn_branch_dt: FfnBranchDt = "2dt",
) -> SplittingScheme:
    """Hybrid splitting: sequential stages, some of them parallel groups. Order 1.

    Args:
        groups: each entry is an operator name (a sequential stage) or a sequence of
            branches run in parallel; a branch is a name, ``None`` (the zero operator) or
            a tuple of names applied in order.
        ffn_branch_dt: ``"2dt"`` runs a K-branch group at speed K (consistent, spec
            §3.1); ``"dt"`` at speed 1 (paper-literal; the group's operators then enter
            the limit scaled by 1/K, docs/spec/continuous-model.md Q10).

    Example:
        >>> from transflow.continuous import hybrid
        >>> hybrid(["attention", ["linear", None]]).describe()
        'attention[0,1] -> avg{(linear) | 0}[0,1]@speed=K'
    """
    check_choice("ffn_branch_dt", ffn_branch_dt, FFN_BRANCH_DT)
    bad = isinstance(groups, str) or not groups
    for g in () if bad else groups:
        entries = list(g) if isinstance(g, tuple | list) else [g]
        parts = [p for e in entries for p in (e if isinstance(e, tuple | list) else [e])]
        bad = bad or not all(isinstance(p, str) for p in parts if p is not None)
    if bad:
        raise TypeError(
            f"hybrid: `groups` must be a non-empty list of operator names or lists of branches "
            f"(names, tuples of names, None), got {groups!r}."
        )
    stages = []
    for g in groups:
        if isinstance(g, str):
            stages.append(Stage(((g,),)))
            continue
        branches = []
        for b in g:
            if b is None:
                branches.append(())
            elif isinstance(b, str):
                branches.append((b,))
            else:
                branches.append(tuple(b))
        speed = None if ffn_branch_dt == "2dt" else 1.0
        stages.append(Stage(tuple(branches), speed=speed if len(branches) > 1 else None))
    return SplittingScheme(f"hybrid-{ffn_branch_dt}", 1, tuple(stages))


def paper_lie(
    n_ffn: int = 2, *, ffn_branch_dt: FfnBranchDt = "dt", relu_on_last: bool = False
) -> SplittingScheme:
    """The paper's Lie scheme of the full model, M = 4 + J sub-steps (docs/spec/continuous-model.md
    §3.2), as data.

    Operators: ``attention`` (explicit Euler), ``ln1`` (P_S1), the FFN branch ``ffn1``,
    ``relu``, ``ffn2``, …, ``ffnJ`` averaged with the zero operator (the ½ relaxation),
    then ``ln2`` (P_S1). Use with :func:`transflow.continuous.full_model_flows`. At
    Δt = 1 with piecewise-constant controls it is the post-LN encoder layer.
    """
    check_number("n_ffn", n_ffn, "paper_lie", lower=0, integer=True, example="2")
    branch: list[str] = []
    for j in range(n_ffn):
        branch.append(f"ffn{j + 1}")
        if j < n_ffn - 1 or relu_on_last:
            branch.append("relu")
    s = hybrid(["attention", "ln1", [tuple(branch), None], "ln2"], ffn_branch_dt=ffn_branch_dt)
    return SplittingScheme(f"paper-lie-{ffn_branch_dt}", 1, s.stages)


def integrate(
    scheme: SplittingScheme,
    flows: Mapping[str, Flow],
    u0: Float[Array, "n d"],
    *,
    t0: float = 0.0,
    t1: float = 1.0,
    n_steps: int,
    save_trajectory: bool = False,
):
    """Run ``n_steps`` steps of ``scheme`` from ``t0`` to ``t1`` (Δt = (t1−t0)/n_steps).

    Compile time does not grow with the number of steps (``lax.fori_loop``/``lax.scan``);
    without ``save_trajectory`` ``n_steps`` may be a traced integer, so one ``jax.jit``
    compilation serves every Δt of a refinement study.

    Returns:
        ``u(t1)``, or ``(u(t1), trajectory)`` with the states after every step,
        ``(n_steps, n, d)``, when ``save_trajectory``.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.continuous import integrate, lie, linear_flow_exact
        >>> a, b = -jnp.eye(2), jnp.array([[0.0, 1.0], [-1.0, 0.0]])
        >>> flows = {"a": linear_flow_exact(a), "b": linear_flow_exact(b)}
        >>> integrate(lie(["a", "b"]), flows, jnp.ones((1, 2)), n_steps=8).shape
        (1, 2)
    """
    if save_trajectory and not isinstance(n_steps, int):
        raise ValueError("`save_trajectory=True` needs a Python int `n_steps`.")
    check_number(
        "n_steps", n_steps, "integrate", lower=0, integer=True, example="8", traced_ok=True
    )
    check_times(t0, t1, "integrate")
    u0 = check_values("u0", u0, "integrate", ndim=2)
    dt = (t1 - t0) / jnp.asarray(n_steps, u0.dtype)

    if not save_trajectory:
        # fori_loop: n_steps may be a traced integer, so one compilation serves every Δt.
        def one(n, u):
            return scheme.step(flows, t0 + n * dt, dt, u)

        return jax.lax.fori_loop(0, n_steps, one, u0)

    def body(u, n):
        u = scheme.step(flows, t0 + n * dt, dt, u)
        return u, u

    return jax.lax.scan(body, u0, jnp.arange(n_steps, dtype=u0.dtype))


def _names(operators: Sequence[str]) -> tuple[str, ...]:
    ops = () if isinstance(operators, str) else tuple(operators)
    if not ops or not all(isinstance(o, str) for o in ops):
        raise ValueError(f"`operators` must be a non-empty sequence of names, got {operators!r}.")
    if len(set(ops)) != len(ops):
        raise ValueError(f"`operators` must be distinct, got {ops}.")
    return ops

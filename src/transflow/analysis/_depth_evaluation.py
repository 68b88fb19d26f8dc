"""Every evaluation of one model trained at one depth, across depths (``experiment=depth``,
docs/depth.md): the accuracy and the output distance to a reference solve at each stepped
depth of each integrator and reading, the fitted orders, the adaptive solve, the
reference's own error and the scaling exponent β of the controls.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence

__all__ = ["depth_evaluation", "reading_suffix"]


def reading_suffix(reading: str) -> str:
    """How a metric of :func:`depth_evaluation` names its reading: ``""`` for ``"right"``
    (the names every earlier record used), ``"@left"``, ``"@average"`` for the others.

    Example:
        >>> reading_suffix("right"), reading_suffix("left")
        ('', '@left')
    """
    return "" if reading == "right" else f"@{reading}"


def _f64(model):
    import jax
    import jax.numpy as jnp

    def cast(a):
        floating = hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)
        return a.astype(jnp.float64) if floating else a

    return jax.tree.map(cast, model)


def _controls_at(model, n: int):
    from ..control import at_depth

    return at_depth(model, n).layer_controls()[0]


def _beta(controls) -> float:
    from ..models._encoder import SplitTransformer
    from ._across_depth import increment_scaling

    return float(increment_scaling(SplitTransformer(controls), [1, 2, 4, 8])["beta"])


def depth_evaluation(
    model,
    init,
    x,
    y,
    *,
    schemes: Sequence[str],
    own: str,
    grid: Sequence[int],
    windows: Mapping[str, Sequence[int]],
    reference,
    adaptive,
    readings: Sequence[str] = ("right",),
    split: bool = True,
    beta_depth: int = 64,
    check_reference: bool = False,
) -> dict:
    """The metrics of one trained model (``model``, its initialisation ``init``, scheme
    ``own``) on the test set ``(x, y)``, in float64.

    - ``acc.reference``, ``nfev.reference``: the reference solve (``reference``, a
      :class:`~transflow.ReferenceTolerances`; ``split``: the split vector field); with
      ``check_reference`` and ``reference.check``, ``dist.ref_check`` (a looser solve's
      relative distance), with ``reference.coarse`` also ``dist.ref_check_coarse``, the
      estimate ``ref_error_est`` (d1 or d1²/d2) and ``ref_error_ratio`` (over the smallest
      distance any order fit uses);
    - ``acc.adaptive``, ``nfev.adaptive``, ``dist.adaptive``: the adaptive solve
      (``adaptive``, an :class:`~transflow.Adaptive`);
    - per reading (suffix :func:`reading_suffix`), scheme of ``schemes`` and depth of
      ``grid``: ``acc.<s>.<n>``, ``dist.<s>.<n>`` (relative distance of the outputs to the
      reference's) and ``order.<s>`` (:func:`fit_order` over ``windows[s]``);
    - ``beta.trained``, ``beta.init``, ``beta.update`` (the controls at ``beta_depth``
      steps, :func:`increment_scaling`) and ``update_rel`` (|θ − θ₀| / |θ₀|);
    - ``seconds.<what>``: the seconds of each :func:`~transflow.control.depth_accuracy`.
    """
    import jax
    import numpy as np

    from .._integrate import Adaptive, ReferenceTolerances, check_option
    from ..control import depth_accuracy
    from ..schemes import make_scheme
    from ._across_depth import fit_order

    for s in schemes:
        if s not in windows:
            raise ValueError(
                f"depth_evaluation: `windows` has no fit window for scheme {s!r}; give "
                "windows={scheme: [n, ...]} for every scheme of `schemes`."
            )
    reference = check_option("reference", reference, ReferenceTolerances, "ReferenceTolerances()")
    adaptive = check_option("adaptive", adaptive, Adaptive, "Adaptive(rtol=1e-6, atol=1e-6)")
    grid = [int(n) for n in grid]
    rec: dict = {}
    with jax.enable_x64(True):
        m = _f64(model)
        x = np.asarray(x, np.float64)

        def timed(name, *args, **kw):  # depth_accuracy, its seconds in rec["seconds.<name>"]
            t0 = time.perf_counter()
            out = depth_accuracy(*args, **kw)
            rec[f"seconds.{name}"] = time.perf_counter() - t0
            return out

        solved = timed("reference", m, x, y, [], adaptive=reference.reference, split=split)
        z_ref = np.asarray(solved["adaptive_outputs"], np.float64)
        norm = float(np.linalg.norm(z_ref))

        def dist(z):
            return float(np.linalg.norm(np.asarray(z, np.float64) - z_ref) / norm)

        rec["acc.reference"] = solved["adaptive_accuracy"]
        rec["nfev.reference"] = solved["adaptive_nfev_mean"]
        if check_reference and reference.check:  # the reference's error: a looser solve
            loose = depth_accuracy(m, x, y, [], adaptive=reference.check, split=split)
            d1 = rec["dist.ref_check"] = dist(loose["adaptive_outputs"])
            est = d1  # v1: the loose solve's distance itself
            if reference.coarse:  # v2: the decay from the coarse to the loose solve, again
                coarse = depth_accuracy(m, x, y, [], adaptive=reference.coarse, split=split)
                d2 = rec["dist.ref_check_coarse"] = dist(coarse["adaptive_outputs"])
                est = d1 * d1 / d2 if d2 > 0 else math.nan
            rec["ref_error_est"] = est
        ad = timed("adaptive", m, x, y, [], adaptive=adaptive)
        rec["acc.adaptive"] = ad["adaptive_accuracy"]
        rec["nfev.adaptive"] = ad["adaptive_nfev_mean"]
        rec["dist.adaptive"] = dist(ad["adaptive_outputs"])
        for reading in readings:  # the stepped depths, under every declared reading
            at = reading_suffix(reading)
            for s in schemes:
                ms = m if s == own else dataclasses.replace(m, scheme=make_scheme(s))
                r = timed(s + at, ms, x, y, grid, adaptive=None, reading=reading)
                for n, a, z in zip(grid, r["accuracy"], r["outputs"]):
                    rec[f"acc.{s}.{n}{at}"] = a
                    rec[f"dist.{s}.{n}{at}"] = dist(z)
                win = [int(n) for n in windows[s]]
                rec[f"order.{s}{at}"] = fit_order(win, [rec[f"dist.{s}.{n}{at}"] for n in win])
        th, th0 = _controls_at(m, int(beta_depth)), _controls_at(_f64(init), int(beta_depth))
        upd = jax.tree.map(lambda a, b: a - b, th, th0)
        rec["beta.trained"] = _beta(th)
        rec["beta.init"] = _beta(th0)
        rec["beta.update"] = _beta(upd)
        sq = lambda t: sum(float(np.sum(np.asarray(v) ** 2)) for v in jax.tree.leaves(t))  # noqa: E731
        rec["update_rel"] = math.sqrt(sq(upd) / sq(th0)) if sq(th0) > 0 else math.nan
    if "dist.ref_check" in rec:  # over the smallest distance any order fit uses
        smallest = min(rec[f"dist.{s}.{int(n)}"] for s in schemes for n in windows[s])
        rec["ref_error_ratio"] = rec["ref_error_est"] / smallest
    return rec

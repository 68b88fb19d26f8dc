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
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    def cast(a):  # the floating arrays to float64; integer arrays and the rest as they are
        return a.astype(jnp.float64) if eqx.is_inexact_array(a) else a

    return jax.tree.map(cast, model)


def _controls_at(model, n: int):
    from ..control import at_depth

    return at_depth(model, n).layer_controls()[0]


def _beta(controls) -> float:
    from ..models._encoder import SplitTransformer
    from ._across_depth import increment_scaling

    return float(increment_scaling(SplitTransformer(controls), [1, 2, 4, 8])["beta"])


def _adaptive_solves(m, x, y, adaptive, adaptive_split: bool) -> dict:
    """The adaptive solves by metric name: ``adaptive`` (split at the jumps of θ with
    ``adaptive_split``, else straight across them) and, with the split, the straight solve
    as ``adaptive.unsplit``; each :func:`~transflow.control.depth_accuracy`'s result with
    its ``seconds``."""
    from ..control import depth_accuracy

    solves = {"adaptive": bool(adaptive_split)}
    if adaptive_split:  # the straight solve beside it: the count every earlier run gave
        solves["adaptive.unsplit"] = False
    out = {}
    for name, cut in solves.items():
        t0 = time.perf_counter()
        out[name] = depth_accuracy(m, x, y, [], adaptive=adaptive, split=cut)
        out[name]["seconds"] = time.perf_counter() - t0
    return out


def _local_orders(rec: dict, s: str, grid: list[int], at: str) -> dict:
    out = {}
    for lo, hi in zip(grid[:-1], grid[1:]):
        a, b = rec[f"dist.{s}.{lo}{at}"], rec[f"dist.{s}.{hi}{at}"]
        ok = a > 0 and b > 0
        out[f"order_local.{s}.{hi}{at}"] = math.log(a / b) / math.log(hi / lo) if ok else math.nan
    return out


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
    adaptive_split: bool = False,
    straddle_scheme: str | None = None,
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
      (``adaptive``, an :class:`~transflow.Adaptive`), straight across the jumps of θ, or
      with ``adaptive_split`` piece by piece between them (as the reference) and then the
      straight solve beside it as ``*.adaptive.unsplit``;
    - per reading (suffix :func:`reading_suffix`), scheme of ``schemes`` and depth of
      ``grid``: ``acc.<s>.<n>``, ``dist.<s>.<n>`` (relative distance of the outputs to the
      reference's), ``order.<s>`` (:func:`fit_order` over ``windows[s]``) and the local
      order per refinement ``order_local.<s>.<n>`` = log(dist(n′)/dist(n)) / log(n/n′)
      for successive depths n′ < n;
    - with ``straddle_scheme`` (a scheme of ``schemes``), ``straddle.<scheme>.<n>``: the
      fraction of its steps whose stages straddle a ReLU kink
      (:func:`~transflow.control.kink_straddles`, reading right);
    - ``beta.trained``, ``beta.init``, ``beta.update`` (the controls at ``beta_depth``
      steps, :func:`increment_scaling`) and ``update_rel`` (|θ − θ₀| / |θ₀|);
    - ``seconds.<what>``: the seconds of each :func:`~transflow.control.depth_accuracy`.
    """
    import jax
    import numpy as np

    from .._integrate import Adaptive, ReferenceTolerances, check_option
    from ..control import depth_accuracy, kink_straddles
    from ..schemes import make_scheme
    from ._across_depth import fit_order

    for s in schemes:
        if s not in windows:
            raise ValueError(
                f"depth_evaluation: `windows` has no fit window for scheme {s!r}; give "
                "windows={scheme: [n, ...]} for every scheme of `schemes`."
            )
    if straddle_scheme is not None and straddle_scheme not in schemes:
        raise ValueError(
            f"depth_evaluation: `straddle_scheme` = {straddle_scheme!r} is not one of the "
            f"`schemes` {list(schemes)}; name an evaluated scheme or None."
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
        for name, ad in _adaptive_solves(m, x, y, adaptive, adaptive_split).items():
            rec[f"seconds.{name}"] = ad.pop("seconds")
            rec[f"acc.{name}"] = ad["adaptive_accuracy"]
            rec[f"nfev.{name}"] = ad["adaptive_nfev_mean"]
            rec[f"dist.{name}"] = dist(ad["adaptive_outputs"])
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
                rec.update(_local_orders(rec, s, grid, at))
        if straddle_scheme is not None:  # where the scheme's stages straddle a ReLU kink
            t0 = time.perf_counter()
            for n in grid:
                frac = kink_straddles(m, x, n, method=straddle_scheme)["fraction"]
                rec[f"straddle.{straddle_scheme}.{n}"] = frac
            rec["seconds.straddle"] = time.perf_counter() - t0
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

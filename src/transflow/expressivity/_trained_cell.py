"""One cell of the trained-regions study (issue #39, docs/trained-regions.md): a
constant-query transformer and the ReLU MLP of the closest parameter count, trained on one
target at one depth from one seed, each counted (certified) at initialisation and after
training, the initial count beside an independent grid estimate, every trained model saved.

``experiment=trained_regions`` runs one :func:`train_cell` per (target, depth, seed) job of
its study; the records it returns are the job's record.
"""

from __future__ import annotations

import pathlib
import time

import jax

from .._errors import check_number
from ._saved import save_model
from ._trained import (
    Target,
    _check_int,
    certified_regions,
    constructed_capacity,
    init_mlp,
    init_transformer,
    mlp_width_for,
    n_params,
    reading_gap,
    sampling_estimate,
    train_model,
)

__all__ = ["train_cell"]


def _check_options(steps, batch, lr, lam_start, lam_end, grid, time_budget) -> None:
    """Every number of :func:`train_cell` before any work (the callees check them again)."""
    _check_int("train_cell", "steps", steps, 2)
    _check_int("train_cell", "batch", batch)
    check_number("lr", lr, "train_cell", lower=0, example="lr=3e-3")
    check_number("lam_start", lam_start, "train_cell", lower=0, example="lam_start=1.0")
    check_number("lam_end", lam_end, "train_cell", lower=0, example="lam_end=1000.0")
    if lam_end < lam_start:
        raise ValueError(
            f"train_cell: `lam_end` must be >= `lam_start` (the softmax scale is annealed "
            f"from one to the other), got lam_start={lam_start!r}, lam_end={lam_end!r}."
        )
    if grid is not None:
        _check_int("train_cell", "grid", grid, 8)
    if time_budget is not None:
        check_number("time_budget", time_budget, "train_cell", lower=0, example="120.0")


def _model_record(kind, init, rec, target: Target, depth, seed, n_tokens, counts, est):
    """The record of one model (see :func:`train_cell`)."""
    r_init, r = counts
    d = target.dim
    return {
        "target": target.name,
        "dim": d,
        "kind": kind,
        "depth": depth,
        "seed": seed,
        "params": n_params(init),
        "mlp_width": init["layers"][0]["w"].shape[0] if kind == "mlp" else None,
        "capacity": constructed_capacity(dim=d, depth=depth, n_tokens=n_tokens),
        "target_regions": target.regions,
        "regions": r.linear,
        "activation": r.activation,
        "certified": bool(r.certified),
        "uncertified_reason": None if r.certified else (r.certificate or {}).get("failure", "?"),
        "regions_init": r_init.linear,
        "activation_init": r_init.activation,
        "certified_init": bool(r_init.certified),
        "init_estimate": est["estimate"],
        "init_estimate_error": est["error"],
        "init_estimate_counts": est["counts"],
        "init_lower_bound_ok": bool(est["estimate"] <= r_init.activation),
        "init_within_error": bool(
            est["estimate"] <= r_init.activation <= est["estimate"] + est["error"]
        ),
        "loss_first": rec["loss"][0],
        "loss_last": rec["loss"][-1],
        "mse": rec["mse"],
        "train_seconds": rec["seconds"],
    }


def train_cell(
    target: Target,
    *,
    depth: int,
    seed: int,
    model_dir,
    n_tokens: int = 4,
    width: int = 8,
    n_heads: int = 2,
    head_dim: int = 2,
    ffn_width: int = 8,
    steps: int = 1000,
    batch: int = 128,
    lr: float = 3e-3,
    lam_start: float = 1.0,
    lam_end: float = 1000.0,
    grid: int | None = None,
    time_budget: float | None = 120.0,
) -> tuple[list[dict], dict]:
    """Train, count and save the two models of one cell (``target``, D = ``depth``, ``seed``).

    From ``PRNGKey(1000·seed + depth)``: a constant-query transformer
    (:func:`init_transformer` with ``n_tokens``, ``width``, ``n_heads``, ``head_dim``,
    ``ffn_width``) and the ReLU MLP of depth D whose parameter count is closest
    (:func:`mlp_width_for`). Each is counted at initialisation (:func:`certified_regions`,
    ``time_budget`` seconds per 2-D / MLP count, and :func:`sampling_estimate` on ``grid``
    points, per axis in 2-D; default 200000 in 1-D, 400 in 2-D), trained
    (:func:`train_model`: ``steps``, ``batch``, ``lr``, softmax λ annealed ``lam_start`` →
    ``lam_end``), saved into ``model_dir`` (:func:`save_model`) and counted again.

    Returns ``(records, counts)``: one record per model (transformer first: its target,
    kind, depth, seed, parameter count, the construction's capacity, the certified counts
    trained and at init, the grid estimate and whether the init count lies above it /
    within its error, the first and last loss, the hardmax MSE, the seconds, the saved
    file ``models/<name>.eqx`` relative to ``model_dir``'s parent; the transformer also
    its softmax MSE at ``lam_end`` and the largest hardmax − softmax gap) and the trained
    models' :class:`RegionCount` by kind.

    Example:
        >>> import tempfile
        >>> from transflow.expressivity import make_target, train_cell
        >>> rows, counts = train_cell(make_target("sawtooth", teeth_log2=1), depth=1,
        ...     seed=0, model_dir=tempfile.mkdtemp(), width=4, n_heads=1, ffn_width=4,
        ...     steps=20, batch=32, lam_end=10.0, grid=64)
        >>> [r["kind"] for r in rows], all(r["certified"] for r in rows)
        (['transformer', 'mlp'], True)
    """
    depth = _check_int("train_cell", "depth", depth)
    seed = _check_int("train_cell", "seed", seed, 0)
    _check_options(steps, batch, lr, lam_start, lam_end, grid, time_budget)
    model_dir = pathlib.Path(model_dir)
    d = target.dim
    key = jax.random.PRNGKey(1000 * seed + depth)
    arch = dict(n_tokens=n_tokens, width=width, n_heads=n_heads, head_dim=head_dim)
    p0 = init_transformer(key, dim=d, depth=depth, ffn_width=ffn_width, **arch)
    mlp_width = mlp_width_for(n_params(p0), dim=d, depth=depth)
    q0 = init_mlp(jax.random.fold_in(key, 1), dim=d, depth=depth, width=mlp_width)
    n_grid = int(grid) if grid is not None else (200_000 if d == 1 else 400)
    rows, counts = [], {}
    for kind, init in (("transformer", p0), ("mlp", q0)):
        t0 = time.perf_counter()
        r_init = certified_regions(kind, init, dim=d, time_budget=time_budget)
        est = sampling_estimate(kind, init, dim=d, n=n_grid)
        t1 = time.perf_counter()
        params, rec = train_model(
            kind, init, target, steps=steps, lr=lr, batch=batch, lam_start=lam_start,
            lam_end=lam_end, seed=seed,
        )  # fmt: skip
        t2 = time.perf_counter()
        path = save_model(model_dir, kind, params, target=target.name, seed=seed)
        r = certified_regions(kind, params, dim=d, time_budget=time_budget)
        row = _model_record(kind, init, rec, target, depth, seed, n_tokens, (r_init, r), est)
        row["count_seconds"] = (t1 - t0) + (time.perf_counter() - t2)
        row["model_file"] = f"{model_dir.name}/{path.name}"
        if kind == "transformer":
            row["mse_softmax"] = rec["mse_softmax"]
            row["gap_max"] = reading_gap(params, float(lam_end), dim=d, n=2001 if d == 1 else 4096)
        rows.append(row)
        counts[kind] = r
    return rows, counts

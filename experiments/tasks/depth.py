"""Task ``depth``: depth transfer on digits as a seeded factorial ablation (issues 26, 37).

The study is declared in ``task.study`` (:class:`transflow.experiments.protocol.StudyConfig`,
``configs/experiment/depth.yaml``) before it runs. Its factors (names fixed by this task):

- ``path``: the control parameterization: ``per_layer`` (today's model: one independent
  set of controls per layer, :data:`transflow.control.DEPTH_DIGITS` with ``path="none"``)
  or a name of :data:`transflow.continuous.PATH_KINDS` (``linear``, ``legendre``,
  ``embedding``, ...; K = ``task.path_size``, smooth initialisation);
- ``T``: the horizon (the model's final time; the step at the training depth is
  Δt = T / ``task.n_steps``);
- ``train``: the training depth: ``fixed`` (N_t = ``task.n_steps`` only) or ``random``
  (N_t drawn per batch from ``task.random_depths``, :func:`transflow.control.depth_loss`);
- ``scheme``: the training scheme of the pre-LN field (``prenorm`` = Euler, or a
  second-order one such as ``heun``).

Every (cell, seed) trains one model (``task.steps`` steps, float32) and evaluates it in
float64 on its test split: with every scheme of ``task.eval_schemes`` (its own and a
second integrator) at every depth of ``task.study.eval_grid``, adaptively (Tsit5 + PID,
``task.rtol``), and against the **continuous limit**: a fine high-order reference solve
(``task.ref_solver``, rtol = atol = ``task.ref_rtol``); the distance of the logits to it,
‖z_N − z_ref‖_F / ‖z_ref‖_F over the test set, is recorded at every depth, and its fitted
order over the declared window of each scheme (``task.study.fit_windows``). Smoothness:
β (``increment_scaling``) of the trained controls, of the model's own initialisation and
of the learned update θ_trained − θ_init, all sampled at ``task.beta_depth`` steps.

Metrics of a seed record (the names claims use): ``acc.<scheme>.<N>``,
``dist.<scheme>.<N>``, ``order.<scheme>``, ``acc.adaptive``, ``nfev.adaptive``,
``dist.adaptive``, ``acc.reference``, ``nfev.reference``, ``acc.train`` (own scheme at
N_t = ``task.n_steps``), ``max_change`` (largest |acc(N) − acc.train| over the window
``transfer`` and adaptively, own scheme), ``max_integrator_change`` (largest
|acc.<s1>.N − acc.<s2>.N| over the window ``integrator``; ``…_transfer``: over
``transfer``, design v1's), ``ref_error_est``/``ref_error_ratio`` (first seed of a
cell), ``dist.train``, ``beta.trained``,
``beta.init``, ``beta.update``, ``update_rel``, ``cpu_train``, ``n_params``, ``n_test``.

Writes per job ``cells/<cell>/seed<k>/record.json`` (a rerun of any cell:
``task.study.cells=[<cell>]``), then ``factorial.md``/``.csv``/``.json`` (mean ± std per
cell and evaluation depth), the figures ``factorial_accuracy`` and ``factorial_distance``,
the claim verdicts (each declared claim in each of its cells, over all seeds or mean ±
std as declared; accuracy margins also in test examples). Besides the study, one float64
continuous-adjoint check, the peak RSS of one gradient per mechanism, and the text models
(``task.text``; seed = the first seed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field

from transflow.control import DepthDigitsConfig, ReferenceTolerances

from ..config import complete, options_without
from ..protocol import (
    StudyConfig,
    aggregate,
    check_study,
    design_cells,
    digest,
    evaluate_claims,
    mean_std_text,
    reusable_record,
    summarize_verdicts,
    verdicts_markdown,
    window,
)

__all__ = ["CHOICES", "FACTORS", "Config", "DigitsOptions", "check", "run"]

#: The factors of the study (``task.study.factors`` must name exactly these).
FACTORS = ("path", "T", "train", "scheme")

#: The fields of DepthDigitsConfig this task sets itself, from its own options (task.d,
#: task.n_steps, task.steps) or per cell (the factors): one name each.
DigitsOptions = options_without(
    DepthDigitsConfig,
    [
        "d",
        "n_steps",
        "steps",
        "checkpoint_dir",
        "path",
        "path_size",
        "scheme",
        "train_depths",
        "smoothness",
        "dt",
    ],
    name="DigitsOptions",
    hints={
        "scheme": "task.study.factors.scheme (a factor of the study)",
        "path": "task.study.factors.path (a factor of the study)",
        "dt": "task.study.factors.T (dt = T / task.n_steps)",
        "train_depths": "task.study.factors.train and task.random_depths",
        "checkpoint_dir": "the run directory",
    },
)


def _scheme_names():
    from transflow import SCHEME_NAMES

    return SCHEME_NAMES


def _gradients():
    from transflow.control import GRADIENTS

    return tuple(GRADIENTS)


#: Names checked before any work, smoke runs included (transflow-run help depth).
CHOICES = {
    "eval_schemes": _scheme_names,
    "text_path_scheme": _scheme_names,
    "ref_solver": ("dopri5", "dopri8", "tsit5"),
    # the FFN activations of transflow (LayerControls.activation)
    "adjoint_activation": (
        "tanh",
        "relu",
        "relu6",
        "identity",
        "gelu",
        "gelu_tanh",
        "gelu_fast",
        "quick_gelu",
        "silu",
        "mish",
        "sigmoid",
        "leaky_relu",
    ),
    "memory_gradients": _gradients,
    "digits.gradient": _gradients,
}


@dataclass
class Config:
    """Depth transfer on digits, a factorial study (``task.<field>=...``)."""

    # the design: factors, seeds, evaluation grid, fit windows, claims (declared in
    # configs/experiment/depth.yaml; experiments/protocol.py)
    study: StudyConfig = field(default_factory=StudyConfig)
    path_size: int = 4  # K of every path parameterization
    n_steps: int = 4  # the training depth N_t (train=fixed), Δt = T / n_steps
    random_depths: list[int] = field(default_factory=lambda: [4, 8, 16])  # train=random
    smoothness: float = 0.0  # λ of λ ∫‖θ'(t)‖² dt
    steps: int = 1500
    d: int = 32
    # every model is evaluated with each of these schemes (its own and a second integrator)
    eval_schemes: list[str] = field(default_factory=lambda: ["prenorm", "heun"])
    rtol: float = 1e-5  # adaptive solve (Tsit5 + PID; atol = rtol)
    ref_solver: str = "dopri5"  # the continuous limit: a fine adaptive solve, float64
    ref_rtol: float = 1e-8  # its tolerance (atol = rtol)
    # solved piece by piece between the jumps of θ (per-layer: every layer boundary;
    # piecewise linear: every knot), so no step crosses a jump (design v2, docs/depth.md)
    ref_split: bool = True
    # the reference's own error, estimated on the first seed of every cell from solves at
    # two looser tolerances: d1, d2 their distances to the reference at ref_check_rtol and
    # ref_check_coarse_rtol; error ≈ d1²/d2 (the decay per decade of tolerance carried one
    # decade on, v2); ref_check_coarse_rtol = 0: d1 itself (v1, ~10× the error). Over the
    # smallest distance the order fits use; claimed <= ref_check_max (0: no check)
    ref_check_rtol: float = 1e-7
    ref_check_coarse_rtol: float = 1e-6
    ref_check_max: float = 0.1
    # design v3 (declared after v2 failed ref_check_max in one cell, before seeds 0-4 ran):
    # a cell whose first seed's ratio exceeds ref_check_max is evaluated again with the
    # reference and both check tolerances divided by 10 (its models reloaded from their
    # final checkpoints, not retrained), at most ref_refine times; every seed of the cell
    # then uses the cell's final reference. 0: v2 (no refinement)
    ref_refine: int = 2
    beta_depth: int = 64  # β: controls sampled at this many steps, strides 1, 2, 4, 8
    # adjoint check (float64): FFN activation of the random path (C¹ field) and tolerance
    adjoint_activation: str = "tanh"
    adjoint_rtol: float = 1e-10
    adjoint_relu_rtol: float = 1e-12  # also measured with ReLU (kink-limited); 0: skip
    # peak RSS of one gradient (fresh process each) at these N, batch of random images
    memory_depths: list[int] = field(default_factory=lambda: [16, 256])
    memory_batch: int = 1024
    # claimed: peak(N_max) <= max_memory_ratio * peak(N_min); "backprop" is the contrast
    memory_gradients: list[str] = field(
        default_factory=lambda: ["adjoint", "checkpointed", "backprop"]
    )
    max_memory_ratio: float = 2.0
    # the text task (DEPTH_TEXT): a path model (the headline's path, T, random depths) and
    # a per-layer model with as many parameters; the first text_seeds seeds of the headline
    # cell, one record per (model, seed) under text/ (reused like the cells' records)
    text: bool = True  # false: digits only
    text_seeds: int = 3
    # design v2: 4000 steps and T = 1 (v1: 1500 steps and the headline's T = 0.2, where
    # neither model beat the 4-gram; docs/depth.md)
    text_steps: int = 4000
    text_T: float = 1.0  # the text path model's horizon
    text_eval_depths: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    max_bpc_change: float = 0.02  # claim: |bpc(4 N_t) − bpc(N_t)| / bpc(N_t), path model
    text_path_scheme: str = "heun"
    # the digits model's other options (DepthDigitsConfig without the fields set above)
    digits: DigitsOptions = field(default_factory=DigitsOptions)
    # a design with fewer cells than the claims name (debug=smoke): the claims and headline
    # cells naming a missing cell are said and not checked, instead of refused
    partial_design: bool = False


def check(cfg: Config) -> None:
    """The study's design, checked before any work (each error names the key)."""
    from transflow import declared_order, make_scheme
    from transflow.continuous import PATH_KINDS

    study = cfg.study
    names = list(study.factors)
    if sorted(names) != sorted(FACTORS):
        raise ValueError(
            f"task.study.factors: the depth study's factors are {list(FACTORS)}, got "
            f"{names}; give exactly these (configs/experiment/depth.yaml)."
        )
    for p in study.factors["path"]:
        if p != "per_layer" and p not in PATH_KINDS:
            raise ValueError(
                f"task.study.factors.path: {p!r} is not a parameterization; choose from "
                f"per_layer, {', '.join(k for k in PATH_KINDS if k != 'per_layer')}."
            )
    for t in study.factors["T"]:
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise ValueError(f"task.study.factors.T: {t!r} is not a horizon > 0.")
    for t in study.factors["train"]:
        if t not in ("fixed", "random"):
            raise ValueError(f"task.study.factors.train: {t!r}; choose fixed or random.")
    for s in [*study.factors["scheme"], *cfg.eval_schemes]:
        if s not in _scheme_names() or s in ("lie", "relaxed"):
            raise ValueError(
                f"task.study.factors.scheme / task.eval_schemes: {s!r} is not a consistent "
                "scheme of the pre-LN field; choose e.g. prenorm (Euler), heun, midpoint."
            )
    if cfg.partial_design:
        study = _within_design(study)
    check_study(study)  # after the levels, so a bad level is named as such
    if not set(study.factors["scheme"]) <= set(cfg.eval_schemes):
        raise ValueError(
            f"task.eval_schemes = {list(cfg.eval_schemes)} must hold every training scheme "
            f"{list(study.factors['scheme'])} (each model is evaluated with its own too)."
        )
    for s in cfg.eval_schemes:
        if s not in study.fit_windows:
            raise ValueError(
                f"task.study.fit_windows has no window for scheme '{s}' (the distance to the "
                f"limit is fitted over it); give task.study.fit_windows.{s}=[lo,hi]."
            )
        declared_order(make_scheme(s))
    for name, what in (("transfer", "max_change"), ("integrator", "max_integrator_change")):
        if name not in study.fit_windows:
            raise ValueError(
                f"task.study.fit_windows.{name} (the depths of {what}) is missing; give "
                f"task.study.fit_windows.{name}=[lo,hi]."
            )
    _check_ref_tolerances(cfg.ref_rtol, cfg.ref_check_rtol, cfg.ref_check_coarse_rtol)
    if cfg.n_steps not in [int(n) for n in study.eval_grid]:
        raise ValueError(
            f"task.n_steps = {cfg.n_steps} must be in task.study.eval_grid = "
            f"{list(study.eval_grid)} (acc.train is read there)."
        )


def _within_design(s: StudyConfig) -> StudyConfig:
    """``s`` without the headline cells and claims naming a cell its design does not have."""
    names = {c.name for c in design_cells(s, check=False)}
    return dataclasses.replace(
        s,
        headline_cells=[c for c in s.headline_cells if c == "headline" or c in names],
        claims=[
            c
            for c in s.claims
            if all(
                x == "headline" or x in names for x in [*c.cells, *([c.minus] if c.minus else [])]
            )
        ],
    )


def _study(cfg: Config, ctx) -> tuple[StudyConfig, int, list[int]]:
    """The design as configured (smoke sizes: configs/sizes/smoke/depth.yaml); with
    ``task.partial_design`` the headline cells and claims naming a cell the design does
    not have are dropped, each said in one line."""
    s = cfg.study
    if cfg.partial_design:
        kept = _within_design(s)
        dropped = [c for c in s.headline_cells if c not in kept.headline_cells] + [
            c.name for c in s.claims if c not in kept.claims
        ]
        if dropped:
            ctx.message(
                "depth study (task.partial_design): not in this design's cells, so not "
                f"checked: {', '.join(dropped)}"
            )
        s = kept
    return s, cfg.n_steps, [int(n) for n in cfg.random_depths]


#: The version of a (cell, seed) record's content: part of its digest, so that a record
#: written before a change of the evaluation (a metric, the reference, a fit) is never
#: reused silently. Bump it with every such change.
RECORD_VERSION = 2  # 2: split reference, extrapolated error estimate, integrator window


def _record_key(cfg: Config, study: StudyConfig, n_steps, random_depths, ref, smoke) -> str:
    """A digest of everything a (cell, seed) record depends on except the cell and seed:
    the task's options (without the study's claims, cells and seed counts, which select
    records but do not change one) and the effective smoke sizes."""
    opts = dataclasses.asdict(cfg)
    opts.pop("study")
    for k in [k for k in opts if k.startswith("text") or k == "max_bpc_change"]:
        opts.pop(k)  # the text models are not part of a cell record
    for k in [k for k in opts if k.startswith(("memory_", "adjoint_", "max_memory"))]:
        opts.pop(k)
    opts.pop("ref_check_max")
    opts.pop("partial_design")  # selects the claims checked, not a record's content
    opts.pop("ref_refine")  # selects the reference level; the level's tolerances are in ref
    design = {
        "eval_grid": [int(n) for n in study.eval_grid],
        "fit_windows": {k: list(v) for k, v in study.fit_windows.items()},
        "n_steps": n_steps,
        "random_depths": list(random_depths),
        "ref": [ref.solver, ref.rtol, ref.check_rtol, ref.coarse_rtol],
        "smoke": bool(smoke),
    }
    return digest({"version": RECORD_VERSION, "options": opts, "design": design})


def _smoke_solver(cfg: Config, ctx) -> ReferenceTolerances:
    """The reference solve's solver, tolerance and the two check tolerances (smoke,
    configs/sizes/smoke/depth.yaml: the adaptive solve's own, checked at 10× and 100× its
    tolerance)."""
    solver, rtol = cfg.ref_solver, cfg.ref_rtol
    check = cfg.ref_check_rtol
    coarse = check and cfg.ref_check_coarse_rtol
    _check_ref_tolerances(rtol, check, coarse)
    return ReferenceTolerances(solver, rtol, check, coarse)


def _check_ref_tolerances(rtol: float, check: float, coarse: float = 0.0) -> None:
    if check and not check > rtol:
        raise ValueError(
            f"task.ref_check_rtol = {check:g} must be larger than the reference tolerance "
            f"{rtol:g} (it estimates the reference's error by a looser solve); or 0 to skip."
        )
    if coarse and not (check and coarse > check):
        raise ValueError(
            f"task.ref_check_coarse_rtol = {coarse:g} must be larger than "
            f"task.ref_check_rtol = {check:g} (> 0): the error estimate d1²/d2 needs two "
            "looser solves; or ref_check_coarse_rtol=0 for the distance d1 alone."
        )


def _train_cell(cfg: Config, ctx, cell, seed: int, n_steps: int, random_depths):
    """Train one (cell, seed); returns (summary, trained model, initial model)."""
    import jax

    from transflow.control import DEPTH_DIGITS, run_training

    lv = cell.levels
    path = "none" if lv["path"] == "per_layer" else lv["path"]
    dcfg = complete(
        cfg.digits,
        d=cfg.d,
        n_steps=n_steps,
        steps=cfg.steps,
        checkpoint_dir="run",
        path=path,
        path_size=cfg.path_size,
        scheme=lv["scheme"],
        train_depths=list(random_depths) if lv["train"] == "random" else [],
        smoothness=cfg.smoothness,
        dt=float(lv["T"]) / n_steps,
    )
    summary, result = run_training(
        DEPTH_DIGITS,
        dcfg,
        run_dir=ctx.run_dir / "cells" / cell.name / f"seed{seed}",
        seed=seed,
        smoke=False,
        progress=ctx.progress,
    )
    k_model, _ = jax.random.split(jax.random.key(seed))  # as run_training draws the model
    init = DEPTH_DIGITS.setup(dcfg, seed, k_model).model
    return summary, result.model, init


def _is_float(a) -> bool:
    import jax.numpy as jnp

    return hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)


def _f64(model):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a: a.astype(jnp.float64) if _is_float(a) else a, model)


def _controls_at(model, n: int):
    from transflow.control import at_depth

    return at_depth(model, n).layer_controls()[0]


def _beta(controls) -> float:
    from transflow import SplitTransformer
    from transflow.analysis import increment_scaling

    return float(increment_scaling(SplitTransformer(controls), [1, 2, 4, 8])["beta"])


def _evaluate(
    cfg: Config,
    study: StudyConfig,
    model,
    init,
    own: str,
    n_steps,
    xte,
    yte,
    ref: ReferenceTolerances,
    check_ref: bool = False,
) -> dict:
    """Every evaluation of one trained model, in float64 (the metrics of a seed record)."""
    import jax
    import numpy as np

    from transflow import Adaptive, make_scheme
    from transflow.analysis import fit_order
    from transflow.control import depth_accuracy

    grid = [int(n) for n in study.eval_grid]
    rec: dict = {}
    with jax.enable_x64(True):
        m = _f64(model)
        x = np.asarray(xte, np.float64)

        def timed(name, *args, **kw):  # depth_accuracy, its seconds in rec["seconds.<name>"]
            t0 = time.perf_counter()
            out = depth_accuracy(*args, **kw)
            rec[f"seconds.{name}"] = time.perf_counter() - t0
            return out

        split = bool(cfg.ref_split)
        solved = timed("reference", m, x, yte, [], adaptive=ref.reference, split=split)
        z_ref = np.asarray(solved["adaptive_outputs"], np.float64)
        norm = float(np.linalg.norm(z_ref))

        def dist(z):
            return float(np.linalg.norm(np.asarray(z, np.float64) - z_ref) / norm)

        rec["acc.reference"] = solved["adaptive_accuracy"]
        rec["nfev.reference"] = solved["adaptive_nfev_mean"]
        if check_ref and ref.check:  # the reference's error: a looser solve's distance
            loose = depth_accuracy(m, x, yte, [], adaptive=ref.check, split=split)
            d1 = rec["dist.ref_check"] = dist(loose["adaptive_outputs"])
            est = d1  # v1: the loose solve's distance itself
            if ref.coarse:  # v2: the decay from the coarse to the loose solve, once more
                coarse = depth_accuracy(m, x, yte, [], adaptive=ref.coarse, split=split)
                d2 = rec["dist.ref_check_coarse"] = dist(coarse["adaptive_outputs"])
                est = d1 * d1 / d2 if d2 > 0 else math.nan
            rec["ref_error_est"] = est
        ad = timed("adaptive", m, x, yte, [], adaptive=Adaptive(rtol=cfg.rtol, atol=cfg.rtol))
        rec["acc.adaptive"] = ad["adaptive_accuracy"]
        rec["nfev.adaptive"] = ad["adaptive_nfev_mean"]
        rec["dist.adaptive"] = dist(ad["adaptive_outputs"])
        for s in cfg.eval_schemes:
            ms = m if s == own else dataclasses.replace(m, scheme=make_scheme(s))
            r = timed(s, ms, x, yte, grid, adaptive=None)
            for n, a, z in zip(grid, r["accuracy"], r["outputs"]):
                rec[f"acc.{s}.{n}"] = a
                rec[f"dist.{s}.{n}"] = dist(z)
            win = window(study, s)
            rec[f"order.{s}"] = fit_order(win, [rec[f"dist.{s}.{n}"] for n in win])
        fine = int(cfg.beta_depth)
        th, th0 = _controls_at(m, fine), _controls_at(_f64(init), fine)
        upd = jax.tree.map(lambda a, b: a - b, th, th0)
        rec["beta.trained"] = _beta(th)
        rec["beta.init"] = _beta(th0)
        rec["beta.update"] = _beta(upd)
        sq = lambda t: sum(float(np.sum(np.asarray(v) ** 2)) for v in jax.tree.leaves(t))  # noqa: E731
        rec["update_rel"] = math.sqrt(sq(upd) / sq(th0)) if sq(th0) > 0 else math.nan
    if "dist.ref_check" in rec:  # over the smallest distance any order fit uses
        smallest = min(rec[f"dist.{s}.{n}"] for s in cfg.eval_schemes for n in window(study, s))
        rec["ref_error_ratio"] = rec["ref_error_est"] / smallest
    rec["acc.train"] = rec[f"acc.{own}.{n_steps}"]
    rec["dist.train"] = rec[f"dist.{own}.{n_steps}"]
    tw = window(study, "transfer")
    rec["max_change"] = max(
        [abs(rec[f"acc.{own}.{n}"] - rec["acc.train"]) for n in tw]
        + [abs(rec["acc.adaptive"] - rec["acc.train"])]
    )
    s0, *others = cfg.eval_schemes

    def integrator_change(win):
        return max(
            (abs(rec[f"acc.{s}.{n}"] - rec[f"acc.{s0}.{n}"]) for s in others for n in win),
            default=0.0,
        )

    rec["max_integrator_change"] = integrator_change(window(study, "integrator"))
    rec["max_integrator_change_transfer"] = integrator_change(tw)  # v1's window
    rec["n_test"] = len(yte)
    return rec


def _evaluate_cell(cfg: Config, ctx, study, cell, seed, n_steps, random_depths, ref, check_ref):
    """Train one (cell, seed) (or reload its final checkpoint) and evaluate it: the record's
    metrics with the seconds of both."""
    from transflow.control import load_digits_split

    t0 = time.perf_counter()
    summary, model, init = _train_cell(cfg, ctx, cell, seed, n_steps, random_depths)
    _, _, xte, yte = load_digits_split(cfg.digits.test_fraction, seed=seed)
    if ctx.smoke:
        xte, yte = xte[:64], yte[:64]
    t1 = time.perf_counter()
    rec = _evaluate(
        cfg, study, model, init, cell.levels["scheme"], n_steps, xte, yte, ref, check_ref
    )
    rec.update(
        cpu_train=summary["cpu_seconds"],
        n_params=summary.get("n_params"),
        seconds_train=t1 - t0,
        seconds_eval=time.perf_counter() - t1,
    )
    return rec


def _job_record(cfg, ctx, study, cell, seed, out, keys, ref, lv, n_steps, random_depths):
    """The record of one (cell, seed) job: reused from ``out/record.json`` if written with
    one of ``keys`` (one per reference level), else evaluated. The cell's first seed may
    raise the level (design v3): while its reference-error ratio exceeds
    ``cfg.ref_check_max`` and ``cfg.ref_refine`` allows, it is evaluated again with every
    reference tolerance ÷ 10; the other seeds use level ``lv``, the first seed's. Returns
    (record, level, whether it was reused)."""
    first = seed == cell.seeds[0]
    old = None
    for j in range(len(keys)) if first else [lv]:
        old = reusable_record(out / "record.json", keys[j], cell.name, seed)
        if old is not None:
            lv = j
            break
    rec, history = old, {}
    while True:
        if rec is None:
            rec = _evaluate_cell(
                cfg, ctx, study, cell, seed, n_steps, random_depths, ref.refined(lv), first
            )
            rec["ref_level"] = lv
            rec.update(history)  # the ratios at the lower levels (first seed)
            out.mkdir(parents=True, exist_ok=True)
            meta = {"cell": cell.name, "levels": cell.levels, "seed": seed, "key": keys[lv]}
            (out / "record.json").write_text(
                json.dumps(meta | rec, indent=1, allow_nan=True) + "\n"
            )
        ratio = rec.get("ref_error_ratio", 0.0)
        if first and cfg.ref_check_max and ratio > cfg.ref_check_max and lv < cfg.ref_refine:
            ctx.message(
                f"{cell.name} seed {seed}: reference error ratio {ratio:.3g} > "
                f"{cfg.ref_check_max:g} at rtol {ref.refined(lv).rtol:g}; evaluated again at "
                f"{ref.refined(lv + 1).rtol:g} "
                "(task.ref_refine, design v3)"
            )
            history = {k: v for k, v in rec.items() if k.startswith("ref_error_ratio.")}
            history[f"ref_error_ratio.level{lv}"] = ratio
            lv, rec, old = lv + 1, None, None
            continue
        return rec, lv, old is not None


def run(cfg: Config, ctx) -> dict:
    """Run the ``depth`` study: every declared (cell, seed), then the factorial table, the
    figures and the declared claims; then the adjoint, memory and text checks."""
    import jax
    import numpy as np

    study, n_steps, random_depths = _study(cfg, ctx)
    cells = design_cells(study, seed=ctx.seed)
    if study.cells:
        wanted = {c if c != "headline" else cells[0].name for c in study.cells}
        cells = [c for c in cells if c.name in wanted]
    jobs = [(c, s) for c in cells for s in c.seeds]
    ctx.message(
        f"depth study: {len(cells)} cells, {len(jobs)} (cell, seed) jobs; factors "
        + ", ".join(f"{k}={list(v)}" for k, v in study.factors.items())
        + f"; crossed {list(study.crossed)}; seeds from {ctx.seed + study.seed_offset}"
    )
    ctx.log(
        {
            "kind": "design",
            "cells": [dataclasses.asdict(c) for c in cells],
            "n_steps": n_steps,
            "random_depths": random_depths,
        }
    )
    ref = _smoke_solver(cfg, ctx)
    records: dict[str, dict[int, dict]] = {}
    t_study = time.perf_counter()
    # a record is reused only if it was written with this very configuration; one key per
    # reference level (design v3: level j divides the reference's tolerances by 10**j)
    keys = [
        _record_key(cfg, study, n_steps, random_depths, ref.refined(j), ctx.smoke)
        for j in range(int(cfg.ref_refine) + 1)
    ]
    level: dict[str, int] = {}  # the reference level of every cell (set by its first seed)
    n_reused = 0
    for i, (cell, seed) in enumerate(jobs):
        out = ctx.run_dir / "cells" / cell.name / f"seed{seed}"
        rec, lv, reused = _job_record(
            cfg,
            ctx,
            study,
            cell,
            seed,
            out,
            keys,
            ref,
            level.get(cell.name, 0),
            n_steps,
            random_depths,
        )
        if seed == cell.seeds[0]:
            level[cell.name] = lv
        n_reused += reused
        records.setdefault(cell.name, {})[seed] = rec
        ctx.log({"kind": "cell", "cell": cell.name, "seed": seed, **cell.levels, **rec})
        done = time.perf_counter() - t_study
        ctx.message(
            f"cell {i + 1}/{len(jobs)} {cell.name} seed {seed}: acc.train "
            f"{rec['acc.train']:.3f}, max_change {rec['max_change']:.3f}, dist.train "
            f"{rec['dist.train']:.3g}; "
            + (
                "record reused; "
                if reused
                else f"train {rec['seconds_train']:.0f} s, eval {rec['seconds_eval']:.0f} s; "
            )
            + f"ETA {done / (i + 1) * (len(jobs) - i - 1):.0f} s"
        )
        if not ctx.smoke and not reused:
            from ..context import release_compiled

            release_compiled()  # every training maps its compiled code (vm.max_map_count)

    agg = aggregate(records)
    n_test = int(np.mean([r["n_test"] for by in records.values() for r in by.values()]))
    verdicts = evaluate_claims(study, records, n_examples=n_test)
    table = _factorial(cfg, study, cells, agg, n_steps)
    (ctx.run_dir / "factorial.md").write_text(table["markdown"] + "\n")
    (ctx.run_dir / "factorial.csv").write_text(table["csv"])
    (ctx.run_dir / "factorial.json").write_text(
        json.dumps(
            {
                "design": dataclasses.asdict(study),
                "n_steps": n_steps,
                "cells": [dataclasses.asdict(c) for c in cells],
                "aggregate": agg,
                "records": {c: {str(s): r for s, r in by.items()} for c, by in records.items()},
            },
            indent=1,
            allow_nan=True,
        )
        + "\n"
    )
    _figures(ctx, cfg, study, cells, agg)
    # every declared claim is a claim of the run: one over cells not run (task.study.cells)
    # is "not checked", so a restricted run never says that all its claims pass; at smoke
    # size they are declared not enforced (configs/sizes/smoke/depth.yaml, not_enforced)
    ctx.record_verdicts(verdicts)
    ctx.log({"kind": "claims", "verdicts": verdicts})
    # the continuous limit's own error (first seed of every cell), against its declared max
    ratios = {
        c: r["ref_error_ratio"]
        for c, by in records.items()
        for r in by.values()
        if "ref_error_ratio" in r
    }
    ref_worst = max(ratios.items(), key=lambda kv: kv[1]) if ratios else None
    if ref_worst is not None and cfg.ref_check_max:
        ctx.claim(
            f"reference_error_ratio [{ref_worst[0]}]",
            ref_worst[1],
            cfg.ref_check_max,
            op="<=",
        )

    adj = _adjoint_check(cfg.adjoint_activation, cfg.adjoint_rtol)
    ctx.log({"kind": "adjoint", **adj})
    adjoint_rel = adj["relative_difference"]
    relu_rel = None
    if cfg.adjoint_relu_rtol:  # the kink-limited contrast (not a claim)
        relu = _adjoint_check("relu", cfg.adjoint_relu_rtol)
        ctx.log({"kind": "adjoint", **relu})
        relu_rel = relu["relative_difference"]
    memory = _memory(cfg, ctx)
    # smoke: the text models only when asked (task.text=true), to stay within 3 minutes
    with_text = cfg.text
    text_seeds = cells[0].seeds[: int(cfg.text_seeds)]
    text = _text(cfg, ctx, study, n_steps, random_depths, text_seeds) if with_text else None

    ctx.claim("adjoint_relative_difference", adjoint_rel, 1e-6, op="<=")
    for g, m in memory.items():
        if g != "backprop":  # backprop stores a state per step: the contrast, not a claim
            ctx.claim(f"peak_rss_ratio_{g}", m["ratio"], cfg.max_memory_ratio, op="<=")
    if text is not None:
        ctx.claim(  # every seed
            "text_path_bpc_change_at_4x_depth",
            max(text["path"]["change_4x"]),
            cfg.max_bpc_change,
            op="<=",
        )
        four = text["baselines"]["bpc"][3]
        for name in ("path", "per_layer"):  # mean over seeds, at the training depth
            ctx.claim(f"text_{name}_beats_4gram", text[name]["bpc_train"], four, op="<")
        ctx.claim(
            "text_equal_parameters",
            abs(text["path"]["n_params"] - text["per_layer"]["n_params"]),
            0,
            op="<=",
        )

    seconds = time.perf_counter() - t_study
    ctx.report(
        "## Design (declared before the run)\n\n"
        + _design_markdown(study, cells, n_steps, random_depths)
        + "\n\n## Factorial table\n\n"
        + table["markdown"]
        + "\n\n## Claims over seeds (declared in task.study.claims)\n\n"
        + verdicts_markdown(verdicts)
        + _reference_line(cfg, ref, ratios, level)
        + "\n\nEach claim is checked in each cell it names; `worst seed`: every seed must "
        "satisfy it; `mean ∓ std`: the mean minus (or plus) one standard deviation. The "
        f"test split holds {n_test} images per seed."
        + _text_table(text)
        + _memory_table(memory)
        + "\n\nContinuous adjoint vs backprop through the solver "
        f"(float64, {cfg.adjoint_activation} FFN, rtol = atol = {cfg.adjoint_rtol:g}): "
        f"relative difference {adjoint_rel:.2e}"
        + (
            ""
            if relu_rel is None
            else f" (ReLU FFN, {cfg.adjoint_relu_rtol:g}: {relu_rel:.2e}, kink-limited)"
        )
        + "."
    )
    per_job = [
        r["seconds_train"] + r["seconds_eval"] for by in records.values() for r in by.values()
    ]
    head = cells[0].name
    ha = agg.get(head, {})
    return {
        "n_cells": len(cells),
        "n_jobs": len(jobs),
        "headline_cell": head,
        "seconds_per_job_mean": float(np.mean(per_job)),
        "seconds_study": seconds,
        "n_records_reused": n_reused,
        **{
            f"headline_{k}": v["mean"]
            for k, v in ha.items()
            if k
            in (
                "acc.train",
                "max_change",
                "dist.train",
                "acc.adaptive",
                "max_integrator_change",
                "beta.update",
            )
        },
        **{
            f"headline_{k}_std": v["std"] for k, v in ha.items() if k in ("acc.train", "max_change")
        },
        "claims_verdicts": summarize_verdicts(verdicts),
        "adjoint_relative_difference": adjoint_rel,
        "adjoint_relative_difference_relu": relu_rel,
        **{f"peak_rss_ratio_{g}": m["ratio"] for g, m in memory.items()},
        **(
            {}
            if text is None
            else {
                **{
                    f"text_bpc_{k}": v["bpc"]
                    for k, v in text.items()
                    if k not in ("depths", "baselines", "seeds")
                },
                "text_ngram_bpc": text["baselines"]["bpc"],  # orders 1..5
                "text_val_overlap": text["baselines"]["overlap"],
            }
        ),
        "jax_devices": str(jax.devices()),
    }


def _reference_line(cfg: Config, ref, ratios: dict, level: dict | None = None) -> str:
    """The continuous limit and the estimate of its own error (report)."""
    check, coarse = ref.check_rtol, ref.coarse_rtol
    how = (
        f"d1²/d2 from the distances d1, d2 of solves at {check:g} and {coarse:g} to it"
        if coarse
        else f"the distance of a solve at {check:g} to it (~10× its own error)"
    )
    line = (
        f"\n\nThe continuous limit: {ref.solver} at rtol = atol = {ref.rtol:g} (float64"
        + (", solved piece by piece between the jumps of θ" if cfg.ref_split else "")
        + f"). Its error, estimated on the first seed of every cell as {how}, over the "
        "smallest distance an order fit uses: "
    )
    if not ratios:
        return line + "not measured (task.ref_check_rtol=0)."
    worst = max(ratios.values())
    refined = {c: j for c, j in (level or {}).items() if j}
    return (
        line
        + (
            f"at most {worst:.2g} (cell {max(ratios, key=ratios.get)}; median "
            f"{sorted(ratios.values())[len(ratios) // 2]:.2g}); declared bound "
            f"{cfg.ref_check_max:g}."
        )
        + (
            " Refined (design v3, `task.ref_refine`; all tolerances ÷ 10 per level, every "
            "seed of the cell): "
            + ", ".join(f"{c} to rtol {ref.refined(j).rtol:g}" for c, j in refined.items())
            + "."
            if refined
            else ""
        )
    )


def _pm(a: dict | None, digits: int = 3, sci: bool = False) -> str:
    return mean_std_text(a, ".2e" if sci else f".{digits}f")


def _factorial(cfg: Config, study: StudyConfig, cells, agg, n_steps) -> dict:
    """The factorial table: one row per cell, mean ± std over its seeds at every
    evaluation depth, per evaluation mode (markdown and CSV)."""
    grid = [int(n) for n in study.eval_grid]
    md: list[str] = []
    lead = "| cell | role | seeds |"
    for title, key, sci, extra in (
        (
            "Test accuracy, own scheme (the training scheme)",
            "acc.{own}.{n}",
            False,
            [("adaptive", "acc.adaptive"), ("reference", "acc.reference")],
        ),
        *(
            (f"Test accuracy, stepped by {s}", f"acc.{s}.{{n}}", False, [])
            for s in cfg.eval_schemes
        ),
        (
            "Distance of the logits to the continuous limit ‖z_N − z_ref‖/‖z_ref‖, own scheme",
            "dist.{own}.{n}",
            True,
            [("adaptive", "dist.adaptive")],
        ),
        *(
            (
                f"Distance to the limit, stepped by {s}",
                f"dist.{s}.{{n}}",
                True,
                [(f"order ({'–'.join(map(str, study.fit_windows[s]))})", f"order.{s}")],
            )
            for s in cfg.eval_schemes
        ),
    ):
        md += [
            f"**{title}** (mean ± std over seeds)",
            "",
            lead + "".join(f" N={n} |" for n in grid) + "".join(f" {e} |" for e, _ in extra),
            "|---|---|---|" + "---|" * (len(grid) + len(extra)),
        ]
        for c in cells:
            a = agg.get(c.name, {})
            own = c.levels["scheme"]
            vals = [_pm(a.get(key.format(own=own, n=n)), sci=sci) for n in grid]
            vals += [_pm(a.get(k), sci=sci and not k.startswith("order")) for _, k in extra]
            md.append(f"| {c.name} | {c.role} | {len(c.seeds)} | " + " | ".join(vals) + " |")
        md.append("")
    summary_keys = [
        ("acc.train", False),
        ("max_change", False),
        ("max_integrator_change", False),
        ("dist.train", True),
        ("nfev.adaptive", False),
        ("beta.trained", False),
        ("beta.init", False),
        ("beta.update", False),
        ("update_rel", False),
        ("cpu_train", False),
        ("n_params", False),
    ]
    md += [
        "**Per cell** (mean ± std over seeds; β: increment scaling at "
        f"{cfg.beta_depth} steps, of the trained controls, of their initialisation and "
        "of the learned update θ − θ₀)",
        "",
        "| cell | " + " | ".join(k for k, _ in summary_keys) + " |",
        "|---|" + "---|" * len(summary_keys),
    ]
    for c in cells:
        a = agg.get(c.name, {})
        md.append(
            f"| {c.name} | "
            + " | ".join(
                _pm(
                    a.get(k),
                    digits=1 if k in ("cpu_train", "nfev.adaptive", "n_params") else 3,
                    sci=sci,
                )
                for k, sci in summary_keys
            )
            + " |"
        )
    metrics = sorted({k for a in agg.values() for k in a})
    lines = ["cell,role,n_seeds," + ",".join(f"{f}" for f in FACTORS) + ",metric,mean,std,values"]
    for c in cells:
        for k in metrics:
            v = agg.get(c.name, {}).get(k)
            if v is None:
                continue
            lines.append(
                f"{c.name},{c.role},{len(c.seeds)},"
                + ",".join(str(c.levels[f]) for f in FACTORS)
                + f',{k},{v["mean"]!r},{v["std"]!r},"{" ".join(map(repr, v["values"]))}"'
            )
    return {"markdown": "\n".join(md), "csv": "\n".join(lines) + "\n"}


def _design_markdown(study, cells, n_steps, random_depths) -> str:
    lines = [
        "Factors: "
        + "; ".join(f"`{k}` ∈ {list(v)}" for k, v in study.factors.items())
        + f". Headline: {dict(study.headline)}. Crossed: {list(study.crossed)}; the others "
        "one at a time around the headline.",
        f"Training depth: fixed N_t = {n_steps} or random from {list(random_depths)}; "
        f"evaluation grid {list(study.eval_grid)}; windows "
        + ", ".join(f"{k} = {list(v)}" for k, v in study.fit_windows.items())
        + ".",
        f"{len(cells)} cells, seeds "
        + ", ".join(f"{c.name}: {c.seeds}" for c in cells if c.role == "headline")
        + f" (headline); others {cells[-1].seeds if cells else []} "
        f"(seed_offset {study.seed_offset}).",
    ]
    return "\n".join(lines)


def _figures(ctx, cfg, study, cells, agg) -> None:
    from transflow.plotting import plot_depth_factorial

    for what in ("accuracy", "distance"):
        ctx.save_figure(
            plot_depth_factorial(
                [int(n) for n in study.eval_grid],
                [(c.name, c.levels, c.role) for c in cells],
                agg,
                what=what,
            ),
            f"factorial_{what}",
        )


def _adjoint_check(activation: str = "tanh", tol: float = 1e-10, solver: str = "tsit5") -> dict:
    """:func:`~transflow.continuous.compare_adjoints` (``BacksolveAdjoint`` against
    ``RecursiveCheckpointAdjoint``) on an adaptive pre-LN solve with a rough Legendre
    path (K = 2, d = 4, 3 tokens, T = 1, float64, rtol = atol = ``tol``) whose FFN has
    the given ``activation`` (the vector field is C¹ for a smooth one, only Lipschitz for
    ReLU)."""
    import jax
    import jax.numpy as jnp

    from transflow import Adaptive, LayerControls, PreNormScheme
    from transflow.continuous import compare_adjoints, init_path

    with jax.enable_x64(True):
        path = init_path(
            "legendre",
            lambda k: LayerControls.random(4, activation=activation, dtype=jnp.float64, key=k),
            2,
            key=jax.random.key(3),
            smooth=False,
        )
        u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
        solve = Adaptive(rtol=tol, atol=tol, solver=solver, max_steps=100_000)
        r = compare_adjoints(u0, path, PreNormScheme(), solve)
        return {
            "activation": activation,
            "rtol": tol,
            "solver": solver,
            "relative_difference": r["relative_difference"],
            "num_steps": r["num_steps"],
        }


def _memory(cfg: Config, ctx) -> dict:
    """Peak RSS of one gradient per mechanism and depth, each in a fresh process
    (:func:`transflow.control.gradient_peak_rss`)."""
    from transflow.control import gradient_peak_rss

    depths = [int(n) for n in cfg.memory_depths]
    batch, d = cfg.memory_batch, cfg.d
    gradients = list(cfg.memory_gradients)
    out = {}
    for g in gradients:
        runs = [gradient_peak_rss(n, gradient=g, batch_size=batch, d=d) for n in depths]
        for r in runs:
            ctx.log({"kind": "memory", **r})
        peaks = [r["peak_rss_bytes"] for r in runs]
        out[g] = {
            "depths": depths,
            "peak_mb": [p / 2**20 for p in peaks],
            "grad_seconds": [r["grad_seconds"] for r in runs],
            "ratio": peaks[-1] / peaks[0],
        }
    return out


def _text(
    cfg: Config, ctx, study: StudyConfig, n_steps: int, random_depths, seeds: list[int]
) -> dict:
    """Train the text path model (the headline's path, T = ``task.text_T``, N_t drawn from
    ``random_depths``, ``task.text_path_scheme``) and a per-layer model with as many
    parameters (:data:`transflow.control.DEPTH_TEXT`) for each of ``seeds``, then
    validation bits per character at ``text_eval_depths`` (with ``n_steps`` and
    ``4 n_steps`` added). One record per (model, seed) in ``text/<model>/seed<k>/``,
    reused on a rerun in the same folder with the same text options."""
    import numpy as np

    from transflow.control import (
        DEPTH_TEXT,
        DepthTextConfig,
        bits_per_char,
        depth_accuracy,
        run_training,
        text_baselines,
        validation_windows,
    )

    n0 = n_steps
    head = study.headline
    depths = sorted({int(n) for n in cfg.text_eval_depths} | {n0, 4 * n0})
    base = DepthTextConfig(checkpoint_dir="run", steps=cfg.text_steps, n_steps=n0)
    if ctx.smoke:
        n0, depths = 2, [2, 4, 8]
        base = DepthTextConfig(
            checkpoint_dir="run",
            d=8,
            n_heads=1,
            n_steps=2,
            context=16,
            n_val=16,
            steps=10,
            eval_every=10,
            log_every=5,
            warmup_steps=2,
        )
    models = {
        "path": dict(
            path="legendre" if head["path"] == "per_layer" else head["path"],
            path_size=n0 if ctx.smoke else cfg.path_size,  # smoke: K = its N_t = 2
            train_depths=[2, 4] if ctx.smoke else list(random_depths),
            smoothness=cfg.smoothness,
            dt=float(cfg.text_T) / n0,
            scheme=cfg.text_path_scheme,
        ),
        "per_layer": dict(path="none", dt=1.0, scheme="prenorm"),
    }
    out: dict = {"depths": depths, "seeds": list(seeds)}
    for name, over in models.items():
        tcfg = dataclasses.replace(base, **over)
        key = digest(
            {"version": RECORD_VERSION, "config": dataclasses.asdict(tcfg), "depths": depths}
        )
        per_seed = []
        for seed in seeds:
            folder = ctx.run_dir / "text" / name / f"seed{seed}"
            rec = reusable_record(folder / "record.json", key, f"text-{name}", seed)
            if rec is None:
                summary, result = run_training(
                    DEPTH_TEXT, tcfg, run_dir=folder, seed=seed, progress=ctx.progress
                )
                ctx.log({"kind": "train", "model": f"text_{name}", "seed": seed, **summary})
                xv, yv = validation_windows(tcfg)
                r = depth_accuracy(result.model, xv, yv, depths, adaptive=None)
                rec = {
                    "bpc": [bits_per_char(v) for v in r["loss"]],
                    "n_params": summary["n_params"],
                    "cpu_seconds": summary["cpu_seconds"],
                }
                folder.mkdir(parents=True, exist_ok=True)
                head = {"cell": f"text-{name}", "seed": seed, "key": key}
                (folder / "record.json").write_text(json.dumps({**head, **rec}) + "\n")
            for n, b in zip(depths, rec["bpc"]):
                ctx.log({"kind": "text_bpc", "model": name, "seed": seed, "n_steps": n, "bpc": b})
            per_seed.append(rec)
        bpc = np.asarray([r["bpc"] for r in per_seed])  # (seeds, depths)
        i0, i4 = depths.index(n0), depths.index(4 * n0)
        out[name] = {
            "bpc": bpc.mean(0).tolist(),
            "bpc_std": (bpc.std(0, ddof=1) if len(seeds) > 1 else 0 * bpc[0]).tolist(),
            "bpc_seeds": bpc.tolist(),
            "bpc_train": float(bpc[:, i0].mean()),
            "change_4x": (np.abs(bpc[:, i4] - bpc[:, i0]) / bpc[:, i0]).tolist(),
            "n_params": per_seed[0]["n_params"],
            "cpu_seconds": float(np.mean([r["cpu_seconds"] for r in per_seed])),
            "scheme": tcfg.scheme,
        }
    # n-gram count baselines on the same validation windows (issue 37)
    out["baselines"] = text_baselines(base)
    ctx.log({"kind": "text_baselines", **out["baselines"]})
    return out


def _text_table(text: dict | None) -> str:
    from transflow.control import baselines_table

    if not text:
        return ""
    depths = text["depths"]
    rows = "\n".join(
        f"| {name} | {text[name]['scheme']} | {text[name]['n_params']} | "
        + " | ".join(f"{b:.3f} ± {e:.3f}" for b, e in zip(text[name]["bpc"], text[name]["bpc_std"]))
        + f" | {100 * max(text[name]['change_4x']):.2f} % | {text[name]['cpu_seconds']:.1f} |"
        for name in ("path", "per_layer")
    )
    return (
        f"\n\nText (pydoc_data.topics, validation bits per character, mean ± std over seeds "
        f"{text['seeds']}):\n\n"
        f"| model | scheme | parameters | {' | '.join(f'N={n}' for n in depths)} "
        "| change at 4x (worst seed) | CPU s (mean) |\n"
        f"|---|---|---|{'---|' * len(depths)}---|---|\n{rows}\n\n"
        + baselines_table(text["baselines"])
    )


def _memory_table(memory: dict) -> str:
    if not memory:
        return ""
    depths = next(iter(memory.values()))["depths"]
    head = " | ".join(f"N={n}: MB (s)" for n in depths)
    rows = "\n".join(
        f"| {g} | "
        + " | ".join(f"{p:.0f} ({t:.1f})" for p, t in zip(m["peak_mb"], m["grad_seconds"]))
        + f" | {m['ratio']:.2f} |"
        for g, m in memory.items()
    )
    return (
        "\n\nPeak RSS of one gradient (fresh process each; grad seconds in brackets):\n\n"
        f"| gradient | {head} | ratio |\n|---|{'---|' * len(depths)}---|\n{rows}"
    )

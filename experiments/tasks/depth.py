"""Task ``depth``: depth transfer on digits as a seeded factorial ablation (issues 26, 37).

The study is declared in ``task.study`` (:class:`transflow.experiments.study.StudyConfig`,
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

Metrics of a seed record (the names claims use: ``acc.<scheme>.<N>``, ``dist.<scheme>.<N>``,
``order.<scheme>``, ``acc.adaptive``, ``max_change``, ...): docs/depth.md, "The metrics
of a seed record". Under a reading of ``task.readings`` other than "right" the stepped
metrics and the claims are suffixed ``@<reading>``.

Runs on the study runner (:mod:`transflow.experiments.study.runner`, :func:`spec`): one
record per job in ``cells/<cell>/seed<k>/record.json``, reused on a rerun in the same
folder when its digest (:func:`record_key`) matches (a shard or a rerun of any cell:
``task.study.cells=[<cell>]``); then ``factorial.md``/``.csv``/``.json`` (mean ± std per
cell and evaluation depth), the figures ``factorial_accuracy`` and ``factorial_distance``,
the claim verdicts (each declared claim in each of its cells, over all seeds or mean ±
std as declared; accuracy margins also in test examples). The side studies of the depth
page are tasks of their own: ``experiment=depth_adjoint`` (the float64 continuous-adjoint
check), ``experiment=depth_memory`` (peak RSS of one gradient per mechanism) and
``experiment=depth_text`` (the text models).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from transflow.analysis import reading_suffix
from transflow.control import DepthDigitsConfig, ReferenceTolerances

from ..config import complete, library_names, options_without
from ..context import markdown_table
from ..study.protocol import (
    StudyConfig,
    aggregate,
    check_study,
    design_cells,
    digest,
    evaluate_claims,
    keyed_fields,
    mean_std_text,
    window,
)
from ..study.report import (
    claims_markdown,
    design_markdown,
    records_json,
    seeds_text,
    study_summary,
    write_tables,
)
from ..study.runner import Refinement, StudySpec, job_dir, run_jobs, select_cells

__all__ = [
    "CHOICES",
    "FACTORS",
    "RECORD_VERSION",
    "Config",
    "DigitsOptions",
    "STRADDLE_SCHEME",
    "check",
    "read_claims",
    "record_key",
    "reference",
    "run",
    "spec",
    "study_design",
    "within_design",
]


#: The factors a cell of the depth study varies (its key's fields, in order).
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


#: Names checked before any work, smoke runs included (transflow-run help depth).
CHOICES = {
    "eval_schemes": library_names("", "SCHEME_NAMES"),
    "ref_solver": ("dopri5", "dopri8", "tsit5"),
    "digits.gradient": library_names("control", "GRADIENTS"),
    "digits.activation": library_names("control", "DEPTH_ACTIVATIONS"),
    "digits.theta_at": library_names("models", "THETA_AT"),
    "readings": library_names("continuous", "READINGS"),
}

#: The reading of θ(t) whose metrics keep their unsuffixed names (``acc.prenorm.2``): the
#: one every run before the option existed used, and the one the declared claims name.
DEFAULT_READING = "right"


@dataclass
class Config:
    """Depth transfer on digits, a factorial study (``task.<field>=...``)."""

    # the design: factors, seeds, evaluation grid, fit windows, claims (declared in
    # configs/experiment/depth.yaml; experiments/study/protocol.py)
    study: StudyConfig = field(default_factory=StudyConfig)
    path_size: int = 4  # K of every path parameterization
    n_steps: int = 4  # the training depth N_t (train=fixed), Δt = T / n_steps
    random_depths: list[int] = field(default_factory=lambda: [4, 8, 16])  # train=random
    smoothness: float = 0.0  # λ of λ ∫‖θ'(t)‖² dt
    steps: int = 1500
    d: int = 32
    # every model is evaluated with each of these schemes (its own and a second integrator)
    eval_schemes: list[str] = field(default_factory=lambda: ["prenorm", "heun"])
    # how a depth N reads θ(t) where a step midpoint falls on a jump (a per-layer model of
    # L layers at N = L/2, L/4, ...; transflow.continuous.READINGS): "right" the layer
    # after it (every run before this option), "left" the layer before, "average" the
    # step's mean of θ. Every declared reading evaluates every stepped depth and every
    # claim; "right" keeps the unsuffixed metric names, another r suffixes them "@r"
    readings: list[str] = field(default_factory=lambda: [DEFAULT_READING])
    rtol: float = 1e-5  # adaptive solve (Tsit5 + PID; atol = rtol)
    ref_solver: str = "dopri5"  # the continuous limit: a fine adaptive solve, float64
    ref_rtol: float = 1e-8  # its tolerance (atol = rtol)
    # solved piece by piece between the jumps of θ (per-layer: every layer boundary;
    # piecewise linear: every knot), so no step crosses a jump (design v2, docs/depth.md)
    ref_split: bool = True
    # issue 50: the adaptive solve (task.rtol) of every model piece by piece between the
    # jumps and kinks of θ, as the reference (task.ref_split): a fair count of field
    # evaluations. The metrics acc/nfev/dist.adaptive are then the split solve's, and the
    # solve straight across the jumps (every run before the option) is kept beside them
    # as acc/nfev/dist.adaptive.unsplit. false (default): the unsplit solve only, the
    # records of v1-v3
    adaptive_split: bool = False
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
    # evaluate on the first test_examples images of the test split (0: all of them)
    test_examples: int = 0
    # drop the compiled programs after every job that trained (a full run's hundreds of
    # trainings exhaust the process's memory mappings otherwise; context.release_compiled)
    release_compiled: bool = True
    # the digits model's other options (DepthDigitsConfig without the fields set above)
    digits: DigitsOptions = field(default_factory=DigitsOptions)
    # a design with fewer cells or depths than the claims name (debug=smoke): the claims
    # and headline cells naming a missing cell or depth are said and not checked, instead
    # of refused
    partial_design: bool = False
    # the smoke sizes (set by configs/sizes/smoke/depth.yaml, debug=smoke): their records
    # are kept apart from full-size ones (the record key's "smoke" field, as before the
    # option, when the key read the run's smoke flag)
    smoke_sizes: bool = False


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
        if s not in library_names("", "SCHEME_NAMES")() or s in ("lie", "relaxed"):
            raise ValueError(
                f"task.study.factors.scheme / task.eval_schemes: {s!r} is not a consistent "
                "scheme of the pre-LN field; choose e.g. prenorm (Euler), heun, midpoint."
            )
    if cfg.partial_design:
        study = within_design(study)
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
    _check_readings(cfg.readings)
    if cfg.n_steps not in [int(n) for n in study.eval_grid]:
        raise ValueError(
            f"task.n_steps = {cfg.n_steps} must be in task.study.eval_grid = "
            f"{list(study.eval_grid)} (acc.train is read there)."
        )


def _check_readings(readings) -> None:
    from transflow.continuous import READINGS

    got = list(readings)
    bad = [r for r in got if r not in READINGS]
    if bad or not got or len(set(got)) != len(got) or DEFAULT_READING not in got:
        raise ValueError(
            f"task.readings = {got} must list distinct readings of {list(READINGS)} including "
            f"'{DEFAULT_READING}' (the reading of the unsuffixed metrics and of the runs "
            "before the option); e.g. task.readings=[right,left,average]."
        )


def within_design(s: StudyConfig) -> StudyConfig:
    """``s`` without the headline cells and claims naming a cell its design does not have,
    and without the claims on a depth its evaluation grid does not have (a metric ending
    in a depth, ``order_local.heun.256``, at the smoke grid 1…8)."""
    names = {c.name for c in design_cells(s, check=False)}
    grid = {int(n) for n in s.eval_grid}

    def kept(c) -> bool:
        last = c.metric.split("@")[0].rsplit(".", 1)[-1]  # a depth when it is a number
        named = [*c.cells, *([c.minus] if c.minus else [])]
        on_grid = not last.isdigit() or int(last) in grid
        return on_grid and all(x == "headline" or x in names for x in named)

    return dataclasses.replace(
        s,
        headline_cells=[c for c in s.headline_cells if c == "headline" or c in names],
        claims=[c for c in s.claims if kept(c)],
    )


def study_design(cfg: Config, ctx) -> StudyConfig:
    """The design as configured (smoke sizes: configs/sizes/smoke/depth.yaml); with
    ``task.partial_design`` the headline cells and claims naming a cell the design does
    not have are dropped, each said in one line."""
    s = cfg.study
    if cfg.partial_design:
        kept = within_design(s)
        dropped = [c for c in s.headline_cells if c not in kept.headline_cells] + [
            c.name for c in s.claims if c not in kept.claims
        ]
        if dropped:
            ctx.message(
                "depth study (task.partial_design): not in this design's cells or evaluation "
                f"grid, so not checked: {', '.join(dropped)}"
            )
        s = kept
    return s


#: The version of a (cell, seed) record's content: part of its digest, so that a record
#: written before a change of the evaluation (a metric, the reference, a fit) is never
#: reused silently. Bump it with every such change.
RECORD_VERSION = 2  # 2: split reference, extrapolated error estimate, integrator window

#: Options that select records or claims but do not change a record's content.
_NOT_IN_RECORD = (
    "study",
    "ref_check_max",
    "partial_design",
    "ref_refine",
    "release_compiled",
    "smoke_sizes",  # in the key's design as "smoke", where the run's flag was before
)


def record_key(cfg: Config, study: StudyConfig, ref: ReferenceTolerances) -> str:
    """The digest of everything a (cell, seed) record depends on except the cell and seed:
    the task's options (without those of :data:`_NOT_IN_RECORD`), the study's evaluation
    grid and fit windows (not its claims, cells or seed counts, which select records but
    do not change one), the reference's tolerances (``ref``: one refinement level),
    ``task.smoke_sizes`` (the smoke sizes' records apart) and :data:`RECORD_VERSION`.
    Unchanged from the job loop this task had before the study runner: records of
    earlier runs are reused (``tests/test_protocol.py``)."""
    opts = dataclasses.asdict(cfg)
    for k in _NOT_IN_RECORD:
        opts.pop(k)
    if not opts["test_examples"]:  # 0: the whole test split, as before the option existed
        opts.pop("test_examples")
    # options added after records were stored enter the key only when not their default
    # (the records of the default options keep their digests: tests/test_protocol.py)
    if list(opts["readings"]) == [DEFAULT_READING]:
        opts.pop("readings")
    opts["digits"] = keyed_fields(opts["digits"])
    if not opts["adaptive_split"]:
        opts.pop("adaptive_split")
    design = {
        "eval_grid": [int(n) for n in study.eval_grid],
        "fit_windows": {k: list(v) for k, v in study.fit_windows.items()},
        "n_steps": cfg.n_steps,
        "random_depths": [int(n) for n in cfg.random_depths],
        "ref": [ref.solver, ref.rtol, ref.check_rtol, ref.coarse_rtol],
        "smoke": bool(cfg.smoke_sizes),
    }
    return digest({"version": RECORD_VERSION, "options": opts, "design": design})


def reference(cfg: Config) -> ReferenceTolerances:
    """The reference solve's solver, tolerance and the two check tolerances (level 0)."""
    check = cfg.ref_check_rtol
    coarse = check and cfg.ref_check_coarse_rtol
    _check_ref_tolerances(cfg.ref_rtol, check, coarse)
    return ReferenceTolerances(cfg.ref_solver, cfg.ref_rtol, check, coarse)


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


def _train_cell(cfg: Config, ctx, cell, seed: int):
    """Train one (cell, seed); returns (summary, trained model, initial model)."""
    import jax

    from transflow.control import DEPTH_DIGITS, run_training

    lv, n_steps = cell.levels, cfg.n_steps
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
        train_depths=list(cfg.random_depths) if lv["train"] == "random" else [],
        smoothness=cfg.smoothness,
        dt=float(lv["T"]) / n_steps,
    )
    summary, result = run_training(
        DEPTH_DIGITS,
        dcfg,
        run_dir=job_dir(ctx.run_dir, cell.name, seed),
        seed=seed,
        smoke=False,
        progress=ctx.progress,
    )
    k_model, _ = jax.random.split(jax.random.key(seed))  # as run_training draws the model
    init = DEPTH_DIGITS.setup(dcfg, seed, k_model).model
    return summary, result.model, init


#: The eval scheme whose stages are checked for ReLU kinks (``straddle.heun.<N>``, reading
#: right: :func:`transflow.control.kink_straddles`), when ``task.eval_schemes`` has it.
STRADDLE_SCHEME = "heun"


def _derived(cfg: Config, study: StudyConfig, rec: dict, own: str, at: str) -> None:
    """The metrics of one reading (suffix ``at``) derived from its stepped accuracies:
    ``acc.train``, ``dist.train``, ``max_change`` (with the adaptive solve, which does not
    depend on the reading) and ``max_integrator_change`` (``…_transfer``: v1's window)."""
    rec[f"acc.train{at}"] = train = rec[f"acc.{own}.{cfg.n_steps}{at}"]
    rec[f"dist.train{at}"] = rec[f"dist.{own}.{cfg.n_steps}{at}"]
    tw = window(study, "transfer")
    rec[f"max_change{at}"] = max(
        [abs(rec[f"acc.{own}.{n}{at}"] - train) for n in tw] + [abs(rec["acc.adaptive"] - train)]
    )
    s0, *others = cfg.eval_schemes

    def integrator_change(win):
        return max(
            (abs(rec[f"acc.{s}.{n}{at}"] - rec[f"acc.{s0}.{n}{at}"]) for s in others for n in win),
            default=0.0,
        )

    rec[f"max_integrator_change{at}"] = integrator_change(window(study, "integrator"))
    rec[f"max_integrator_change_transfer{at}"] = integrator_change(tw)  # v1's window


def _measure(cfg: Config, ctx, study: StudyConfig, ref: ReferenceTolerances, job) -> dict:
    """The job function: train one (cell, seed) (or reload its final checkpoint) and
    evaluate it in float64 against ``ref`` (the job's reference level; its error estimated
    on the cell's first seed): :func:`transflow.analysis.depth_evaluation`, the metrics
    derived per reading (:func:`_derived`) and the seconds of both."""
    from transflow import Adaptive
    from transflow.analysis import depth_evaluation
    from transflow.control import at_depth, load_digits_split

    t0 = time.perf_counter()
    summary, model, init = _train_cell(cfg, ctx, job.cell, job.seed)
    _, _, xte, yte = load_digits_split(cfg.digits.test_fraction, seed=job.seed)
    if cfg.test_examples:
        xte, yte = xte[: cfg.test_examples], yte[: cfg.test_examples]
    t1 = time.perf_counter()
    own = job.cell.levels["scheme"]
    rec = depth_evaluation(
        model, init, xte, yte, schemes=list(cfg.eval_schemes), own=own,
        grid=study.eval_grid, windows={s: window(study, s) for s in cfg.eval_schemes},
        reference=ref, adaptive=Adaptive(rtol=cfg.rtol, atol=cfg.rtol),
        readings=list(cfg.readings), split=bool(cfg.ref_split), beta_depth=int(cfg.beta_depth),
        check_reference=job.first, adaptive_split=bool(cfg.adaptive_split),
        straddle_scheme=STRADDLE_SCHEME if STRADDLE_SCHEME in cfg.eval_schemes else None,
    )  # fmt: skip
    for reading in cfg.readings:
        _derived(cfg, study, rec, own, reading_suffix(reading))
    rec.update(
        n_test=len(yte),
        ffn_activation=at_depth(model, 1).layer_controls()[0].ffn.activation,  # its own
        cpu_train=summary["cpu_seconds"],
        n_params=summary.get("n_params"),
        seconds_train=t1 - t0,
        seconds_eval=time.perf_counter() - t1,
    )
    return rec


def spec(cfg: Config, ctx, study: StudyConfig, cells) -> StudySpec:
    """The depth study for the runner: its cells, its job function (:func:`_measure`),
    its record key (:func:`record_key`, one per reference level) and the refinement of
    design v3 (a cell whose first seed's reference-error ratio exceeds
    ``task.ref_check_max`` is evaluated again with every reference tolerance ÷ 10, its
    models reloaded, at most ``task.ref_refine`` times; every seed of the cell then uses
    the cell's final reference)."""
    ref = reference(cfg)
    keys = [record_key(cfg, study, ref.refined(j)) for j in range(cfg.ref_refine + 1)]
    return StudySpec(
        "depth",
        cells,
        measure=lambda job: _measure(cfg, ctx, study, ref.refined(job.level), job),
        key=lambda job: keys[job.level],
        line=lambda r: (
            f"acc.train {r['acc.train']:.3f}, max_change {r['max_change']:.3f}, "
            f"dist.train {r['dist.train']:.3g}"
        ),
        refine=Refinement(
            int(cfg.ref_refine),
            "ref_error_ratio",
            cfg.ref_check_max or math.inf,  # 0: no check, no refinement
            field="ref_level",
            describe=lambda j: f"reference rtol {ref.refined(j).rtol:g} (design v3)",
        ),
        release_compiled=cfg.release_compiled,
    )


def run(cfg: Config, ctx) -> dict:
    """Run the ``depth`` study on the study runner: every declared (cell, seed) job, then
    the factorial table, the figures and the declared claims."""
    import jax
    import numpy as np

    study = study_design(cfg, ctx)
    cells = select_cells(design_cells(study, seed=ctx.seed), study.cells)
    ctx.message(
        f"depth study: {len(cells)} cells, {sum(len(c.seeds) for c in cells)} (cell, seed) "
        "jobs; factors "
        + ", ".join(f"{k}={list(v)}" for k, v in study.factors.items())
        + f"; crossed {list(study.crossed)}; seeds from {ctx.seed + study.seed_offset}"
        + f"; readings {list(cfg.readings)} ({_readings_line(cfg)})"
    )
    design = {"n_steps": cfg.n_steps, "random_depths": [int(n) for n in cfg.random_depths]}
    ctx.log({"kind": "design", "cells": [dataclasses.asdict(c) for c in cells], **design})
    result = run_jobs(spec(cfg, ctx, study, cells), ctx)
    records, agg = result.records, aggregate(result.records)
    n_test = int(np.mean([r["n_test"] for r in result.values()]))
    verdicts = _verdicts(cfg, study, records, n_test)
    table = _factorial(cfg, study, cells, agg)
    data = records_json(study, cells, agg, result, n_steps=cfg.n_steps)
    write_tables(ctx, "factorial", markdown=table["markdown"], csv=table["csv"], data=data)
    _figures(ctx, study, cells, agg)
    # every declared claim is a claim of the run: one over cells not run (task.study.cells)
    # is "not checked"; at smoke size they are declared not enforced (not_enforced)
    ctx.record_verdicts(verdicts)
    ctx.log({"kind": "claims", "verdicts": verdicts})
    # the continuous limit's own error (first seed of every cell), against its declared max
    ratios = {c: r["ref_error_ratio"] for c, by in records.items() for r in by.values()
              if "ref_error_ratio" in r}  # fmt: skip
    if ratios and cfg.ref_check_max:
        worst = max(ratios, key=ratios.get)
        ctx.claim(f"reference_error_ratio [{worst}]", ratios[worst], cfg.ref_check_max, op="<=")
    training = (
        f"Training depth: fixed N_t = {cfg.n_steps} or random from {design['random_depths']}; "
        f"evaluation grid {list(study.eval_grid)}; windows "
        + ", ".join(f"{k} = {list(v)}" for k, v in study.fit_windows.items())
        + f"; FFN activation {cfg.digits.activation}. Readings of θ(t) at the stepped "
        f"depths: {list(cfg.readings)} ({_readings_line(cfg)})."
    )
    ctx.report(
        "## Design (declared before the run)\n\n"
        + design_markdown(study, cells, training)
        + "\n\n## Results\n\nThe factorial table (mean ± std over seeds).\n\n"
        + table["markdown"]
        + "\n\n## Path − per-layer model trained alike, per reading\n\n"
        + _path_minus_per_layer(cfg, study, cells, records)
        + "\n\n## Local order per doubling and ReLU kink straddles (issue 50)\n\n"
        + _local_order_table(cfg, study, cells, records)
        + "\n\n## Claims over seeds (declared in task.study.claims)\n\n"
        + _claims_readings(cfg)
        + claims_markdown(verdicts)
        + _reference_line(cfg, reference(cfg), ratios, result.levels)
        + f"\n\nThe test split holds {n_test} images per seed."
    )
    head = ("acc.train", "max_change", "dist.train", "acc.adaptive", "max_integrator_change")
    ha = agg.get(cells[0].name, {})
    return {
        **study_summary(
            cells, result, verdicts, agg, (*head, "beta.update", *_per_reading(cfg, head))
        ),
        "readings": list(cfg.readings),
        "metric_reading": _readings_line(cfg),
        "activation": cfg.digits.activation,
        "seconds_per_job_mean": float(
            np.mean([r["seconds_train"] + r["seconds_eval"] for r in result.values()])
        ),
        **{f"headline_{k}_std": ha[k]["std"] for k in ("acc.train", "max_change") if k in ha},
        "jax_devices": str(jax.devices()),
    }


def _verdicts(cfg: Config, study: StudyConfig, records: dict, n_test: int) -> list:
    """Every declared claim's verdict, then each again under every other reading."""
    verdicts = evaluate_claims(study, records, n_examples=n_test)
    for reading in _other_readings(cfg):
        restated = read_claims(study, reading, records)
        verdicts += evaluate_claims(restated, records, n_examples=n_test)
    return verdicts


def _other_readings(cfg: Config) -> list[str]:
    """The declared readings but :data:`DEFAULT_READING` (their metrics suffixed ``@r``)."""
    return [r for r in cfg.readings if r != DEFAULT_READING]


def _per_reading(cfg: Config, metrics) -> list[str]:
    """``metrics`` under every other declared reading (``acc.train@left``, ...)."""
    return [f"{k}{reading_suffix(r)}" for r in _other_readings(cfg) for k in metrics]


def _readings_line(cfg: Config) -> str:
    """Which reading each metric name carries (console, report, summary)."""
    return f"unsuffixed metrics: reading {DEFAULT_READING}" + "".join(
        f"; @{r}: reading {r}" for r in _other_readings(cfg)
    )


def _claims_readings(cfg: Config) -> str:
    """The report's sentence on the readings the claims are stated under."""
    if not (extra := _other_readings(cfg)):
        return f"Every claim is stated under the reading {DEFAULT_READING}.\n\n"
    return (
        f"Every claim is stated under the reading {DEFAULT_READING} (its declared metric); "
        + ", ".join(f"`<claim>@{r}`: the same claim under the reading {r}" for r in extra)
        + ".\n\n"
    )


def read_claims(study: StudyConfig, reading: str, records: dict | None = None) -> StudyConfig:
    """``study`` with every declared claim restated under ``reading``: its metric
    suffixed (``acc.prenorm.2@left``), its name ``<claim>@<reading>``, nothing else moved.
    A claim whose metric does not depend on the reading (the records hold it without the
    suffix and not with it: ``nfev.adaptive``, ``dist.adaptive``, ``beta.*``) is checked
    once, under its own name, and not restated."""
    at = reading_suffix(reading)
    keys = {k for by in (records or {}).values() for r in by.values() for k in r}
    return dataclasses.replace(
        study,
        claims=[
            dataclasses.replace(c, name=f"{c.name}{at}", metric=f"{c.metric}{at}")
            for c in study.claims
            if f"{c.metric}{at}" in keys or c.metric not in keys
        ],
    )


def _path_minus_per_layer(cfg: Config, study: StudyConfig, cells, records) -> str:
    """Test accuracy of every path cell minus the per-layer cell trained alike (same T,
    training depth and scheme), paired by seed, at every evaluation depth (own scheme)
    and adaptively, per declared reading: mean ± std, then the per-seed values."""
    grid = [int(n) for n in study.eval_grid]

    def alike(c) -> tuple:
        return tuple(c.levels[f] for f in FACTORS if f != "path")

    by = {alike(c): c for c in cells if c.levels["path"] == "per_layer"}
    rows = []
    for c in cells:
        base = by.get(alike(c))
        if c.levels["path"] == "per_layer" or base is None:
            continue
        a, b = records.get(c.name, {}), records.get(base.name, {})
        seeds = sorted(set(a) & set(b))
        if not seeds:
            continue
        for reading in cfg.readings:
            at = reading_suffix(reading)
            keys = [f"acc.{c.levels['scheme']}.{n}{at}" for n in grid] + ["acc.adaptive"]
            diffs = [[a[s][k] - b[s][k] for s in seeds if k in a[s] and k in b[s]] for k in keys]
            label = f"{c.name} − {base.name}"
            rows.append(
                [label, reading, len(seeds), *(seeds_text(d, ".3f", "+.3f") for d in diffs)]
            )
    if not rows:
        return "No path cell has a per-layer cell trained alike in this run."
    head = ["cell − per-layer", "reading", "seeds", *(f"N={n}" for n in grid), "adaptive"]
    intro = (
        "Test accuracy of the path model minus the per-layer model trained alike (own "
        "scheme; paired seeds; mean ± std, per-seed values below each). The readings "
        "differ only where a step midpoint falls on a jump of θ (the per-layer model below "
        "its layer count); the adaptive solve does not depend on the reading."
    )
    return "\n".join([intro, "", markdown_table(head, rows)])


def _local_order_table(cfg: Config, study: StudyConfig, cells, records) -> str:
    """Per cell and eval scheme (reading right): the local order per refinement of the
    grid, ``order_local.<s>.<N>`` (mean ± std, the per-seed values below), and the
    fraction of Heun steps whose stages straddle a kink, ``straddle.heun.<N>``."""
    grid = [int(n) for n in study.eval_grid]
    quantities = [(f"local order, {s}", f"order_local.{s}") for s in cfg.eval_schemes]
    if STRADDLE_SCHEME in cfg.eval_schemes:
        quantities.append((f"straddle, {STRADDLE_SCHEME}", f"straddle.{STRADDLE_SCHEME}"))
    rows = []
    for c in cells:
        by = records.get(c.name, {})
        if not by:
            continue
        for label, metric in quantities:
            keys = [f"{metric}.{n}" for n in grid[1:]]
            finite = [
                [by[s][k] for s in sorted(by) if k in by[s] and math.isfinite(by[s][k])]
                for k in keys
            ]
            rows.append([c.name, label, len(by), *(seeds_text(d, ".2f") for d in finite)])
    head = ["cell", "quantity", "seeds", *(f"{a}→{b}" for a, b in zip(grid, grid[1:]))]
    intro = (
        "Local order log(dist(N′)/dist(N)) / log(N/N′) of the distance to the continuous limit "
        "between successive depths N′ → N (per doubling: log₂ of the ratio), reading right, "
        f"mean ± std over seeds [per-seed values]; `straddle`: the fraction of "
        f"{STRADDLE_SCHEME} steps at depth N (the column's right end) whose two stage states "
        "give some FFN pre-activation (any token, unit) another sign "
        "(`transflow.control.kink_straddles`): where the ReLU field is not C¹ inside a step. "
        f"FFN activation: {cfg.digits.activation}."
    )
    return "\n".join([intro, "", markdown_table(head, rows)])


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
    worst = max(ratios, key=ratios.get)
    median = sorted(ratios.values())[len(ratios) // 2]
    line += (
        f"at most {ratios[worst]:.2g} (cell {worst}; median {median:.2g}); declared bound "
        f"{cfg.ref_check_max:g}."
    )
    refined = {c: j for c, j in (level or {}).items() if j}
    if refined:
        line += (
            " Refined (design v3, `task.ref_refine`; all tolerances ÷ 10 per level, every "
            "seed of the cell): "
            + ", ".join(f"{c} to rtol {ref.refined(j).rtol:g}" for c, j in refined.items())
            + "."
        )
    return line


def _factorial_tables(cfg: Config, study: StudyConfig):
    """(title, metric pattern, scientific, extra columns) of every table of the factorial
    section, per declared reading (each title names its reading)."""
    for reading in cfg.readings:
        at, r = reading_suffix(reading), f", reading {reading}"
        first = reading == cfg.readings[0]
        yield (
            f"Test accuracy, own scheme (the training scheme){r}",
            "acc.{own}.{n}" + at,
            False,
            [("adaptive", "acc.adaptive"), ("reference", "acc.reference")] if first else [],
        )
        for s in cfg.eval_schemes:
            yield (f"Test accuracy, stepped by {s}{r}", f"acc.{s}.{{n}}{at}", False, [])
        yield (
            f"Distance of the logits to the continuous limit ‖z_N − z_ref‖/‖z_ref‖, own scheme{r}",
            "dist.{own}.{n}" + at,
            True,
            [("adaptive", "dist.adaptive")] if first else [],
        )
        for s in cfg.eval_schemes:
            fit = "–".join(map(str, study.fit_windows[s]))
            yield (
                f"Distance to the limit, stepped by {s}{r}",
                f"dist.{s}.{{n}}{at}",
                True,
                [(f"order ({fit})", f"order.{s}{at}")],
            )


def _summary_format(metric: str) -> str:
    """The number format of a metric in the factorial's per-cell table."""
    if metric.startswith("dist.train"):
        return ".2e"
    return ".1f" if metric in ("cpu_train", "n_params") or metric.startswith("nfev") else ".3f"


def _factorial(cfg: Config, study: StudyConfig, cells, agg) -> dict:
    """The factorial table: one row per cell, mean ± std over its seeds at every
    evaluation depth, per evaluation mode (markdown and CSV)."""
    grid = [int(n) for n in study.eval_grid]
    md: list[str] = []
    for title, key, sci, extra in _factorial_tables(cfg, study):
        fmt = ".2e" if sci else ".3f"
        head = ["cell", "role", "seeds", *(f"N={n}" for n in grid), *(e for e, _ in extra)]
        rows = []
        for c in cells:
            a, own = agg.get(c.name, {}), c.levels["scheme"]
            depths = [mean_std_text(a.get(key.format(own=own, n=n)), fmt) for n in grid]
            more = [mean_std_text(a.get(k), ".3f" if k.startswith("order") else fmt)
                    for _, k in extra]  # fmt: skip
            rows.append([c.name, c.role, len(c.seeds), *depths, *more])
        md += [f"**{title}** (mean ± std over seeds)", "", markdown_table(head, rows), ""]
    summary_keys = [
        "acc.train", "max_change", "max_integrator_change", "dist.train", "nfev.adaptive",
        *(["nfev.adaptive.unsplit"] if cfg.adaptive_split else []),
        "beta.trained", "beta.init", "beta.update", "update_rel", "cpu_train", "n_params",
        *_per_reading(cfg, ("acc.train", "max_change", "max_integrator_change", "dist.train")),
    ]  # fmt: skip
    md += [
        "**Per cell** (mean ± std over seeds; acc.train, max_change, "
        f"max_integrator_change, dist.train under the reading {DEFAULT_READING}, "
        "`…@<reading>` under another; β: increment scaling at "
        f"{cfg.beta_depth} steps, of the trained controls, of their initialisation and "
        "of the learned update θ − θ₀)",
        "",
        markdown_table(
            ["cell", *summary_keys],
            (
                [c.name, *(mean_std_text(agg.get(c.name, {}).get(k), _summary_format(k))
                           for k in summary_keys)]
                for c in cells
            ),
        ),
    ]  # fmt: skip
    metrics = sorted({k for a in agg.values() for k in a})
    lines = ["cell,role,n_seeds," + ",".join(FACTORS) + ",metric,mean,std,values"]
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


def _figures(ctx, study, cells, agg) -> None:
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

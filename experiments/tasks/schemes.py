"""Task ``schemes``: layers designed by numerical analysis, trained side by side (issue 27;
docs/schemes.md, "Trained side by side", describes the tasks, measurements and records).

Every scheme of ``task.schemes`` is one layer of the same continuous model with the same
controls. Each (task, scheme) is a cell ``<task>-<scheme>`` of the study runner (:func:`spec`,
:func:`cells`); each (cell, seed) job (:func:`measure`) trains it with the same optimiser
budget and writes its record (test accuracy, for ``text`` validation bits per character, at
Δt, Δt/2 and 2Δt; CPU ms per training step; the FTLE; the parameter counts) to
``cells/<cell>/seed<k>/record.json``, reused by a rerun in the same folder when its digest
(:func:`record_key`) matches. The claims over seeds (``task.claims``) are evaluated by
:func:`~transflow.experiments.study.protocol.evaluate_claims`; a claim about a cell this run
does not train is reported as not checked, never dropped.

The numerical analysis is one call each of :mod:`transflow.schemes` (tests/
test_scheme_analysis.py): the orders measured on two problems with declared fit windows
(:func:`~transflow.schemes.measure_orders`; claim: within ``order_tol`` of the declared
order), the stability-function identity (:func:`~transflow.schemes.stability_function_error`;
≤ 1e-12), the largest stable Δt of the layers as trained with its confirmation runs
(:func:`~transflow.schemes.layer_stable_dt`; bounded at 0.95 Δt*, growing at 1.05 Δt*) and
the IMEX step's solve and cost (:func:`~transflow.schemes.imex_step_check`; an LU
factorisation in the traced step, residual ≤ 1e-12).

Writes the records, ``metrics.jsonl`` (kinds ``job``, ``claims``, ``order``, ``stability``,
``stable_dt``, ``imex_cost``), ``schemes.npz``, the tables and claim verdicts in
``report.md`` and the figure ``schemes``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from transflow.control import DepthTextConfig, DigitsConfig, SequenceConfig

from ..config import complete, library_names, options_without
from ..study.protocol import (
    Cell,
    ClaimSpec,
    StudyConfig,
    aggregate,
    check_claims,
    digest,
    evaluate_claims,
    keyed_fields,
    mean_std_text,
)
from ..study.report import claims_markdown, study_summary
from ..study.runner import StudySpec, job_dir, run_jobs

__all__ = [
    "CHOICES",
    "RECORD_VERSION",
    "TASKS",
    "Config",
    "cell_name",
    "cells",
    "check",
    "measure",
    "record_key",
    "run",
    "spec",
    "text_baselines",
    "train",
]

#: Set by the task for every training (one name per option): the scheme (task.schemes),
#: the step budget (task.steps) and, for digits/sequence, the width and depth (task.d,
#: task.n_steps, task.sequence_n_steps).
_SET = ["scheme", "steps", "eval_every", "checkpoint_dir"]
_HINTS = {
    "scheme": "task.schemes",
    "eval_every": "the task (evaluated once, at the end)",
    "checkpoint_dir": "the task (no checkpoints)",
}
DigitsOptions = options_without(
    DigitsConfig, [*_SET, "d", "n_steps"], name="DigitsOptions", hints=_HINTS
)
SequenceOptions = options_without(
    SequenceConfig,
    [*_SET, "d", "n_steps"],
    name="SequenceOptions",
    hints={**_HINTS, "n_steps": "task.sequence_n_steps"},
)
TextOptions = options_without(
    DepthTextConfig,
    _SET,
    name="TextOptions",
    hints=_HINTS,
    defaults=dict(
        path="none", dt=1.0, d=32, n_heads=2, context=64, n_steps=4, batch_size=32, n_val=256
    ),
)

#: The tasks ``task.tasks`` accepts.
TASKS = ("digits", "sequence", "text")

_DEFAULT_SCHEMES = [
    "lie",
    "prenorm",
    "macaron",
    "macaron_post",
    "strang",
    "heun",
    "rk4",
    "ode_rk2",
    "imex",
    "macaron_untied",  # issue 37: Macaron-Net's two FFNs beside the tied Macaron
    "imex_dissipative",  # issue 37: W_eff = W - W^T - W W^T beside the free IMEX
]


#: Names checked before any work, smoke runs included (transflow-run help schemes).
CHOICES = {
    "schemes": library_names("", "SCHEME_NAMES"),
    "tasks": TASKS,
    "jobs": ("all", "spread"),
    "stable_dt_schemes": lambda: ("all", *library_names("", "SCHEME_NAMES")()),
}
#: Schemes whose order is measured on each problem (every consistent trained layer).
_ORDER_SCHEMES = [
    "prenorm",
    "macaron",
    "macaron_untied",
    "strang",
    "macaron_post",
    "strang_post",
    "heun",
    "midpoint",
    "rk4",
    "ode_rk2",
    "imex",
    "imex_dissipative",
]


@dataclass
class ProblemOptions:
    """One problem of the order study (:meth:`transflow.schemes.OrderProblem.legendre`),
    declared with its fit windows before the run.

    A random Legendre path θ(t) on [0, 1] (``path_size`` = K coefficients, weights of
    scale ``scale``, GELU FFN, the LayerNorm sets fixed in t) and a random initial state on
    S1 (``n_tokens`` × ``d``). Errors at T = 1 against a Dopri8 solve of each scheme's own
    vector field are measured at every N of ``grid`` ∪ the window (local slopes between
    consecutive N are reported, so the asymptotic range is visible); the order is the
    log-log slope fitted on the window of its order class (``window_order1``/``2``/``4``:
    the same N for every scheme of that class). A window is never changed after a claim on
    it fails (issue 37).
    """

    d: int = 4
    n_tokens: int = 3
    n_heads: int = 2
    path_size: int = 3  # Legendre K
    scale: float = 0.5
    path_seed: int = 3
    state_seed: int = 1
    grid: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128, 256, 512, 1024])
    window_order1: list[int] = field(default_factory=lambda: [128, 256, 512, 1024])
    window_order2: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    window_order4: list[int] = field(default_factory=lambda: [64, 128, 256])


def _windows(pb: ProblemOptions) -> dict[int, list[int]]:
    """The declared fit windows of a problem, by order class."""
    return {q: [int(n) for n in getattr(pb, f"window_order{q}")] for q in (1, 2, 4)}


def _problem_b() -> ProblemOptions:
    # independent of problem a: other dimensions, more tokens and heads, another K, other seeds
    return ProblemOptions(d=6, n_tokens=5, n_heads=3, path_size=4, path_seed=11, state_seed=12)


@dataclass
class Config:
    """Schemes trained side by side (``task.<field>=...``)."""

    schemes: list[str] = field(default_factory=lambda: list(_DEFAULT_SCHEMES))
    tasks: list[str] = field(default_factory=lambda: ["digits", "text"])  # of TASKS
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    seed_offset: int = 0  # the seeds run: seed + seed_offset for each seed of task.seeds
    steps: int = 600  # the same optimiser budget for every scheme and task
    d: int = 32
    n_steps: int = 4  # digits depth N (Δt = 1)
    sequence_n_steps: int = 2  # sorting depth N (Δt = 1)
    n_sensitivity: int = 32  # test inputs for the finite-time Lyapunov exponent
    # the test inputs of the Δt/2, 2Δt evaluations and the FTLE (0: the whole test split)
    test_subset: int = 0
    # the (task, scheme, seed) jobs: "all" (every combination) or "spread" (scheme i on
    # task i mod len(tasks), the first scheme with every seed, the others with the first)
    jobs: str = "all"
    # the trained schemes whose largest stable Δt is measured ("all": every one with a
    # linear stability function)
    stable_dt_schemes: list[str] = field(default_factory=lambda: ["all"])
    order_tol: float = 0.15  # claim: |order fitted on the declared window - declared order|
    order_schemes: list[str] = field(default_factory=lambda: list(_ORDER_SCHEMES))
    # the two problems of the order study, each with its declared fit windows
    problem_a: ProblemOptions = field(default_factory=ProblemOptions)
    problem_b: ProblemOptions = field(default_factory=_problem_b)
    # the claims over seeds about the trained cells (<task>-<scheme>), declared before the
    # run in configs/experiment/schemes.yaml (experiments/study/protocol.py's ClaimSpec)
    claims: list[ClaimSpec] = field(default_factory=list)
    # the other options of each task's config (without those set above)
    digits: DigitsOptions = field(default_factory=DigitsOptions)
    sequence: SequenceOptions = field(default_factory=SequenceOptions)
    # The text task's own size (task.d/n_steps are digits'; steps is shared): per-layer
    # controls (path="none"), Δt = 1, sized for 2 CPU cores.
    text: TextOptions = field(default_factory=TextOptions)


def _task_config(cfg: Config, task: str, scheme: str):
    """The training config of one (task, scheme) job: the task's options (with the smoke
    sizes under ``debug=smoke``, merged into them) and the sizes set by this task (part of
    a record's digest)."""
    common = {"scheme": scheme, "steps": cfg.steps, "eval_every": 0, "checkpoint_dir": "none"}
    if task == "text":
        return complete(cfg.text, **common)
    base = cfg.digits if task == "digits" else cfg.sequence
    n = cfg.n_steps if task == "digits" else cfg.sequence_n_steps
    return complete(base, d=cfg.d, n_steps=n, **common)


def train(cfg: Config, ctx, task: str, scheme: str, seed: int):
    """Train one (task, scheme, seed) job (its training run in the job's folder,
    ``cells/<task>-<scheme>/seed<k>/train``): ``(summary, model, training config)``."""
    from transflow.control import DEPTH_TEXT, DIGITS, SEQUENCE, run_training

    tcfg = _task_config(cfg, task, scheme)
    summary, result = run_training(
        {"digits": DIGITS, "sequence": SEQUENCE, "text": DEPTH_TEXT}[task],
        tcfg,
        run_dir=job_dir(ctx.run_dir, cell_name(task, scheme), seed) / "train",
        seed=seed,
        smoke=False,
        progress=None,
        message=lambda _: None,
    )
    return summary, result.model, tcfg


def _test_data(task: str, tcfg, seed: int, subset: int):
    from transflow.control import load_digits_split, sequence_batch, validation_windows

    if task == "text":  # the validation windows the training run evaluates on
        return validation_windows(tcfg)
    if task == "digits":
        _, _, xte, yte = load_digits_split(tcfg.test_fraction, seed=seed)
    else:
        xte, yte = sequence_batch(
            tcfg.kind, tcfg.n_test, tcfg.length, tcfg.vocab, seed=seed, step=0, split="test"
        )
    return (xte[:subset], yte[:subset]) if subset else (xte, yte)


def measure(cfg: Config, ctx, task: str, scheme: str, seed: int) -> dict:
    """The job function: train one (task, scheme, seed) and measure it; its record.

    The record has, for ``text``, ``bpc``/``bpc_half_dt``/``bpc_double_dt`` (validation
    bits per character at Δt, Δt/2, 2Δt), otherwise ``accuracy``/``accuracy_half_dt``/
    ``accuracy_double_dt``; ``n_test`` (digits: the test images its accuracy is over, for
    a claim's margin in examples); ``cpu_ms_per_step`` and ``ftle``; the parameter counts
    ``n_params``, ``ffn_copies``, ``one_ffn_params`` and the job's ``seconds``.
    """
    import jax

    from transflow.analysis import lyapunov_exponent
    from transflow.control import at_depth, bits_per_char
    from transflow.control._train import evaluate

    t0 = time.perf_counter()
    summary, model, tcfg = train(cfg, ctx, task, scheme, seed)
    xte, yte = _test_data(task, tcfg, seed, cfg.test_subset)
    n = tcfg.n_steps
    half, double = at_depth(model, 2 * n), at_depth(model, max(1, n // 2))
    k = cfg.n_sensitivity
    ftle = lyapunov_exponent(model, xte[:k], key=jax.random.key(seed))
    count = int(sum(x.size for x in jax.tree.leaves(model) if hasattr(x, "size") and x.ndim > 0))
    copies = model.scheme.ffn_copies
    ffn = model.layer_controls()[0].ffn  # the FFN sub-steps of all layers, stacked
    per_copy = len(ffn.weights) // copies
    one_ffn = int(sum(x.size for x in (*ffn.weights[:per_copy], *ffn.biases[:per_copy])))
    if task == "text":  # validation bits per character (cross-entropy in nats / ln 2)
        rec = {
            "bpc": summary["eval_bpc"],
            "bpc_half_dt": bits_per_char(evaluate(half, xte, yte, batch_size=64)["loss"]),
            "bpc_double_dt": bits_per_char(evaluate(double, xte, yte, batch_size=64)["loss"]),
        }
    else:
        rec = {
            "accuracy": summary["test_accuracy"],
            "accuracy_half_dt": evaluate(half, xte, yte)["accuracy"],
            "accuracy_double_dt": evaluate(double, xte, yte)["accuracy"],
        }
        if task == "digits":  # the whole test split (summary["test_accuracy"] is over it)
            rec["n_test"] = int(summary["n_test"])
    rec["cpu_ms_per_step"] = 1e3 * summary["cpu_seconds"] / max(1, summary["steps"])
    rec["ftle"] = ftle
    rec.update(n_params=count, ffn_copies=copies, one_ffn_params=one_ffn)
    return rec | {"seconds": time.perf_counter() - t0}


#: The version of a (cell, seed) record's content: part of its digest, so that a record
#: written before a change of the measurement (a metric, the evaluation, the FTLE) is
#: never reused silently. Bump it with every such change.
RECORD_VERSION = 1


def cell_name(task: str, scheme: str) -> str:
    """The cell of one trained (task, scheme): ``'digits-imex_dissipative'``."""
    return f"{task}-{scheme}"


def record_key(cfg: Config, ctx, task: str, scheme: str, seed: int) -> str:
    """A digest of everything a (cell, seed) record depends on: the record version, the
    cell and seed, the job's effective training config (the task's options with the smoke
    sizes), the measurement's own sizes (``n_sensitivity``, ``test_subset`` when set), the
    smoke flag and the precision. The options that do not change a record (the other
    schemes and tasks, the seeds list, the claims, the order and stability study) are not
    in it. Unchanged from the job loop this task had before the study runner: records of
    earlier runs are reused (``tests/test_protocol.py``)."""
    return digest(
        {
            "version": RECORD_VERSION,
            "cell": cell_name(task, scheme),
            "seed": int(seed),
            "training": _training_key(_task_config(cfg, task, scheme)),
            "n_sensitivity": int(cfg.n_sensitivity),
            "smoke": bool(ctx.smoke),
            "precision": str(ctx.precision),
            # only when set, so that the records of the full runs keep their digests
            **({"test_subset": int(cfg.test_subset)} if cfg.test_subset else {}),
        }
    )


def _training_key(tcfg) -> dict:
    """A job's training config in its record key (:func:`keyed_fields`)."""
    return keyed_fields(dataclasses.asdict(tcfg))


def _seeds(cfg: Config) -> list[int]:
    return [int(s) + int(cfg.seed_offset) for s in cfg.seeds]


def cells(cfg: Config) -> list[Cell]:
    """The trained cells, one per (task, scheme), with their seeds (``task.seeds`` shifted
    by ``task.seed_offset``): ``task.jobs="all"``, every (task, scheme); ``"spread"`` (the
    smoke size), each scheme on one task (scheme i on task i mod len(tasks)), the first
    with every seed and the others with the first seed, so that both tasks, every scheme
    and the mean ± std over seeds run in ≤ 3 minutes."""
    tasks, schemes, seeds = [str(t) for t in cfg.tasks], [str(s) for s in cfg.schemes], _seeds(cfg)
    if cfg.jobs == "all":
        pairs = [(t, s, seeds) for t in tasks for s in schemes]
    else:
        pairs = [
            (tasks[i % len(tasks)], s, seeds if i == 0 else seeds[:1])
            for i, s in enumerate(schemes)
        ]
    return [
        Cell(cell_name(t, s), {"task": t, "scheme": s}, list(ss), "trained") for t, s, ss in pairs
    ]


def spec(cfg: Config, ctx, study_cells: list[Cell] | None = None) -> StudySpec:
    """The schemes study for the runner (:func:`~transflow.experiments.study.runner.
    run_jobs`): its cells (:func:`cells` unless given), its job function (:func:`measure`)
    and its record key (:func:`record_key`)."""

    def job(j):
        return cfg, ctx, j.cell.levels["task"], j.cell.levels["scheme"], j.seed

    return StudySpec(
        "schemes",
        cells(cfg) if study_cells is None else study_cells,
        measure=lambda j: measure(*job(j)),
        key=lambda j: record_key(*job(j)),
        line=lambda r: ", ".join(f"{k} {r[k]:.4f}" for k in ("accuracy", "bpc") if k in r),
    )


def text_baselines(cfg: Config, ctx) -> dict:
    """n-gram baselines (:func:`transflow.control.text_baselines`, issue 37) on the
    validation windows the text runs are scored on (``task.text``, the text runs' config;
    at smoke size ``context=16, n_val=16``); logged, reported, not claimed."""
    from transflow.control import text_baselines as baselines

    b = baselines(complete(cfg.text))  # the windows' fields are the text options'
    ctx.log({"kind": "text_baselines", **b})
    return b


#: The order schemes whose continuous limit is the pre-norm field a + g: they share its
#: reference solve (``measure_orders`` checks that the fields agree).
_PRENORM_FIELD = ("macaron", "strang", "heun", "midpoint", "rk4", "ode_rk2")


#: The fields of :class:`ProblemOptions` that size its :meth:`transflow.schemes.OrderProblem.
#: legendre` (the others are its grid and windows).
_PROBLEM_SIZES = ("d", "n_tokens", "n_heads", "path_size", "scale", "path_seed", "state_seed")


def _orders(cfg: Config, ctx, names: list[str]) -> dict:
    """Per problem: :func:`transflow.schemes.measure_orders` of the named schemes on the
    problem's grid and declared windows (logged, kind ``order``)."""
    from transflow import make_scheme
    from transflow.schemes import OrderProblem, measure_orders

    prenorm = make_scheme("prenorm")
    schemes = {n: prenorm if n == "prenorm" else make_scheme(n) for n in names}
    fields = {n: prenorm for n in names if n in _PRENORM_FIELD}
    out = {}
    for pname in ("problem_a", "problem_b"):
        pb = getattr(cfg, pname)
        sizes = {k: v for k, v in dataclasses.asdict(pb).items() if k in _PROBLEM_SIZES}
        problem = OrderProblem.legendre(**sizes, ffn_copies=2)
        grid = [int(n) for n in pb.grid]
        out[pname] = measure_orders(
            schemes, problem, windows=_windows(pb), grid=grid, reference_fields=fields
        )
        for name, m in out[pname].items():
            ctx.log({"kind": "order", "problem": pname, "scheme": name, **m.record()})
    return out


def _stability(cfg: Config, ctx, names: list[str]) -> tuple[float, dict[str, dict]]:
    """:func:`transflow.schemes.stability_survey`: the stability-function identity (its max
    error over every registered scheme with a linear stability function) and the largest
    stable Δt of the trained schemes of ``task.stable_dt_schemes`` for a random d = 8 layer
    as trained; logged (kinds ``stability``, ``stable_dt``)."""
    from transflow import make_scheme
    from transflow.schemes import AbstractLinearStability, has, stability_survey

    wanted = [str(n) for n in cfg.stable_dt_schemes]  # "all": those that have a Δt*
    linear = [n for n in names if has(make_scheme(n), AbstractLinearStability)]
    errors, stable = stability_survey([n for n in linear if {"all", n} & set(wanted)])
    for name, err in errors.items():
        ctx.log({"kind": "stability", "scheme": name, "identity_error": err})
        if name in stable:
            ctx.log({"kind": "stable_dt", "scheme": name, "identity_error": err, **stable[name]})
    return max([0.0, *errors.values()]), stable


def _imex_check(ctx) -> dict:
    """:func:`transflow.schemes.imex_step_check` at its sizes (d = 32, 16 tokens, float32),
    logged (kind ``imex_cost``)."""
    from transflow.schemes import imex_step_check

    out = imex_step_check()
    ctx.log({"kind": "imex_cost", **out})
    return out


def _check_names(schemes, tasks, order_schemes) -> None:
    from transflow import SCHEME_NAMES, declared_order, make_scheme

    for s in schemes:
        if s not in SCHEME_NAMES:
            raise ValueError(f"task.schemes: {s!r} is not a scheme; use one of {SCHEME_NAMES}.")
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"task.tasks: {t!r} is not a task; use one of {TASKS}.")
    for s in order_schemes:
        if s not in SCHEME_NAMES or declared_order(make_scheme(s)) is None or s == "relaxed":
            raise ValueError(f"task.order_schemes: {s!r} has no order to measure here; use "
                             f"names of {_ORDER_SCHEMES}.")  # fmt: skip


def _check_windows(cfg: Config) -> None:
    """Each declared window has ≥ 2 distinct step counts (a slope needs two)."""
    for pname in ("problem_a", "problem_b"):
        for p, w in _windows(getattr(cfg, pname)).items():
            if len(set(w)) < 2:
                raise ValueError(
                    f"task.{pname}.window_order{p} = {w}: a fit window needs at least two "
                    f"distinct step counts N, e.g. task.{pname}.window_order{p}=[64,128,256]."
                )


def _measured(task: str) -> list[str]:
    """The measurements of a (cell, seed) record of ``task`` (table, figure, npz)."""
    key = _METRIC[task][0]
    return [key, f"{key}_half_dt", f"{key}_double_dt", "cpu_ms_per_step", "ftle"]


def _record_metrics(task: str) -> list[str]:
    """The numbers of a (cell, seed) record of ``task`` (the metrics a claim can name)."""
    return [
        *_measured(task),
        *(["n_test"] if task == "digits" else []),
        "n_params",
        "ffn_copies",
        "one_ffn_params",
        "seconds",
    ]


def _check_claims(claims: list[ClaimSpec]) -> None:
    """The declared claims (``task.claims``), before any work: well formed
    (:func:`~transflow.experiments.study.protocol.check_claims`; cells ``<task>-<scheme>`` of
    any task of :data:`TASKS` and scheme of ``SCHEME_NAMES``, so a claim about a cell
    that this run does not train is kept and reported as not checked), each metric one
    its cells' records have, and ``examples: true`` only on digits (its test images)."""
    from transflow import SCHEME_NAMES

    cells = {cell_name(t, s): t for t in TASKS for s in SCHEME_NAMES}
    check_claims(claims, cells, "task")
    for i, c in enumerate(claims):
        for cell in [*c.cells, *([c.minus] if c.minus else [])]:
            task = cells[cell]
            if c.metric not in _record_metrics(task):
                raise ValueError(
                    f"task.claims[{i}] ({c.name}).metric = {c.metric!r} is not in the "
                    f"records of cell '{cell}'; its metrics are {_record_metrics(task)}."
                )
            if c.examples and task != "digits":
                raise ValueError(
                    f"task.claims[{i}] ({c.name}).examples: cell '{cell}' has no count of "
                    "test examples (only digits has); set examples: false."
                )


def check(cfg: Config) -> None:
    """The options checked before any work (also by :func:`run`, for a ``Config`` built in
    Python): the names of ``task.schemes``, ``task.tasks`` and ``task.order_schemes``, the
    order study's windows, the declared claims and the schemes of
    ``task.stable_dt_schemes``."""
    _check_names([str(s) for s in cfg.schemes], [str(t) for t in cfg.tasks],
                 [str(s) for s in cfg.order_schemes])  # fmt: skip
    _check_windows(cfg)
    _check_claims(list(cfg.claims))
    _check_stable_dt(cfg)


def _check_stable_dt(cfg: Config) -> None:
    """Each name of ``task.stable_dt_schemes`` (but "all") has a linear stability function."""
    from transflow import make_scheme
    from transflow.schemes import AbstractLinearStability, has

    for name in cfg.stable_dt_schemes:
        if name != "all" and not has(make_scheme(name), AbstractLinearStability):
            raise ValueError(
                f"task.stable_dt_schemes: {name!r} has no linear stability function (no "
                "largest stable Δt to measure); use 'all' or schemes such as prenorm, rk4, "
                "imex."
            )


def run(cfg: Config, ctx) -> dict:
    """Run the ``schemes`` experiment.

    Layers designed by numerical analysis: every scheme trained on the tasks of
    ``task.tasks`` (default digits and the character-level text task; 3 seeds) on the
    study runner (one reusable record per (cell, seed) job, :func:`spec`), the declared
    claims over seeds; orders on two problems with declared fit windows, stability of the
    trained layers and the IMEX solve checked.
    """
    import numpy as np

    check(cfg)
    tasks, schemes = [str(t) for t in cfg.tasks], [str(s) for s in cfg.schemes]
    study_cells = cells(cfg)
    ctx.message(
        f"schemes study: {len(study_cells)} cells, "
        f"{sum(len(c.seeds) for c in study_cells)} (cell, seed) jobs"
    )
    result = run_jobs(spec(cfg, ctx, study_cells), ctx)
    records, agg = result.records, aggregate(result.records)
    # per (task, scheme) trained: the values over seeds of every measured metric (table,
    # figure, npz) and the parameter counts (they do not depend on the seed)
    trained = [(t, s) for t in tasks for s in schemes if cell_name(t, s) in records]
    rows = {
        (t, s): {k: agg[cell_name(t, s)][k]["values"] for k in _measured(t)} for t, s in trained
    }
    counts: dict[str, dict[str, tuple[int, int, int]]] = {t: {} for t in tasks}
    for t, s in trained:
        first = next(iter(records[cell_name(t, s)].values()))
        counts[t][s] = (first["n_params"], first["ffn_copies"], first["one_ffn_params"])

    baselines = text_baselines(cfg, ctx) if "text" in tasks else None
    orders = _orders(cfg, ctx, [str(s) for s in cfg.order_schemes])
    identity_err, stable = _stability(cfg, ctx, schemes)
    imex = _imex_check(ctx) if any(s.startswith("imex") for s in schemes) else None
    _claims(cfg, ctx, orders, identity_err, stable, imex, counts)
    # the declared claims over seeds (task.claims): one about a cell this run does not
    # train is "not checked", never dropped; at smoke size they are declared not enforced
    verdicts = evaluate_claims(StudyConfig(claims=list(cfg.claims)), records)
    ctx.record_verdicts(verdicts)
    ctx.log({"kind": "claims", "verdicts": verdicts})

    unchecked = any(v.get("skipped") for v in verdicts)
    ctx.report(
        "## Results\n\n"
        + f"{result.n_jobs} (cell, seed) jobs, one record each in cells/<task>-<scheme>/"
        f"seed<k>/record.json; {result.n_reused} reused from an earlier run in this folder.\n\n"
        + _tables(cfg, tasks, schemes, records, agg, counts, stable, baselines)
        + "\n\n## Claims over seeds (declared in task.claims)\n\n"
        + claims_markdown(verdicts)
        + (
            " A claim not checked names a cell this run did not train: add its scheme to "
            "task.schemes and its task to task.tasks."
            if unchecked
            else ""
        )
        + "\n\n"
        + _orders_markdown(cfg, orders)
        + "\n\n"
        + _stability_markdown(stable, identity_err, imex)
    )
    # the figure: the schemes trained on every task (a smoke run trains each scheme on one
    # task: then the first task's schemes)
    fig_tasks, fig_schemes = tasks, [s for s in schemes if all((t, s) in rows for t in tasks)]
    if not fig_schemes:
        fig_tasks, fig_schemes = [tasks[0]], [s for s in schemes if (tasks[0], s) in rows]
    _figure(ctx, fig_tasks, fig_schemes, rows, stable)
    ctx.save_arrays(
        "schemes",
        **{f"{t}_{s}_{k}": np.asarray(v) for (t, s), r in rows.items() for k, v in r.items()},
    )
    return {
        **_summary(cfg, rows, agg, orders, stable, identity_err, imex, counts, baselines),
        **study_summary(study_cells, result, verdicts, agg),
    }


def _claims(cfg: Config, ctx, orders, identity_err, stable, imex, counts) -> None:
    """The claims of the numerical analysis and of the parameter counts (``ctx.claim``)."""
    for pname, per in orders.items():
        for name, o in per.items():
            ctx.claim(f"order_{pname}_{name}", abs(o.observed - o.declared), cfg.order_tol)
    ctx.claim("stability_function_identity_max_error", identity_err, 1e-12, op="<=")
    for name, st in stable.items():
        if "growth_below" not in st:
            continue  # no Δt* below dt_max: nothing to confirm (reported as inf)
        ctx.claim(f"stable_dt_{name}_bounded_below", st["growth_below"], 1.0, op="<")
        ctx.claim(f"stable_dt_{name}_grows_above", st["growth_above"], 10.0, op=">")
    if imex is not None:
        ctx.claim("imex_step_has_lu_solve", imex["uses_lu"], 1, op="==")
        ctx.claim("imex_solve_residual", imex["residual"], 1e-12, op="<=")
    for task, per in counts.items():
        # equal parameter counts for the one-FFN schemes; the untied Macaron layer has
        # exactly one more FFN per layer (its second)
        tied = {c[0] for c in per.values() if c[1] == 1}
        ctx.claim(f"equal_parameter_counts_{task}", len(tied), 1 if tied else 0, op="<=")
        for name, (n, copies, one_ffn) in per.items():
            if copies > 1 and tied:
                ctx.claim(
                    f"parameter_count_{task}_{name}_is_one_ffn_more",
                    n - min(tied),
                    (copies - 1) * one_ffn,
                    op="==",
                )


def _tables(cfg: Config, tasks, schemes, records, agg, counts, stable, baselines) -> str:
    """Per task: each trained scheme's mean ± std over seeds of every measured metric, its
    parameter count and largest stable Δt (and, for text, the n-gram baselines)."""
    from transflow import declared_order, make_scheme
    from transflow.control import baselines_table

    sections = []
    for task in tasks:
        key, label = _METRIC[task]
        what = "validation bits per character, lower is better; " if key == "bpc" else ""
        lines = [
            f"**{task}** (seeds {_seeds(cfg)}, "
            f"{cfg.steps} steps each; {what}mean ± std over seeds, sample std (n − 1))\n",
            f"| scheme | order | parameters | seeds | {label} | {label} at Δt/2 | "
            f"{label} at 2Δt | CPU ms/step | FTLE (sensitivity) | largest stable Δt |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in schemes:
            cell = cell_name(task, s)
            if cell not in records:
                continue  # a smoke run trains each scheme on one task
            a = agg[cell]
            order = declared_order(make_scheme(s))
            dt_star = stable.get(s, {}).get("dt_star")
            lines.append(
                f"| {s} | {order if order is not None else '—'} | {counts[task][s][0]} | "
                f"{len(records[cell])} | "
                + " | ".join(
                    mean_std_text(a[k]) for k in (key, key + "_half_dt", key + "_double_dt")
                )
                + f" | {mean_std_text(a['cpu_ms_per_step'], '.1f')} | "
                f"{mean_std_text(a['ftle'])} | {'—' if dt_star is None else f'{dt_star:.3f}'} |"
            )
        sections.append("\n".join(lines))
        if key == "bpc" and baselines is not None:  # n-gram counts on the same windows
            sections.append(baselines_table(baselines))
    return "\n\n".join(sections)


def _summary(cfg: Config, rows, agg, orders, stable, identity_err, imex, counts, baselines):
    """The summary fields of the task's own numbers (the study's: ``study_summary``)."""
    import numpy as np

    out: dict = {
        f"{t}_{s}_{k}_mean": float(np.mean(v)) for (t, s), r in rows.items() for k, v in r.items()
    }
    out.update(
        {
            f"{t}_{s}_{_METRIC[t][0]}_std": agg[cell_name(t, s)][_METRIC[t][0]]["std"]
            for (t, s) in rows
        }
    )
    out["seeds"] = _seeds(cfg)
    for pname, per in orders.items():
        out.update({f"order_{pname}_{k}": o.observed for k, o in per.items()})
        out.update({f"local_slopes_{pname}_{k}": o.local_slopes for k, o in per.items()})
    out["fit_windows"] = {
        p: {f"order{q}": w for q, w in _windows(getattr(cfg, p)).items()}
        for p in ("problem_a", "problem_b")
    }
    out.update({f"stable_dt_{k}": v["dt_star"] for k, v in stable.items()})
    out["stability_identity_max_error"] = identity_err
    if imex is not None:
        out["imex_cost_ratio"] = imex["cost_ratio"]
    out.update({f"n_params_{t}": {s: c[0] for s, c in v.items()} for t, v in counts.items()})
    if baselines is not None:
        out["text_ngram_bpc"] = baselines["bpc"]  # orders 1..5
        out["text_val_overlap"] = baselines["overlap"]
    return out


def _orders_markdown(cfg: Config, orders: dict) -> str:
    """Per problem: its sizes and declared windows, then
    :func:`transflow.schemes.order_table` (each scheme's slope on its window, the local
    slopes N → 2N)."""
    from transflow.schemes import order_table

    parts = []
    for pname, per in orders.items():
        pb, w = getattr(cfg, pname), _windows(getattr(cfg, pname))
        parts.append(
            f"## Orders, {pname} (d = {pb.d}, {pb.n_tokens} tokens, {pb.n_heads} heads, "
            f"Legendre K = {pb.path_size}, seeds {pb.path_seed}/{pb.state_seed}; windows "
            f"declared in the config: order 1 N = {w[1]}, order 2 {w[2]}, order 4 {w[4]})\n\n"
            + order_table(per, tol=cfg.order_tol)
        )
    return "\n\n".join(parts)


def _stability_markdown(stable: dict, identity_err: float, imex) -> str:
    from transflow.schemes import stable_dt_table

    text = (
        "## Largest stable Δt of the layers as trained (random d = 8 layer)\n\n"
        f"Stability-function identity: max error {identity_err:.1e}.\n\n" + stable_dt_table(stable)
    )
    if imex is not None:
        text += (
            f"\n\nIMEX step (d = 32, 16 tokens, float32, jitted): {imex['imex_step_us']:.0f} "
            f"µs against {imex['explicit_step_us']:.0f} µs for the explicit relaxed Lie step "
            f"(ratio {imex['cost_ratio']:.2f}); solve residual {imex['residual']:.1e}."
        )
    return text


#: Per task: the record key of its headline metric and the table/figure label.
_METRIC = {
    "digits": ("accuracy", "test accuracy"),
    "sequence": ("accuracy", "test accuracy"),
    "text": ("bpc", "bits/char"),
}


def _figure(ctx, tasks, schemes, rows, stable) -> None:
    from transflow.plotting import plot_schemes

    fig = plot_schemes(rows, tasks=tasks, schemes=schemes, stable=stable)
    ctx.save_figure(fig, "schemes")

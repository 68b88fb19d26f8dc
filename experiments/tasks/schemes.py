"""Task ``schemes``: layers designed by numerical analysis, trained side by side (issue 27).

Every scheme of :data:`transflow.SCHEME_NAMES` in ``task.schemes`` is one layer of the same
continuous model with the same controls (equal parameter count): the paper's post-LN Lie
layer, pre-LN (Lie splitting, Euler), Macaron (Strang with Euler sub-flows, pre- and
post-norm), Strang with Heun sub-flows, Runge–Kutta blocks (Heun, RK4, the ODE
Transformer's RK2 block) and the IMEX layer (implicit linear FFN sub-steps). For each
scheme, each task of ``task.tasks`` (``digits``: the 8×8 digits ViT; ``text``: the causal
character-level LM of :data:`transflow.control.DEPTH_TEXT` on ``pydoc_data.topics``, with
per-layer controls; ``sequence``: sorting) and each seed of ``task.seeds``,
:func:`transflow.control.run_training` trains it with the same optimiser budget
(``task.steps``), then:

- test accuracy (``text``: validation bits per character, lower is better) at the training
  Δt, at Δt/2 (2N steps over the same T, the controls read as a piecewise-constant path,
  :func:`transflow.control.at_depth`) and at 2Δt (N/2 steps);
- CPU time per training step (``time.process_time()``);
- sensitivity: the finite-time Lyapunov exponent log σ_max(∂u_T/∂u_0)/T of the trained
  flow (:func:`transflow.perturbation_growth`), averaged over ``n_sensitivity`` test inputs.

Numerical analysis of the schemes (float64, small random layers): the fitted order of
convergence against a Dopri8 reference on a smooth Legendre path (claim: within
``order_tol`` of the declared order), the measured amplification factors on u' = λu against
the stability functions (claim ≤ 1e-12), the largest stable Δt of a random layer's
linearised dynamics with its confirmation runs (claim: bounded at 0.95 Δt*, growing at
1.05 Δt*), and the IMEX step's linear solve (claims: an LU factorisation in the traced
step, residual ≤ 1e-12) with its cost against the explicit relaxed Lie step.

Writes ``metrics.jsonl`` (kinds ``train``, ``order``, ``stability``, ``stable_dt``,
``imex_cost``), ``schemes.npz``, the table in ``report.md`` and the figure ``schemes``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from transflow.control import DepthTextConfig, DigitsConfig, SequenceConfig

from ..config import complete, options_without

__all__ = ["Config", "run"]

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
]
_SMOKE_SCHEMES = ["prenorm", "imex"]


def _scheme_names():
    from transflow import SCHEME_NAMES

    return SCHEME_NAMES


#: Names checked before any work, smoke runs included (transflow-run help schemes).
CHOICES = {"schemes": _scheme_names, "tasks": TASKS}
#: Pre-norm-field schemes whose order is measured (one Dopri8 reference for all of them).
_ORDER_SCHEMES = ["prenorm", "macaron", "strang", "heun", "midpoint", "rk4", "ode_rk2"]


@dataclass
class Config:
    """Schemes trained side by side (``task.<field>=...``)."""

    schemes: list[str] = field(default_factory=lambda: list(_DEFAULT_SCHEMES))
    tasks: list[str] = field(default_factory=lambda: ["digits", "text"])  # of TASKS
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    steps: int = 600  # the same optimiser budget for every scheme and task
    d: int = 32
    n_steps: int = 4  # digits depth N (Δt = 1)
    sequence_n_steps: int = 2  # sorting depth N (Δt = 1)
    n_sensitivity: int = 32  # test inputs for the finite-time Lyapunov exponent
    order_tol: float = 0.2  # claim: |fitted order - declared order|
    # the other options of each task's config (without those set above)
    digits: DigitsOptions = field(default_factory=DigitsOptions)
    sequence: SequenceOptions = field(default_factory=SequenceOptions)
    # The text task's own size (task.d/n_steps are digits'; steps is shared): per-layer
    # controls (path="none"), Δt = 1, sized for 2 CPU cores.
    text: TextOptions = field(default_factory=TextOptions)


def _train(cfg: Config, ctx, task: str, scheme: str, seed: int):
    from transflow.control import DEPTH_TEXT, DIGITS, SEQUENCE, run_training

    common = {"scheme": scheme, "steps": cfg.steps, "eval_every": 0, "checkpoint_dir": "none"}
    if task == "text":
        tcfg = complete(cfg.text, **common)
    else:
        base = cfg.digits if task == "digits" else cfg.sequence
        n = cfg.n_steps if task == "digits" else cfg.sequence_n_steps
        tcfg = complete(base, d=cfg.d, n_steps=n, **common)
    if ctx.smoke:
        tcfg = dataclasses.replace(
            tcfg,
            d=ctx.smoke_value("task.d", tcfg.d, 8) if task != "text" else 8,
            n_heads=1,
            steps=ctx.smoke_value("task.steps", tcfg.steps, min(tcfg.steps, 6)),
            log_every=3,
            warmup_steps=1,
        )
        if task == "sequence":
            tcfg = dataclasses.replace(tcfg, n_test=64)
        if task == "text":
            tcfg = dataclasses.replace(tcfg, context=16, n_val=16, n_steps=2, batch_size=8)
    summary, result = run_training(
        {"digits": DIGITS, "sequence": SEQUENCE, "text": DEPTH_TEXT}[task],
        tcfg,
        run_dir=ctx.run_dir / f"{task}_{scheme}_{seed}",
        seed=seed,
        smoke=False,
        progress=None,
        message=lambda _: None,
    )
    return summary, result.model, tcfg


def _test_data(task: str, tcfg, seed: int, smoke: bool):
    from transflow.control import load_digits_split, sequence_batch, validation_windows

    if task == "text":  # the validation windows the training run evaluates on
        return validation_windows(tcfg)
    if task == "digits":
        _, _, xte, yte = load_digits_split(tcfg.test_fraction, seed=seed)
    else:
        xte, yte = sequence_batch(
            tcfg.kind, tcfg.n_test, tcfg.length, tcfg.vocab, seed=seed, step=0, split="test"
        )
    return (xte[:64], yte[:64]) if smoke else (xte, yte)


def _measure(cfg: Config, ctx, task: str, scheme: str, seed: int) -> tuple[dict, int]:
    """Train one (task, scheme, seed) and measure it: ``(record, parameter count)``.

    The record has, for ``text``, ``bpc``/``bpc_half_dt``/``bpc_double_dt`` (validation
    bits per character at Δt, Δt/2, 2Δt), otherwise ``accuracy``/``accuracy_half_dt``/
    ``accuracy_double_dt``; and ``cpu_ms_per_step`` and ``ftle`` for every task.
    """
    import jax

    from transflow.control import at_depth, bits_per_char
    from transflow.control._train import evaluate

    summary, model, tcfg = _train(cfg, ctx, task, scheme, seed)
    xte, yte = _test_data(task, tcfg, seed, ctx.smoke)
    n = tcfg.n_steps
    half, double = at_depth(model, 2 * n), at_depth(model, max(1, n // 2))
    k = 4 if ctx.smoke else cfg.n_sensitivity
    ftle = _ftle(model, xte[:k], jax.random.key(seed))
    count = int(sum(x.size for x in jax.tree.leaves(model) if hasattr(x, "size") and x.ndim > 0))
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
    rec["cpu_ms_per_step"] = 1e3 * summary["cpu_seconds"] / max(1, summary["steps"])
    rec["ftle"] = ftle
    return rec, count


def _measure_all(cfg: Config, ctx, runs: list[tuple[str, str, int]]):
    """Yield ``(task, scheme, seed, record, parameter count)`` for every run, releasing the
    compiled programs of each training before the next one (:func:`release_compiled`:
    without it the 54 trainings of the full run exhaust the process's memory mappings;
    ``test_schemes_trainings_release_their_compiled_programs``)."""
    from transflow.experiments.context import release_compiled

    for task, scheme, seed in ctx.progress(runs, desc="schemes"):
        rec, count = _measure(cfg, ctx, task, scheme, seed)
        release_compiled()
        yield task, scheme, seed, rec, count


def _text_baselines(cfg: Config, ctx) -> dict:
    """n-gram baselines (:func:`transflow.control.text_baselines`, issue 37) on the
    validation windows the text runs are scored on (``_train``'s text config: its smoke
    size has ``context=16, n_val=16``); logged, reported, not claimed."""
    from transflow.control import text_baselines

    tcfg = dataclasses.replace(cfg.text, context=16, n_val=16) if ctx.smoke else cfg.text
    b = text_baselines(tcfg)
    ctx.log({"kind": "text_baselines", **b})
    return b


def _ftle(model, xs, key) -> float:
    """Mean over ``xs`` of log σ_max(∂u_T/∂u_0) / T of the model's flow.

    The flow is the model's own ``evolve`` with ``model.scheme`` (for the char LM a
    :class:`~transflow.CausalScheme`, so the attention stays causal) on its token grid.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow import evolve, perturbation_growth

    controls, dt = model.layer_controls()
    grid = model.embed.grid()
    horizon = float(dt) * int(jax.tree.leaves(controls)[0].shape[0])

    @eqx.filter_jit
    def growth(m_controls, u0, k):
        def flow(v):
            return evolve(v, m_controls, model.scheme, dt=dt, grid=grid)

        return perturbation_growth(flow, u0, key=k, n_iter=12)

    keys = jax.random.split(key, len(xs))
    out = [float(jnp.log(growth(controls, model.embed(x), k))) for x, k in zip(xs, keys)]
    return float(np.mean(out)) / horizon


def _orders(cfg: Config, ctx) -> dict[str, dict]:
    """Fitted orders of the pre-norm-field schemes against one Dopri8 reference."""
    import jax
    import jax.numpy as jnp

    from transflow import (
        LayerControls,
        declared_order,
        evolve,
        make_scheme,
        reference_solution,
        stage_controls,
    )
    from transflow.continuous import BasisExpansion, fit_slope, init_path

    names = [n for n in _ORDER_SCHEMES if not ctx.smoke or n in ("prenorm", "strang")]
    grids = {1: (16, 32, 64), 2: (8, 16, 32), 4: (8, 16, 32)}
    out = {}
    with jax.enable_x64(True):

        def draw(k):
            return LayerControls.random(
                4, n_heads=2, activation="gelu", scale=0.5, dtype=jnp.float64, key=k
            )

        c = init_path("legendre", draw, 3, key=jax.random.key(3), smooth=False).coeffs
        path = BasisExpansion(c, "legendre")
        u0 = jax.random.normal(jax.random.key(1), (3, 4), jnp.float64)
        ref = reference_solution(u0, path, make_scheme("prenorm"))
        for name in names:
            s = make_scheme(name)
            p = declared_order(s)
            ns = (32, 64, 128) if name == "ode_rk2" else grids[p]
            errs = []
            for n in ns:
                u = evolve(u0, stage_controls(path, s, n), s, dt=path.step_size(n))
                errs.append(float(jnp.max(jnp.abs(u - ref))))
            slope = fit_slope([1.0 / n for n in ns], errs)
            out[name] = {"declared": p, "observed": slope, "n_steps": list(ns), "errors": errs}
            ctx.log({"kind": "order", "scheme": name, **out[name]})
    return out


def _stability(names: list[str], ctx, smoke: bool) -> tuple[float, dict[str, dict]]:
    """Stability-function identity (max error) and each scheme's largest stable Δt."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow import (
        LayerControls,
        SaveAt,
        amplification_factor,
        confirm_stable_dt,
        evolve,
        linearised_stability,
        make_scheme,
        stability_function,
        stack_controls,
    )

    rng = np.random.default_rng(0)
    zs = rng.normal(size=(24, 2)) * 1.5 + 1j * rng.normal(size=(24, 2)) * 1.5
    worst = 0.0
    stable = {}
    with jax.enable_x64(True):
        th = LayerControls.random(
            8, n_heads=2, activation="gelu", dtype=jnp.float64, key=jax.random.key(0)
        )
        u0 = jax.random.normal(jax.random.key(1), (4, 8), jnp.float64)
        steps = SaveAt(steps=True)
        _, traj = evolve(
            u0, stack_controls([th] * 3), make_scheme("prenorm"), dt=0.25, saveat=steps
        )
        traj = jnp.concatenate([u0[None], traj])
        for name in names:
            if name in ("lie", "relaxed"):
                continue  # no linear test problem: Δt-independent / relaxed projections
            s = make_scheme(name, ffn_branch_dt="2dt") if name == "imex" else make_scheme(name)
            err = max(
                abs(complex(amplification_factor(s, a, g)) - complex(stability_function(s, a, g)))
                / max(1.0, abs(complex(stability_function(s, a, g))))
                for a, g in zs
            )
            worst = max(worst, err)
            if smoke and name != "prenorm":
                continue  # the largest stable Δt of one scheme is the wiring check
            r = linearised_stability(s, th, traj)
            h = r["dt"]
            # runs at 0.95 Δt* and 1.05 Δt*, the one above long enough to grow 1e4-fold at
            # its spectral radius (IMEX: ρ = 1.0006 there, 2000 steps would not show it)
            c = confirm_stable_dt(s, r["j_attention"], r["j_ffn"], h)
            stable[name] = {"dt_star": h, **c}
            ctx.log({"kind": "stable_dt", "scheme": name, "identity_error": err, **stable[name]})
    return worst, stable


def _imex_check(ctx) -> dict:
    """The IMEX step's solve (LU in the traced step, residual) and its cost."""
    import jax
    import jax.numpy as jnp

    from transflow import IMEXScheme, LayerControls
    from transflow.continuous import RelaxedLieScheme

    th = LayerControls.random(32, n_heads=2, dtype=jnp.float32, key=jax.random.key(0))
    u = jax.random.normal(jax.random.key(1), (16, 32), jnp.float32)
    imex, expl = IMEXScheme(), RelaxedLieScheme()
    jaxpr = str(jax.make_jaxpr(lambda v: imex.step(v, th, 0.5))(u))
    uses_lu = int("lu" in jaxpr and "triangular_solve" in jaxpr)
    with jax.enable_x64(True):
        w = jax.random.normal(jax.random.key(2), (32, 32), jnp.float64) / 32**0.5
        b = jax.random.normal(jax.random.key(3), (32,), jnp.float64)
        z = jax.random.normal(jax.random.key(4), (16, 32), jnp.float64)
        x = IMEXScheme.implicit_substep(z, w, b, 0.5)
        residual = float(jnp.max(jnp.abs(x - 0.5 * (x @ w + b) - z)))

    def timed(scheme) -> float:
        f = jax.jit(lambda v: scheme.step(v, th, 0.5))
        f(u).block_until_ready()
        reps = 200
        t = time.process_time()
        for _ in range(reps):
            f(u).block_until_ready()
        return (time.process_time() - t) / reps

    t_imex, t_expl = timed(imex), timed(expl)
    out = {
        "uses_lu": uses_lu,
        "residual": residual,
        "imex_step_us": 1e6 * t_imex,
        "explicit_step_us": 1e6 * t_expl,
        "cost_ratio": t_imex / t_expl,
    }
    ctx.log({"kind": "imex_cost", **out})
    return out


def run(cfg: Config, ctx) -> dict:
    """Run the ``schemes`` experiment.

    Layers designed by numerical analysis: every scheme trained on the tasks of
    ``task.tasks`` (default digits and the character-level text task; 3 seeds), orders,
    stability and the IMEX solve checked.
    """
    import numpy as np

    from transflow import SCHEME_NAMES, declared_order, make_scheme
    from transflow.control import baselines_table

    # smoke: two schemes and one seed, unless given on the command line (then kept)
    schemes = ctx.smoke_value("task.schemes", [str(s) for s in cfg.schemes], list(_SMOKE_SCHEMES))
    seeds = ctx.smoke_value("task.seeds", [int(s) for s in cfg.seeds], [0])
    tasks = [str(t) for t in cfg.tasks]
    for s in schemes:
        if s not in SCHEME_NAMES:
            raise ValueError(f"task.schemes: {s!r} is not a scheme; use one of {SCHEME_NAMES}.")
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"task.tasks: {t!r} is not a task; use one of {TASKS}.")

    rows: dict[tuple[str, str], dict[str, list[float]]] = {}
    n_params: dict[str, set[int]] = {t: set() for t in tasks}
    runs = [(t, s, seed) for t in tasks for s in schemes for seed in seeds]
    for task, scheme, seed, rec, count in _measure_all(cfg, ctx, runs):
        n_params[task].add(count)
        ctx.log({"kind": "train", "task": task, "scheme": scheme, "seed": seed, **rec})
        row = rows.setdefault((task, scheme), {k: [] for k in rec})
        for key, v in rec.items():
            row[key].append(float(v))

    baselines = _text_baselines(cfg, ctx) if "text" in tasks else None
    orders = _orders(cfg, ctx)
    identity_err, stable = _stability(schemes, ctx, ctx.smoke)
    imex = _imex_check(ctx) if "imex" in schemes else None

    # ------------------------------------------------------------------ claims
    for name, o in orders.items():
        ctx.claim(f"order_{name}", abs(o["observed"] - o["declared"]), cfg.order_tol, op="<=")
    ctx.claim("stability_function_identity_max_error", identity_err, 1e-12, op="<=")
    for name, st in stable.items():
        # every scheme, IMEX included: the run above is as long as its spectral radius
        # needs (confirm_stable_dt)
        ctx.claim(f"stable_dt_{name}_bounded_below", st["growth_below"], 1.0, op="<")
        ctx.claim(f"stable_dt_{name}_grows_above", st["growth_above"], 10.0, op=">")
    if imex is not None:
        ctx.claim("imex_step_has_lu_solve", imex["uses_lu"], 1, op="==")
        ctx.claim("imex_solve_residual", imex["residual"], 1e-12, op="<=")
    for task in tasks:
        ctx.claim(f"equal_parameter_counts_{task}", len(n_params[task]), 1, op="==")

    # ------------------------------------------------------------------ table and figure
    def ms(v: list[float], fmt: str = ".3f") -> str:
        a = np.asarray(v)
        return f"{a.mean():{fmt}} ± {a.std():{fmt}}"

    sections = []
    for task in tasks:
        key, label = _METRIC[task]
        what = "validation bits per character, lower is better; " if key == "bpc" else ""
        lines = [
            f"### {task} ({len(seeds)} seed(s), {cfg.steps if not ctx.smoke else 6} steps each; "
            f"{what}mean ± std)\n",
            f"| scheme | order | {label} | {label} at Δt/2 | {label} at 2Δt | CPU ms/step "
            "| FTLE (sensitivity) | largest stable Δt |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in schemes:
            r = rows[(task, s)]
            order = declared_order(make_scheme(s))
            dt_star = stable.get(s, {}).get("dt_star")
            lines.append(
                f"| {s} | {order if order is not None else '—'} | {ms(r[key])} | "
                f"{ms(r[key + '_half_dt'])} | {ms(r[key + '_double_dt'])} | "
                f"{ms(r['cpu_ms_per_step'], '.1f')} | {ms(r['ftle'])} | "
                f"{'—' if dt_star is None else f'{dt_star:.3f}'} |"
            )
        sections.append("\n".join(lines))
        if key == "bpc" and baselines is not None:  # n-gram counts on the same windows
            sections.append(baselines_table(baselines))
    order_lines = ", ".join(
        f"{k} {o['observed']:.2f} (declared {o['declared']})" for k, o in orders.items()
    )
    imex_line = (
        ""
        if imex is None
        else (
            f"\n\nIMEX step (d = 32, 16 tokens, float32, jitted): {imex['imex_step_us']:.0f} µs "
            f"against {imex['explicit_step_us']:.0f} µs for the explicit relaxed Lie step "
            f"(ratio {imex['cost_ratio']:.2f}); solve residual {imex['residual']:.1e}."
        )
    )
    ctx.report(
        "## Results\n\n"
        + "\n\n".join(sections)
        + f"\n\nFitted orders (Dopri8 reference, Legendre path): {order_lines}. "
        f"Stability-function identity: max error {identity_err:.1e}." + imex_line
    )
    _figure(ctx, tasks, schemes, rows, stable)
    ctx.save_arrays(
        "schemes",
        **{f"{t}_{s}_{k}": np.asarray(v) for (t, s), r in rows.items() for k, v in r.items()},
    )
    out: dict = {
        f"{t}_{s}_{k}_mean": float(np.mean(v)) for (t, s), r in rows.items() for k, v in r.items()
    }
    out.update({f"order_{k}": o["observed"] for k, o in orders.items()})
    out.update({f"stable_dt_{k}": v["dt_star"] for k, v in stable.items()})
    out["stability_identity_max_error"] = identity_err
    if imex is not None:
        out["imex_cost_ratio"] = imex["cost_ratio"]
    out.update({f"n_params_{t}": sorted(v) for t, v in n_params.items()})
    if baselines is not None:
        out["text_ngram_bpc"] = baselines["bpc"]  # orders 1..5
        out["text_val_overlap"] = baselines["overlap"]
    return out


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

"""Task ``depth``: depth transfer on digits (issue 26): train at one depth, evaluate at many
depths and adaptively, per-layer and path-controlled models side by side.

Trains (with :func:`transflow.control.run_training` of
:data:`transflow.control.DEPTH_DIGITS`):

- ``per_layer_lie``: today's digits model (per-layer controls, the paper's post-LN Lie
  scheme), the model whose accuracy collapses under refinement;
- ``per_layer_prenorm``: per-layer controls with the pre-LN scheme (the same scheme as the
  path model, so the difference is the control parameterization alone);
- ``path``: controls θ(t) as a :class:`~transflow.continuous.ControlPath`
  (``task.path``, K = ``task.path_size``), smooth initialisation, ``task.train_depths``
  drawn per batch (:func:`transflow.control.depth_loss`), the pre-LN scheme, final time
  T = ``n_steps · path_dt`` (the per-layer models keep Δt = 1).

Then, for every model, the test accuracy with N = ``task.depths`` uniform steps
(:func:`transflow.control.at_depth`; for the per-layer models the piecewise-constant
reading = ``analysis.refine``) and, for the consistent schemes, with diffrax's Tsit5 and
a PID controller (rtol = atol = ``task.rtol``); the fitted order of the successive output
differences of the path model under refinement; ``increment_scaling`` of each model's
controls sampled at the finest depth; and a float64 continuous-adjoint check
(``BacksolveAdjoint`` against backpropagation through the adaptive solver, on a random
path whose FFN activation is smooth, ``task.adjoint_activation``: with ReLU the vector
field is only Lipschitz and the two gradients agree only to ~1e-6, also logged).

Writes ``metrics.jsonl`` (kinds ``depth``, ``adaptive``, ``order``, ``scaling``,
``adjoint``), ``depth.npz``, the figures ``accuracy_vs_depth``, ``convergence``,
``smoothness``, and the claims (enforced at full size): path accuracy at the training
depth ≥ ``min_accuracy``; within ``max_drop`` at every depth and adaptively; fitted order
within 0.2 of 1; β ≥ 0.9; adjoint agreement ≤ 1e-6; the path model's CPU time ≤
``max_cpu_ratio`` × the per-layer (Lie) model's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from transflow.control import DepthDigitsConfig

from ..config import complete, options_without

__all__ = ["CHOICES", "Config", "DigitsOptions", "run"]

#: The fields of DepthDigitsConfig this task sets itself, from its own options (task.d,
#: task.n_steps, task.steps) or per model (task.baselines, task.path, ...): one name each.
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
        "scheme": "task.baselines (the per-layer models; the path model is prenorm)",
        "path": "task.path (the path model; the per-layer models have none)",
        "dt": "task.path_dt (the path model; the per-layer models have dt = 1)",
        "checkpoint_dir": "the run directory",
    },
)


def _scheme_names():
    from transflow import SCHEME_NAMES

    return SCHEME_NAMES


def _path_kinds():
    from transflow.continuous import PATH_KINDS

    return tuple(PATH_KINDS)


def _gradients():
    from transflow.control import GRADIENTS

    return tuple(GRADIENTS)


#: Names checked before any work, smoke runs included (transflow-run help depth).
CHOICES = {
    "path": _path_kinds,
    "baselines": _scheme_names,
    "second_order": lambda: ("", *_scheme_names()),
    "text_path_scheme": _scheme_names,
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
    """Depth transfer on digits (``task.<field>=...``)."""

    path: str = "legendre"  # a name of transflow.continuous.PATH_KINDS
    path_size: int = 4  # K
    n_steps: int = 4  # the training depth N_t
    train_depths: list[int] = field(default_factory=lambda: [4, 8, 16])
    smoothness: float = 0.0  # λ of λ ∫‖θ'(t)‖² dt
    path_dt: float = 0.05  # the path model's step at n_steps (T = n_steps · path_dt)
    steps: int = 1500
    d: int = 32
    depths: list[int] = field(default_factory=lambda: [4, 8, 16, 32, 64])
    rtol: float = 1e-5  # adaptive solve (atol = rtol)
    baselines: list[str] = field(default_factory=lambda: ["lie", "prenorm"])  # per-layer
    # a second-order scheme of the pre-LN field (transflow.SCHEME_NAMES, declared order 2)
    # stepping the trained path model: claim fitted order within 0.2 of 2; "": skip
    second_order: str = "heun"
    # its refinement depths: past the pre-asymptotic range of the trained ReLU model
    # (at N = 4..64 the fitted order is about 1.5; docs/depth.md)
    second_order_depths: list[int] = field(default_factory=lambda: [32, 64, 128, 256])
    min_accuracy: float = 0.96  # claim: path accuracy at n_steps
    max_drop: float = 0.01  # claim: |acc(N) - acc(n_steps)| at every N and adaptively
    max_cpu_ratio: float = 2.0  # claim: path CPU time / per-layer (lie) CPU time
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
    # the text task (DEPTH_TEXT): a path model and a per-layer model with as many parameters
    text: bool = True  # false: digits only
    text_steps: int = 1500
    text_eval_depths: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    max_bpc_change: float = 0.02  # claim: |bpc(4 N_t) − bpc(N_t)| / bpc(N_t), path model
    # the text path model's scheme: Heun (second order) on the pre-LN field; with the
    # first-order "prenorm" the change at 4x was 2.1 % (docs/depth.md)
    text_path_scheme: str = "heun"
    # the digits model's other options (DepthDigitsConfig without the fields set above)
    digits: DigitsOptions = field(default_factory=DigitsOptions)


def _train(cfg: Config, ctx, name: str, **over):
    from transflow.control import DEPTH_DIGITS, run_training

    dcfg = complete(
        cfg.digits, d=cfg.d, n_steps=cfg.n_steps, steps=cfg.steps, checkpoint_dir="run", **over
    )
    if ctx.smoke:  # a wiring check: tiny model, a few steps, depths 2 and 4
        dcfg = dataclasses.replace(
            dcfg,
            d=ctx.smoke_value("task.d", dcfg.d, 8),
            n_heads=1,
            n_steps=2,
            steps=ctx.smoke_value("task.steps", dcfg.steps, min(dcfg.steps, 10)),
            eval_every=10,
            log_every=5,
            warmup_steps=2,
            train_depths=[2, 4] if over.get("train_depths") else [],
        )
    summary, result = run_training(
        DEPTH_DIGITS,
        dcfg,
        run_dir=ctx.run_dir / name,
        seed=ctx.seed,
        smoke=False,
        progress=ctx.progress,
    )
    ctx.log({"kind": "train", "model": name, **summary})
    return summary, result.model


def run(cfg: Config, ctx) -> dict:
    """Run the ``depth`` experiment.

    Continuous depth: per-layer vs path-controlled digits models evaluated at N_t = 4..64
    and adaptively.
    """
    import jax
    import numpy as np

    from transflow.analysis import fit_order, increment_scaling
    from transflow.control import at_depth, depth_accuracy, load_digits_split

    depths = [int(n) for n in cfg.depths]
    n_train = cfg.n_steps
    if ctx.smoke:
        depths, n_train = ctx.smoke_value("task.depths", depths, [2, 4, 8]), 2
    models = {}
    summaries = {}
    for base in cfg.baselines:
        name = f"per_layer_{base}"
        summaries[name], models[name] = _train(cfg, ctx, name, path="none", scheme=base, dt=1.0)
    summaries["path"], models["path"] = _train(
        cfg,
        ctx,
        "path",
        path=cfg.path,
        path_size=cfg.path_size,
        scheme="prenorm",
        train_depths=list(cfg.train_depths),
        smoothness=cfg.smoothness,
        dt=cfg.path_dt,
    )
    _, _, xte, yte = load_digits_split(cfg.digits.test_fraction, seed=ctx.seed)
    if ctx.smoke:
        xte, yte = xte[:64], yte[:64]

    results = {}
    for name, m in models.items():
        consistent = m.scheme.__class__.__name__ != "LieScheme"
        r = depth_accuracy(m, xte, yte, depths, rtol=cfg.rtol if consistent else None)
        results[name] = r
        for n, acc in zip(r["depths"], r["accuracy"]):
            ctx.log({"kind": "depth", "model": name, "n_steps": n, "accuracy": acc})
        if "adaptive_accuracy" in r:
            ctx.log(
                {
                    "kind": "adaptive",
                    "model": name,
                    "rtol": cfg.rtol,
                    "accuracy": r["adaptive_accuracy"],
                    "nfev_mean": r["adaptive_nfev_mean"],
                    "nfev_max": r["adaptive_nfev_max"],
                }
            )

    # Convergence of the path model's outputs (logits) under refinement.
    outs = results["path"]["outputs"]
    ref = np.linalg.norm(outs[0])
    succ = [float(np.linalg.norm(b - a) / ref) for a, b in zip(outs, outs[1:])]
    order = fit_order(depths[:-1], succ)
    ctx.log(
        {"kind": "order", "model": "path", "depths": depths, "successive": succ, "order": order}
    )
    # The same trained path model stepped by a second-order scheme of the same field
    # (``task.second_order``, e.g. Heun): the successive differences shrink at order 2.
    order2 = succ2 = depths2 = None
    if cfg.second_order:
        depths2 = depths if ctx.smoke else [int(n) for n in cfg.second_order_depths]
        succ2, order2 = _second_order(models["path"], xte, depths2, cfg.second_order)
        ctx.log(
            {
                "kind": "order",
                "model": f"path_{cfg.second_order}",
                "depths": depths2,
                "successive": succ2,
                "order": order2,
            }
        )

    # Smoothness of the controls sampled at the finest depth.
    fine = max(depths)
    scaling = {}
    for name, m in models.items():
        s = increment_scaling(at_depth(m, fine), [1, 2, 4] if fine > 4 else None)
        scaling[name] = s
        ctx.log(
            {
                "kind": "scaling",
                "model": name,
                "n_steps": fine,
                **{k: s[k] for k in ("strides", "max_increment", "beta")},
            }
        )

    adj = _adjoint_check(cfg.adjoint_activation, cfg.adjoint_rtol)
    ctx.log({"kind": "adjoint", **adj})
    adjoint_rel = adj["relative_difference"]
    relu_rel = None
    if cfg.adjoint_relu_rtol and not ctx.smoke:  # the kink-limited contrast (not a claim)
        relu = _adjoint_check("relu", cfg.adjoint_relu_rtol)
        ctx.log({"kind": "adjoint", **relu})
        relu_rel = relu["relative_difference"]

    memory = _memory(cfg, ctx)
    text = _text(cfg, ctx) if cfg.text else None

    _figures(ctx, depths, results, succ, order, scaling)
    ctx.save_arrays(
        "depth",
        depths=np.asarray(depths),
        **{f"accuracy_{k}": np.asarray(v["accuracy"]) for k, v in results.items()},
        successive=np.asarray(succ),
    )

    path_acc = results["path"]["accuracy"]
    a0 = path_acc[depths.index(n_train)] if n_train in depths else path_acc[0]
    drops = [abs(a - a0) for a in path_acc] + [abs(results["path"]["adaptive_accuracy"] - a0)]
    full = not ctx.smoke
    ref_cpu = summaries.get("per_layer_lie", next(iter(summaries.values())))["cpu_seconds"]
    cpu_ratio = summaries["path"]["cpu_seconds"] / ref_cpu
    ctx.claim("path_accuracy_at_training_depth", a0, cfg.min_accuracy, op=">=", enforce=full)
    ctx.claim("path_max_accuracy_drop", max(drops), cfg.max_drop, op="<=", enforce=full)
    ctx.claim("path_order_minus_1", abs(order - 1.0), 0.2, op="<=", enforce=full)
    if order2 is not None:
        ctx.claim(
            f"path_order_{cfg.second_order}_minus_2", abs(order2 - 2.0), 0.2, op="<=", enforce=full
        )
    ctx.claim("path_beta", scaling["path"]["beta"], 0.9, op=">=", enforce=full)
    ctx.claim("adjoint_relative_difference", adjoint_rel, 1e-6, op="<=", enforce=full)
    ctx.claim("cpu_ratio_path_over_per_layer", cpu_ratio, cfg.max_cpu_ratio, op="<=", enforce=full)
    if text is not None:
        ctx.claim(
            "text_path_bpc_change_at_4x_depth",
            text["path"]["change_4x"],
            cfg.max_bpc_change,
            op="<=",
            enforce=full,
        )
        ctx.claim(
            "text_equal_parameters",
            abs(text["path"]["n_params"] - text["per_layer"]["n_params"]),
            0,
            op="<=",
            enforce=full,
        )
    for g, m in memory.items():
        if g != "backprop":  # backprop stores a state per step: the contrast, not a claim
            ctx.claim(
                f"peak_rss_ratio_{g}", m["ratio"], cfg.max_memory_ratio, op="<=", enforce=full
            )

    rows = "\n".join(
        f"| {name} | "
        + " | ".join(f"{a:.4f}" for a in r["accuracy"])
        + f" | {r.get('adaptive_accuracy', float('nan')):.4f} | "
        f"{r.get('adaptive_nfev_mean', float('nan')):.0f} | {scaling[name]['beta']:.2f} | "
        f"{summaries[name]['cpu_seconds']:.1f} |"
        for name, r in results.items()
    )
    ctx.report(
        "## Results\n\nDepth transfer (digits test accuracy):\n\n"
        f"| model | {' | '.join(f'N={n}' for n in depths)} | adaptive (rtol {cfg.rtol:g}) "
        "| mean nfev | β | CPU s |\n"
        f"|---|{'---|' * len(depths)}---|---|---|---|\n{rows}\n\n"
        f"Path model output differences under refinement: {', '.join(f'{s:.3g}' for s in succ)}, "
        f"fitted order **{order:.3f}**"
        + (
            ""
            if order2 is None
            else f"; stepped by {cfg.second_order} (N = {', '.join(map(str, depths2))}): "
            f"{', '.join(f'{s:.3g}' for s in succ2)}, "
            f"fitted order **{order2:.3f}**"
        )
        + ".\n\n"
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
    return {
        "depths": depths,
        **{f"accuracy_{k}": v["accuracy"] for k, v in results.items()},
        **{
            f"adaptive_accuracy_{k}": v["adaptive_accuracy"]
            for k, v in results.items()
            if "adaptive_accuracy" in v
        },
        **{
            f"adaptive_nfev_{k}": v["adaptive_nfev_mean"]
            for k, v in results.items()
            if "adaptive_accuracy" in v
        },
        "path_order": order,
        "path_order_second": order2,
        "path_successive": succ,
        **{f"beta_{k}": v["beta"] for k, v in scaling.items()},
        **{f"cpu_seconds_{k}": v["cpu_seconds"] for k, v in summaries.items()},
        "cpu_ratio": cpu_ratio,
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
                    if k not in ("depths", "baselines")
                },
                "text_ngram_bpc": text["baselines"]["bpc"],  # orders 1..5
                "text_val_overlap": text["baselines"]["overlap"],
            }
        ),
        "jax_devices": str(jax.devices()),
    }


def _second_order(model, x, depths: list[int], scheme: str) -> tuple[list[float], float]:
    """Successive relative output differences of ``model`` stepped by ``scheme`` (a
    second-order scheme of the same pre-LN vector field) at ``depths``, and their
    fitted order. The model's controls and time interval are kept; the logits are
    compared in float64 (the model is cast) so that float32 rounding does not floor the
    O(Δt²) differences."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from transflow import declared_order, make_scheme
    from transflow.analysis import fit_order
    from transflow.control import depth_accuracy

    s = make_scheme(scheme)
    if declared_order(s) != 2:
        raise ValueError(
            f"task.second_order: {scheme!r} has declared order {declared_order(s)}, expected "
            "a second-order scheme such as 'heun', 'midpoint' or 'strang' (or '' to skip)."
        )
    with jax.enable_x64(True):
        m = jax.tree.map(
            lambda a: a.astype(jnp.float64) if _is_float(a) else a,
            dataclasses.replace(model, scheme=s),
        )
        outs = depth_accuracy(m, x, np.zeros(len(x), np.int32), depths, rtol=None)["outputs"]
    ref = np.linalg.norm(outs[0])
    succ = [float(np.linalg.norm(b - a) / ref) for a, b in zip(outs, outs[1:])]
    return succ, fit_order(depths[:-1], succ)


def _is_float(a) -> bool:
    import jax.numpy as jnp

    return hasattr(a, "dtype") and jnp.issubdtype(a.dtype, jnp.floating)


def _adjoint_check(activation: str = "tanh", tol: float = 1e-10, solver: str = "tsit5") -> dict:
    """:func:`~transflow.continuous.compare_adjoints` (``BacksolveAdjoint`` against
    ``RecursiveCheckpointAdjoint``) on an adaptive pre-LN solve with a rough Legendre
    path (K = 2, d = 4, 3 tokens, T = 1, float64, rtol = atol = ``tol``) whose FFN has
    the given ``activation`` (the vector field is C¹ for a smooth one, only Lipschitz for
    ReLU)."""
    import jax
    import jax.numpy as jnp

    from transflow import LayerControls, PreNormScheme
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
        r = compare_adjoints(u0, path, PreNormScheme(), rtol=tol, atol=tol, solver=solver)
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
    if ctx.smoke:
        depths, batch, d = [2, 8], 4, 8
    out = {}
    for g in cfg.memory_gradients:
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


def _text(cfg: Config, ctx) -> dict:
    """Train the text path model and a per-layer model with as many parameters
    (:data:`transflow.control.DEPTH_TEXT`), then validation bits per character at
    ``text_eval_depths`` (which must hold ``n_steps`` and ``4 n_steps``)."""
    from transflow.control import (
        DEPTH_TEXT,
        DepthTextConfig,
        bits_per_char,
        depth_accuracy,
        run_training,
        text_baselines,
        validation_windows,
    )

    n0 = cfg.n_steps
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
            path=cfg.path,
            path_size=n0 if ctx.smoke else cfg.path_size,  # smoke: K = its N_t = 2
            train_depths=[2, 4] if ctx.smoke else list(cfg.train_depths),
            smoothness=cfg.smoothness,
            dt=cfg.path_dt,
            scheme=cfg.text_path_scheme,
        ),
        "per_layer": dict(path="none", dt=1.0, scheme="prenorm"),
    }
    out: dict = {"depths": depths}
    for name, over in models.items():
        tcfg = dataclasses.replace(base, **over)
        summary, result = run_training(
            DEPTH_TEXT,
            tcfg,
            run_dir=ctx.run_dir / f"text_{name}",
            seed=ctx.seed,
            progress=ctx.progress,
        )
        ctx.log({"kind": "train", "model": f"text_{name}", **summary})
        xv, yv = validation_windows(tcfg)
        r = depth_accuracy(result.model, xv, yv, depths, rtol=None)
        bpc = [bits_per_char(v) for v in r["loss"]]
        for n, b in zip(depths, bpc):
            ctx.log({"kind": "text_bpc", "model": name, "n_steps": n, "bpc": b})
        b0, b4 = bpc[depths.index(n0)], bpc[depths.index(4 * n0)]
        out[name] = {
            "bpc": bpc,
            "change_4x": abs(b4 - b0) / b0,
            "n_params": summary["n_params"],
            "cpu_seconds": summary["cpu_seconds"],
            "scheme": tcfg.scheme,
        }
    # n-gram count baselines on the same validation windows (issue 37): reported, not claimed
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
        + " | ".join(f"{b:.4f}" for b in text[name]["bpc"])
        + f" | {100 * text[name]['change_4x']:.2f} % | {text[name]['cpu_seconds']:.1f} |"
        for name in ("path", "per_layer")
    )
    return (
        "\n\nText (pydoc_data.topics, validation bits per character):\n\n"
        f"| model | scheme | parameters | {' | '.join(f'N={n}' for n in depths)} "
        "| change at 4x | CPU s |\n"
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


def _figures(ctx, depths, results, succ, order, scaling) -> None:
    from transflow.plotting import (
        plot_depth_accuracy,
        plot_depth_convergence,
        plot_depth_smoothness,
    )

    ctx.save_figure(plot_depth_accuracy(depths, results), "accuracy_vs_depth")
    ctx.save_figure(plot_depth_convergence(depths, succ, order), "convergence")
    ctx.save_figure(plot_depth_smoothness(scaling), "smoothness")

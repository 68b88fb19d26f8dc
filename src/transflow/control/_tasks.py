"""The training tasks of issue 7: one runner, the task differences as data.

:func:`run_training` trains one :class:`TrainingTask` of :data:`TRAINING_TASKS`:

- ``"digits"`` (:data:`DIGITS`, :class:`DigitsConfig`): the scikit-learn handwritten
  digits (8×8) with a ViT-style continuous model (patches on a 2-D token grid,
  :func:`make_vit`);
- ``"sequence"`` (:data:`SEQUENCE`, :class:`SequenceConfig`): a synthetic sequence task
  that needs attention (sorting, or reversing, a short sequence) with :func:`make_seq`.

A task is data: its name, its config class, its smoke-size caps and a ``setup`` that
builds the model, the batches (a pure function of the step), the evaluation and the
data-order state. Both train with :func:`train` (checkpoints every ``checkpoint_every``
steps, bitwise-exact resume) and return a dict of headline numbers including
``test_accuracy`` and ``cpu_seconds`` (``time.process_time()`` summed over resumed runs).
Used by the Hydra tasks ``train_digits``/``train_sequence`` and by
``python -m transflow.control``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._controls import FFN_BRANCH_DT
from .._errors import (
    check_callable,
    check_flag,
    check_kind,
    check_number,
    check_path,
    check_sequence,
)
from ._checkpoint import _say
from ._data import SEQUENCE_KINDS

__all__ = [
    "DEPTH_ACTIVATIONS",
    "DEPTH_DIGITS",
    "DepthDigitsConfig",
    "DIGITS",
    "SEQUENCE",
    "TRAINING_TASKS",
    "DigitsConfig",
    "SequenceConfig",
    "TrainConfig",
    "TrainingTask",
    "checkpoint_dir_for",
    "load_trained",
    "run_training",
]

# Fields that do not change the training trajectory (excluded from the checkpoint key).
_NOT_TRAJECTORY = ("checkpoint_dir", "resume", "throttle", "log_every")


def _names(module: str, attr: str) -> Callable[[], tuple[str, ...]]:
    """The allowed names ``transflow.<module>.<attr>``, imported when a check runs (the
    registries pull in JAX; the scheme registry also grows with ``register_scheme``)."""
    import importlib

    return lambda: tuple(getattr(importlib.import_module(f"transflow.{module}"), attr))


_EXAMPLES = {"size": "4", "count": "10", "positive": "1.0", "non-negative": "0.0"}


def _check_fields(cfg: Any, rules: Mapping[str, Any]) -> None:
    """Check the fields of a training config against ``rules`` (name → rule), one line per
    refusal naming the config, the field, what was expected and what was got.

    A rule is ``"size"`` (an integer > 0), ``"count"`` (an integer >= 0), ``"positive"``
    (a finite number > 0), ``"non-negative"`` (finite, >= 0), ``"fraction"`` (finite, in
    (0, 1)), ``"flag"`` (a bool), ``"sizes"`` (a possibly empty list of integers > 0), or
    the allowed names (a tuple, or a function returning one, read when the check runs).
    """
    owner = type(cfg).__name__
    for name, rule in rules.items():
        value = getattr(cfg, name)
        if callable(rule):
            rule = rule()
        if isinstance(rule, tuple):
            if not isinstance(value, str) or value not in rule:
                raise ValueError(f"{owner}: `{name}` must be one of {rule}, got {value!r}.")
        elif rule == "flag":
            check_flag(name, value, owner)
        elif rule == "sizes":
            check_sequence(name, value, owner, nonempty=False, example="[2, 4, 8]")
        elif rule == "fraction":
            check_number(name, value, owner, lower=0, upper=1, example="0.2")
        else:
            check_number(
                name,
                value,
                owner,
                lower=0,
                strict=rule in ("size", "positive"),
                integer=rule in ("size", "count"),
                example=_EXAMPLES[rule],
            )


_TRAIN_RULES: dict[str, Any] = {
    **dict.fromkeys(("d", "n_steps", "n_heads", "batch_size", "steps"), "size"),
    **dict.fromkeys(("d_ff", "warmup_steps", "log_every", "eval_every"), "count"),
    "checkpoint_every": "count",
    "scheme": _names("schemes._registry", "_REGISTRY"),
    "ffn_branch_dt": FFN_BRANCH_DT,
    "remat": _names("_integrate", "_MODES"),
    "lr": "positive",
    "weight_decay": "non-negative",
    "throttle": "non-negative",
    "resume": "flag",
}


@dataclass
class TrainConfig:
    """The fields every training task shares: model size, scheme, optimiser, logging and
    checkpoints."""

    d: int = 32  # feature grid size N_y = d_model
    n_steps: int = 4  # time steps N_t (layers)
    n_heads: int = 2
    d_ff: int = 0  # 0: the paper's square FFN (W_j: Ω_y → Ω_y); >0: lifted hidden width
    scheme: str = "lie"  # "lie" (paper, post-LN), "prenorm", or a name of SCHEME_NAMES
    # LieScheme option (docs/spec/continuous-model.md §3.2): "dt" or "2dt"
    ffn_branch_dt: str = "dt"
    remat: str = "step"  # "none" | "step" (jax.checkpoint per step) | "nested" (√N_t)
    batch_size: int = 64
    steps: int = 1500
    lr: float = 3e-3
    warmup_steps: int = 75
    weight_decay: float = 1e-4
    log_every: int = 10
    eval_every: int = 250
    checkpoint_every: int = 250
    checkpoint_dir: str = "auto"  # "auto": shared by reruns of the same config; "run"; a path
    resume: bool = True  # continue from the last checkpoint in checkpoint_dir
    throttle: float = 0.0  # seconds of sleep per step (to demonstrate interruption)

    def __post_init__(self):
        # every field checked when the config is made (the CLI builds it before any run
        # directory exists): one line naming the field, the rule and the value
        _check_fields(self, self._rules())
        check_path("checkpoint_dir", self.checkpoint_dir, type(self).__name__)

    def _rules(self) -> dict[str, Any]:
        return _TRAIN_RULES


@dataclass
class DigitsConfig(TrainConfig):
    """Digits classification with a small continuous ViT (defaults reach ≥ 95 %)."""

    patch: int = 2  # patch size: 8×8 image → (8/patch)² tokens on a 2-D grid
    pool: str = "mean"  # read-out: "mean" over Ω_x or "cls" (class token)
    test_fraction: float = 0.2

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.patch, int) and self.patch > 0 and 8 % self.patch:
            raise ValueError(
                f"{type(self).__name__}: `patch` must divide the 8×8 image (1, 2, 4 or 8), "
                f"got {self.patch}; pass e.g. patch=2."
            )

    def _rules(self) -> dict[str, Any]:
        return {
            **super()._rules(),
            "patch": "size",
            "pool": ("mean", "cls"),
            "test_fraction": "fraction",
        }


@dataclass
class DepthDigitsConfig(DigitsConfig):
    """Digits with controls θ(t) as a function of time (issue 26), or per layer.

    ``path``: ``"none"`` (today's per-layer controls) or a name of
    :data:`transflow.continuous.PATH_KINDS`, with ``path_size`` = K; ``train_depths``:
    the numbers of steps drawn per batch (:func:`transflow.control.depth_loss`; ``[]``:
    ``n_steps`` only); ``smoothness``: λ of the penalty λ ∫‖θ'(t)‖² dt;
    ``smooth_init``: a path that starts constant in t; ``scheme`` also accepts
    ``"relaxed"`` (:class:`~transflow.continuous.RelaxedLieScheme` with ``relax_tau``);
    ``dt``: the step at the training depth (final time T = ``n_steps · dt``);
    ``gradient``: how the training gradient goes through the steps
    (:data:`transflow.control.GRADIENTS`: ``"backprop"``, ``"checkpointed"`` with
    ``checkpoints`` stored states, or the continuous ``"adjoint"`` solved backwards with
    ``adjoint_solver``; the last two use memory independent of the depth);
    ``activation``: the FFN's activation, one of :data:`DEPTH_ACTIVATIONS` (``"relu"``,
    the paper's projection onto S2, whose field is Lipschitz but not C¹; a smooth one
    such as ``"gelu"`` for a control where only the activation differs); ``theta_at``:
    where a path model's step reads θ(t) (:class:`~transflow.models.FlowModel`'s
    ``theta_at``: ``"midpoint"``, every depth-study run so far, or ``"nodes"``).
    """

    scheme: str = "prenorm"
    path: str = "legendre"
    path_size: int = 4
    train_depths: list = field(default_factory=list)
    smoothness: float = 0.0
    smooth_init: bool = True
    relax_tau: float = 1.0
    dt: float = 1.0  # the step at the training depth: final time T = n_steps · dt
    gradient: str = "backprop"  # "backprop" | "checkpointed" | "adjoint"
    checkpoints: int = 4  # states stored by gradient="checkpointed"
    adjoint_solver: str = "euler"  # the backward solve of gradient="adjoint"
    activation: str = "relu"  # the FFN's activation (DEPTH_ACTIVATIONS)
    # where a path model's step reads θ(t) (FlowModel.theta_at): "midpoint" for every
    # stage, as every depth-study run so far; "nodes" at the scheme's stage nodes
    theta_at: str = "midpoint"

    def _rules(self) -> dict[str, Any]:
        return {
            **super()._rules(),
            "path": lambda: ("none", *_names("_paths", "PATH_KINDS")()),
            "path_size": "size",
            "train_depths": "sizes",
            "smoothness": "non-negative",
            "smooth_init": "flag",
            "relax_tau": "positive",
            "dt": "positive",
            "gradient": _names("control._at_depth", "GRADIENTS"),
            "checkpoints": "size",
            "adjoint_solver": _names("control._at_depth", "_SOLVERS"),
            "activation": DEPTH_ACTIVATIONS,
            "theta_at": _names("models._flow", "THETA_AT"),
        }


#: The FFN activations :class:`DepthDigitsConfig` trains with: ReLU (the paper's
#: projection onto S2, a kink at 0) and smooth ones (a control with a C¹ field).
DEPTH_ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "tanh")


@dataclass
class SequenceConfig(TrainConfig):
    """Sorting (or reversing) a random sequence: each output token needs attention."""

    n_steps: int = 2
    kind: str = "sort"  # "sort" or "reverse"
    length: int = 8
    vocab: int = 10
    n_test: int = 1000

    def _rules(self) -> dict[str, Any]:
        return {
            **super()._rules(),
            "kind": SEQUENCE_KINDS,
            **dict.fromkeys(("length", "vocab", "n_test"), "size"),
        }


@dataclass
class Problem:
    """What a task's ``setup`` returns: the model, batches, evaluation and summary extras."""

    model: Any
    batch: Callable[[int], tuple[Any, Any]]  # a pure function of the step
    eval_fn: Callable[[Any], dict]
    data_state: Callable[[int], tuple[int, int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # added to the summary
    loss_fn: Callable | None = None  # (model, x, y, key) -> (loss, aux); None: cross-entropy

    def __post_init__(self):
        check_callable("batch", self.batch, "Problem", "lambda step: (x, y)")
        check_callable("eval_fn", self.eval_fn, "Problem", "lambda model: {'accuracy': ...}")
        for name in ("data_state", "loss_fn"):
            if getattr(self, name) is not None:
                check_callable(name, getattr(self, name), "Problem", "a function or None")
        if not isinstance(self.extra, dict):
            raise TypeError(f"Problem: `extra` must be a dict, got {type(self.extra).__name__}.")


@dataclass(frozen=True)
class TrainingTask:
    """One training task as data.

    Attributes:
        name: the task's name (checkpoint key, progress label, report title).
        config: its config dataclass (a :class:`TrainConfig`).
        setup: ``setup(cfg, seed, key) -> Problem`` builds the model (from ``key``), the
            data and the evaluation.
        smoke_caps: in smoke mode each field is capped at this value (``min``).
        smoke_set: in smoke mode these fields are set to these values.
    """

    name: str
    config: type
    setup: Callable[[Any, int, Any], Problem]
    smoke_caps: Mapping[str, Any]
    smoke_set: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        owner = "TrainingTask"
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"{owner}: `name` must be a non-empty str, got {self.name!r:.40}.")
        if not (isinstance(self.config, type) and issubclass(self.config, TrainConfig)):
            raise TypeError(
                f"{owner}: `config` must be a TrainConfig class (e.g. DigitsConfig), got "
                f"{self.config!r:.40}."
            )
        check_callable("setup", self.setup, owner, "setup(cfg, seed, key) -> Problem")
        fields = {f.name for f in dataclasses.fields(self.config)}
        for arg in ("smoke_caps", "smoke_set"):
            value = getattr(self, arg)
            if not isinstance(value, Mapping) or set(value) - fields:
                raise ValueError(
                    f"{owner}: `{arg}` must map fields of {self.config.__name__} to values, "
                    f"got {value!r:.60}."
                )


def _as_config(cls, cfg) -> Any:
    if isinstance(cfg, cls):
        return cfg
    names = [f.name for f in dataclasses.fields(cls)]
    missing = (
        [n for n in names if not hasattr(cfg, n)]
        if not isinstance(cfg, dict)
        else [n for n in names if n not in cfg]
    )
    if missing:
        raise ValueError(
            f"`cfg` lacks the fields {missing} of {cls.__name__}; pass a {cls.__name__} "
            "(or a mapping with its fields)."
        )
    get = (lambda n: cfg[n]) if isinstance(cfg, dict) else (lambda n: getattr(cfg, n))
    return cls(**{n: get(n) for n in names})


#: Environment variable naming the root of the shared training checkpoints
#: (``checkpoint_dir="auto"``); default ``outputs/checkpoints`` in the working directory.
CHECKPOINT_ROOT_ENV = "TRANSFLOW_CHECKPOINT_ROOT"


def checkpoint_root() -> pathlib.Path:
    """The documented root of ``checkpoint_dir="auto"`` checkpoints:
    ``$TRANSFLOW_CHECKPOINT_ROOT``, else ``outputs/checkpoints`` under the working
    directory (where ``transflow-run`` writes ``outputs/`` by default), whatever
    ``hydra.run.dir`` says.

    Example:
        >>> checkpoint_root().name  # without $TRANSFLOW_CHECKPOINT_ROOT
        'checkpoints'
    """
    import os

    root = os.environ.get(CHECKPOINT_ROOT_ENV)
    return pathlib.Path(root) if root else pathlib.Path.cwd() / "outputs" / "checkpoints"


_CODE_VERSION: list[str] = []


def code_version() -> str:
    """A short hash of transflow's source (the package's ``.py`` files and the
    experiments' tasks): checkpoints of ``checkpoint_dir="auto"`` are keyed by it, so a
    rerun after a code change trains again instead of returning the old numbers.

    Example:
        >>> len(code_version())
        12
    """
    if not _CODE_VERSION:
        import importlib.util

        import transflow

        h = hashlib.sha256(transflow.__version__.encode())
        roots = [pathlib.Path(transflow.__file__).parent]
        spec = importlib.util.find_spec("transflow.experiments")
        if spec is not None and spec.submodule_search_locations:
            roots += [pathlib.Path(p) for p in spec.submodule_search_locations]
        seen = set()
        for root in roots:
            for path in sorted(root.rglob("*.py")):
                real = path.resolve()
                if real in seen:
                    continue
                seen.add(real)
                h.update(path.relative_to(root).as_posix().encode())
                h.update(path.read_bytes())
        _CODE_VERSION.append(h.hexdigest()[:12])
    return _CODE_VERSION[0]


def checkpoint_dir_for(
    name: str, cfg, run_dir: pathlib.Path, *, seed: int, smoke: bool
) -> pathlib.Path | None:
    """Where a task keeps its checkpoints.

    ``cfg.checkpoint_dir``: ``"auto"`` → ``<checkpoint_root()>/<name>-<hash>``, a
    directory under the documented root (``$TRANSFLOW_CHECKPOINT_ROOT``, else
    ``outputs/checkpoints`` in the working directory) keyed by a hash of every config
    field that changes the training trajectory, the seed, smoke and the code version
    (:func:`code_version`), so rerunning the same command with the same code finds it
    even though ``transflow-run`` gives each run a new time-stamped directory; ``"run"``
    → ``<run_dir>/checkpoints`` (no resume across commands; also what ``"auto"`` means
    in smoke mode, so smoke runs never touch the real checkpoints); ``"none"``/``""`` →
    no checkpoints; anything else is a path.
    """
    owner = "checkpoint_dir_for"
    if not isinstance(name, str) or not name:
        raise TypeError(f"{owner}: `name` must be the task's name (a str), got {name!r:.40}.")
    check_kind("cfg", cfg, TrainConfig, owner, "pass the task's config, e.g. DigitsConfig()")
    check_path("run_dir", run_dir, owner)
    check_number("seed", seed, owner, lower=0, strict=False, integer=True, example="0")
    check_flag("smoke", smoke, owner)
    run_dir = pathlib.Path(run_dir)
    spec = str(cfg.checkpoint_dir)
    if spec in ("", "none"):
        return None
    if spec == "run" or (spec == "auto" and smoke):
        return run_dir / "checkpoints"
    if spec != "auto":
        return pathlib.Path(spec)
    key = {
        f.name: getattr(cfg, f.name)
        for f in dataclasses.fields(cfg)
        if f.name not in _NOT_TRAJECTORY
    }
    key.update(seed=seed, smoke=smoke, task=name, code=code_version())
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return checkpoint_root() / f"{name}-{digest}"


def _scheme(name: str, ffn_branch_dt: str, relax_tau: float = 1.0):
    """The scheme ``name`` of the registry (:func:`transflow.make_scheme`, and those of
    :func:`transflow.register_scheme`) with the task options it declares it takes."""
    from ..schemes._registry import make_scheme, scheme_options

    task = {"ffn_branch_dt": ffn_branch_dt, "tau": relax_tau}
    return make_scheme(name, **{k: v for k, v in task.items() if k in scheme_options(name)})


def _prepare_dir(ckpt, resume: bool, message):
    import shutil

    if ckpt is not None and not resume and ckpt.exists():
        message(f"resume=false: removing old checkpoints in {ckpt}")
        shutil.rmtree(ckpt)


def _finish(name, result, extra, *, report, log, ckpt) -> dict:
    hist = result.history
    final_eval = [h for h in hist if "eval_accuracy" in h][-1]
    last_train = [h for h in hist if "loss" in h][-1]
    summary = {
        "test_accuracy": final_eval["eval_accuracy"],
        "test_loss": final_eval["eval_loss"],
        "train_loss": last_train["loss"],
        "train_accuracy": last_train["train_accuracy"],
        "cpu_seconds": result.cpu_seconds,
        "wall_seconds": result.wall_seconds,
        "steps": result.step,
        "resumed_from": result.resumed_from,
        "checkpoint_dir": None if ckpt is None else str(ckpt),
        **{
            k: v
            for k, v in final_eval.items()
            if k.startswith("eval_") and k not in ("eval_accuracy", "eval_loss")
        },
        **extra,
    }
    if log is not None:
        log({"final": True, **summary})
    if report is not None:
        report(
            f"## {name}\n\n"
            f"Test accuracy **{summary['test_accuracy']:.4f}** after {result.step} steps, "
            f"in **{summary['cpu_seconds']:.1f} s of CPU time** (`time.process_time()`, "
            f"summed over resumed runs; wall {summary['wall_seconds']:.1f} s)."
            + (f" Resumed from step {result.resumed_from}." if result.resumed_from else "")
        )
    return summary


def _setup_digits(cfg: DigitsConfig, seed: int, key, **model_kw) -> Problem:
    """Data, evaluation and the model of the digits task (``model_kw``: ``make_vit``'s)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from ..models._flow import make_vit
    from ._data import EpochOrder, load_digits_split
    from ._train import evaluate

    xtr, ytr, xte, yte = load_digits_split(cfg.test_fraction, seed=seed)
    model = make_vit(
        d=cfg.d,
        n_steps=cfg.n_steps,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff or None,
        patch=cfg.patch,
        pool=cfg.pool,
        **{
            "scheme": _scheme(cfg.scheme, cfg.ffn_branch_dt),
            "remat": cfg.remat,
            "dtype": jnp.float32,
            "key": key,
            **model_kw,
        },
    )
    order = EpochOrder(len(xtr), cfg.batch_size, seed)

    def batch(step):
        idx = order.indices(step)
        return xtr[idx], ytr[idx]

    n_params = sum(x.size for x in jax.tree.leaves(model) if eqx.is_array(x))
    return Problem(
        model,
        batch,
        lambda m: evaluate(m, xte, yte),
        order.state,
        {"n_params": int(n_params), "n_train": len(xtr), "n_test": len(xte)},
    )


def _setup_depth_digits(cfg: DepthDigitsConfig, seed: int, key) -> Problem:
    import dataclasses as dc

    import equinox as eqx
    import jax

    from ._at_depth import depth_loss

    # the config checked its fields (DepthDigitsConfig._rules)
    scheme = _scheme(cfg.scheme, cfg.ffn_branch_dt, cfg.relax_tau)
    path_kw = (
        {}
        if cfg.path == "none"
        else {"path": cfg.path, "path_size": cfg.path_size, "smooth_init": cfg.smooth_init}
    )
    if cfg.activation != "relu":  # the default model is built exactly as before
        path_kw["activation"] = cfg.activation
    path_kw["theta_at"] = cfg.theta_at
    base = _setup_digits(cfg, seed, key, scheme=scheme, dt=cfg.dt, **path_kw)
    model = base.model
    depths = list(cfg.train_depths) or [cfg.n_steps]
    n_params = sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))
    extra = {**base.extra, "n_params": int(n_params), "path": cfg.path}
    return dc.replace(
        base,
        model=model,
        extra=extra,
        loss_fn=depth_loss(
            depths,
            smoothness=cfg.smoothness,
            gradient=cfg.gradient,
            checkpoints=cfg.checkpoints,
            adjoint_solver=cfg.adjoint_solver,
        ),
    )


def _setup_sequence(cfg: SequenceConfig, seed: int, key) -> Problem:
    """Reports the per-token test accuracy and the fraction of test sequences that are
    entirely correct (``eval_sequence_accuracy``)."""
    import jax
    import jax.numpy as jnp

    from ..models._flow import make_seq
    from ._data import sequence_batch
    from ._train import evaluate

    model = make_seq(
        vocab=cfg.vocab,
        length=cfg.length,
        d=cfg.d,
        n_steps=cfg.n_steps,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff or None,
        scheme=_scheme(cfg.scheme, cfg.ffn_branch_dt),
        remat=cfg.remat,
        dtype=jnp.float32,
        key=key,
    )
    xte, yte = sequence_batch(
        cfg.kind, cfg.n_test, cfg.length, cfg.vocab, seed=seed, step=0, split="test"
    )

    def batch(step):
        return sequence_batch(cfg.kind, cfg.batch_size, cfg.length, cfg.vocab, seed=seed, step=step)

    predict = jax.jit(lambda m, x: jnp.argmax(jax.vmap(m)(x), -1))

    def eval_fn(m):
        out = evaluate(m, xte, yte)
        pred = predict(m, jnp.asarray(xte))
        out["sequence_accuracy"] = float(
            jnp.mean(jnp.all(pred == jnp.asarray(yte, pred.dtype), axis=-1))
        )
        return out

    return Problem(model, batch, eval_fn, None, {"kind": cfg.kind})


# Smoke mode (a few seconds): every task shrinks the same way, plus its own caps.
_SMOKE_CAPS = {"d": 16, "steps": 40, "checkpoint_every": 20, "warmup_steps": 4}
_SMOKE_SET = {"eval_every": 20, "log_every": 5}

#: The digits ViT (``python -m transflow.control digits``, ``experiment=train_digits``).
DIGITS = TrainingTask(
    "train_digits", DigitsConfig, _setup_digits, {**_SMOKE_CAPS, "n_steps": 2}, _SMOKE_SET
)
#: Sorting/reversing (``python -m transflow.control sequence``, ``experiment=train_sequence``).
SEQUENCE = TrainingTask(
    "train_sequence", SequenceConfig, _setup_sequence, {**_SMOKE_CAPS, "n_test": 200}, _SMOKE_SET
)
#: Digits with controls as functions of t (issue 26; ``experiment=depth``).
DEPTH_DIGITS = TrainingTask(
    "depth_digits",
    DepthDigitsConfig,
    _setup_depth_digits,
    {**_SMOKE_CAPS, "n_steps": 2},
    _SMOKE_SET,
)
#: The training tasks by their command-line name.
TRAINING_TASKS: dict[str, TrainingTask] = {"digits": DIGITS, "sequence": SEQUENCE}


def run_training(
    task: TrainingTask | str,
    cfg,
    *,
    run_dir,
    seed: int = 0,
    smoke: bool = False,
    log: Callable[[dict], None] | None = None,
    report: Callable[[str], None] | None = None,
    progress: Callable | None = None,
    message: Callable[[str], None] = _say,
) -> tuple[dict, Any]:
    """Train one task (a :class:`TrainingTask` or its name in :data:`TRAINING_TASKS`);
    returns ``(summary, TrainResult)``.

    ``cfg`` is the task's config (or any object/mapping with its fields; extra fields are
    ignored). Checkpoints go to :func:`checkpoint_dir_for`; ``log`` receives every logged
    record and the final one (``final=True``), ``report`` a markdown paragraph. In
    ``smoke`` mode the model and the run are shrunk to a few seconds (the task's
    ``smoke_caps``/``smoke_set``: d ≤ 16, 40 training steps, checkpoints every 20, ...).

    Example:
        >>> from transflow.control import TRAINING_TASKS, DigitsConfig
        >>> sorted(TRAINING_TASKS), TRAINING_TASKS["digits"].config is DigitsConfig
        (['digits', 'sequence'], True)
    """
    import jax

    from ._train import _default_progress, make_optimizer, train

    owner = "run_training"
    task = _resolve_task(task, owner)
    check_path("run_dir", run_dir, owner)
    check_number("seed", seed, owner, lower=0, strict=False, integer=True, example="0")
    check_flag("smoke", smoke, owner)
    cfg = _as_config(task.config, cfg)
    if smoke:
        cfg = dataclasses.replace(
            cfg,
            **{k: min(getattr(cfg, k), v) for k, v in task.smoke_caps.items()},
            **dict(task.smoke_set),
        )
    run_dir = pathlib.Path(run_dir)
    ckpt = checkpoint_dir_for(task.name, cfg, run_dir, seed=seed, smoke=smoke)
    _prepare_dir(ckpt, cfg.resume, message)
    k_model, k_train = jax.random.split(jax.random.key(seed))
    problem = task.setup(cfg, seed, k_model)
    opt = make_optimizer(
        cfg.lr, num_steps=cfg.steps, warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay
    )
    result = train(
        problem.model,
        opt,
        problem.batch,
        cfg.steps,
        key=k_train,
        **({} if problem.loss_fn is None else {"loss_fn": problem.loss_fn}),
        checkpoint_dir=ckpt,
        checkpoint_every=cfg.checkpoint_every,
        data_state=problem.data_state,
        log_every=cfg.log_every,
        eval_fn=problem.eval_fn,
        eval_every=cfg.eval_every,
        on_log=log,
        progress=_default_progress if progress is None else progress,
        desc=task.name,
        throttle=cfg.throttle,
        message=message,
    )
    summary = _finish(task.name, result, problem.extra, report=report, log=log, ckpt=ckpt)
    return summary, result


def _resolve_task(task, owner: str) -> TrainingTask:
    """A :class:`TrainingTask` from itself or its name in :data:`TRAINING_TASKS`."""
    if isinstance(task, TrainingTask):
        return task
    if not isinstance(task, str) or task not in TRAINING_TASKS:
        raise ValueError(
            f"{owner}: `task` must be one of {sorted(TRAINING_TASKS)} or a TrainingTask, got "
            f"{task!r:.40}."
        )
    return TRAINING_TASKS[task]


def _checkpoint_template(task: TrainingTask, cfg, seed: int) -> dict:
    """The state :func:`run_training` checkpoints, at step 0 (the pytree to load into)."""
    import equinox as eqx
    import jax
    import numpy as np

    from ._train import make_optimizer

    k_model, k_train = jax.random.split(jax.random.key(seed))  # as run_training splits it
    problem = task.setup(cfg, seed, k_model)
    opt = make_optimizer(
        cfg.lr, num_steps=cfg.steps, warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay
    )
    data = (0, 0) if problem.data_state is None else problem.data_state(0)
    return {
        "model": problem.model,
        "opt_state": opt.init(eqx.filter(problem.model, eqx.is_inexact_array)),
        "step": np.asarray(0, np.int64),
        "key": np.asarray(jax.random.key_data(k_train)),
        "data": np.asarray(data, np.int64),
    }


def load_trained(task: TrainingTask | str, path, cfg=None, seed: int = 0) -> tuple[Any, dict]:
    """``(model, info)`` from a directory of checkpoints written by :func:`run_training`.

    ``cfg`` is the configuration the run used (default: the task's defaults) and ``seed``
    its seed; ``info`` has ``checkpoint_dir``, ``train_test_accuracy`` (the last
    evaluation, or ``None``) and ``train_steps``. Raises ``ValueError`` naming ``path``
    when it holds no valid checkpoint.
    """
    from ._checkpoint import load_latest_checkpoint

    owner = "load_trained"
    task = _resolve_task(task, owner)
    check_path("path", path, owner)
    check_number("seed", seed, owner, lower=0, strict=False, integer=True, example="0")
    cfg = task.config() if cfg is None else _as_config(task.config, cfg)
    found = load_latest_checkpoint(path, _checkpoint_template(task, cfg, seed))
    if found is None:
        raise ValueError(f"{str(path)!r}: no valid ckpt-*.eqx checkpoint of task {task.name!r}.")
    state, step, meta = found
    evals = [h for h in meta.get("history", []) if "eval_accuracy" in h]
    return state["model"], {
        "checkpoint_dir": str(path),
        "train_test_accuracy": evals[-1]["eval_accuracy"] if evals else None,
        "train_steps": step,
    }

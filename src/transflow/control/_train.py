"""Training as optimal control: loss, exact gradients, optax updates, resumable loops.

The discrete optimal-control problem (docs/spec/continuous-model.md §5) is solved by first-order
methods on the controls θ = (embedding, per-step controls θⁿ, read-out). The gradient is the exact
discrete adjoint of the split scheme, computed by reverse-mode AD through
:func:`transflow.evolve` (optionally rematerialised). Equinox/optax style: one jitted
:func:`make_step` returns the new model and optimizer state; nothing is hidden.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._errors import (
    check_callable,
    check_key,
    check_kind,
    check_number,
    check_path,
    check_step,
    check_values,
    is_array,
)
from ._checkpoint import _say, load_latest_checkpoint, save_checkpoint

__all__ = [
    "cross_entropy_loss",
    "make_optimizer",
    "make_step",
    "evaluate",
    "train",
    "TrainResult",
]


def cross_entropy_loss(model, x, y, key=None):
    """Mean softmax cross-entropy of ``jax.vmap(model)(x)`` against integer labels ``y``.

    ``ℓ = -(1/B) Σ_i log softmax(model(x_i))[y_i]`` (averaged over tokens too for
    per-token outputs). Returns ``(loss, accuracy)``; ``key`` is unused (no dropout) and
    kept so that losses with randomness fit the same signature.
    """
    del key
    _check_labels(model, x, y, "cross_entropy_loss")
    logits = jax.vmap(model)(x)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    acc = jnp.mean(jnp.argmax(logits, axis=-1).astype(y.dtype) == y)
    return loss, acc


def _check_labels(model, x, y, owner: str) -> None:
    """Static checks of a loss's ``(model, x, y)`` (free under ``jit``: types and shapes)."""
    check_callable("model", model, owner, "a FlowModel")
    for name, v in (("x", x), ("y", y)):
        if not is_array(v) or len(v.shape) < 1:
            raise TypeError(
                f"{owner}: `{name}` must be a batch (an array with a leading batch axis), got "
                f"{type(v).__name__} {v!r:.40}."
            )
    if not jnp.issubdtype(y.dtype, jnp.integer):
        raise TypeError(
            f"{owner}: `y` must hold integer class labels, got dtype {y.dtype}; cast them, "
            "e.g. `y.astype(jnp.int32)`."
        )
    if y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{owner}: `y` must have one label per example of `x` ({x.shape[0]}), got shape "
            f"{tuple(y.shape)}."
        )


def _check_optimizer(optimizer, owner: str) -> None:
    check_kind(
        "optimizer",
        optimizer,
        optax.GradientTransformation,
        owner,
        "pass an optax transformation, e.g. make_optimizer(1e-3, num_steps=100)",
    )


def make_optimizer(
    lr: float = 3e-3,
    *,
    num_steps: int,
    warmup_steps: int = 0,
    weight_decay: float = 0.0,
    clip_norm: float | None = 1.0,
) -> optax.GradientTransformation:
    """AdamW with linear warm-up and cosine decay to 0, after global-norm clipping."""
    owner = "make_optimizer"
    check_step("lr", lr, owner)
    check_number("num_steps", num_steps, owner, lower=0, integer=True, example="1000")
    check_number(
        "warmup_steps", warmup_steps, owner, lower=0, strict=False, integer=True, example="0"
    )
    check_number("weight_decay", weight_decay, owner, lower=0, strict=False, example="0.0")
    if clip_norm is not None:
        check_number("clip_norm", clip_norm, owner, lower=0, example="1.0 (or None)")
    warmup_steps = min(warmup_steps, num_steps - 1)
    sched = optax.warmup_cosine_decay_schedule(
        0.0 if warmup_steps else lr, lr, max(warmup_steps, 0), num_steps, 0.0
    )
    parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm else []
    return optax.chain(*parts, optax.adamw(sched, weight_decay=weight_decay))


def make_step(optimizer: optax.GradientTransformation, loss_fn: Callable = cross_entropy_loss):
    """One jitted training step ``(model, opt_state, x, y, key) -> (model, opt_state, loss, aux)``.

    Computes ``(loss, aux), g = value_and_grad(loss_fn)(model, x, y, key)`` with respect
    to every floating-point array of ``model`` (``eqx.filter_value_and_grad``), then the
    optax update ``θ ← θ + update(g, opt_state, θ)``. The optimizer state is passed in and
    returned (never stored in a closure), so a step is a pure function and a checkpoint of
    ``(model, opt_state, key, step)`` determines the rest of the run.

    Example:
        >>> import jax, jax.numpy as jnp, equinox as eqx
        >>> from transflow.control import make_vit, make_optimizer, make_step
        >>> model = make_vit(d=8, n_steps=1, n_heads=1, key=jax.random.key(0))
        >>> opt = make_optimizer(1e-2, num_steps=10)
        >>> state = opt.init(eqx.filter(model, eqx.is_inexact_array))
        >>> step = make_step(opt)
        >>> x, y = jnp.zeros((4, 8, 8)), jnp.arange(4)
        >>> model, state, loss, acc = step(model, state, x, y, jax.random.key(1))
        >>> loss.shape
        ()
    """
    _check_optimizer(optimizer, "make_step")
    check_callable("loss_fn", loss_fn, "make_step", "cross_entropy_loss")

    @eqx.filter_jit
    def step(model, opt_state, x, y, key):
        (loss, aux), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(model, x, y, key)
        params = eqx.filter(model, eqx.is_inexact_array)
        # optax mixes its int32 step count with floats (Adam's bias correction): give it
        # NumPy promotion even where the caller runs JAX with strict promotion.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimizer.update(grads, opt_state, params)
        model = eqx.apply_updates(model, updates)
        return model, opt_state, loss, aux

    return step


def evaluate(model, x, y, *, batch_size: int = 512, loss_fn: Callable = cross_entropy_loss):
    """Mean loss and accuracy of ``model`` on ``(x, y)``, in batches (jitted)."""
    owner = "evaluate"
    check_number("batch_size", batch_size, owner, lower=0, integer=True, example="512")
    check_callable("loss_fn", loss_fn, owner, "cross_entropy_loss")
    check_callable("model", model, owner, "a FlowModel")
    x, y = _check_data(x, y, owner)
    fn = eqx.filter_jit(loss_fn)
    n = len(x)
    tot_loss = tot_acc = 0.0
    for i in range(0, n, batch_size):
        xb, yb = jnp.asarray(x[i : i + batch_size]), jnp.asarray(y[i : i + batch_size])
        loss, acc = fn(model, xb, yb)
        tot_loss += float(loss) * len(xb)
        tot_acc += float(acc) * len(xb)
    return {"loss": tot_loss / n, "accuracy": tot_acc / n}


def _check_data(x, y, owner: str):
    """``(x, y)`` as arrays: ``x`` finite (images) or integer (token ids), not empty."""
    if not is_array(x):
        x = np.asarray(x)
    if not is_array(y):
        y = np.asarray(y)
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"{owner}: `x` must hold at least one example, got shape {x.shape}.")
    if jnp.issubdtype(x.dtype, jnp.floating):
        x = check_values("x", x, owner)
    elif not jnp.issubdtype(x.dtype, jnp.integer):
        raise TypeError(
            f"{owner}: `x` must be images (floats) or token ids (integers), got dtype {x.dtype}."
        )
    if y.ndim < 1 or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"{owner}: `y` must have one target per example of `x` ({x.shape[0]}), got shape "
            f"{tuple(y.shape)}."
        )
    return x, y


def _default_progress(iterable: Iterable, total: int | None = None, desc: str = ""):
    from tqdm.auto import tqdm

    # disable=None: quiet when stderr is not a TTY (CI, logs, subprocesses).
    return tqdm(iterable, total=total, desc=desc, disable=None, dynamic_ncols=True)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        model, opt_state, key: the final training state.
        step: number of steps done (= ``num_steps``).
        resumed_from: the step of the checkpoint the run resumed from, or ``None``.
        history: logged dicts (``step``, ``loss``, ``train_accuracy``, ``cpu_seconds`` …,
            plus evaluation entries), including those of the runs before a resume.
        cpu_seconds: ``time.process_time()`` spent training, summed over resumed runs.
        wall_seconds: wall-clock time of training, summed over resumed runs.
    """

    model: Any
    opt_state: Any
    key: Any
    step: int
    resumed_from: int | None
    history: list[dict] = field(default_factory=list)
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0


def train(
    model,
    optimizer: optax.GradientTransformation,
    batch_fn: Callable[[int], tuple[Any, Any]],
    num_steps: int,
    *,
    key,
    loss_fn: Callable = cross_entropy_loss,
    checkpoint_dir=None,
    checkpoint_every: int = 100,
    keep: int | None = 3,
    data_state: Callable[[int], tuple[int, int]] | None = None,
    log_every: int = 10,
    eval_fn: Callable[[Any], dict] | None = None,
    eval_every: int | None = None,
    on_log: Callable[[dict], None] | None = None,
    progress: Callable | None = _default_progress,
    desc: str = "train",
    throttle: float = 0.0,
    message: Callable[[str], None] = _say,
) -> TrainResult:
    """Train ``model`` for ``num_steps`` steps, checkpointing and resuming.

    Every step ``s`` takes the batch ``batch_fn(s)`` (which must be a pure function of
    ``s``, e.g. :class:`EpochOrder`), splits the PRNG key and applies :func:`make_step`.
    Every ``checkpoint_every`` steps and at the end, ``{model, opt_state, step, key,
    data}`` is written to ``checkpoint_dir`` with :func:`save_checkpoint` (atomic, with a
    checksum). If ``checkpoint_dir`` already holds a valid checkpoint, training resumes
    from it; because the state and the data order are restored exactly, the result is
    bitwise identical to an uninterrupted run.

    Args:
        model: an equinox model (every floating array is trained).
        optimizer: an optax transformation.
        batch_fn: ``step -> (x, y)``.
        num_steps: total number of steps (including steps done before a resume).
        key: PRNG key, split once per step and passed to ``loss_fn``.
        loss_fn: ``(model, x, y, key) -> (loss, aux)`` (aux: accuracy).
        checkpoint_dir: directory for checkpoints; ``None`` disables them.
        checkpoint_every: checkpoint period in steps.
        keep: how many checkpoints to keep.
        data_state: ``step -> (epoch, position)``; saved and checked on resume.
        log_every: period of the logged training loss/accuracy (and progress postfix).
        eval_fn: ``model -> dict`` of evaluation metrics (e.g. test accuracy).
        eval_every: evaluation period (``None`` or ``0``: only at the end).
        on_log: called with every logged dict (e.g. ``ctx.log``).
        progress: ``(iterable, total=, desc=) -> iterable`` progress bar (tqdm, quiet when
            not a TTY); ``None`` for none.
        throttle: seconds to sleep after each step (for demonstrating interruption).
        message: where resume/corruption messages go (default: stderr).

    Returns:
        A :class:`TrainResult`.
    """
    owner = "train"
    _check_optimizer(optimizer, owner)
    check_callable("batch_fn", batch_fn, owner, "lambda step: (x, y)")
    check_number("num_steps", num_steps, owner, lower=0, integer=True, example="100")
    check_key("key", key, owner)
    check_callable("loss_fn", loss_fn, owner, "cross_entropy_loss")
    if checkpoint_dir is not None:
        check_path("checkpoint_dir", checkpoint_dir, owner)
    check_number("checkpoint_every", checkpoint_every, owner, lower=0, integer=True, example="100")
    if keep is not None:
        check_number("keep", keep, owner, lower=0, integer=True, example="3 (or None)")
    check_number("log_every", log_every, owner, lower=0, integer=True, example="10")
    if eval_every is not None and not (isinstance(eval_every, int) and eval_every == 0):
        check_number("eval_every", eval_every, owner, lower=0, integer=True, example="100")
    check_number("throttle", throttle, owner, lower=0, strict=False, example="0.0")
    for name, fn in (("data_state", data_state), ("eval_fn", eval_fn), ("on_log", on_log)):
        if fn is not None:
            check_callable(name, fn, owner)
    step_fn = make_step(optimizer, loss_fn)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))
    ds = (lambda s: (0, s)) if data_state is None else data_state

    def pack(model, opt_state, key, step):
        return {
            "model": model,
            "opt_state": opt_state,
            "step": np.asarray(step, np.int64),
            "key": np.asarray(jax.random.key_data(key)),
            "data": np.asarray(ds(step), np.int64),
        }

    start, resumed_from, history = 0, None, []
    cpu0, wall0 = 0.0, 0.0
    if checkpoint_dir is not None:
        found = load_latest_checkpoint(checkpoint_dir, pack(model, opt_state, key, 0), log=message)
        if found is not None:
            state, start, meta = found
            if int(state["step"]) != start:
                raise ValueError(f"checkpoint step {int(state['step'])} != file step {start}.")
            want = np.asarray(ds(start), np.int64)
            if not np.array_equal(state["data"], want):
                raise ValueError(
                    f"checkpoint data-order state {state['data'].tolist()} does not match "
                    f"{want.tolist()} for step {start}: the batch size or data set changed."
                )
            model, opt_state = state["model"], state["opt_state"]
            key = jax.random.wrap_key_data(jnp.asarray(state["key"]))
            history = list(meta.get("history", []))
            cpu0, wall0 = float(meta.get("cpu_seconds", 0.0)), float(meta.get("wall_seconds", 0))
            resumed_from = start
            message(f"resuming from step {start} of {num_steps} ({checkpoint_dir})")
    if start > num_steps:
        raise ValueError(f"the checkpoint is at step {start}, beyond `num_steps`={num_steps}.")

    cpu_start, wall_start = time.process_time(), time.perf_counter()

    def elapsed():
        return cpu0 + time.process_time() - cpu_start, wall0 + time.perf_counter() - wall_start

    def record(entry):
        history.append(entry)
        if on_log is not None:
            on_log(entry)

    def checkpoint(step):
        if checkpoint_dir is None:
            return
        cpu, wall = elapsed()
        save_checkpoint(
            checkpoint_dir,
            step,
            pack(model, opt_state, key, step),
            keep=keep,
            meta={
                "cpu_seconds": cpu,
                "wall_seconds": wall,
                "history": history,
                "num_steps": num_steps,
            },
        )

    steps = range(start, num_steps)
    it = progress(steps, total=len(steps), desc=desc) if progress is not None else steps
    run_loss = run_acc = None
    for s in it:
        x, y = batch_fn(s)
        key, sub = jax.random.split(key)
        model, opt_state, loss, acc = step_fn(model, opt_state, jnp.asarray(x), jnp.asarray(y), sub)
        done = s + 1
        if done % log_every == 0 or done == num_steps:
            run_loss, run_acc = float(loss), float(acc)
            cpu, wall = elapsed()
            record(
                {
                    "step": done,
                    "loss": run_loss,
                    "train_accuracy": run_acc,
                    "cpu_seconds": cpu,
                    "wall_seconds": wall,
                }
            )
            if hasattr(it, "set_postfix"):  # a tqdm bar
                it.set_postfix(loss=f"{run_loss:.4f}", acc=f"{run_acc:.3f}", refresh=False)
        if eval_fn is not None and eval_every and done % eval_every == 0 and done != num_steps:
            record({"step": done, **{f"eval_{k}": v for k, v in eval_fn(model).items()}})
        if done % checkpoint_every == 0 or done == num_steps:
            checkpoint(done)
        if throttle:
            time.sleep(throttle)
    if hasattr(it, "close"):
        it.close()
    if eval_fn is not None and not any(
        h.get("step") == num_steps and any(k.startswith("eval_") for k in h) for h in history
    ):
        record({"step": num_steps, **{f"eval_{k}": v for k, v in eval_fn(model).items()}})
    cpu, wall = elapsed()
    return TrainResult(model, opt_state, key, num_steps, resumed_from, history, cpu, wall)

"""A character-level causal language model on the English text CPython ships
(``pydoc_data.topics``, ≈ 465 kB; no download), reported in bits per character.

- :func:`load_text_split`: the text (topics in sorted order, joined), its character
  vocabulary, and a train/validation split **by position** (the last
  ``val_fraction`` of the characters are the validation text);
- :func:`make_char_lm`: a causal continuous decoder: token + position embedding,
  N_t steps of a scheme whose attention is causal (:class:`~transflow.CausalScheme`),
  a per-token linear read-out; per-layer controls or a control path θ(t);
- :data:`DEPTH_TEXT` (:class:`DepthTextConfig`): the training task (random windows of
  the training text, next-character cross-entropy; validation bits per character on
  non-overlapping windows of the validation text), with the depth options of
  :data:`~transflow.control.DEPTH_DIGITS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ._tasks import _SMOKE_CAPS, _SMOKE_SET, DepthDigitsConfig, TrainingTask

__all__ = [
    "DEPTH_TEXT",
    "DepthTextConfig",
    "TextSplit",
    "bits_per_char",
    "load_text_split",
    "make_char_lm",
    "text_windows",
    "validation_windows",
]


class TextSplit(NamedTuple):
    """What :func:`load_text_split` returns: encoded train/validation characters and the
    vocabulary (``vocab[i]`` is the character of id i)."""

    train: np.ndarray
    val: np.ndarray
    vocab: str


def load_text_split(val_fraction: float = 0.1) -> TextSplit:
    """The ``pydoc_data.topics`` text as int32 character ids, split by position.

    Example:
        >>> from transflow.control import load_text_split
        >>> s = load_text_split(0.1)
        >>> len(s.vocab), len(s.train) + len(s.val) > 400_000, round(len(s.val) / 46_497)
        (103, True, 1)
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {val_fraction!r}.")
    from pydoc_data.topics import topics

    text = "".join(topics[k] for k in sorted(topics))
    vocab = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(vocab)}
    ids = np.fromiter((lookup[c] for c in text), np.int32, len(text))
    cut = int(round(len(ids) * (1 - val_fraction)))
    return TextSplit(ids[:cut], ids[cut:], vocab)


def text_windows(ids: np.ndarray, context: int, starts) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``ids[s : s + context]`` and next-character targets ``ids[s+1 : s+context+1]``
    for every start ``s``.

    Example:
        >>> import numpy as np
        >>> from transflow.control import text_windows
        >>> x, y = text_windows(np.arange(10), 3, [0, 5])
        >>> x.tolist(), y.tolist()
        ([[0, 1, 2], [5, 6, 7]], [[1, 2, 3], [6, 7, 8]])
    """
    starts = np.asarray(starts)
    offsets = np.arange(context)
    return ids[starts[:, None] + offsets], ids[starts[:, None] + offsets + 1]


def make_char_lm(
    *,
    vocab: int,
    context: int,
    d: int = 64,
    n_steps: int = 4,
    n_heads: int = 2,
    scheme=None,
    dt: float = 1.0,
    path: str | None = None,
    path_size: int | None = None,
    smooth_init: bool = True,
    remat: str = "step",
    dtype=None,
    key,
):
    """A causal character-level continuous decoder (a :class:`~transflow.control.FlowModel`).

    ``scheme`` (default :class:`~transflow.PreNormScheme`) is wrapped in
    :class:`~transflow.CausalScheme`; ``path``/``path_size``/``smooth_init`` as in
    :func:`~transflow.control.make_vit` (``None``: one set of controls per layer).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.control import make_char_lm
        >>> m = make_char_lm(vocab=5, context=4, d=8, n_steps=2, n_heads=1, path="legendre",
        ...                  key=jax.random.key(0))
        >>> logits = m(jnp.array([0, 1, 2, 3]))
        >>> logits.shape, bool(jnp.allclose(m(jnp.array([0, 1, 4, 4]))[:2], logits[:2]))
        ((4, 5), True)
    """
    import jax
    import jax.numpy as jnp

    from .. import CausalScheme, PreNormScheme
    from ..models._flow import FlowModel, TokenEmbedding, _layer_or_path_controls

    dtype = jnp.float32 if dtype is None else dtype
    k1, k2, k3, k4 = jax.random.split(key, 4)
    embed = TokenEmbedding(
        jax.random.normal(k1, (vocab, d), dtype), 0.1 * jax.random.normal(k2, (context, d), dtype)
    )
    controls = _layer_or_path_controls(
        d, n_steps, n_heads, None, dtype, k3, path, path_size, dt, smooth_init
    )
    scheme = PreNormScheme() if scheme is None else scheme
    return FlowModel(
        embed,
        controls,
        jax.random.normal(k4, (d, vocab), dtype) / float(np.sqrt(d)),
        jnp.zeros((vocab,), dtype),
        scheme if isinstance(scheme, CausalScheme) else CausalScheme(scheme),
        dt,
        "tokens",
        remat,
        None if path is None else n_steps,
    )


@dataclass
class DepthTextConfig(DepthDigitsConfig):
    """Character-level LM on ``pydoc_data.topics`` with the depth options of
    :class:`~transflow.control.DepthDigitsConfig` (``path``, ``path_size``,
    ``train_depths``, ``dt``, ``smoothness``, ``gradient``, ...); ``context`` characters
    per window, the last ``val_fraction`` of the text for validation, ``n_val``
    non-overlapping validation windows (evenly spaced over the validation text)."""

    d: int = 64
    context: int = 64
    val_fraction: float = 0.1
    n_val: int = 256
    steps: int = 1500
    batch_size: int = 32
    eval_every: int = 500
    train_depths: list = field(default_factory=list)


def bits_per_char(loss_nats: float) -> float:
    """Mean cross-entropy in nats → bits per character.

    Example:
        >>> from transflow.control import bits_per_char
        >>> round(bits_per_char(0.6931471805599453), 6)
        1.0
    """
    return float(loss_nats) / math.log(2)


def _setup_depth_text(cfg: DepthTextConfig, seed: int, key):
    import equinox as eqx
    import jax

    from ..continuous import PATH_KINDS
    from ._at_depth import depth_loss
    from ._tasks import Problem, _scheme
    from ._train import evaluate

    if cfg.path != "none" and cfg.path not in PATH_KINDS:
        raise ValueError(f"`path` must be 'none' or one of {PATH_KINDS}, got {cfg.path!r}.")
    split = load_text_split(cfg.val_fraction)
    model = make_char_lm(
        vocab=len(split.vocab),
        context=cfg.context,
        d=cfg.d,
        n_steps=cfg.n_steps,
        n_heads=cfg.n_heads,
        scheme=_scheme(cfg.scheme, cfg.ffn_branch_dt, cfg.relax_tau),
        dt=cfg.dt,
        path=None if cfg.path == "none" else cfg.path,
        path_size=cfg.path_size,
        smooth_init=cfg.smooth_init,
        remat=cfg.remat,
        key=key,
    )
    xv, yv = validation_windows(cfg, split)
    high = len(split.train) - cfg.context - 1

    def batch(step):
        rng = np.random.default_rng([seed, step])
        return text_windows(split.train, cfg.context, rng.integers(0, high, cfg.batch_size))

    def eval_fn(m):
        out = evaluate(m, xv, yv, batch_size=64)
        out["bpc"] = bits_per_char(out["loss"])
        return out

    depths = list(cfg.train_depths) or [cfg.n_steps]
    n_params = sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))
    return Problem(
        model,
        batch,
        eval_fn,
        None,
        {
            "n_params": int(n_params),
            "path": cfg.path,
            "vocab": len(split.vocab),
            "n_train_chars": len(split.train),
            "n_val_windows": len(xv),
        },
        depth_loss(
            depths,
            smoothness=cfg.smoothness,
            gradient=cfg.gradient,
            checkpoints=cfg.checkpoints,
            adjoint_solver=cfg.adjoint_solver,
        ),
    )


def validation_windows(cfg: DepthTextConfig, split: TextSplit | None = None):
    """The validation windows ``(x, y)`` of ``DEPTH_TEXT`` for ``cfg``: ``n_val``
    non-overlapping windows evenly spaced over the validation text.

    Example:
        >>> from transflow.control import DepthTextConfig, validation_windows
        >>> x, y = validation_windows(DepthTextConfig(context=16, n_val=8))
        >>> x.shape, bool((x[:, 1:] == y[:, :-1]).all())
        ((8, 16), True)
    """
    split = load_text_split(cfg.val_fraction) if split is None else split
    n_windows = (len(split.val) - 1) // cfg.context
    starts = np.linspace(0, n_windows - 1, min(cfg.n_val, n_windows)).astype(int) * cfg.context
    return text_windows(split.val, cfg.context, starts)


#: Character-level LM on ``pydoc_data.topics`` with controls θ(t) or per layer (issue 26;
#: ``experiment=depth``); its evaluation reports validation bits per character
#: (``eval_bpc``).
DEPTH_TEXT = TrainingTask(
    "depth_text",
    DepthTextConfig,
    _setup_depth_text,
    {**_SMOKE_CAPS, "n_steps": 2, "context": 16, "n_val": 32},
    _SMOKE_SET,
)

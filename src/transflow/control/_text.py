"""A character-level causal language model on text CPython ships (no download): the
English ``pydoc_data.topics`` (≈ 465 kB, the default) or the standard library's own
``.py`` files (``corpus="stdlib"``, ≈ 10 MB), reported in bits per character.

- :func:`load_text_split`: the text, its character vocabulary, and a train/validation
  split, **by position** for ``"pydoc"`` (the last ``val_fraction`` of the characters
  are the validation text), **by file** for ``"stdlib"`` (:func:`stdlib_files`);
- :func:`make_char_lm`: a causal continuous decoder: token + position embedding,
  N_t steps of a scheme whose attention is causal (:class:`~transflow.CausalScheme`),
  a per-token linear read-out; per-layer controls or a control path θ(t);
- :data:`DEPTH_TEXT` (:class:`DepthTextConfig`): the training task (random windows of
  the training text, next-character cross-entropy; validation bits per character on
  non-overlapping windows of the validation text), with the depth options of
  :data:`~transflow.control.DEPTH_DIGITS`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .._errors import check_builder, check_kind, check_number, check_sizes
from ._tasks import _SMOKE_CAPS, _SMOKE_SET, DepthDigitsConfig, TrainingTask

__all__ = [
    "CORPORA",
    "DEPTH_TEXT",
    "STDLIB_EXCLUDED_DIRS",
    "DepthTextConfig",
    "TextSplit",
    "bits_per_char",
    "load_text_split",
    "make_char_lm",
    "stdlib_files",
    "text_windows",
    "validation_windows",
]


class TextSplit(NamedTuple):
    """What :func:`load_text_split` returns: encoded train/validation characters and the
    vocabulary (``vocab[i]`` is the character of id i)."""

    train: np.ndarray
    val: np.ndarray
    vocab: str


#: The corpora of :func:`load_text_split`: ``"pydoc"`` (``pydoc_data.topics``, the
#: default) and ``"stdlib"`` (the standard library's own ``.py`` files).
CORPORA = ("pydoc", "stdlib")

#: Directories left out of the ``"stdlib"`` corpus (anywhere in a file's relative path):
#: installed third-party packages, the test suites (absent from some distributions'
#: CPython, and full of generated data), byte-code caches, ``encodings`` (≈ 100 generated
#: codec tables, near copies of each other: with them 12 % of all validation windows occur
#: verbatim in the training files, mostly table rows) and ``pydoc_data`` (the ``"pydoc"``
#: corpus itself: the two corpora stay disjoint).
STDLIB_EXCLUDED_DIRS = frozenset(
    {
        "site-packages",
        "dist-packages",
        "test",
        "tests",
        "idle_test",
        "__pycache__",
        "encodings",
        "pydoc_data",
    }
)


def load_text_split(
    val_fraction: float = 0.1, corpus: str = "pydoc", max_chars: int = 0
) -> TextSplit:
    """A corpus as int32 character ids with its vocabulary, split into train/validation.

    - ``corpus="pydoc"`` (default): the ``pydoc_data.topics`` text (topics in sorted
      order, joined), split **by position**: the last ``val_fraction`` of the characters
      are the validation text.
    - ``corpus="stdlib"``: the standard library's own ``.py`` files, split **by file**
      (:func:`stdlib_files`: a file is a validation file when a hash of its relative
      path falls below ``val_fraction``); each side is its files' text concatenated in
      sorted path order. It depends on the CPython version that runs it (3.11.7: 610
      files, 9.9 M characters).

    ``max_chars`` (0: no cap) caps the corpus: ``"pydoc"`` keeps its first ``max_chars``
    characters, ``"stdlib"`` whole files in a fixed pseudo-random order
    (:func:`stdlib_files`) while their total stays within ``max_chars``. The vocabulary
    is the sorted set of characters of the (capped) corpus, both sides.

    Example:
        >>> from transflow.control import load_text_split
        >>> s = load_text_split(0.1)
        >>> len(s.vocab), len(s.train) + len(s.val) > 400_000, round(len(s.val) / 46_497)
        (103, True, 1)
        >>> s = load_text_split(0.1, corpus="stdlib", max_chars=300_000)
        >>> 200_000 < len(s.train) + len(s.val) <= 300_000, len(s.val) < len(s.train)
        (True, True)
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {val_fraction!r}.")
    if corpus not in CORPORA:
        raise ValueError(
            f"`corpus` must be one of {CORPORA}, got {corpus!r}; "
            "'pydoc' is pydoc_data.topics, 'stdlib' the standard library's .py files."
        )
    if isinstance(max_chars, bool) or not isinstance(max_chars, int | np.integer):
        raise TypeError(f"`max_chars` must be an int (0: no cap), got {max_chars!r}.")
    if max_chars < 0:
        raise ValueError(f"`max_chars` must be >= 0 (0: no cap), got {max_chars}.")
    if corpus == "stdlib":
        return _stdlib_split(float(val_fraction), int(max_chars))
    from pydoc_data.topics import topics

    text = "".join(topics[k] for k in sorted(topics))
    if max_chars:
        text = text[:max_chars]
    vocab = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(vocab)}
    ids = np.fromiter((lookup[c] for c in text), np.int32, len(text))
    cut = int(round(len(ids) * (1 - val_fraction)))
    return TextSplit(ids[:cut], ids[cut:], vocab)


def _unit_hash(salt: str, name: str) -> float:
    """A number in [0, 1) fixed by ``salt`` and ``name`` (SHA-256; the same everywhere)."""
    digest = hashlib.sha256(f"{salt}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def stdlib_files(
    val_fraction: float = 0.1, max_chars: int = 0
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The ``"stdlib"`` corpus's files: ``(train, validation)``, each a sorted list of
    ``(path relative to the standard library, number of characters)``.

    The files are every ``*.py`` below ``sysconfig.get_paths()["stdlib"]`` outside
    :data:`STDLIB_EXCLUDED_DIRS`, read as UTF-8 (undecodable bytes replaced). The split
    is by file: ``path`` is a validation file when ``sha256("split/" + path)``, read as a
    number in [0, 1), is below ``val_fraction`` (a rule that does not depend on which
    other files exist). ``max_chars > 0`` keeps files in the order of
    ``sha256("order/" + path)`` while their total stays within ``max_chars`` (a sample
    of the whole library, not its first packages alphabetically).

    Example:
        >>> from transflow.control import stdlib_files
        >>> train, val = stdlib_files(0.1, max_chars=200_000)
        >>> sum(n for _, n in train + val) <= 200_000, set(train).isdisjoint(val)
        (True, True)
        >>> train == sorted(train), any(p.startswith("test/") for p, _ in train)
        (True, False)
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {val_fraction!r}.")
    check_number("max_chars", max_chars, "stdlib_files", lower=0, strict=False, integer=True)
    texts = _stdlib_texts()
    names = sorted(texts)
    if max_chars:
        kept, total = [], 0
        for name in sorted(names, key=lambda n: (_unit_hash("order", n), n)):
            if total + len(texts[name]) > max_chars:
                break
            kept.append(name)
            total += len(texts[name])
        names = sorted(kept)
    train, val = [], []
    for name in names:
        side = val if _unit_hash("split", name) < val_fraction else train
        side.append((name, len(texts[name])))
    return train, val


@functools.lru_cache(maxsize=1)
def _stdlib_texts() -> dict[str, str]:
    """Relative path → text of every ``.py`` file of the ``"stdlib"`` corpus (read once)."""
    import sysconfig

    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if STDLIB_EXCLUDED_DIRS.isdisjoint(rel.parts[:-1]) and path.is_file():
            out[rel.as_posix()] = path.read_bytes().decode("utf-8", errors="replace")
    if not out:
        raise FileNotFoundError(f"no .py files below the standard library {root}.")
    return out


@functools.lru_cache(maxsize=4)
def _stdlib_split(val_fraction: float, max_chars: int) -> TextSplit:
    """The ``"stdlib"`` split (cached: the text tasks load it once per window set)."""
    train_files, val_files = stdlib_files(val_fraction, max_chars)
    texts = _stdlib_texts()
    train = "".join(texts[p] for p, _ in train_files)
    val = "".join(texts[p] for p, _ in val_files)
    if not train or not val:
        raise ValueError(
            f"the stdlib corpus with `max_chars`={max_chars} and `val_fraction`="
            f"{val_fraction} has an empty {'training' if not train else 'validation'} side; "
            "raise `max_chars` (0: no cap)."
        )
    codes = np.frombuffer((train + val).encode("utf-32-le"), np.uint32)
    present = np.flatnonzero(np.bincount(codes))
    lookup = np.zeros(int(present[-1]) + 1, np.int32)
    lookup[present] = np.arange(len(present), dtype=np.int32)
    ids = lookup[codes]
    ids.setflags(write=False)
    vocab = "".join(map(chr, present))
    return TextSplit(ids[: len(train)], ids[len(train) :], vocab)


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
    check_sizes("text_windows", context=context)
    starts = np.asarray(starts)
    if starts.dtype.kind not in "iu" or starts.ndim != 1:
        raise TypeError(f"text_windows: `starts` must be a 1-D array of integers, got {starts!r}.")
    if starts.size and (starts.min() < 0 or starts.max() + context + 1 > len(ids)):
        raise ValueError(
            f"text_windows: `starts` must lie in [0, len(ids) - context - 1] = "
            f"[0, {len(ids) - context - 1}], got {starts.min()}..{starts.max()}."
        )
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
    activation: str = "relu",
    theta_at: str = "nodes",
    dtype=None,
    key,
):
    """A causal character-level continuous decoder (a :class:`~transflow.control.FlowModel`).

    ``scheme`` (default :class:`~transflow.PreNormScheme`) is wrapped in
    :class:`~transflow.CausalScheme`; ``path``/``path_size``/``smooth_init``/``activation``/
    ``theta_at`` as in :func:`~transflow.control.make_vit` (``None``: one set of controls
    per layer).

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
    from .._activations import activation_fn
    from ..models._flow import FlowModel, TokenEmbedding, _ffn_copies, _layer_or_path_controls
    from ..schemes._base import AbstractCausal, has

    check_builder(
        "make_char_lm",
        dt=dt,
        key=key,
        vocab=vocab,
        context=context,
        d=d,
        n_steps=n_steps,
        n_heads=n_heads,
        path_size=path_size,
    )
    activation_fn(activation)  # refuses an unknown name, naming `activation`
    dtype = jnp.float32 if dtype is None else dtype
    k1, k2, k3, k4 = jax.random.split(key, 4)
    embed = TokenEmbedding(
        jax.random.normal(k1, (vocab, d), dtype), 0.1 * jax.random.normal(k2, (context, d), dtype)
    )
    scheme = PreNormScheme() if scheme is None else scheme
    controls = _layer_or_path_controls(
        d,
        n_steps,
        n_heads,
        None,
        dtype,
        k3,
        path,
        path_size,
        dt,
        smooth_init,
        _ffn_copies(scheme),
        activation,
    )
    return FlowModel(
        embed,
        controls,
        jax.random.normal(k4, (d, vocab), dtype) / float(np.sqrt(d)),
        jnp.zeros((vocab,), dtype),
        scheme if has(scheme, AbstractCausal) else CausalScheme(scheme),
        dt,
        "tokens",
        remat,
        None if path is None else n_steps,
        theta_at=theta_at,
    )


@dataclass
class DepthTextConfig(DepthDigitsConfig):
    """Character-level LM on ``pydoc_data.topics`` with the depth options of
    :class:`~transflow.control.DepthDigitsConfig` (``path``, ``path_size``,
    ``train_depths``, ``dt``, ``smoothness``, ``gradient``, ...); ``context`` characters
    per window, the last ``val_fraction`` of the text for validation, ``n_val``
    non-overlapping validation windows (evenly spaced over the validation text).
    ``corpus``: ``"pydoc"`` (default) or ``"stdlib"`` (the standard library's ``.py``
    files, split by file), ``max_chars`` its size cap (0: none); see
    :func:`~transflow.control.load_text_split`."""

    d: int = 64
    context: int = 64
    val_fraction: float = 0.1
    n_val: int = 256
    steps: int = 1500
    batch_size: int = 32
    eval_every: int = 500
    train_depths: list = field(default_factory=list)
    corpus: str = "pydoc"  # "pydoc" | "stdlib" (CORPORA)
    max_chars: int = 0  # cap on the corpus's characters; 0: the whole corpus

    def _rules(self) -> dict[str, Any]:
        return {
            **super()._rules(),
            "context": "size",
            "val_fraction": "fraction",
            "n_val": "size",
            "corpus": CORPORA,
            "max_chars": "count",
        }


def bits_per_char(loss_nats: float) -> float:
    """Mean cross-entropy in nats → bits per character.

    Example:
        >>> from transflow.control import bits_per_char
        >>> round(bits_per_char(0.6931471805599453), 6)
        1.0
    """
    check_number("loss_nats", loss_nats, "bits_per_char", lower=0, strict=False, example="1.2")
    return float(loss_nats) / math.log(2)


def _setup_depth_text(cfg: DepthTextConfig, seed: int, key):
    import equinox as eqx
    import jax

    from ._at_depth import depth_loss
    from ._tasks import Problem, _scheme
    from ._train import evaluate

    split = load_text_split(cfg.val_fraction, cfg.corpus, cfg.max_chars)
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
        activation=cfg.activation,
        theta_at=cfg.theta_at,
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
    check_kind("cfg", cfg, DepthTextConfig, "validation_windows", "DepthTextConfig(...)")
    if split is not None:
        check_kind("split", split, TextSplit, "validation_windows", "load_text_split(...)")
    if split is None:
        split = load_text_split(cfg.val_fraction, cfg.corpus, cfg.max_chars)
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

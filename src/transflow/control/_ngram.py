"""Character n-gram count baselines for the text task (issue 37): what a language model
of :data:`~transflow.control.DEPTH_TEXT` has to beat.

- :class:`CharNgram`: interpolated Kneser–Ney character models of every order up to
  ``max_order`` (default 5), fitted on the training text by counting;
- :func:`window_overlap`: the fraction of validation windows that occur verbatim in the
  training text;
- :func:`text_baselines`: both on exactly the validation windows a
  :class:`~transflow.control.DepthTextConfig` run is scored on, and
  :func:`baselines_table`, the markdown table the experiments put in their reports.

The smoothing is interpolated Kneser–Ney (Kneser & Ney 1995, in the interpolated form of
Chen & Goodman 1999; one discount per order): for a context h of length k − 1 (suffix
h' of length k − 2) ::

    P_k(c | h) = max(N_k(h c) − D_k, 0) / N_k(h ·) + D_k T_k(h ·) / N_k(h ·) · P_{k−1}(c | h')

with ``P_0(c) = 1 / V`` over the whole vocabulary, ``P_k = P_{k−1}`` for a context
never seen in training, ``T_k(h ·)`` the number of distinct characters seen after h.
``N_k`` are the raw counts at the order that is queried and the *continuation* counts
(the number of distinct characters seen before the k-gram) at the orders below it.
The discount of each table is Ney's closed form ``D = n₁ / (n₁ + 2 n₂)`` from its
count-of-counts (n_r: k-grams seen exactly r times; 0.5 where n₁ or n₂ is 0, e.g. the
unigram table of a large text), so nothing is fitted on held-out text and the
validation text is never used.

Context handling matches the neural models: a window is scored on its own, so the
target at position i of a window (the (i+2)-th character) is predicted from the i + 1
characters of the window before it; it is scored by the model of order
min(order, i + 2) (raw counts at that order). A model of order n therefore sees the
same characters the causal network does, at most n − 1 of them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["CharNgram", "baselines_table", "text_baselines", "window_overlap"]


class _Table:
    """Sorted k-gram keys with their counts, and the per-context totals and types."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray, vocab: int, discount=None):
        self.keys, self.counts = keys, counts.astype(np.float64)
        ctx = keys // vocab
        self.ctx, first, types = np.unique(ctx, return_index=True, return_counts=True)
        self.ctx_total = np.add.reduceat(self.counts, first) if len(keys) else self.counts
        self.ctx_types = types.astype(np.float64)
        if discount is None:
            n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
            # Ney's estimate; 0.5 when n1 or n2 is 0 (e.g. unigrams: no rare character)
            discount = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5
        self.discount = float(discount)

    @staticmethod
    def _find(sorted_keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
        if len(sorted_keys) == 0:
            return np.zeros(query.shape, np.float64)
        i = np.minimum(np.searchsorted(sorted_keys, query), len(sorted_keys) - 1)
        return np.where(sorted_keys[i] == query, values[i], 0.0)


class CharNgram:
    """Interpolated Kneser–Ney character n-gram models of orders 1…``max_order``, fitted
    by counting the k-grams of ``train`` (int character ids below ``vocab``).

    One fit serves every order up to ``max_order``: :meth:`prob`, :meth:`distribution`
    and :meth:`bits_per_char` take the ``order`` to use. ``discount`` (a float in (0, 1))
    replaces Ney's per-table estimate ``n₁ / (n₁ + 2 n₂)`` (0.5 where n₁ or n₂ is 0) by
    one discount for every table; the fitted ones are in :attr:`discounts`.

    Example:
        >>> import numpy as np
        >>> from transflow.control import CharNgram
        >>> m = CharNgram(np.array([0, 1, 0, 1, 0, 1, 0, 2]), vocab=3, max_order=3)
        >>> p = m.distribution([0, 1], order=3)
        >>> p.shape, round(float(p.sum()), 12), int(p.argmax())
        ((3,), 1.0, 0)
        >>> x, y = np.array([[0, 1, 0]]), np.array([[1, 0, 1]])  # one window "aba" → "bab"
        >>> [round(m.bits_per_char(x, y, order=k), 4) for k in (1, 2)]
        [1.2767, 0.3883]
    """

    def __init__(
        self, train, vocab: int, max_order: int = 5, *, discount: float | None = None
    ) -> None:
        train = np.asarray(train)
        if train.ndim != 1 or not np.issubdtype(train.dtype, np.integer):
            raise TypeError(
                f"`train` must be a 1-D array of int character ids, got dtype {train.dtype} "
                f"and shape {train.shape}."
            )
        if isinstance(vocab, bool) or not isinstance(vocab, int | np.integer) or vocab < 1:
            raise ValueError(f"`vocab` must be an int >= 1 (the alphabet size), got {vocab!r}.")
        if isinstance(max_order, bool) or not isinstance(max_order, int | np.integer):
            raise TypeError(f"`max_order` must be an int >= 1, got {max_order!r}.")
        if max_order < 1:
            raise ValueError(f"`max_order` must be >= 1 (1: unigram), got {max_order}.")
        if float(vocab) ** (max_order + 1) >= 2.0**62:
            raise ValueError(
                f"`max_order`={max_order} with `vocab`={vocab}: the k-gram keys would overflow "
                "int64; use a lower `max_order`."
            )
        if len(train) < max_order:
            raise ValueError(
                f"`train` has {len(train)} characters, fewer than `max_order`={max_order}."
            )
        if len(train) and (train.min() < 0 or train.max() >= vocab):
            raise ValueError(
                f"`train` ids must be in [0, vocab={vocab}), got [{train.min()}, {train.max()}]."
            )
        if discount is not None and not 0 < discount < 1:
            raise ValueError(f"`discount` must be in (0, 1) or None, got {discount!r}.")
        self.vocab, self.max_order = int(vocab), int(max_order)
        ids = train.astype(np.int64)
        v = np.int64(vocab)
        self._raw: dict[int, _Table] = {}
        self._cont: dict[int, _Table] = {}
        uniq: dict[int, np.ndarray] = {}
        key = np.zeros(len(ids), np.int64)
        for k in range(1, self.max_order + 1):
            key = key[:-1] * v + ids[k - 1 :] if k > 1 else ids.copy()
            keys, counts = np.unique(key, return_counts=True)
            uniq[k] = keys
            self._raw[k] = _Table(keys, counts, self.vocab, discount)
        for k in range(1, self.max_order):
            # N1+(· w): the distinct characters seen before w = the (k+1)-grams ending in w
            keys, counts = np.unique(uniq[k + 1] % v**k, return_counts=True)
            self._cont[k] = _Table(keys, counts, self.vocab, discount)

    @property
    def discounts(self) -> dict[str, list[float]]:
        """The discounts per order: ``{"raw": [D_1, …], "continuation": [D_1, …]}``."""
        return {
            "raw": [self._raw[k].discount for k in sorted(self._raw)],
            "continuation": [self._cont[k].discount for k in sorted(self._cont)],
        }

    def _check_order(self, order: int) -> int:
        if isinstance(order, bool) or not isinstance(order, int | np.integer):
            raise TypeError(f"`order` must be an int in [1, {self.max_order}], got {order!r}.")
        if not 1 <= order <= self.max_order:
            raise ValueError(
                f"`order` must be in [1, max_order={self.max_order}], got {order}; fit with a "
                "larger `max_order` for higher orders."
            )
        return int(order)

    def prob(self, history, target, order: int) -> np.ndarray:
        """``P(target | history)`` of the model of order ``order`` (raw counts at that
        order, continuation counts below it), vectorised over rows.

        ``history``: int array ``(M, order − 1)`` (the preceding characters, most recent
        last); ``target``: int array ``(M,)``. Returns float64 ``(M,)``.
        """
        order = self._check_order(order)
        target = np.atleast_1d(np.asarray(target, np.int64))
        hist = np.asarray(history, np.int64)
        if hist.size == 0:
            hist = hist.reshape(len(target), 0)
        if hist.shape != (len(target), order - 1):
            raise ValueError(
                f"`history` must have shape (len(target), order − 1) = "
                f"({len(target)}, {order - 1}), got {hist.shape}."
            )
        for name, a in (("history", hist), ("target", target)):
            if a.size and (a.min() < 0 or a.max() >= self.vocab):
                raise ValueError(
                    f"`{name}` ids must be in [0, vocab={self.vocab}), got [{a.min()}, {a.max()}]."
                )
        v = np.int64(self.vocab)
        p = np.full(len(target), 1.0 / self.vocab)
        for k in range(1, order + 1):
            table = self._raw[k] if k == order else self._cont[k]
            ctx = np.zeros(len(target), np.int64)
            for j in range(order - k, order - 1):  # the last k − 1 characters
                ctx = ctx * v + hist[:, j]
            total = table._find(table.ctx, table.ctx_total, ctx)
            types = table._find(table.ctx, table.ctx_types, ctx)
            count = table._find(table.keys, table.counts, ctx * v + target)
            d = table.discount
            seen = total > 0
            safe = np.where(seen, total, 1.0)
            p = np.where(seen, (np.maximum(count - d, 0.0) + d * types * p) / safe, p)
        return p

    def distribution(self, history, order: int) -> np.ndarray:
        """The model's distribution over the whole vocabulary after ``history`` (its last
        ``order − 1`` characters are used; fewer: the model of order ``len + 1``)."""
        order = self._check_order(order)
        hist = [int(c) for c in history][-(order - 1) :] if order > 1 else []
        m = len(hist) + 1
        rows = np.tile(np.asarray(hist, np.int64), (self.vocab, 1)).reshape(self.vocab, m - 1)
        return self.prob(rows, np.arange(self.vocab), m)

    def log2_probs(self, x, y, order: int) -> np.ndarray:
        """``log₂ P(y[w, i] | x[w, : i + 1])`` for windows ``x``/``y`` of shape ``(W, L)``
        (as :func:`~transflow.control.text_windows` forms them), each window scored on
        its own with at most ``order − 1`` characters of history."""
        order = self._check_order(order)
        x, y = np.asarray(x, np.int64), np.asarray(y, np.int64)
        if x.ndim != 2 or x.shape != y.shape or x.size == 0:
            raise ValueError(
                f"`x` and `y` must be non-empty (windows, length) arrays of one shape, got "
                f"{x.shape} and {y.shape}."
            )
        out = np.empty(x.shape, np.float64)
        n_win, length = x.shape
        start = min(max(order - 2, 0), length)  # from here on: order − 1 characters of history
        for i in range(start):  # i + 1 characters of history: the model of order i + 2
            out[:, i] = np.log2(self.prob(x[:, : i + 1], y[:, i], i + 2))
        if length > start:
            if order > 1:
                hist = np.lib.stride_tricks.sliding_window_view(x, order - 1, axis=1)
            else:
                hist = np.zeros((n_win, length, 0), np.int64)
            rows = n_win * (length - start)
            p = self.prob(hist.reshape(rows, order - 1), y[:, start:].ravel(), order)
            out[:, start:] = np.log2(p).reshape(n_win, length - start)
        return out

    def bits_per_char(self, x, y, order: int) -> float:
        """Mean ``−log₂ P`` over every target of the windows ``x``/``y`` (bits per
        character, as :func:`~transflow.control.bits_per_char` of the network's mean
        cross-entropy on the same windows)."""
        return float(-self.log2_probs(x, y, order).mean())


def window_overlap(train, windows) -> float:
    """The fraction of the rows of ``windows`` (int ids, ``(W, L)``) that occur verbatim
    (as L consecutive characters) somewhere in ``train``.

    Example:
        >>> import numpy as np
        >>> from transflow.control import window_overlap
        >>> window_overlap(np.array([1, 2, 3, 4, 5]), np.array([[2, 3], [3, 5], [4, 5]]))
        0.6666666666666666
    """
    train = np.asarray(train)
    windows = np.asarray(windows)
    if windows.ndim != 2 or len(windows) == 0:
        raise ValueError(f"`windows` must be a non-empty (W, L) array, got shape {windows.shape}.")
    for name, a in (("train", train), ("windows", windows)):
        if not np.issubdtype(a.dtype, np.integer) or (a.size and a.min() < 0):
            raise ValueError(f"`{name}` must hold non-negative int ids, got {a.dtype}.")

    length = windows.shape[1]
    if len(train) < length:
        return 0.0
    # Every length-L substring of train by a polynomial hash mod 2⁶⁴ (prefix sums of
    # (id + 1)·B⁻ʲ, vectorised), then an exact comparison with the candidates of equal
    # hash: a collision cannot make a window count as found.
    base = 0x9E3779B97F4A7C15  # odd: invertible mod 2⁶⁴
    inv = pow(base, -1, 2**64)
    t = train.astype(np.uint64) + np.uint64(1)
    n = len(t)
    inv_pow = np.cumprod(np.full(n, inv, np.uint64))
    inv_pow = np.concatenate([np.ones(1, np.uint64), inv_pow[:-1]])  # B⁻ʲ
    base_pow = np.cumprod(np.full(n - length + 1, base, np.uint64))
    base_pow = np.concatenate([np.ones(1, np.uint64), base_pow[:-1]])  # Bⁱ
    prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum(t * inv_pow, dtype=np.uint64)])
    train_hash = (prefix[length:] - prefix[:-length]) * base_pow  # Σ_j t[i+j] B⁻ʲ
    order = np.argsort(train_hash, kind="stable")
    sorted_hash = train_hash[order]
    w = windows.astype(np.uint64) + np.uint64(1)
    win_hash = (w * inv_pow[:length]).sum(axis=1, dtype=np.uint64)
    lo = np.searchsorted(sorted_hash, win_hash, "left")
    hi = np.searchsorted(sorted_hash, win_hash, "right")
    found = [
        any(np.array_equal(train[i : i + length], row) for i in order[a:b])
        for row, a, b in zip(windows, lo, hi)
    ]
    return float(np.mean(found))


def text_baselines(cfg=None, orders=(1, 2, 3, 4, 5)) -> dict[str, Any]:
    """n-gram baselines of the text task for ``cfg`` (a
    :class:`~transflow.control.DepthTextConfig`; default: the default one): the
    interpolated Kneser–Ney models (:class:`CharNgram`) of ``orders`` fitted on the
    training text of ``cfg``'s corpus and split, scored in bits per character on the
    validation windows the network is scored on
    (:func:`~transflow.control.validation_windows`), and the train/validation overlap
    of those windows (:func:`window_overlap`, windows of ``cfg.context`` characters).

    Returns ``{"orders", "bpc" (one per order), "overlap", "corpus", "context",
    "n_val_windows", "n_train_chars", "n_val_chars", "vocab", "seconds"}``.

    Example:
        >>> from transflow.control import DepthTextConfig, text_baselines
        >>> b = text_baselines(DepthTextConfig(context=16, n_val=32), orders=(1, 3))
        >>> b["orders"], b["bpc"][0] > b["bpc"][1] > 1.0, 0.0 <= b["overlap"] <= 1.0
        ([1, 3], True, True)
    """
    from .._errors import check_kind, check_sequence
    from ._text import DepthTextConfig, load_text_split, validation_windows

    if cfg is not None:
        check_kind("cfg", cfg, DepthTextConfig, "text_baselines", "DepthTextConfig(...) or None")
    cfg = DepthTextConfig() if cfg is None else cfg
    orders = check_sequence("orders", orders, "text_baselines", example="(1, 2, 3)")
    if not orders or min(orders) < 1:
        raise ValueError(f"`orders` must be non-empty orders >= 1, got {orders!r}.")
    t0 = time.perf_counter()
    split = load_text_split(cfg.val_fraction, cfg.corpus, cfg.max_chars)
    x, y = validation_windows(cfg, split)
    model = CharNgram(split.train, len(split.vocab), max(orders))
    return {
        "orders": orders,
        "bpc": [model.bits_per_char(x, y, o) for o in orders],
        "overlap": window_overlap(split.train, x),
        "corpus": cfg.corpus,
        "context": int(cfg.context),
        "n_val_windows": len(x),
        "n_train_chars": len(split.train),
        "n_val_chars": len(split.val),
        "vocab": len(split.vocab),
        "seconds": time.perf_counter() - t0,
    }


def baselines_table(b: dict[str, Any]) -> str:
    """A markdown table of :func:`text_baselines`' result.

    Example:
        >>> from transflow.control import baselines_table
        >>> print(baselines_table({"orders": [1, 2], "bpc": [4.5, 3.25], "overlap": 0.08,
        ...     "corpus": "pydoc", "context": 64, "n_val_windows": 256,
        ...     "n_train_chars": 1000, "vocab": 90}).splitlines()[4])
        | 4.5000 | 3.2500 | 8.0 % |
    """
    head = " | ".join(f"{o}-gram" for o in b["orders"])
    return (
        f"Text baselines ({b['corpus']}, {b['n_train_chars']} training characters, "
        f"vocabulary {b['vocab']}): interpolated Kneser–Ney character n-grams fitted on the "
        f"training text, validation bits per character on the same {b['n_val_windows']} "
        f"windows of {b['context']} characters as the models above; overlap: the fraction "
        "of those windows found verbatim in the training text.\n\n"
        f"| {head} | overlap |\n|{'---|' * (len(b['orders']) + 1)}\n"
        f"| {' | '.join(f'{v:.4f}' for v in b['bpc'])} | {100 * b['overlap']:.1f} % |"
    )

"""Data for the training tasks, with a data order that is a pure function of (seed, step).

A resumed run must see exactly the batches an uninterrupted run sees. Every batch is
therefore computed from the seed and the global step alone: epoch e uses the permutation
``numpy.random.default_rng([seed, e]).permutation(n)``; step s takes the slice
``(s mod steps_per_epoch)`` of epoch ``s // steps_per_epoch`` (the last incomplete batch
of an epoch is dropped). The data-order state saved in a checkpoint is ``(epoch,
position)``; it is checked against the step on resume.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._errors import check_number, check_sizes

#: The targets of :func:`sequence_batch` (and ``SequenceConfig.kind``).
SEQUENCE_KINDS = ("sort", "reverse")

__all__ = ["EpochOrder", "load_digits_split", "sequence_batch"]


@dataclass(frozen=True)
class EpochOrder:
    """Deterministic mini-batch order over ``n`` examples.

    Example:
        >>> order = EpochOrder(n=10, batch_size=4, seed=0)
        >>> order.steps_per_epoch, order.state(5)
        (2, (2, 1))
        >>> order.indices(5).shape
        (4,)
    """

    n: int
    batch_size: int
    seed: int

    def __post_init__(self):
        check_number("n", self.n, "EpochOrder", lower=0, integer=True, example="1000")
        check_number(
            "batch_size", self.batch_size, "EpochOrder", lower=0, integer=True, example="64"
        )
        check_number("seed", self.seed, "EpochOrder", integer=True, example="0")
        if not 1 <= self.batch_size <= self.n:
            raise ValueError(f"`batch_size` must be in [1, n={self.n}], got {self.batch_size}.")

    @property
    def steps_per_epoch(self) -> int:
        return self.n // self.batch_size

    def state(self, step: int) -> tuple[int, int]:
        """The data-order state ``(epoch, position)`` before global step ``step``."""
        return divmod(int(step), self.steps_per_epoch)

    def permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.n)

    def indices(self, step: int) -> np.ndarray:
        epoch, pos = self.state(step)
        b = self.batch_size
        return self.permutation(epoch)[pos * b : (pos + 1) * b]


def load_digits_split(test_fraction: float = 0.2, *, seed: int = 0):
    """The scikit-learn handwritten digits (1797 images, 8×8, 10 classes), split.

    Pixels are scaled from [0, 16] to [0, 1]. The split is stratified by class and
    depends on ``seed`` only. Returns ``(x_train, y_train, x_test, y_test)`` as NumPy
    arrays, images of shape ``(8, 8)`` in float32 and labels in int32.
    """
    if not 0 < test_fraction < 1:
        raise ValueError(f"`test_fraction` must be in (0, 1), got {test_fraction}.")
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    rng = np.random.default_rng([seed, 12345])
    test = np.zeros(len(y), bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        k = int(round(test_fraction * len(idx)))
        test[rng.choice(idx, k, replace=False)] = True
    return x[~test], y[~test], x[test], y[test]


def sequence_batch(
    kind: str,
    batch_size: int,
    length: int,
    vocab: int,
    *,
    seed: int,
    step: int,
    split: str = "train",
) -> tuple[np.ndarray, np.ndarray]:
    """A batch of a synthetic sequence task, a pure function of ``(seed, step)``.

    - ``"sort"``: input a random sequence over ``{0..vocab-1}``, target the sorted
      sequence (position i must find the i-th order statistic: needs attention over all
      tokens).
    - ``"reverse"``: target the input read backwards.

    ``split="test"`` draws from a stream disjoint from every training step.

    Returns ``(tokens, targets)``, both int32 of shape ``(batch_size, length)``.
    """
    if kind not in SEQUENCE_KINDS:
        raise ValueError(f"`kind` must be one of {SEQUENCE_KINDS}, got {kind!r}.")
    check_sizes("sequence_batch", batch_size=batch_size, length=length, vocab=vocab)
    if split not in ("train", "test"):
        raise ValueError(f"`split` must be 'train' or 'test', got {split!r}.")
    if step < 0:
        raise ValueError(f"`step` must be >= 0, got {step}.")
    rng = np.random.default_rng([seed, 777, int(split == "test"), step])
    x = rng.integers(0, vocab, size=(batch_size, length)).astype(np.int32)
    y = np.sort(x, axis=1) if kind == "sort" else x[:, ::-1].copy()
    return x, y.astype(np.int32)

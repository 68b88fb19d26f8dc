"""Batched float evaluation of a model, shared by the float counters (``_regions``) and the
certified point walk (``_certify``): kernels run over numpy batches in padded chunks of one
fixed size (one compilation per kernel and model structure), and activation patterns are
hashed to 64-bit keys."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ._budget import check_budget

__all__ = ["CHUNK", "batched", "combine", "hash_coeffs", "pattern_hash"]

# one fixed batch size: one compilation per kernel and model structure; small enough to
# stay in cache on CPU (larger batches were slower per point).
CHUNK = 2048


def hash_coeffs(n: int) -> np.ndarray:
    """``(n, 2)`` odd uint32 coefficients of two independent linear hashes of a pattern."""
    rng = np.random.default_rng(0x5EED)
    return (rng.integers(0, 2**31, size=(n, 2), dtype=np.int64) * 2 + 1).astype(np.uint32)


def pattern_hash(pats, coeffs):
    """Two independent 32-bit linear hashes of the pattern (wrapping uint32 arithmetic)."""
    return pats.astype(jnp.uint32) @ coeffs


def combine(h: np.ndarray) -> np.ndarray:
    """The two 32-bit hashes ``(N, 2)`` as one uint64 key per row."""
    h = h.astype(np.uint64)
    return (h[:, 0] << np.uint64(32)) | h[:, 1]


def batched(kernel, f, xs, *extra, what: str = "float evaluation"):
    """``kernel(f, *chunks, *extra)`` over the rows of ``xs`` (an array, or a tuple of arrays
    with the same number of rows) in chunks of :data:`CHUNK` rows (the last one padded),
    the outputs concatenated; ``what`` names the step for the time budget."""
    xs = [np.asarray(x) for x in (xs if isinstance(xs, tuple) else (xs,))]
    n = xs[0].shape[0]
    outs = []
    for start in range(0, max(n, 1), CHUNK):
        check_budget(what)
        parts = []
        for x in xs:
            part = x[start : start + CHUNK]
            k = part.shape[0]
            if k < CHUNK:
                part = np.concatenate([part, np.repeat(part[:1], CHUNK - k, axis=0)])
            parts.append(jnp.asarray(part))
        k = min(CHUNK, n - start)
        res = kernel(f, *parts, *extra)
        outs.append(jax.tree.map(lambda a, k=k: np.asarray(a)[:k], res))
    return jax.tree.map(lambda *a: np.concatenate(a), *outs)

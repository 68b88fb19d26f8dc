"""Peak memory of one training gradient against the number of steps N (issue 26).

:func:`gradient_peak_rss` runs one gradient of the mean cross-entropy of a digits path
model (Legendre K = 4, pre-LN, as ``experiment=depth``) on a batch of random images in a
**fresh Python process** and returns that process's peak resident set size
(``VmHWM`` of ``/proc/self/status``, the high-water mark of its own address space;
``ru_maxrss`` elsewhere, which on Linux inherits the parent's peak across exec), so
that nothing from an earlier measurement (compiled programs, allocator caches) is
counted. ``gradient`` is one of
:data:`~transflow.control.GRADIENTS`: ``"backprop"`` stores a state per step (the model's
``FlowModel.remat="step"``), ``"checkpointed"`` and ``"adjoint"`` do not.
"""

from __future__ import annotations

import json
import subprocess
import sys

__all__ = ["gradient_peak_rss"]


def gradient_peak_rss(
    n_steps: int,
    *,
    gradient: str = "adjoint",
    batch_size: int = 256,
    d: int = 32,
    checkpoints: int = 4,
    timeout: float = 900.0,
) -> dict:
    """Peak RSS (bytes) of a fresh process that computes one gradient with ``n_steps``.

    Returns ``{"n_steps", "gradient", "batch_size", "d", "peak_rss_bytes",
    "grad_seconds", "grad_norm"}`` as measured in the child process
    (``python -m transflow.control._memory_child``); ``grad_norm`` lets callers check that the
    gradients of two mechanisms agree.

    Example:
        >>> from transflow.control import gradient_peak_rss
        >>> r = gradient_peak_rss(2, gradient="checkpointed", batch_size=2, d=8)
        >>> r["peak_rss_bytes"] > 10_000_000, r["n_steps"]
        (True, 2)
    """
    from .._errors import check_number, check_sizes
    from ._at_depth import _check_gradient

    _check_gradient(gradient, checkpoints)
    check_sizes("gradient_peak_rss", n_steps=n_steps, batch_size=batch_size, d=d)
    check_number("timeout", timeout, "gradient_peak_rss", lower=0, example="900.0")
    args = [str(a) for a in (n_steps, gradient, batch_size, d, checkpoints)]
    out = subprocess.run(
        [sys.executable, "-m", "transflow.control._memory_child", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the measurement process failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])

"""The child process of :func:`transflow.control.gradient_peak_rss` (one gradient, then its
peak RSS as JSON on stdout): ``python -m transflow.control._memory_child N GRADIENT B D C``.
Not imported by ``transflow.control``, so ``-m`` runs it fresh.
"""

from __future__ import annotations

import json
import sys


def _child(n_steps: int, gradient: str, batch_size: int, d: int, checkpoints: int) -> dict:
    import resource
    import time

    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from transflow import PreNormScheme
    from transflow.control._at_depth import depth_loss
    from transflow.models._flow import make_vit

    model = make_vit(
        d=d,
        n_steps=n_steps,
        n_heads=2,
        path="legendre",
        path_size=4,
        scheme=PreNormScheme(),
        dt=0.2 / n_steps,
        remat="step",
        smooth_init=False,
        key=jax.random.key(0),
    )
    x = jax.random.uniform(jax.random.key(1), (batch_size, 8, 8))
    y = jax.random.randint(jax.random.key(2), (batch_size,), 0, 10)
    loss = depth_loss([n_steps], gradient=gradient, checkpoints=checkpoints)
    grad = eqx.filter_jit(eqx.filter_grad(lambda m: loss(m, x, y)[0]))
    start = time.perf_counter()
    g = grad(model)
    leaves = [jnp.ravel(a) for a in jax.tree.leaves(eqx.filter(g, eqx.is_inexact_array))]
    norm = float(jnp.linalg.norm(jnp.concatenate(leaves)))
    seconds = time.perf_counter() - start
    # VmHWM: the peak RSS of this process's own address space. ru_maxrss is not used
    # where VmHWM exists: Linux carries the parent's peak over exec into it, so a child of
    # a large process would report the parent's size.
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    try:
        with open("/proc/self/status") as fh:
            kib = next(int(ln.split()[1]) for ln in fh if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    return {
        "n_steps": n_steps,
        "gradient": gradient,
        "batch_size": batch_size,
        "d": d,
        "peak_rss_bytes": int(kib) * 1024,
        "grad_seconds": seconds,
        "grad_norm": norm,
    }


if __name__ == "__main__":
    n, grad_kind, b, dd, c = sys.argv[1:6]
    print(json.dumps(_child(int(n), grad_kind, int(b), int(dd), int(c))))

"""Performance regression checks that do not time anything.

The cost of a layer is compared through XLA's own operation count
(``jax.jit(f).lower(...).compile().cost_analysis()["flops"]``) against the analytic
matmul count 2·m·n·k of the layer; elementwise work (softmax, LayerNorm, activations)
adds a few per cent on top. A change that doubles the cost of any large part (e.g.
computing the scores twice, or a non-fused extra pass) pushes the ratio past the bound.
Compile-time independence of depth is checked on the lowered program's size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import (
    AttentionParams,
    ConstantSteps,
    LayerControls,
    LieScheme,
    PreNormScheme,
    attention,
    evolve,
    stack_controls,
)

# XLA counts elementwise flops too: the measured ratios are 1.02–1.11 for these shapes.
MAX_OVERHEAD = 1.3


def _flops(f, *args) -> float:
    cost = jax.jit(f).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"])


def _f32(tree):
    return jax.tree.map(lambda x: x.astype(jnp.float32), tree)


def _layer_matmul_flops(n, d, d_ff):
    """QKV, scores, γV, W_O and the two FFN maps of one sequence."""
    return 2 * n * d * 3 * d + 2 * 2 * n * n * d + 2 * n * d * d + 2 * 2 * n * d * d_ff


@pytest.mark.parametrize("scheme", [LieScheme(), PreNormScheme()], ids=["lie", "prenorm"])
@pytest.mark.parametrize(
    "shape",
    [(2, 32, 32, 4, 64), (1, 128, 32, 2, None)],
    ids=["lifted-ffn", "attention-heavy"],
)
def test_batched_step_costs_its_matmuls(getkey, scheme, shape):
    B, n, d, H, d_ff = shape
    theta = _f32(LayerControls.random(d, n_heads=H, d_ff=d_ff, bias=True, eps=1e-5, key=getkey()))
    u = jnp.ones((B, n, d), jnp.float32)
    step = jax.vmap(lambda u, th: scheme.step(u, th), in_axes=(0, None))
    analytic = B * _layer_matmul_flops(n, d, d_ff or d)
    ratio = _flops(step, u, theta) / analytic
    assert 0.95 <= ratio <= MAX_OVERHEAD, ratio


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_attention_costs_no_more_than_dense(getkey, causal):
    # One block each way, so XLA's count (which sees one loop iteration) is the total.
    p = _f32(AttentionParams.random(32, n_heads=2, bias=True, key=getkey()))
    u = jnp.ones((256, 32), jnp.float32)
    dense = lambda u: attention(u, p, causal=causal, implementation="dense")
    chunked = lambda u: attention(
        u, p, causal=causal, implementation="chunked", query_block=256, key_block=256
    )
    assert _flops(chunked, u) <= MAX_OVERHEAD * _flops(dense, u)
    grad = lambda f: jax.grad(lambda u: jnp.sum(f(u) ** 2))
    # The backward pass recomputes the probabilities but must not cost more than that.
    assert _flops(grad(chunked), u) <= MAX_OVERHEAD * _flops(grad(dense), u)


def test_evolve_program_size_is_independent_of_depth(getkey):
    one = _f32(LayerControls.random(16, n_heads=2, d_ff=32, eps=1e-5, key=getkey()))
    u = jnp.ones((8, 16), jnp.float32)
    sizes = {}
    for steps in (1, 2, 48):
        theta = stack_controls([one] * steps)
        sizes[steps] = len(
            jax.jit(lambda u, th: evolve(u, th, stepsize_controller=ConstantSteps(unroll=1)))
            .lower(u, theta)
            .as_text()
        )
    # Only the shapes in the signature change with depth: the program is one scan body.
    assert sizes[48] <= 1.05 * sizes[2]
    assert sizes[48] <= 1.05 * sizes[1]


def test_auto_unroll_unrolls_short_loops_and_scans_long_ones(getkey):
    """``unroll="auto"`` (the default): no loop up to AUTO_UNROLL_STEPS steps (the faster
    backward), one rolled scan above (bounded compile time); the values are the same."""
    from transflow._integrate import AUTO_UNROLL_STEPS

    one = LayerControls.random(8, n_heads=2, d_ff=16, key=getkey())
    u = jax.random.normal(getkey(), (5, 8))
    for steps, unroll in ((AUTO_UNROLL_STEPS, AUTO_UNROLL_STEPS), (AUTO_UNROLL_STEPS + 1, 1)):
        theta = stack_controls([one] * steps)
        jaxpr = str(jax.make_jaxpr(lambda u, th: evolve(u, th))(u, theta))
        # lax.scan(unroll=True) is a scan of `length` steps per iteration in the jaxpr
        assert f"unroll={unroll}\n" in jaxpr, steps
        np.testing.assert_allclose(
            evolve(u, theta),
            evolve(u, theta, stepsize_controller=ConstantSteps(unroll=1)),
            rtol=1e-12,
            atol=1e-12,
        )
    with pytest.raises(ValueError, match="unroll"):
        ConstantSteps(unroll="always")

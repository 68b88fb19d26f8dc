"""Chunked (online-softmax) attention vs the dense operator: values, gradients, memory.

Tolerances: float64 relative max error ≤ 1e-12 (values) and ≤ 1e-10 (gradients, relative
to the largest gradient entry of the tree); float32 ≤ 1e-5 relative (the issue's target).
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import (
    CHUNKED_THRESHOLD,
    AttentionParams,
    Grid,
    LayerControls,
    LieScheme,
    PreNormScheme,
    attention,
    chunked_attention,
    evolve,
    online_softmax_attention,
    stack_controls,
)


def _rel(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _tree_rel(ga, gb) -> float:
    la = [np.asarray(x) for x in jax.tree.leaves(ga) if np.size(x)]
    lb = [np.asarray(x) for x in jax.tree.leaves(gb) if np.size(x)]
    scale = max(float(np.max(np.abs(x))) for x in lb)
    return max(float(np.max(np.abs(x - y))) for x, y in zip(la, lb)) / scale


N = 203  # not a multiple of the blocks: exercises the padding


def _setup(getkey, dtype, *, d=16, n_heads=4, head_dim=None):
    p = AttentionParams.random(
        d, n_heads=n_heads, head_dim=head_dim, bias=True, dtype=dtype, key=getkey()
    )
    # AttentionParams.random multiplies by a NumPy float64 scale, which promotes under
    # x64; cast explicitly so the float32 checks really run in float32.
    p = jax.tree.map(lambda x: x.astype(dtype), p)
    u = jax.random.normal(getkey(), (N, d), dtype)
    return p, u


GRID = Grid.interval(N, 16, x_rule="gauss", y_rule="trapezoid")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hardmax", [False, True])
@pytest.mark.parametrize("use_grid", [False, True])
def test_chunked_matches_dense_float64(getkey, causal, hardmax, use_grid):
    p, u = _setup(getkey, jnp.float64)
    kw = dict(grid=GRID if use_grid else None, causal=causal, hardmax=hardmax, temperature=1.7)
    dense = attention(u, p, implementation="dense", **kw)
    chunked = chunked_attention(u, p, query_block=48, key_block=64, **kw)
    assert dense.dtype == chunked.dtype == jnp.float64
    assert _rel(chunked, dense) <= 1e-12


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_matches_dense_float32(getkey, causal):
    p, u = _setup(getkey, jnp.float32)
    grid = Grid.interval(N, 16, x_rule="gauss", y_rule="trapezoid", dtype=jnp.float32)
    dense = attention(u, p, grid=grid, causal=causal, implementation="dense")
    chunked = attention(
        u, p, grid=grid, causal=causal, implementation="chunked", query_block=64, key_block=32
    )
    assert chunked.dtype == dense.dtype == jnp.float32
    assert _rel(chunked, dense) <= 1e-5


def test_chunked_rectangular_heads_scale_and_vmap(getkey):
    # H·d_k = 3·5 = 15 ≠ d = 16, explicit scale, batched with vmap.
    p, _ = _setup(getkey, jnp.float64, head_dim=5, n_heads=3)
    u = jax.random.normal(getkey(), (3, N, 16), jnp.float64)
    dense = jax.vmap(lambda x: attention(x, p, scale=0.3, implementation="dense"))(u)
    chunked = jax.vmap(
        lambda x: chunked_attention(x, p, scale=0.3, query_block=100, key_block=100)
    )(u)
    assert _rel(chunked, dense) <= 1e-12


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("hardmax", [False, True])
def test_chunked_gradient_matches_dense(getkey, causal, hardmax):
    p, u = _setup(getkey, jnp.float64)
    c = jax.random.normal(getkey(), u.shape, jnp.float64)

    def loss(impl):
        def f(u, p, grid):
            a = attention(
                u,
                p,
                grid=grid,
                causal=causal,
                hardmax=hardmax,
                temperature=0.8,
                implementation=impl,
                query_block=64,
                key_block=48,
            )
            return jnp.sum(c * a)

        return jax.grad(f, argnums=(0, 1, 2))(u, p, GRID)

    g_dense, g_chunked = loss("dense"), loss("chunked")
    assert _tree_rel(g_chunked, g_dense) <= 1e-10
    # Not vacuous: the input gradient is non-zero.
    assert float(jnp.max(jnp.abs(g_dense[0]))) > 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_hardmax_backward_does_not_rely_on_the_forwards_rounding(getkey, causal):
    """The backward finds the maximizers with its own (key-major) products: maxima saved
    by the forward that differ from them in the last bit (as XLA may round q kᵀ and k qᵀ
    differently) leave the gradient unchanged. Before the fix every maximizer compared
    unequal here and the gradients of v and log w were silently 0."""
    from transflow._chunked import _attend_bwd, _attend_fwd

    q, k, v = jax.random.normal(getkey(), (3, 2, 37, 4), jnp.float64)
    lw = jnp.log(jax.random.uniform(getkey(), (37,), jnp.float64, 0.5, 2.0))
    g = jax.random.normal(getkey(), (2, 37, 4), jnp.float64)
    static = (causal, True, 8, 16, False, False)  # causal, hardmax, bq, bk, masked, uniform
    _, res = _attend_fwd(q, k, v, lw, None, *static)
    exact = _attend_bwd(*static, res, g)
    s1 = res[6]
    off = jnp.nextafter(s1, jnp.full_like(s1, jnp.inf))  # the forward's max, one ulp up
    shifted = _attend_bwd(*static, (*res[:6], off, res[7]), g)
    for a, b in zip(shifted[2:4], exact[2:4]):  # d v, d log w
        np.testing.assert_array_equal(a, b)
    assert float(jnp.max(jnp.abs(exact[2]))) > 1e-2  # not vacuous


def test_online_softmax_attention_direct(getkey):
    q, k, v = jax.random.normal(getkey(), (3, 2, 130, 8), jnp.float64)
    lw = jnp.log(jax.random.uniform(getkey(), (130,), jnp.float64, 0.5, 2.0))
    ref = jax.nn.softmax(q @ k.swapaxes(-1, -2) + lw, axis=-1) @ v
    out = online_softmax_attention(q, k, v, lw, query_block=32, key_block=40)
    assert _rel(out, ref) <= 1e-12


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n", [96, 100])
def test_online_softmax_attention_without_weights_values_and_gradients(getkey, causal, n):
    # log_weights=None takes the plain path that neither adds log w nor forms its gradient;
    # n = 96 is a multiple of both blocks (no padded key: no log w at all), n = 100 is not
    # (padded keys get log w = −∞). Values and q, k, v gradients equal the dense softmax.
    q, k, v = jax.random.normal(getkey(), (3, 2, n, 8), jnp.float64)
    g = jax.random.normal(getkey(), (2, n, 8), jnp.float64)
    tril = jnp.tril(jnp.ones((n, n), bool)) if causal else jnp.ones((n, n), bool)

    def dense(q, k, v):
        s = jnp.where(tril, q @ k.swapaxes(-1, -2), -jnp.inf)
        return jax.nn.softmax(s, axis=-1) @ v

    def chunked(q, k, v):
        return online_softmax_attention(q, k, v, causal=causal, query_block=32, key_block=48)

    out, vjp = jax.vjp(chunked, q, k, v)
    ref, ref_vjp = jax.vjp(dense, q, k, v)
    assert _rel(out, ref) <= 1e-12
    assert _tree_rel(vjp(g), ref_vjp(g)) <= 1e-10


def _max_intermediate(jaxpr) -> int:
    """Largest number of elements of any value in a jaxpr, sub-jaxprs included."""
    best = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            shape = getattr(var.aval, "shape", ())
            best = max(best, int(np.prod(shape)) if shape else 1)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            best = max(best, _max_intermediate(sub))
    return best


def test_chunked_memory_is_linear_forward_and_backward(getkey):
    # No intermediate of the chunked operator (or of its gradient) has n² entries.
    n, d = 1024, 16
    p = AttentionParams.random(d, n_heads=1, dtype=jnp.float32, key=getkey())
    u = jax.random.normal(getkey(), (n, d), jnp.float32)

    def f(u, impl):
        return jnp.sum(
            attention(u, p, causal=True, implementation=impl, query_block=128, key_block=128) ** 2
        )

    chunked = _max_intermediate(
        jax.make_jaxpr(jax.value_and_grad(f), static_argnums=1)(u, "chunked").jaxpr
    )
    dense = _max_intermediate(
        jax.make_jaxpr(jax.value_and_grad(f), static_argnums=1)(u, "dense").jaxpr
    )
    assert dense >= n * n  # the check sees the dense score matrix ...
    assert chunked <= 128 * 128 * 2  # ... and only (query_block, key_block) blocks here


def test_auto_switches_to_chunked_above_threshold(getkey):
    p = AttentionParams.random(8, n_heads=1, dtype=jnp.float32, key=getkey())
    n_big = int(np.sqrt(CHUNKED_THRESHOLD)) + 1
    u = jax.ShapeDtypeStruct((n_big, 8), jnp.float32)
    jaxpr = jax.make_jaxpr(lambda x: attention(x, p))(u).jaxpr
    assert _max_intermediate(jaxpr) < n_big * n_big
    small = jax.make_jaxpr(lambda x: attention(x, p))(
        jax.ShapeDtypeStruct((64, 8), jnp.float32)
    ).jaxpr
    assert _max_intermediate(small) >= 64 * 64


@pytest.mark.parametrize("scheme_cls", [LieScheme, PreNormScheme])
def test_schemes_and_evolve_thread_the_implementation(getkey, scheme_cls):
    theta = stack_controls(
        [LayerControls.random(8, n_heads=2, d_ff=16, eps=1e-5, key=getkey()) for _ in range(2)]
    )
    u = jax.random.normal(getkey(), (37, 8), jnp.float64)
    dense = evolve(u, theta, scheme_cls(implementation="dense"))
    chunked = evolve(u, theta, scheme_cls(implementation="chunked"))
    override = evolve(
        u, theta, scheme_cls(implementation="dense"), attention_implementation="chunked"
    )
    assert _rel(chunked, dense) <= 1e-12
    assert _rel(override, dense) <= 1e-12


def test_bad_options_name_the_argument(getkey):
    p, u = _setup(getkey, jnp.float64)
    with pytest.raises(ValueError, match="implementation"):
        attention(u, p, implementation="flash")
    with pytest.raises(ValueError, match="key_block"):
        chunked_attention(u, p, key_block=0)
    with pytest.raises(ValueError, match="implementation"):
        LieScheme(implementation="sparse")


@pytest.mark.slow
def test_chunked_peak_rss_at_32768_tokens_in_fresh_process():
    # The memory target, measured like benchmarks/bench_chunked.py: a fresh process
    # (float32, 32 768 tokens, 64 features, one head) whose dense scores alone are 4 GiB.
    import json
    import pathlib
    import subprocess
    import sys

    script = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "bench_chunked.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--worker", "chunked", "--tokens", "32768", "--d", "64"],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["n_tokens"] == 32768
    assert result["peak_rss_gib"] <= 1.5


def _count_block_visits(monkeypatch):
    """Record, at run time, every (query block, key block) body the chunked operator runs.

    Each block body (forward and the custom VJP's backward recomputation) builds its mask
    with ``_chunked._mask`` exactly once; a debug callback there fires only when the body
    executes, so skipped blocks are never recorded.
    """
    from transflow import _chunked

    visits: list[tuple[int, int]] = []
    original = _chunked._mask

    def counting_mask(q0, k0, bq, bk, n_k, causal):
        jax.debug.callback(lambda a, b: visits.append((int(a), int(b))), q0, k0)
        return original(q0, k0, bq, bk, n_k, causal)

    monkeypatch.setattr(_chunked, "_mask", counting_mask)
    return visits


# The masked variant is slow-tier: tests/test_masks.py checks masked causal values and
# gradients against dense in the fast tier.
@pytest.mark.parametrize("masked", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_causal_skips_key_blocks_above_the_diagonal(getkey, monkeypatch, masked):
    # 240 tokens, query blocks of 24 (10) and key blocks of 16 (15): causal must visit only
    # the pairs with k0 ≤ q0 + 23, in the forward and in the backward, with the values
    # and the gradients of the dense causal operator (masks included when `masked`).
    n, bq, bk = 240, 24, 16
    q, k, v = jax.random.normal(getkey(), (3, 2, n, 4), jnp.float64)
    lw = jnp.log(jax.random.uniform(getkey(), (n,), jnp.float64, 0.5, 2.0))
    g = jax.random.normal(getkey(), (2, n, 4), jnp.float64)
    kw = {}
    bias = jnp.zeros((n, n), jnp.float64)
    if masked:
        kpm = jnp.arange(n) % 7 == 3
        am = jax.random.normal(getkey(), (n, n), jnp.float64)
        kw = dict(key_padding_mask=kpm, attention_mask=am)
        bias = am + jnp.where(kpm, -jnp.inf, 0.0)[None, :]
    tril = jnp.tril(jnp.ones((n, n), bool))

    def dense(q, k, v, lw):
        s = jnp.where(tril, q @ k.swapaxes(-1, -2) + lw + bias, -jnp.inf)
        return jax.nn.softmax(s, axis=-1) @ v

    def chunked(causal):
        return lambda q, k, v, lw: online_softmax_attention(
            q, k, v, lw, causal=causal, query_block=bq, key_block=bk, **kw
        )

    visits = _count_block_visits(monkeypatch)
    counts = {}
    for causal in (False, True):
        visits.clear()
        out, vjp = jax.vjp(chunked(causal), q, k, v, lw)
        jax.effects_barrier()
        fwd = sorted(visits)
        visits.clear()
        grads = vjp(g)
        jax.effects_barrier()
        counts[causal] = (fwd, sorted(visits))
    n_qb, n_kb = n // bq, n // bk
    full = sorted((i * bq, j * bk) for i in range(n_qb) for j in range(n_kb))
    below = sorted(p for p in full if p[1] <= p[0] + bq - 1)
    assert counts[False] == (full, full)  # forward and backward: every pair once
    assert counts[True] == (below, below)  # only the blocks touching j ≤ i, each once
    assert len(below) <= 0.6 * len(full)  # 85 of 150 block bodies
    ref, ref_vjp = jax.vjp(dense, q, k, v, lw)
    assert _rel(out, ref) <= 1e-12
    assert _tree_rel(grads, ref_vjp(g)) <= 1e-10


_RING_COUNT_SCRIPT = """
import json, jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
from transflow import Grid, LayerControls, PreNormScheme, evolve, stack_controls
from transflow.parallel import _ring, make_mesh, max_rel_diff, shard_evolve, to_host

visits = []
original = _ring._ring_round

def counting_round(state, visit, **kw):  # (query shard, key shard) of each executed round
    n = visit[0].shape[0]
    jax.debug.callback(lambda q, s: visits.append((int(q) // n, int(s))), visit[4][0], visit[5])
    return original(state, visit, **kw)

_ring._ring_round = counting_round
keys = jax.random.split(jax.random.key(0), 3)
theta = stack_controls([LayerControls.random(8, n_heads=2, d_ff=16, bias=True, key=k)
                        for k in keys[:2]])
u = jax.random.normal(keys[2], (2, 32, 8))
grid = Grid.interval(32, 8, x_rule="gauss", y_rule="gauss")
mesh = make_mesh((4,), ("t",))
record = {}
for causal in (False, True):
    visits.clear()
    out = shard_evolve(theta, u, mesh, {"tokens": "t"}, method="ring",
                       scheme=PreNormScheme(), grid=grid, causal=causal)
    out = to_host(out)
    jax.effects_barrier()
    ref = jax.vmap(lambda x: evolve(x, theta, PreNormScheme(), grid=grid, causal=causal))(u)
    record[str(causal)] = {"visits": sorted(set(visits)), "n": len(visits),
                           "rel": max_rel_diff(out, ref)}
print(json.dumps(record))
"""


@pytest.mark.slow
def test_ring_causal_skips_key_shards_after_the_queries():
    # 4 token devices, 2 layers, batch 2: a device computes the round of key shard s only
    # when s ≤ its own index (10 of the 16 (device, shard) pairs), with the same result as
    # the single-device causal evolution. Fresh process: the device count is fixed at start.
    import json
    import subprocess
    import sys

    from transflow.parallel._selftest import _env

    proc = subprocess.run(
        [sys.executable, "-c", _RING_COUNT_SCRIPT],
        env=_env(4),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    pairs = [[me, s] for me in range(4) for s in range(4)]
    assert rec["False"]["visits"] == pairs
    assert rec["True"]["visits"] == [p for p in pairs if p[1] <= p[0]]
    # each executed round is recorded once per layer (the batch is vmapped, and the
    # device and shard indices do not depend on the sequence)
    assert rec["False"]["n"] == 2 * 16 and rec["True"]["n"] == 2 * 10
    assert rec["False"]["rel"] <= 1e-12 and rec["True"]["rel"] <= 1e-12

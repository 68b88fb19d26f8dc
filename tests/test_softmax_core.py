"""The hand-written reverse mode of the dense softmax-attention core equals autodiff."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow._softmax_core import softmax_attention


def _reference(q, k, v, bias):
    s = jnp.einsum("hic,hjc->hij", q, k)
    if bias is not None:
        s = s + bias
    return jnp.einsum("hij,hjc->hic", jax.nn.softmax(s, axis=-1), v)


@pytest.mark.parametrize("bias_kind", ["none", "weights", "causal", "both", "per_head"])
def test_values_and_gradients_match_autodiff_fp64(bias_kind):
    keys = jax.random.split(jax.random.key(0), 5)
    H, n, m, c = 3, 7, 7, 4
    q, k, v = (jax.random.normal(keys[i], (H, n if i == 0 else m, c)) for i in range(3))
    w = jax.random.uniform(keys[3], (m,), minval=0.2, maxval=2.0)
    causal = jnp.where(jnp.arange(m)[None, :] <= jnp.arange(n)[:, None], 0.0, -jnp.inf)
    bias = {
        "none": None,
        "weights": jnp.log(w)[None, None, :],
        "causal": causal[None],
        "both": jnp.log(w)[None, None, :] + causal[None],
        "per_head": jax.random.normal(keys[4], (H, 1, m)),
    }[bias_kind]
    np.testing.assert_allclose(
        softmax_attention(q, k, v, bias), _reference(q, k, v, bias), rtol=0, atol=1e-13
    )
    ct = jax.random.normal(keys[4], (H, n, c))

    def loss(f, q, k, v, b):
        return jnp.sum(f(q, k, v, b) * ct)

    argnums = (0, 1, 2) if bias is None else (0, 1, 2, 3)
    got = jax.grad(lambda *a: loss(softmax_attention, *a), argnums=argnums)(q, k, v, bias)
    want = jax.grad(lambda *a: loss(_reference, *a), argnums=argnums)(q, k, v, bias)
    for g, r in zip(got, want):
        finite = np.isfinite(np.asarray(r))
        np.testing.assert_allclose(np.asarray(g)[finite], np.asarray(r)[finite], atol=1e-12)
        assert np.all(np.isfinite(np.asarray(g)))


def test_row_without_support_is_zero_and_finite():
    q = k = v = jnp.ones((1, 2, 3))
    bias = jnp.array([[[-jnp.inf, -jnp.inf], [0.0, -jnp.inf]]])
    out = softmax_attention(q, k, v, bias)
    np.testing.assert_array_equal(out[0, 0], 0.0)
    np.testing.assert_allclose(out[0, 1], 1.0)
    g = jax.grad(lambda q: jnp.sum(softmax_attention(q, k, v, bias)))(q)
    assert np.all(np.isfinite(np.asarray(g)))


def test_vmap_and_jit_work():
    q = k = v = jax.random.normal(jax.random.key(1), (4, 2, 5, 3))
    f = jax.jit(jax.vmap(lambda q, k, v: softmax_attention(q, k, v, None)))
    np.testing.assert_allclose(f(q, k, v), jax.vmap(lambda *a: _reference(*a, None))(q, k, v))

"""Exact gradients through the split scheme (issue 7).

- d loss / d input and d loss / d every weight equal torch autograd through the same
  ``torch.nn.TransformerEncoder(Layer)`` (float64, ≤ 1e-9 relative per tensor);
- directional central finite differences (float64, ≤ 1e-7 relative);
- the three rematerialisation modes give the same value and gradients;
- float32 gradients agree with float64 ones to float32 round-off (≤ 1e-4 relative).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require
from transflow.control import (
    cross_entropy_loss,
    grads_to_torch_layout,
    make_vit,
)

torch = require("torch", reason="torch (extra 'reference') is needed for this check")

REL_FP64 = 1e-9


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def _torch_encoder(kind, d, nhead, dff, norm_first, n_layers, seed):
    torch.manual_seed(seed)
    kw = dict(dim_feedforward=dff, dropout=0.0, batch_first=True, norm_first=norm_first)
    if kind == "layer":
        mod = torch.nn.TransformerEncoderLayer(d, nhead, **kw)
    else:
        layer = torch.nn.TransformerEncoderLayer(d, nhead, **kw)
        mod = torch.nn.TransformerEncoder(
            layer, n_layers, norm=torch.nn.LayerNorm(d), enable_nested_tensor=False
        )
    mod = mod.double()
    # Randomise the LayerNorm affine parameters too, so their gradients are generic.
    with torch.no_grad():
        for name, p in mod.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return mod


@pytest.mark.parametrize(
    "kind,nhead,dff,norm_first",
    [
        ("layer", 1, 8, False),  # the paper's identification (square FFN, one head)
        ("encoder", 2, 16, False),  # a 3-layer post-LN stack, d_ff ≠ d (lifted), final norm
        pytest.param("encoder", 2, 8, False, marks=pytest.mark.slow),  # square FFN stack
        pytest.param("encoder", 2, 16, True, marks=pytest.mark.slow),  # pre-LN extension
    ],
)
def test_gradients_equal_torch_autograd(kind, nhead, dff, norm_first):
    from transflow.interop import from_torch

    d, n, n_layers = 8, 5, 3
    mod = _torch_encoder(kind, d, nhead, dff, norm_first, n_layers, seed=0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, d))
    c = rng.normal(size=(n, d))

    # torch autograd: L = Σ c ⊙ sin(out) + ½ Σ out² (a generic non-linear loss)
    xt = torch.tensor(x, requires_grad=True)
    out = mod(xt[None])[0]
    loss_t = (torch.tensor(c) * torch.sin(out)).sum() + 0.5 * (out**2).sum()
    loss_t.backward()
    g_torch = {name: p.grad.numpy() for name, p in mod.named_parameters()}

    model = from_torch(mod)  # float64 (follows the module)

    def loss(model, u):
        o = model(u)
        return jnp.sum(jnp.asarray(c) * jnp.sin(o)) + 0.5 * jnp.sum(o**2)

    assert abs(float(loss(model, jnp.asarray(x))) - loss_t.item()) <= 1e-12 * abs(loss_t.item())
    g_model, g_u = eqx.filter_grad(lambda mu: loss(*mu))((model, jnp.asarray(x)))
    assert _rel(g_u, xt.grad.numpy()) <= REL_FP64
    g_jax = grads_to_torch_layout(
        g_model.controls, final_norm=g_model.final_norm, single_layer=kind == "layer"
    )
    assert sorted(g_jax) == sorted(g_torch)
    for name in g_torch:
        assert g_jax[name].shape == g_torch[name].shape, name
        assert _rel(g_jax[name], g_torch[name]) <= REL_FP64, (
            name,
            _rel(g_jax[name], g_torch[name]),
        )


def _vit64(remat="step", key=None):
    return make_vit(
        d=8,
        n_steps=3,
        n_heads=2,
        pool="cls",
        remat=remat,
        dtype=jnp.float64,
        key=jax.random.key(3) if key is None else key,
    )


def _digits_batch(dtype=np.float64):
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.uniform(size=(6, 8, 8)).astype(dtype)), jnp.asarray(
        rng.integers(0, 10, 6)
    )


def test_gradients_match_central_finite_differences():
    model = _vit64()
    x, y = _digits_batch()
    params, static = eqx.partition(model, eqx.is_inexact_array)

    @jax.jit
    def f(p):
        return cross_entropy_loss(eqx.combine(p, static), x, y)[0]

    g = jax.grad(f)(params)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(7), 3)
    h = 1e-4  # truncation O(h²) ≈ 1e-8, round-off O(ε/h) ≈ 1e-12
    for k in keys:  # three random directions v over all parameters
        ks = jax.random.split(k, len(leaves))
        v = [jax.random.normal(kk, leaf.shape, leaf.dtype) for kk, leaf in zip(ks, leaves)]
        norm = np.sqrt(sum(float(jnp.sum(a**2)) for a in v))
        v = treedef.unflatten([a / norm for a in v])  # a unit direction
        plus = jax.tree.map(lambda p, vv: p + h * vv, params, v)
        minus = jax.tree.map(lambda p, vv: p - h * vv, params, v)
        fd = (float(f(plus)) - float(f(minus))) / (2 * h)
        ad = sum(float(jnp.vdot(a, b)) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(v)))
        assert abs(fd - ad) <= 1e-7 * abs(ad) + 1e-10, (fd, ad)


@pytest.mark.slow  # three compilations of a ViT gradient (~15 s CPU)
def test_remat_modes_same_values_and_gradients():
    x, y = _digits_batch()
    vals, grads = [], []
    vg = eqx.filter_jit(eqx.filter_value_and_grad(cross_entropy_loss, has_aux=True))
    for remat in ("none", "step", "nested"):
        (val, _), g = vg(_vit64(remat), x, y)
        vals.append(float(val))
        grads.append(jax.tree.leaves(g))
    for v, gs in zip(vals[1:], grads[1:]):
        assert v == pytest.approx(vals[0], rel=1e-14)
        for a, b in zip(gs, grads[0]):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-13)


def test_float32_gradients_agree_with_float64():
    x64, y = _digits_batch()
    m64 = _vit64()
    m32 = jax.tree.map(lambda a: a.astype(jnp.float32) if eqx.is_inexact_array(a) else a, m64)
    grad = eqx.filter_jit(eqx.filter_grad(lambda m, x: cross_entropy_loss(m, x, y)[0]))
    g64, g32 = grad(m64, x64), grad(m32, x64.astype(jnp.float32))
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(g32))
    # Some entries vanish analytically (e.g. key biases: softmax is shift invariant), so
    # compare the whole gradient vector, not leaf by leaf.
    flat = lambda g: np.concatenate(
        [np.ravel(np.asarray(a, np.float64)) for a in jax.tree.leaves(g)]
    )
    assert _rel(flat(g32), flat(g64)) <= 1e-4


@pytest.mark.slow  # two compilations of a 64-step ViT gradient (~15 s CPU)
def test_nested_remat_memory_grows_sublinearly():
    """XLA's working memory of the gradient at N_t = 64 is ≤ 2× that at N_t = 8 with √N_t
    checkpointing (benchmarks/bench_memory.py measures the full training step)."""
    x, y = jnp.zeros((128, 8, 8), jnp.float32), jnp.zeros((128,), jnp.int32)

    def loss(p, static):
        return cross_entropy_loss(eqx.combine(p, static), x, y)[0]

    temps = {}
    for n_steps in (8, 64):
        model = make_vit(
            d=16,
            n_steps=n_steps,
            n_heads=2,
            remat="nested",
            dtype=jnp.float32,
            key=jax.random.key(0),
        )
        params, static = eqx.partition(model, eqx.is_inexact_array)
        grad = jax.jit(jax.grad(loss), static_argnums=1)
        temps[n_steps] = grad.lower(params, static).compile().memory_analysis().temp_size_in_bytes
    assert temps[64] <= 2 * temps[8], temps

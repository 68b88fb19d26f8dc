"""ViT: transflow reproduces HuggingFace ``ViTLayer`` and ``ViTModel``
(docs/spec/continuous-model.md §4.2).

float64 (x64 on): max |Δ| ≤ 1e-10 at unit-scale outputs, with HF's eager attention using a
float64 softmax (``fp64_eager``, see ``test_hf_helpers``); float32: relative error ≤ 1e-5.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require

torch = require("torch", reason="the HF equivalence tests need PyTorch")
require("transformers", reason="the HF equivalence tests need transformers")

from transformers import ViTConfig  # noqa: E402
from transformers.models.vit.modeling_vit import ViTLayer, ViTModel  # noqa: E402

import transflow  # noqa: E402
from test_hf_helpers import fp64_eager, max_abs, randomize_, rel_err, to_np  # noqa: E402
from transflow.interop import from_hf  # noqa: E402

__all__ = ["fp64_eager"]  # the fixture is used by name

# hidden, heads, intermediate, image (H, W), patch, qkv_bias, hidden_act
CONFIGS = [
    (12, 3, 20, (8, 12), 4, True, "gelu"),  # odd heads, non-square 2x3 patch grid
    (16, 4, 24, (12, 8), (4, 2), False, "gelu_new"),  # even heads, non-square patches, 3x4
    (10, 5, 16, (9, 9), 3, True, "relu"),  # 5 heads of width 2
    (8, 1, 16, (8, 10), 2, False, "gelu_pytorch_tanh"),  # one head, 4x5 grid
]
IDS = [f"d{c[0]}-h{c[1]}-img{c[3][0]}x{c[3][1]}-bias{int(c[5])}-{c[6]}" for c in CONFIGS]


def _config(c, *, layers=1, impl="eager"):
    d, h, inter, image, patch, bias, act = c
    return ViTConfig(
        hidden_size=d,
        num_hidden_layers=layers,
        num_attention_heads=h,
        intermediate_size=inter,
        image_size=image,
        patch_size=patch,
        num_channels=3,
        qkv_bias=bias,
        hidden_act=act,
        attn_implementation=impl,
    )


def _tokens(c, dtype, seed=0):
    d, _, _, image, patch, *_ = c
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    n = 1 + (image[0] // ph) * (image[1] // pw)
    return torch.randn(n, d, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _image(c, dtype, batch=None, seed=0):
    shape = (3, *c[3]) if batch is None else (batch, 3, *c[3])
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_vit_layer_float64(c, fp64_eager):
    layer = randomize_(ViTLayer(_config(c)).double().eval(), 1)
    x = _tokens(c, torch.float64)
    with torch.no_grad():
        ref = to_np(layer(x[None])[0])
    model = from_hf(layer)
    assert model.scheme == transflow.PreNormScheme()
    out = eqx.filter_jit(model)(jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float64
    assert 0.3 < np.abs(ref).max() < 30  # unit-scale outputs
    assert max_abs(out, ref) <= 1e-10


@pytest.mark.parametrize("c", CONFIGS[:2], ids=IDS[:2])
def test_vit_layer_float32(c):
    layer = randomize_(ViTLayer(_config(c)).float().eval(), 2)
    x = _tokens(c, torch.float32)
    with torch.no_grad():
        ref = to_np(layer(x[None])[0])
    out = eqx.filter_jit(from_hf(layer))(jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float32
    assert rel_err(out, ref) <= 1e-5


def test_vit_layer_substeps_match_hf(fp64_eager):
    """Each sub-step state is the matching HF intermediate: ln1 = layernorm_before(u),
    attention = u + SA(ln1), ln2 = layernorm_after(·), residual = the output."""
    c = CONFIGS[0]
    layer = randomize_(ViTLayer(_config(c)).double().eval(), 3)
    x = _tokens(c, torch.float64)[None]
    with torch.no_grad():
        p1 = layer.layernorm_before(x)
        a = x + layer.attention(p1)[0]
        p2 = layer.layernorm_after(a)
        res = a + layer.mlp(p2)
    states = eqx.filter_jit(lambda m, u: m.substeps(u))(from_hf(layer), jnp.asarray(to_np(x[0])))
    for name, ref in (("ln1", p1), ("attention", a), ("ln2", p2), ("residual", res)):
        assert max_abs(states[name], to_np(ref[0])) <= 1e-10, name


@pytest.mark.parametrize(
    "c",
    [CONFIGS[0], CONFIGS[1], pytest.param(CONFIGS[2], marks=pytest.mark.slow)],
    ids=IDS[:3],
)
def test_vit_model_float64(c, fp64_eager):
    """2-layer ViTModel: pixels → embeddings f → layers → LayerNorm, and the pooler."""
    hf = randomize_(ViTModel(_config(c, layers=2)).double().eval(), 4)
    img = _image(c, torch.float64)
    with torch.no_grad():
        o = hf(img[None])
        f_ref = to_np(hf.embeddings(img[None])[0])
    model = from_hf(hf)
    ji = jnp.asarray(to_np(img))
    assert model.encoder.num_layers == 2
    assert max_abs(model.initial_condition(ji), f_ref) <= 1e-12
    last = to_np(o.last_hidden_state[0])
    assert 0.3 < np.abs(last).max() < 30
    out = eqx.filter_jit(model)(ji)
    assert max_abs(out, last) <= 1e-10
    assert max_abs(model.readout(out), to_np(o.pooler_output[0])) <= 1e-10


def test_vit_model_float32_batched():
    c = CONFIGS[1]
    hf = randomize_(ViTModel(_config(c, layers=2)).float().eval(), 5)
    imgs = _image(c, torch.float32, batch=3)
    with torch.no_grad():
        o = hf(imgs)
    model = from_hf(hf)
    ji = jnp.asarray(to_np(imgs))
    out, pooled = eqx.filter_jit(jax.vmap(lambda i: (model(i), model.pooled(i))))(ji)
    assert out.dtype == jnp.float32
    assert rel_err(out, to_np(o.last_hidden_state)) <= 1e-5
    assert rel_err(pooled, to_np(o.pooler_output)) <= 1e-5


def test_vit_attention_kernel_matches_output_attentions(fp64_eager):
    """γ(x, x̃) of each layer (transflow.attention_weights) equals HF's attentions."""
    c = CONFIGS[0]
    hf = randomize_(ViTModel(_config(c, layers=2)).double().eval(), 6)
    img = _image(c, torch.float64)
    with torch.no_grad():
        o = hf(img[None], output_attentions=True)
    model = from_hf(hf)
    u = model.initial_condition(jnp.asarray(to_np(img)))
    for i in range(2):
        theta = model.encoder.layer(i)
        p1 = transflow.project_s1(u, theta.norm1.bias, theta.norm1.gain, eps=theta.norm1.eps)
        gamma = transflow.attention_weights(transflow.attention_scores(p1, theta.attn))
        assert gamma.shape == tuple(o.attentions[i].shape[1:])
        assert max_abs(gamma, to_np(o.attentions[i][0])) <= 1e-12
        u = model.encoder.scheme.step(u, theta)


def test_vit_modulelist_is_stacked_steps(fp64_eager):
    c = CONFIGS[0]
    hf = randomize_(ViTModel(_config(c, layers=2)).double().eval(), 7)
    x = _tokens(c, torch.float64)[None]
    with torch.no_grad():
        ref = to_np(hf.layers[1](hf.layers[0](x))[0])
    model = from_hf(hf.layers)
    assert model.num_layers == 2
    assert max_abs(eqx.filter_jit(model)(jnp.asarray(to_np(x[0]))), ref) <= 1e-10


def test_vit_hf_eager_float32_softmax_is_the_only_gap():
    """Unpatched HF eager computes the softmax in float32 even in float64: the gap to
    transflow is then bounded by float32 rounding of γ, and vanishes with HF's sdpa."""
    c = CONFIGS[0]
    x = _tokens(c, torch.float64)[None]
    gaps = {}
    for impl in ("eager", "sdpa"):
        layer = randomize_(ViTLayer(_config(c, impl=impl)).double().eval(), 8)
        with torch.no_grad():
            ref = to_np(layer(x)[0])
        gaps[impl] = max_abs(from_hf(layer)(jnp.asarray(to_np(x[0]))), ref)
    assert gaps["eager"] <= 1e-6
    assert gaps["sdpa"] <= 1e-10


@pytest.mark.parametrize("act", ["laplace", "gelu_10", "relu2"])
def test_vit_unsupported_activation_names_the_option(act):
    cfg = ViTConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_act=act)
    with pytest.raises(ValueError, match=rf"hidden_act.*{act}"):
        from_hf(ViTLayer(cfg).eval())


def test_from_hf_rejects_other_modules():
    with pytest.raises(TypeError, match="from_hf: `module` must be one of"):
        from_hf(torch.nn.Linear(3, 3))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        from_hf("ViTLayer")
    cfg = ViTConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16)
    with pytest.raises(ValueError, match="grid_shape"):
        from_hf(ViTLayer(cfg).eval(), grid_shape=(2, 2))

"""CvT: transflow reproduces HuggingFace ``CvtLayer`` and ``CvtStage``
(docs/spec/continuous-model.md §4.3).

Convolutional projections over the 2-D token grid (depthwise conv + BatchNorm in eval mode
+ pointwise), strided keys/values, the class token split off and re-attached, and the
``embed_dim**-0.5`` score scale of the HF implementation. float64: max |Δ| ≤ 1e-10;
float32: relative error ≤ 1e-5. HF CvT computes its softmax in the input dtype.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from _reference import require

torch = require("torch", reason="the HF equivalence tests need PyTorch")
require("transformers", reason="the HF equivalence tests need transformers")

from transformers import CvtConfig  # noqa: E402
from transformers.models.cvt.modeling_cvt import CvtLayer, CvtStage  # noqa: E402

from test_hf_helpers import max_abs, randomize_, rel_err, to_np  # noqa: E402
from transflow.interop import from_hf  # noqa: E402
from transflow.vision import ConvPreNormScheme, DepthwiseConv2d  # noqa: E402

# embed, heads, kernel, padding_kv, stride_kv, qkv_bias, cls token, grid (H, W), mlp_ratio
LAYERS = [
    (12, 3, 3, 1, 2, True, True, (4, 5), 2.0),  # odd heads, strided K/V, class token
    (8, 2, 3, 1, 1, False, False, (3, 6), 4.0),  # even heads, unstrided, no bias
    (10, 5, 5, 2, 2, True, False, (5, 4), 1.5),  # kernel 5
    (16, 1, 3, 0, 2, False, True, (5, 5), 2.0),  # no K/V padding: 2x2 key grid
]
IDS = [f"d{c[0]}-h{c[1]}-k{c[2]}-s{c[4]}-bias{int(c[5])}-cls{int(c[6])}" for c in LAYERS]


def _layer(c, method="dw_bn", stride_q=1):
    d, h, k, pkv, skv, bias, cls, _, ratio = c
    return CvtLayer(
        num_heads=h,
        embed_dim=d,
        kernel_size=k,
        padding_q=k // 2,
        padding_kv=pkv,
        stride_q=stride_q,
        stride_kv=skv,
        qkv_projection_method=method,
        qkv_bias=bias,
        attention_drop_rate=0.0,
        drop_rate=0.0,
        mlp_ratio=ratio,
        drop_path_rate=0.0,
        with_cls_token=cls,
    )


def _tokens(c, dtype, seed=0):
    d, *_, cls, (gh, gw), _ = c
    g = torch.Generator().manual_seed(seed)
    return torch.randn(int(cls) + gh * gw, d, dtype=dtype, generator=g)


@pytest.mark.parametrize("c", LAYERS, ids=IDS)
def test_cvt_layer_float64(c):
    layer = randomize_(_layer(c).double().eval(), 1)
    x = _tokens(c, torch.float64)
    gh, gw = c[7]
    with torch.no_grad():
        ref = to_np(layer(x[None], gh, gw)[0])
    model = from_hf(layer, grid_shape=(gh, gw))
    assert model.scheme == ConvPreNormScheme((gh, gw), int(c[6]))
    assert isinstance(model.layer(0).attn.k_conv, DepthwiseConv2d)
    out = eqx.filter_jit(model)(jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float64
    assert 0.3 < np.abs(ref).max() < 30
    assert max_abs(out, ref) <= 1e-10


def test_cvt_layer_float32():
    c = LAYERS[0]
    layer = randomize_(_layer(c).float().eval(), 2)
    x = _tokens(c, torch.float32)
    with torch.no_grad():
        ref = to_np(layer(x[None], *c[7])[0])
    out = eqx.filter_jit(from_hf(layer, grid_shape=c[7]))(jnp.asarray(to_np(x)))
    assert out.dtype == jnp.float32
    assert rel_err(out, ref) <= 1e-5


def test_cvt_embed_dim_scale_quirk_is_copied():
    """HF scales scores by embed_dim**-0.5, not head_dim**-0.5; with several heads the
    two differ, and only the copied quirk reproduces the layer."""
    c = LAYERS[0]
    layer = randomize_(_layer(c).double().eval(), 3)
    x = _tokens(c, torch.float64)
    with torch.no_grad():
        ref = to_np(layer(x[None], *c[7])[0])
    model = from_hf(layer, grid_shape=c[7])
    assert model.layer(0).attn.scale == pytest.approx(c[0] ** -0.5)
    attn = model.controls.attn
    head_scaled = eqx.tree_at(
        lambda m: m.controls.attn, model, dataclasses.replace(attn, scale=None)
    )
    run = eqx.filter_jit(lambda m, u: m(u))
    assert max_abs(run(model, jnp.asarray(to_np(x))), ref) <= 1e-10
    assert max_abs(run(head_scaled, jnp.asarray(to_np(x))), ref) > 1e-4


def _stage_config():
    return CvtConfig(
        num_channels=3,
        patch_sizes=[3, 3],
        patch_stride=[2, 2],
        patch_padding=[1, 1],
        embed_dim=[8, 12],
        num_heads=[2, 3],
        depth=[2, 2],
        mlp_ratio=[2.0, 2.0],
        attention_drop_rate=[0.0, 0.0],
        drop_rate=[0.0, 0.0],
        drop_path_rate=[0.0, 0.0],
        qkv_bias=[True, False],
        cls_token=[False, True],
        qkv_projection_method=["dw_bn", "dw_bn"],
        kernel_qkv=[3, 3],
        padding_kv=[1, 1],
        stride_kv=[2, 2],
        padding_q=[1, 1],
        stride_q=[1, 1],
    )


@pytest.mark.parametrize("stage", [0, 1], ids=["stage0-pixels", "stage1-cls"])
def test_cvt_stage_float64(stage):
    """A whole CvtStage (conv embedding + LayerNorm, class token, 2 layers), non-square
    input: hidden (D, h, w) and the class token."""
    st = randomize_(CvtStage(_stage_config(), stage).double().eval(), 4 + stage)
    channels = 3 if stage == 0 else 8
    g = torch.Generator().manual_seed(stage)
    x = torch.randn(channels, 10, 12, dtype=torch.float64, generator=g)
    with torch.no_grad():
        hidden, cls = st(x[None])
    model = from_hf(st)
    assert (model.cls_token is None) == (cls is None)
    jh, jc = eqx.filter_jit(model)(jnp.asarray(to_np(x)))
    assert jh.shape == tuple(hidden.shape[1:]) == ((8, 12)[stage], 5, 6)
    assert 0.3 < float(hidden.abs().max()) < 30
    assert max_abs(jh, to_np(hidden[0])) <= 1e-10
    if cls is not None:
        assert max_abs(jc, to_np(cls[0, 0])) <= 1e-10


def test_cvt_stage_float32():
    st = randomize_(CvtStage(_stage_config(), 1).float().eval(), 6)
    x = torch.randn(2, 8, 9, 11, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        hidden, cls = st(x)
    model = from_hf(st)
    jh, jc = eqx.filter_jit(eqx.filter_vmap(model))(jnp.asarray(to_np(x)))
    assert jh.dtype == jnp.float32
    assert rel_err(jh, to_np(hidden)) <= 1e-5
    assert rel_err(jc, to_np(cls[:, 0])) <= 1e-5


def test_cvt_unsupported_projection_method_names_the_option():
    layer = _layer(LAYERS[1], method="avg").eval()
    with pytest.raises(ValueError, match="qkv_projection_method"):
        from_hf(layer, grid_shape=(3, 6))


def test_cvt_layer_needs_grid_shape_and_matching_tokens():
    c = LAYERS[0]
    layer = randomize_(_layer(c).double().eval(), 7)
    with pytest.raises(ValueError, match="grid_shape"):
        from_hf(layer)
    model = from_hf(layer, grid_shape=(5, 5))  # 1 + 25 tokens expected, 1 + 20 given
    with pytest.raises(ValueError, match="grid_shape"):
        model(jnp.asarray(to_np(_tokens(c, torch.float64))))


def test_cvt_strided_query_is_rejected():
    c = LAYERS[1]
    layer = randomize_(_layer(c, stride_q=2).double().eval(), 8)
    model = from_hf(layer, grid_shape=c[7])
    with pytest.raises(ValueError, match="one query per token"):
        model(jnp.asarray(to_np(_tokens(c, torch.float64))))

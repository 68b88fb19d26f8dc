"""The input policy (issue 17): one rule for what users really pass, at every entry point.

Every rejection must name the argument, and the error must be raised by transflow's own
checks (the last traceback frame is in the transflow package), so that no internal
JAX/NumPy message ("carry input and carry output must have equal types", "zero-size
array to reduction operation", "Cannot interpret 'torch.float64' as a data type") reaches
the user. Accepted inputs (torch tensors, narrower floats) must give the same numbers as
the equivalent jax input.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transflow
from _reference import require
from transflow import (
    AttentionParams,
    LayerControls,
    SplitTransformer,
    attention,
    attention_scores,
    evolve,
    online_softmax_attention,
    project_s1,
    project_s2,
    stack_controls,
)

torch = require("torch", reason="the torch-tensor and converter cases need PyTorch")

PKG = pathlib.Path(transflow.__file__).resolve().parent


def _raises(exc, fn, *needles):
    """``fn()`` raises ``exc`` from transflow code, with every needle in the message."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)
    origin = pathlib.Path(str(info.traceback[-1].path)).resolve()
    assert PKG in origin.parents, f"raised outside transflow ({origin}): {msg}"
    return msg


def _controls(dtype, n_layers=2, d=8):
    keys = jax.random.split(jax.random.key(0), n_layers)
    return stack_controls([LayerControls.random(d, n_heads=2, dtype=dtype, key=k) for k in keys])


def _u(dtype, n=5, d=8):
    return np.random.default_rng(0).standard_normal((n, d)).astype(dtype)


# ------------------------------------------------------------------ the core entry points
def _entry_points(dtype):
    """name -> (callable of one array, the argument's name) for a model in ``dtype``."""
    theta = _controls(dtype)
    p = AttentionParams.random(8, n_heads=2, dtype=dtype, key=jax.random.key(1))
    model = SplitTransformer(theta)
    return {
        "evolve": (lambda u: evolve(u, theta), "u0"),
        "SplitTransformer": (lambda u: model(u), "u"),
        "SplitTransformer.substeps": (lambda u: model.substeps(u), "u"),
        "attention": (lambda u: attention(u, p), "u"),
        "attention_scores": (lambda u: attention_scores(u, p), "u"),
    }


ENTRY = list(_entry_points(np.float64))


@pytest.mark.parametrize("entry", ENTRY)
def test_float64_input_to_float32_model_is_rejected(entry):
    fn, arg = _entry_points(np.float32)[entry]
    msg = _raises(TypeError, lambda: fn(jnp.asarray(_u(np.float64))), f"`{arg}`")
    assert "float64" in msg and "float32" in msg and ".astype(jnp.float32)" in msg


@pytest.mark.parametrize("entry", ENTRY)
def test_float32_input_to_float64_model_is_cast_up_exactly(entry):
    fn, _ = _entry_points(np.float64)[entry]
    u32 = _u(np.float32)
    got = jax.tree.leaves(fn(jnp.asarray(u32)))
    want = jax.tree.leaves(fn(jnp.asarray(u32.astype(np.float64))))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == jnp.float64
        np.testing.assert_array_equal(g, w)  # the cast up is exact: identical bits


@pytest.mark.parametrize("entry", ENTRY)
def test_torch_tensor_is_converted(entry):
    fn, _ = _entry_points(np.float64)[entry]
    u = _u(np.float64)
    got = jax.tree.leaves(fn(torch.from_numpy(u)))
    want = jax.tree.leaves(fn(jnp.asarray(u)))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("entry", ENTRY)
def test_zero_tokens_are_rejected(entry):
    fn, arg = _entry_points(np.float64)[entry]
    _raises(ValueError, lambda: fn(jnp.zeros((0, 8))), f"`{arg}` is empty", "no tokens")


@pytest.mark.parametrize("entry", ENTRY)
def test_integer_input_is_rejected(entry):
    fn, arg = _entry_points(np.float64)[entry]
    _raises(TypeError, lambda: fn(jnp.ones((5, 8), jnp.int32)), f"`{arg}`", "astype")


def test_bfloat16_torch_tensor_is_rejected_with_the_conversion():
    u = torch.ones((5, 8), dtype=torch.bfloat16)
    _raises(
        TypeError,
        lambda: attention(u, AttentionParams.random(8, key=jax.random.key(0))),
        "`u`",
        "bfloat16",
        ".float()",
    )


def test_projections_and_online_attention_follow_the_policy():
    u = _u(np.float64)
    np.testing.assert_array_equal(project_s2(torch.from_numpy(u)), np.maximum(u, 0))
    np.testing.assert_array_equal(project_s1(torch.from_numpy(u)), project_s1(jnp.asarray(u)))
    _raises(TypeError, lambda: project_s1([[1.0, 2.0]]), "`v`", "jnp.asarray")
    q = jnp.ones((1, 4, 2))
    _raises(ValueError, lambda: online_softmax_attention(q, q[:, :0], q[:, :0]), "`k` is empty")
    _raises(TypeError, lambda: online_softmax_attention(q.astype(jnp.float32), q, q), "`k`")


def test_non_finite_input_names_the_argument():
    fn, arg = _entry_points(np.float64)["SplitTransformer"]
    u = _u(np.float64)
    u[2, 3] = np.nan
    with pytest.raises(Exception, match=f"`{arg}` contains NaN or Inf"):
        fn(jnp.asarray(u))


# ------------------------------------------------------------------ converted models
def _torch_layer(**kw):
    torch.manual_seed(0)
    opts = dict(dropout=0.0, batch_first=True)
    opts.update(kw)
    return torch.nn.TransformerEncoderLayer(8, 2, 16, **opts)


def _converted_models():
    """name -> (float32 model, one valid float32 input, the argument's name)."""
    from transformers import CvtConfig, ViTConfig
    from transformers.models.cvt.modeling_cvt import CvtStage
    from transformers.models.vit.modeling_vit import ViTModel

    from transflow.interop import from_hf, from_torch

    torch.manual_seed(0)
    vit = ViTModel(
        ViTConfig(
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=16,
            image_size=8,
            patch_size=4,
            num_channels=1,
        )
    ).eval()
    cvt_cfg = CvtConfig(
        num_channels=1,
        patch_sizes=[3],
        patch_stride=[2],
        patch_padding=[1],
        embed_dim=[8],
        num_heads=[2],
        depth=[1],
        cls_token=[False],
    )
    cvt = CvtStage(cvt_cfg, 0).eval()
    rng = np.random.default_rng(0)
    return {
        "torch encoder": (from_torch(_torch_layer().eval()), _u(np.float32), "u"),
        "ViT": (from_hf(vit), rng.standard_normal((1, 8, 8)).astype(np.float32), "image"),
        "CvT": (from_hf(cvt), rng.standard_normal((1, 6, 6)).astype(np.float32), "x"),
    }


@pytest.fixture(scope="module")
def converted():
    require("transformers", reason="the HF converted models need transformers")
    return _converted_models()


@pytest.mark.parametrize("name", ["torch encoder", "ViT", "CvT"])
def test_converted_models_reject_float64_and_accept_torch(converted, name):
    model, x, arg = converted[name]
    msg = _raises(TypeError, lambda: model(jnp.asarray(x, jnp.float64)), f"`{arg}`")
    assert "float64" in msg and "float32" in msg
    want = jax.tree.leaves(model(jnp.asarray(x)))
    for g, w in zip(jax.tree.leaves(model(torch.from_numpy(x))), want, strict=True):
        assert g.dtype == jnp.float32
        np.testing.assert_array_equal(g, w)


def test_converted_models_reject_empty_inputs(converted):
    model, x, arg = converted["torch encoder"]
    _raises(ValueError, lambda: model(x[:0]), f"`{arg}` is empty")
    model, x, arg = converted["CvT"]
    _raises(ValueError, lambda: model(x[:, :0]), f"`{arg}` is empty")
    model, x, arg = converted["ViT"]
    _raises(ValueError, lambda: model(x[:, :0]), f"`{arg}`")


def test_gpt2_ids_torch_tensor_and_empty():
    require("transformers", reason="GPT-2 needs transformers")
    from transformers import GPT2Config, GPT2Model

    from transflow.interop import from_hf

    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=8, n_layer=1, n_head=2, n_positions=16, vocab_size=11)
    model = from_hf(GPT2Model(cfg).eval())
    ids = np.array([1, 4, 2, 7])
    np.testing.assert_array_equal(model(torch.from_numpy(ids)), model(jnp.asarray(ids)))
    _raises(ValueError, lambda: model(jnp.zeros((0,), jnp.int32)), "`ids` is empty")
    _raises(TypeError, lambda: model(jnp.asarray(ids, jnp.float32)), "`ids`")


# ------------------------------------------------------------------ converter checks
def test_from_torch_rejects_rmsnorm():
    from transflow.interop import from_torch

    layer = _torch_layer()
    layer.norm1 = torch.nn.RMSNorm(8)
    _raises(ValueError, lambda: from_torch(layer), "`norm1`", "RMSNorm", "LayerNorm")


def test_from_torch_rejects_a_non_layernorm_final_norm():
    from transflow.interop import from_torch

    enc = torch.nn.TransformerEncoder(
        _torch_layer(), 1, norm=torch.nn.RMSNorm(8), enable_nested_tensor=False
    )
    _raises(ValueError, lambda: from_torch(enc), "norm", "RMSNorm")


def test_from_torch_rejects_training_mode_dropout():
    from transflow.interop import from_torch

    layer = _torch_layer(dropout=0.2)
    assert layer.training
    _raises(
        ValueError, lambda: from_torch(layer), "`module`", "training mode", "p=0.2", "module.eval()"
    )
    from_torch(layer.eval())  # eval mode: dropout is the identity, accepted
    from_torch(_torch_layer(dropout=0.0))  # training mode without dropout: same outputs


def test_from_hf_rejects_training_mode_dropout():
    require("transformers", reason="the HF case needs transformers")
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    from transflow.interop import from_hf

    layer = ViTLayer(
        ViTConfig(
            hidden_size=8, num_attention_heads=2, intermediate_size=16, hidden_dropout_prob=0.2
        )
    )
    _raises(ValueError, lambda: from_hf(layer), "`module`", "training mode", "module.eval()")


def test_from_torch_rejects_unsupported_activation():
    from transflow.interop import from_torch

    _raises(
        ValueError,
        lambda: from_torch(_torch_layer(activation=torch.nn.functional.softplus)),
        "activation",
    )


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_half_precision_layers_need_an_explicit_dtype(dt):
    from transflow.interop import from_torch

    layer = _torch_layer(dtype=getattr(torch, dt)).eval()
    _raises(ValueError, lambda: from_torch(layer), "`module`", dt, "dtype=jnp.float32")
    model = from_torch(layer, dtype=jnp.float32)  # explicit: the exact upcast
    assert model.controls.attn.wq.dtype == jnp.float32
    want = layer.self_attn.in_proj_weight.detach().float().numpy()[:8].T
    np.testing.assert_array_equal(model.controls.attn.wq[0], want)


def test_mixed_parameter_dtypes_are_rejected():
    from transflow.interop import from_torch

    layer = _torch_layer().eval()
    layer.linear1.double()
    _raises(ValueError, lambda: from_torch(layer), "`module`", "mixes", "torch.float64")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_rejected_by_name(bad):
    from transflow.interop import from_torch

    layer = _torch_layer().eval()
    with torch.no_grad():
        layer.linear2.weight[1, 2] = bad
    _raises(ValueError, lambda: from_torch(layer), "`module`", "'linear2.weight'", "NaN/Inf")


def test_from_hf_checks_weights_and_dtypes():
    require("transformers", reason="the HF case needs transformers")
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    from transflow.interop import from_hf

    cfg = GPT2Config(n_embd=8, n_head=2, n_positions=8)
    block = GPT2Block(cfg).eval()
    with torch.no_grad():
        block.mlp.c_fc.weight[0, 0] = float("nan")
    _raises(ValueError, lambda: from_hf(block), "`module`", "'mlp.c_fc.weight'", "NaN/Inf")
    _raises(ValueError, lambda: from_hf(GPT2Block(cfg).half().eval()), "`module`", "float16")

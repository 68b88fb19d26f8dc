"""Every pointwise HF/torch activation as a function option of the FFN sub-step.

Pointwise: transflow's map equals HF's ``ACT2FN`` / torch's function or module to
≤ 1e-14 · max(1, |y|) in float64 on [−30, 30] (torch and XLA evaluate tanh, exp
differently in the last bits). Models (float64, ≤ 1e-10 · max(1, |y|)):
torch ``nn.TransformerEncoderLayer``/``DecoderLayer``, BERT, RoBERTa, DistilBERT, GPT-2
and Llama (the gate of the gated FFN) with these activations, with a padding mask.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the activation tests need PyTorch")
pytest.importorskip("transformers", reason="the activation tests need transformers")

from transformers import (  # noqa: E402
    BertConfig,
    BertModel,
    DistilBertConfig,
    DistilBertModel,
    GPT2Config,
    GPT2Model,
    LlamaConfig,
    LlamaModel,
    RobertaConfig,
    RobertaModel,
)
from transformers.activations import ACT2FN  # noqa: E402

from test_hf_helpers import (  # noqa: E402
    padded_batch,
    randomize_,
    run_padded,
    scaled_err,
    to_np,
)
from transflow._operators import PROJECTION_ACTIVATIONS, activation_fn  # noqa: E402
from transflow.interop import from_hf, from_torch, hf_activation, hf_float64_reference  # noqa: E402
from transflow.interop._acts import HF_ACTIVATIONS, torch_activation  # noqa: E402

X = np.linspace(-30.0, 30.0, 4001)
F = torch.nn.functional
TORCH_ACTS = {
    "F.relu": F.relu,
    "F.gelu": F.gelu,
    "F.silu": F.silu,
    "F.mish": F.mish,
    "F.relu6": F.relu6,
    "F.leaky_relu": F.leaky_relu,
    "torch.tanh": torch.tanh,
    "torch.sigmoid": torch.sigmoid,
    "nn.SiLU": torch.nn.SiLU(),
    "nn.Mish": torch.nn.Mish(),
    "nn.ReLU6": torch.nn.ReLU6(),
    "nn.LeakyReLU(0.2)": torch.nn.LeakyReLU(0.2),
    "nn.Tanh": torch.nn.Tanh(),
    "nn.GELU(tanh)": torch.nn.GELU(approximate="tanh"),
}


@pytest.mark.parametrize("name", sorted(HF_ACTIVATIONS))
def test_hf_activation_is_hfs_map(name):
    ref = to_np(ACT2FN[name](torch.tensor(X)))
    ours = activation_fn(hf_activation(name))(jnp.asarray(X))
    assert np.max(np.abs(np.asarray(ours) - ref) / np.maximum(1.0, np.abs(ref))) <= 1e-14


@pytest.mark.parametrize("name", list(TORCH_ACTS))
def test_torch_activation_is_torchs_map(name):
    act = TORCH_ACTS[name]
    ref = to_np(act(torch.tensor(X)))
    ours = activation_fn(torch_activation(act, "test"))(jnp.asarray(X))
    assert np.max(np.abs(np.asarray(ours) - ref) / np.maximum(1.0, np.abs(ref))) <= 1e-14


def test_projection_activations_are_projections():
    """relu, relu6 and identity are idempotent and non-expansive (projections onto convex
    sets); leaky_relu, silu, ... are not idempotent (explicit maps)."""
    v = jnp.asarray(X)
    for name in PROJECTION_ACTIVATIONS:
        p = activation_fn(name)
        assert bool(jnp.array_equal(p(p(v)), p(v))), name
    for name in ("leaky_relu", "silu", "gelu", "tanh", "mish", "quick_gelu"):
        f = activation_fn(name)
        assert float(jnp.max(jnp.abs(f(f(v)) - f(v)))) > 1e-3, name
    assert activation_fn("leaky_relu:0.5")(jnp.array([-2.0])).tolist() == [-1.0]
    with pytest.raises(ValueError, match="unsupported activation"):
        activation_fn("leaky_relu:abc")


# ------------------------------------------------------------------ torch layers
@pytest.mark.parametrize(
    "name",
    [
        "F.silu",
        "nn.LeakyReLU(0.2)",
        *(pytest.param(n, marks=pytest.mark.slow) for n in ("nn.Mish", "nn.ReLU6", "torch.tanh")),
    ],
)
def test_torch_encoder_layer_with_activation(name):
    layer = torch.nn.TransformerEncoderLayer(
        16, 2, 24, dropout=0.0, activation=TORCH_ACTS[name], batch_first=True
    )
    layer = randomize_(layer.double().eval(), 0)
    x = torch.randn(2, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 5:] = True
    with torch.no_grad():
        ref = to_np(layer(x, src_key_padding_mask=pad))
    model = from_torch(layer)
    out = jax.vmap(lambda u, p: model(u, key_padding_mask=p))(
        jnp.asarray(to_np(x)), jnp.asarray(to_np(pad))
    )
    keep = ~to_np(pad)
    assert scaled_err(np.asarray(out)[keep], ref[keep]) <= 1e-10


def test_torch_decoder_layer_with_activation():
    layer = torch.nn.TransformerDecoderLayer(
        16, 2, 24, dropout=0.0, activation=F.silu, batch_first=True, norm_first=True
    )
    layer = randomize_(layer.double().eval(), 2)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 6, 16, dtype=torch.float64, generator=g)
    mem = torch.randn(1, 5, 16, dtype=torch.float64, generator=g)
    with torch.no_grad():
        ref = to_np(layer(x, mem)[0])
    model = from_torch(layer)
    out = model(jnp.asarray(to_np(x[0])), jnp.asarray(to_np(mem[0])))
    assert scaled_err(out, ref) <= 1e-10


# ------------------------------------------------------------------ HF families
def _bert_like(kind, act):
    common = dict(vocab_size=23, max_position_embeddings=24, attn_implementation="eager")
    if kind == "distilbert":
        cfg = DistilBertConfig(
            dim=16, n_heads=2, hidden_dim=24, n_layers=1, activation=act, **common
        )
        return DistilBertModel(cfg)
    cls, model = (RobertaConfig, RobertaModel) if kind == "roberta" else (BertConfig, BertModel)
    cfg = cls(
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=24,
        num_hidden_layers=1,
        hidden_act=act,
        **common,
    )
    return model(cfg, add_pooling_layer=False)


BERT_CASES = [
    ("bert", "silu"),
    ("bert", "quick_gelu"),
    ("bert", "tanh"),
    ("distilbert", "silu"),
    ("roberta", "gelu_fast"),
    *(
        pytest.param(k, a, marks=pytest.mark.slow)
        for k, a in (
            ("bert", "mish"),
            ("bert", "leaky_relu"),
            ("bert", "relu6"),
            ("bert", "gelu_new"),
            ("roberta", "swish"),
            ("distilbert", "gelu_pytorch_tanh"),
        )
    ),
]


@pytest.mark.parametrize(("kind", "act"), BERT_CASES)
def test_bert_family_with_activation(kind, act):
    hf = randomize_(_bert_like(kind, act).double().eval(), 4)
    ids, keep = padded_batch(23, 9, 6, seed=5)
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    out = run_padded(from_hf(hf), ids, keep)
    kept = to_np(keep).astype(bool)
    assert scaled_err(out[kept], ref[kept]) <= 1e-10


@pytest.mark.parametrize(
    "act", ["gelu_fast", "silu", pytest.param("quick_gelu", marks=pytest.mark.slow)]
)
def test_gpt2_with_activation(act):
    cfg = GPT2Config(
        n_embd=16,
        n_head=2,
        n_inner=24,
        n_layer=1,
        n_positions=16,
        vocab_size=11,
        activation_function=act,
        attn_implementation="eager",
    )
    hf = randomize_(GPT2Model(cfg).double().eval(), 6)
    ids = torch.randint(0, 11, (1, 8), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ref = to_np(hf(ids).last_hidden_state[0])
    assert scaled_err(from_hf(hf)(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10


@pytest.mark.parametrize(
    "act", ["gelu_fast", "mish", pytest.param("leaky_relu", marks=pytest.mark.slow)]
)
def test_llama_gate_with_activation(act):
    cfg = LlamaConfig(
        hidden_size=16,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=24,
        num_hidden_layers=1,
        vocab_size=11,
        hidden_act=act,
        attn_implementation="eager",
    )
    hf = randomize_(LlamaModel(cfg).double().eval(), 8)
    ids = torch.randint(0, 11, (1, 8), generator=torch.Generator().manual_seed(9))
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids).last_hidden_state[0])
    model = from_hf(hf)
    assert model.decoder.controls.ffn.activation == hf_activation(act)
    assert scaled_err(model(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10

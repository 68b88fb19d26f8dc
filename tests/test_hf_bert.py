"""BERT-family encoders: transflow reproduces HF ``BertLayer``, ``BertModel`` (token types,
positions, pooler), ``RobertaModel`` (padding-aware position ids) and ``DistilBertModel``.
Their layers are post-LN: exactly the paper's Lie scheme (docs/spec/continuous-model.md §3.5).

float64: max |Δ| ≤ 1e-10 · max(1, |y|) (HF's BERT family computes its softmax in the input
dtype, so no patch is needed); float32: max |Δ| / max |y| ≤ 1e-5.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
pytest.importorskip("transformers", reason="the HF equivalence tests need transformers")

from transformers import (  # noqa: E402
    BertConfig,
    BertModel,
    DistilBertConfig,
    DistilBertModel,
    RobertaConfig,
    RobertaModel,
)
from transformers.models.roberta.modeling_roberta import RobertaEmbeddings  # noqa: E402

import transflow  # noqa: E402
from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import TextEncoder, from_hf  # noqa: E402

VOCAB = 37


def randomize_text_(module, seed):
    """``randomize_`` plus LayerNorm gains 1 + N(0, 0.2²) (BERT names them ``LayerNorm``)."""
    randomize_(module, seed)
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for mod in module.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                r = torch.randn(mod.weight.shape, generator=g, dtype=mod.weight.dtype)
                mod.weight.copy_(1.0 + 0.2 * r)
    return module


def _bert_config(cls=BertConfig, d=32, h=4, inter=48, layers=2, act="gelu", **kw):
    return cls(
        hidden_size=d,
        num_attention_heads=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        vocab_size=VOCAB,
        max_position_embeddings=24,
        hidden_act=act,
        attn_implementation="eager",
        **kw,
    )


def _distil_config(d=32, h=4, inter=48, layers=2, act="gelu"):
    return DistilBertConfig(
        dim=d,
        n_heads=h,
        hidden_dim=inter,
        n_layers=layers,
        vocab_size=VOCAB,
        max_position_embeddings=24,
        activation=act,
        attn_implementation="eager",
    )


def _ids(n=9, seed=0, batch=1, low=2):
    return torch.randint(low, VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize(
    ("d", "h", "act", "pooler"),
    [(32, 4, "gelu", True), pytest.param(30, 3, "gelu_new", False, marks=pytest.mark.slow)],
)
def test_bert_model_float64(d, h, act, pooler):
    """BertModel: f = LN(word + token type + position) → 2 post-LN Lie steps → pooler."""
    hf = BertModel(_bert_config(d=d, h=h, act=act), add_pooling_layer=pooler)
    hf = randomize_text_(hf.double().eval(), 1)
    ids = _ids()
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        o = hf(ids, token_type_ids=types)
    model = from_hf(hf)
    assert isinstance(model, TextEncoder)
    assert model.encoder.scheme == transflow.LieScheme()
    ji, jt = jnp.asarray(to_np(ids[0])), jnp.asarray(to_np(types[0]))
    with torch.no_grad():
        f_ref = to_np(hf.embeddings(ids, token_type_ids=types)[0])
    assert _err(model.initial_condition(ji, jt), f_ref) <= 1e-12
    last = to_np(o.last_hidden_state[0])
    assert 0.3 < np.abs(last).max() < 30
    out = eqx.filter_jit(model)(ji, jt)
    assert _err(out, last) <= 1e-10
    if pooler:
        assert _err(model.readout(out), to_np(o.pooler_output[0])) <= 1e-10
    else:
        with pytest.raises(ValueError, match="pooler"):
            model.readout(out)


def test_bert_layer_is_the_lie_scheme_substep_by_substep():
    """BertLayer = one LieScheme step: ln1 = LN₁(u + 𝒜u), ln2 = LN₂(ln1 + ℱ(ln1))."""
    hf = randomize_text_(BertModel(_bert_config(layers=1)).double().eval(), 2)
    layer = hf.encoder.layer[0]
    x = torch.randn(1, 7, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = layer(x)
        a = layer.attention(x)[0]
    model = from_hf(layer)
    u = jnp.asarray(to_np(x[0]))
    assert _err(model(u), to_np(out[0])) <= 1e-10
    states = model.substeps(u)
    assert _err(states["ln1"], to_np(a[0])) <= 1e-10
    assert _err(states["ln2"], to_np(out[0])) <= 1e-10
    assert from_hf(hf.encoder.layer).num_layers == 1


def test_roberta_model_float64_with_padding_positions():
    """RobertaModel: position ids start at padding_idx + 1 and skip padding tokens."""
    cfg = _bert_config(RobertaConfig, pad_token_id=1)
    hf = randomize_text_(RobertaModel(cfg).double().eval(), 4)
    ids = _ids(seed=5)
    ids[0, 3] = 1  # a padding token inside the sequence shifts the later positions
    ids[0, -2:] = 1
    with torch.no_grad():
        o = hf(ids)
    model = from_hf(hf)
    ji = jnp.asarray(to_np(ids[0]))
    ref_pos = RobertaEmbeddings.create_position_ids_from_input_ids(ids, 1)[0]
    assert np.array_equal(np.asarray(model.embedding.position_ids(ji)), to_np(ref_pos))
    assert _err(eqx.filter_jit(model)(ji), to_np(o.last_hidden_state[0])) <= 1e-10
    assert _err(model.pooled(ji), to_np(o.pooler_output[0])) <= 1e-10


def test_distilbert_model_float64():
    hf = randomize_text_(DistilBertModel(_distil_config(d=24, h=3)).double().eval(), 6)
    ids = _ids(seed=7)
    with torch.no_grad():
        ref = to_np(hf(ids).last_hidden_state[0])
    model = from_hf(hf)
    assert model.embedding.token_types is None and model.pooler is None
    assert _err(eqx.filter_jit(model)(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10
    assert from_hf(hf.transformer.layer).num_layers == 2


@pytest.mark.parametrize(
    "family",
    ["bert", *(pytest.param(f, marks=pytest.mark.slow) for f in ("roberta", "distilbert"))],
)
def test_bert_family_float32_batched(family):
    if family == "distilbert":
        hf = DistilBertModel(_distil_config())
    elif family == "roberta":
        hf = RobertaModel(_bert_config(RobertaConfig))
    else:
        hf = BertModel(_bert_config())
    hf = randomize_text_(hf.float().eval(), 8)
    ids = _ids(batch=3, seed=9)
    with torch.no_grad():
        ref = to_np(hf(ids).last_hidden_state)
    model = from_hf(hf)
    out = eqx.filter_jit(jax.vmap(lambda i: model(i)))(jnp.asarray(to_np(ids)))
    assert out.dtype == jnp.float32
    assert float(np.max(np.abs(out - ref)) / np.abs(ref).max()) <= 1e-5


def test_bert_decoder_config_is_causal():
    """``is_decoder=True`` (without cross-attention) makes BERT's self-attention causal."""
    hf = randomize_text_(BertModel(_bert_config(is_decoder=True)).double().eval(), 10)
    ids = _ids(seed=11)
    with torch.no_grad():
        ref = to_np(hf(ids).last_hidden_state[0])
    model = from_hf(hf)
    assert isinstance(model.encoder.scheme, transflow.CausalScheme)
    assert _err(model(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10


@pytest.mark.parametrize(
    ("build", "option"),
    [
        (lambda: BertModel(_bert_config(act="laplace")), "hidden_act"),
        (lambda: DistilBertModel(_distil_config(act="gelu_10")), "activation"),
        (
            lambda: BertModel(_bert_config(is_decoder=True, add_cross_attention=True)),
            "add_cross_attention",
        ),
    ],
)
def test_unsupported_bert_options_name_the_option(build, option):
    with pytest.raises(ValueError, match=option):
        from_hf(build().eval())


# ----------------------------------------------------------------- padding masks
def _padded_batch(family, n=9, pad=3, seed=12):
    ids = _ids(n=n, batch=2, seed=seed)
    keep = torch.ones(2, n, dtype=torch.long)
    keep[1, n - pad :] = 0
    if family == "roberta":
        ids[keep == 0] = 1  # padding_idx: RoBERTa's positions skip padding tokens
    return ids, keep


def _text_model(family, dtype, seed):
    if family == "distilbert":
        hf = DistilBertModel(_distil_config())
    elif family == "roberta":
        hf = RobertaModel(_bert_config(RobertaConfig, pad_token_id=1))
    else:
        hf = BertModel(_bert_config())
    return randomize_text_(hf.to(dtype).eval(), seed)


@pytest.mark.parametrize(
    "family", ["bert", "roberta", pytest.param("distilbert", marks=pytest.mark.slow)]
)
def test_bert_family_with_padding_mask_float64(family):
    """HF ``attention_mask`` (1 = keep) = transflow ``key_padding_mask = (mask == 0)``:
    kept tokens agree with HF, and with the unpadded sequence run alone (ragged batch)."""
    hf = _text_model(family, torch.float64, 13)
    ids, keep = _padded_batch(family)
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
        alone = to_np(hf(ids[1:, :6]).last_hidden_state[0])
    model = from_hf(hf)
    pad = jnp.asarray(to_np(keep) == 0)
    assert bool(jnp.all(pad == transflow.mask_from_hf(to_np(keep))))
    out = eqx.filter_jit(jax.vmap(lambda i, p: model(i, key_padding_mask=p)))(
        jnp.asarray(to_np(ids)), pad
    )
    kept = to_np(keep).astype(bool)
    assert _err(np.asarray(out)[kept], ref[kept]) <= 1e-10
    assert _err(np.asarray(out)[1, :6], alone) <= 1e-12
    if family != "distilbert":  # the pooler reads the (kept) class token
        with torch.no_grad():
            pooled = to_np(hf(ids, attention_mask=keep).pooler_output[1])
        ji, pj = jnp.asarray(to_np(ids[1])), pad[1]
        assert _err(model.pooled(ji, key_padding_mask=pj), pooled) <= 1e-10


def test_padded_tokens_never_influence_kept_tokens():
    """Changing the padded tokens' ids changes no kept row: exactly 0.0."""
    model = from_hf(_text_model("bert", torch.float64, 14))
    ids = jnp.asarray(to_np(_ids(seed=15)[0]))
    pad = jnp.arange(9) >= 6
    a = model(ids, key_padding_mask=pad)
    b = model(ids.at[6:].set(jnp.array([3, 4, 5])), key_padding_mask=pad)
    assert float(jnp.max(jnp.abs(a[:6] - b[:6]))) == 0.0
    assert float(jnp.max(jnp.abs(a[6:] - b[6:]))) > 0.0  # padded rows do evolve


def test_bert_padding_mask_float32():
    hf = _text_model("bert", torch.float32, 16)
    ids, keep = _padded_batch("bert")
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    model = from_hf(hf)
    out = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(
        jnp.asarray(to_np(ids)), jnp.asarray(to_np(keep) == 0)
    )
    kept = to_np(keep).astype(bool)
    assert float(np.max(np.abs(np.asarray(out)[kept] - ref[kept])) / np.abs(ref).max()) <= 1e-5


def test_hf_style_attention_mask_is_refused_with_the_fix():
    model = from_hf(_text_model("bert", torch.float64, 17))
    ids = jnp.asarray(to_np(_ids()[0]))
    with pytest.raises(ValueError, match="key_padding_mask=transflow.mask_from_hf"):
        model(ids, attention_mask=jnp.ones(9, jnp.int32))
    with pytest.raises(ValueError, match="key_padding_mask"):
        model(ids, key_padding_mask=jnp.zeros(8, bool))


def test_bert_layer_with_hf_extended_4d_mask():
    """HF's extended additive mask (batch, 1, n, n) with the dtype's minimum, passed per
    sequence as a float ``attention_mask`` (``mask_from_hf``): every row agrees with the
    HF layer, padded rows included (same finite-minimum kernel)."""
    hf = randomize_text_(BertModel(_bert_config(layers=1)).double().eval(), 18)
    layer = hf.encoder.layer[0]
    n = 7
    x = torch.randn(2, n, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(19))
    keep = torch.ones(2, n, dtype=torch.bool)
    keep[1, 4:] = False
    zero = torch.zeros((), dtype=torch.float64)
    low = torch.tensor(torch.finfo(torch.float64).min, dtype=torch.float64)
    ext = torch.where(keep[:, None, None, :], zero, low).expand(2, 1, n, n)
    with torch.no_grad():
        ref = to_np(layer(x, attention_mask=ext))
    model = from_hf(layer)
    am = transflow.mask_from_hf(to_np(ext))
    out = jax.vmap(lambda u, m: model(u, attention_mask=m))(jnp.asarray(to_np(x)), am)
    assert _err(out, ref) <= 1e-10

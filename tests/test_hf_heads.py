"""Task heads as read-outs after the flow: masked-LM and sequence-classification logits of
BERT, RoBERTa, DistilBERT, GPT-2 and Llama, and the whole CvtModel, via ``from_hf`` and
``load_hf`` of ``save_pretrained`` directories.

float64: max |Δ| / max(1, max |y|) ≤ 1e-10 (Llama through ``hf_float64_reference``), with a
padding mask; float32: ≤ 1e-5 relative.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the HF tests need transformers")

from test_hf_helpers import (  # noqa: E402
    padded_batch,
    randomize_,
    rel_err,
    run_padded,
    scaled_err,
    to_np,
)
from transflow.interop import from_hf, hf_float64_reference, load_hf  # noqa: E402
from transflow.models import HeadModel  # noqa: E402

VOCAB, N = 29, 9
t = transformers


def _bert_cfg(cls, **kw):
    return cls(
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=24,
        num_hidden_layers=2,
        vocab_size=VOCAB,
        max_position_embeddings=24,
        attn_implementation="eager",
        num_labels=3,
        **kw,
    )


BUILD = {
    "BertForMaskedLM": lambda: t.BertForMaskedLM(_bert_cfg(t.BertConfig, hidden_act="silu")),
    "BertForSequenceClassification": lambda: t.BertForSequenceClassification(
        _bert_cfg(t.BertConfig)
    ),
    "RobertaForMaskedLM": lambda: t.RobertaForMaskedLM(_bert_cfg(t.RobertaConfig)),
    "RobertaForSequenceClassification": lambda: t.RobertaForSequenceClassification(
        _bert_cfg(t.RobertaConfig)
    ),
    "DistilBertForMaskedLM": lambda: t.DistilBertForMaskedLM(
        t.DistilBertConfig(
            dim=16,
            n_heads=2,
            hidden_dim=24,
            n_layers=2,
            vocab_size=VOCAB,
            max_position_embeddings=24,
            attn_implementation="eager",
        )
    ),
    "DistilBertForSequenceClassification": lambda: t.DistilBertForSequenceClassification(
        t.DistilBertConfig(
            dim=16,
            n_heads=2,
            hidden_dim=24,
            n_layers=2,
            vocab_size=VOCAB,
            max_position_embeddings=24,
            attn_implementation="eager",
            num_labels=3,
        )
    ),
    "GPT2ForSequenceClassification": lambda: t.GPT2ForSequenceClassification(
        t.GPT2Config(
            n_embd=16,
            n_head=2,
            n_inner=24,
            n_layer=2,
            n_positions=16,
            vocab_size=VOCAB,
            attn_implementation="eager",
            num_labels=3,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
    ),
    "LlamaForSequenceClassification": lambda: t.LlamaForSequenceClassification(
        t.LlamaConfig(
            hidden_size=16,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=24,
            num_hidden_layers=2,
            vocab_size=VOCAB,
            attn_implementation="eager",
            num_labels=3,
            pad_token_id=0,
        )
    ),
}
FAST = {"BertForMaskedLM", "BertForSequenceClassification", "GPT2ForSequenceClassification"}
NAMES = [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in BUILD]


def _batch(name):
    """Two sequences; the second right-padded with pad id 0 (ids ≥ 3 elsewhere; RoBERTa's
    padding_idx is 1)."""
    return padded_batch(VOCAB, N, 6, seed=1, pad_id=1 if name.startswith("Roberta") else 0)


def _compare(name, hf, model):
    ids, keep = _batch(name)
    with torch.no_grad(), hf_float64_reference(name.startswith("Llama")):
        ref = to_np(hf(ids, attention_mask=keep).logits)
    out = run_padded(model, ids, keep)
    if "MaskedLM" in name:  # per-token logits: compare the kept tokens
        kept = to_np(keep).astype(bool)
        out, ref = out[kept], ref[kept]
    assert out.shape == ref.shape
    return scaled_err(out, ref)


@pytest.mark.parametrize("name", NAMES)
def test_head_logits_float64(name):
    hf = randomize_(BUILD[name]().double().eval(), 3)
    model = from_hf(hf)
    assert isinstance(model, HeadModel)
    assert _compare(name, hf, model) <= 1e-10


@pytest.mark.parametrize(
    "name",
    [
        "BertForMaskedLM",
        "BertForSequenceClassification",
        *(pytest.param(n, marks=pytest.mark.slow) for n in BUILD if n not in FAST),
    ],
)
def test_load_hf_of_head_checkpoint(name, tmp_path):
    hf = randomize_(BUILD[name]().double().eval(), 5)
    hf.save_pretrained(tmp_path / "ckpt")
    model = load_hf(tmp_path / "ckpt")
    assert isinstance(model, HeadModel)
    assert _compare(name, hf, model) <= 1e-10


def test_head_logits_float32():
    name = "BertForSequenceClassification"
    hf = randomize_(BUILD[name]().float().eval(), 7)
    ids, keep = _batch(name)
    with torch.no_grad():
        ref = to_np(hf(ids, attention_mask=keep).logits)
    out = run_padded(from_hf(hf), ids, keep)
    assert out.dtype == np.float32
    assert rel_err(out, ref) <= 1e-5


def test_sequence_classification_reads_the_last_non_pad_token():
    """GPT-2: changing the padded tail changes nothing; the logits are the head at the
    last non-pad token of the base model's state."""
    hf = randomize_(BUILD["GPT2ForSequenceClassification"]().double().eval(), 9)
    model = from_hf(hf)
    ids, _ = _batch("GPT2")
    ji = jnp.asarray(to_np(ids[1]))
    u = model.base(ji)
    assert scaled_err(model(ji), model.head(u[5])) <= 1e-15


def _cvt_config():
    return t.CvtConfig(
        num_channels=3,
        patch_sizes=[3, 3, 3],
        patch_stride=[2, 2, 2],
        patch_padding=[1, 1, 1],
        embed_dim=[8, 12, 16],
        num_heads=[2, 3, 4],
        depth=[1, 2, 3],  # HF indexes its drop-path rates by stage: depth[s] > s
        mlp_ratio=[2.0, 2.0, 2.0],
        attention_drop_rate=[0.0] * 3,
        drop_rate=[0.0] * 3,
        drop_path_rate=[0.0] * 3,
        qkv_bias=[True, True, True],
        cls_token=[False, False, True],
        qkv_projection_method=["dw_bn"] * 3,
        kernel_qkv=[3, 3, 3],
        padding_kv=[1, 1, 1],
        stride_kv=[2, 2, 2],
        padding_q=[1, 1, 1],
        stride_q=[1, 1, 1],
    )


@pytest.mark.slow
def test_cvt_model_all_stages_float64(tmp_path):
    """CvtModel (3 stages, class token in the last): last_hidden_state and cls_token_value;
    also through load_hf of its save_pretrained directory."""
    from transflow.vision import CvtModel

    hf = randomize_(t.CvtModel(_cvt_config(), add_pooling_layer=False).double().eval(), 11)
    x = torch.randn(2, 3, 16, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        o = hf(x)
    model = from_hf(hf)
    assert isinstance(model, CvtModel) and len(model.stages) == 3
    hidden, cls = eqx.filter_jit(jax.vmap(lambda a: model(a)))(jnp.asarray(to_np(x)))
    assert hidden.shape == tuple(o.last_hidden_state.shape)
    assert scaled_err(hidden, to_np(o.last_hidden_state)) <= 1e-10
    assert scaled_err(cls, to_np(o.cls_token_value[:, 0])) <= 1e-10
    hf.save_pretrained(tmp_path / "cvt")
    loaded = load_hf(tmp_path / "cvt")
    h2, _ = loaded(jnp.asarray(to_np(x[0])))
    assert scaled_err(h2, to_np(o.last_hidden_state[0])) <= 1e-10

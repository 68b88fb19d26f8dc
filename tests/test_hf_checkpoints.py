"""Checkpoints on disk: ``from_hf`` on models loaded with ``from_pretrained(local_dir)`` and
``transflow.interop.load_hf(path)``. Models are random (small configs), saved with
``save_pretrained`` to a temporary directory and loaded back; no network.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF checkpoint tests need PyTorch")
pytest.importorskip("transformers", reason="the HF checkpoint tests need transformers")

from transformers import (  # noqa: E402
    AutoModel,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import RMSDecoder, from_hf, hf_float64_reference, load_hf  # noqa: E402

VOCAB = 23


def _ids(n=6):
    return torch.randint(0, VOCAB, (1, n), generator=torch.Generator().manual_seed(0))


def _err(out, ref) -> float:
    ref = np.asarray(ref, np.float64)
    return float(np.max(np.abs(np.asarray(out, np.float64) - ref)) / max(1.0, np.abs(ref).max()))


def _llama(tmp_path):
    cfg = LlamaConfig(
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=24,
        num_hidden_layers=2,
        vocab_size=VOCAB,
        attn_implementation="eager",
    )
    hf = randomize_(LlamaForCausalLM(cfg).double().eval(), 0)
    hf.save_pretrained(tmp_path)
    return hf


def test_from_pretrained_local_dir_then_from_hf(tmp_path):
    hf = _llama(tmp_path)
    loaded = LlamaForCausalLM.from_pretrained(
        tmp_path, local_files_only=True, attn_implementation="eager"
    ).eval()
    assert next(loaded.parameters()).dtype == torch.float64  # saved dtype is kept
    ids = _ids()
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids).logits[0])
    out = from_hf(loaded).logits(jnp.asarray(to_np(ids[0])))
    assert _err(out, ref) <= 1e-10


def test_load_hf_causal_lm_and_base_model(tmp_path):
    """load_hf picks AutoModelForCausalLM for *ForCausalLM / LMHead checkpoints (logits)
    and AutoModel otherwise (a BertForMaskedLM checkpoint gives the base encoder)."""
    hf = _llama(tmp_path / "llama")
    ids = _ids()
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids).logits[0])
    model = load_hf(tmp_path / "llama")
    assert isinstance(model, RMSDecoder) and model.unembedding is not None
    assert _err(model.logits(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10
    # dtype= converts the float64 checkpoint to float32
    assert load_hf(tmp_path / "llama", dtype=jnp.float32).table.dtype == jnp.float32

    gpt = GPT2LMHeadModel(GPT2Config(n_embd=8, n_head=2, n_layer=1, vocab_size=VOCAB))
    gpt = randomize_(gpt.double().eval(), 1)
    gpt.save_pretrained(tmp_path / "gpt2")
    with torch.no_grad():
        ref = to_np(gpt(ids).logits[0])
    assert _err(load_hf(tmp_path / "gpt2").logits(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10

    bert = BertForMaskedLM(
        BertConfig(
            hidden_size=8,
            num_attention_heads=2,
            intermediate_size=12,
            num_hidden_layers=1,
            vocab_size=VOCAB,
            attn_implementation="eager",
        )
    )
    bert = randomize_(bert.double().eval(), 2)
    bert.save_pretrained(tmp_path / "bert")
    with torch.no_grad():
        ref = to_np(bert.bert(ids).last_hidden_state[0])
    model = load_hf(tmp_path / "bert")
    assert _err(model(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10
    # the checkpoint holds no pooler: it is left out, not drawn at random as HF does
    assert model.pooler is None
    assert AutoModel.from_pretrained(tmp_path / "bert", local_files_only=True).pooler is not None


def test_load_hf_bad_paths_name_the_path(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_hf(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="empty.*no HuggingFace checkpoint"):
        load_hf(empty)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-model"}')
    with pytest.raises(ValueError, match="broken"):
        load_hf(broken)
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    BertConfig(hidden_size=8, num_attention_heads=2, vocab_size=VOCAB).save_pretrained(noweights)
    with pytest.raises(ValueError, match="noweights"):
        load_hf(noweights)
    # a checkpoint missing weights other than the pooler raises instead of random init
    partial = tmp_path / "partial"
    cfg = BertConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1, vocab_size=VOCAB)
    BertModel(cfg).save_pretrained(partial)
    from safetensors.torch import load_file, save_file

    weights = load_file(partial / "model.safetensors")
    del weights["encoder.layer.0.attention.self.query.weight"]
    save_file(weights, partial / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="partial.*query"):
        load_hf(partial)

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
        logits = to_np(bert(ids).logits[0])
    model = load_hf(tmp_path / "bert")  # loads with its masked-LM head
    assert _err(model.base(jnp.asarray(to_np(ids[0]))), ref) <= 1e-10
    assert _err(model(jnp.asarray(to_np(ids[0]))), logits) <= 1e-10
    # the checkpoint holds no pooler: the base model has none, none is drawn at random
    assert model.base.pooler is None
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


# ----------------------------------------------------------------- unreadable checkpoints
def _saved(tmp_path, name="ok"):
    cfg = BertConfig(
        hidden_size=8,
        num_attention_heads=2,
        intermediate_size=16,
        num_hidden_layers=1,
        vocab_size=VOCAB,
    )
    BertModel(cfg).save_pretrained(tmp_path / name)
    return tmp_path / name


def _corrupt(tmp_path, how):
    import json
    import shutil

    d = _saved(tmp_path)
    bad = tmp_path / f"ckpt-{how}"
    shutil.copytree(d, bad)
    st = bad / "model.safetensors"
    data = st.read_bytes()
    if how == "empty":
        st.write_bytes(b"")
    elif how == "truncated":
        st.write_bytes(data[: len(data) // 2])
    elif how == "truncated_header":
        st.write_bytes(data[:20])
    elif how == "corrupt":
        st.write_bytes(data[:8] + b"\xff" * 40 + data[48:])
    elif how == "garbage":
        st.write_bytes(b"not a safetensors file at all" * 10)
    elif how == "dtype":
        from safetensors.torch import load_file, save_file

        w = load_file(st)
        key = "encoder.layer.0.attention.self.query.weight"
        w[key] = w[key].to(torch.int32)
        save_file(w, st, metadata={"format": "pt"})
    elif how == "shape":
        cfg = json.loads((bad / "config.json").read_text())
        cfg["intermediate_size"] = 24
        (bad / "config.json").write_text(json.dumps(cfg))
    return bad


@pytest.mark.parametrize(
    ("how", "cause"),
    [
        ("empty", r"model\.safetensors' is empty"),
        ("truncated", r"model\.safetensors' is truncated: its tensors need \d+ bytes"),
        ("truncated_header", r"model\.safetensors' is truncated or corrupted"),
        ("corrupt", r"model\.safetensors' is corrupted: its header is not valid JSON"),
        ("garbage", r"model\.safetensors' is truncated or corrupted"),
        ("dtype", r"stores 'encoder\.layer\.0\.attention\.self\.query\.weight' as I32"),
        ("shape", r"do not fit the shapes of its config\.json .*intermediate\.dense"),
    ],
)
def test_load_hf_unreadable_checkpoint_raises_checkpoint_error(tmp_path, how, cause):
    """Every failure to read the weights is the documented CheckpointError (a ValueError,
    the type of transflow.control's checkpoints too) naming the path and the cause."""
    from transflow.control import CheckpointError as ControlCheckpointError
    from transflow.interop import CheckpointError

    assert CheckpointError is ControlCheckpointError and issubclass(CheckpointError, ValueError)
    bad = _corrupt(tmp_path, how)
    with pytest.raises(CheckpointError, match=rf"ckpt-{how}.*{cause}|{cause}.*ckpt-{how}") as info:
        load_hf(bad)
    assert str(bad) in str(info.value)
    assert "SafetensorError" not in str(info.value)


def test_load_hf_bfloat16_checkpoint_still_loads(tmp_path):
    """A float checkpoint in another float dtype is no error (HF casts floats exactly up)."""
    from safetensors.torch import load_file, save_file

    d = _saved(tmp_path)
    w = {k: v.to(torch.bfloat16) for k, v in load_file(d / "model.safetensors").items()}
    save_file(w, d / "model.safetensors", metadata={"format": "pt"})
    assert load_hf(d)(jnp.array([1, 5, 7])).shape == (3, 8)

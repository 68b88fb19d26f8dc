"""T5 (v1.0 ReLU, v1.1/flan gated-GELU) reproduced by transflow: ``T5EncoderModel``,
``T5Model`` and ``T5ForConditionalGeneration`` (LM logits), via ``from_hf`` and ``load_hf``.

float64: max |Δ| / max(1, max |y|) ≤ 1e-10 against HF run through ``hf_float64_reference``
(T5LayerNorm computes its mean square in float32), with padding masks on the encoder and
the decoder; float32: ≤ 1e-5 relative. Relative position buckets: equal to HF's for every
offset. Small random models (d = 16, 3 heads of width 6, 8 buckets, max distance 12, 14
encoder tokens so that the logarithmic buckets are used).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the HF equivalence tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the HF tests need transformers")

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import from_hf, hf_float64_reference, load_hf  # noqa: E402
from transflow.models import (  # noqa: E402
    RelativePositionBias,
    T5Encoder,
    T5EncoderDecoder,
    T5Stack,
    relative_position_buckets,
)

VOCAB, N, T = 37, 14, 9
CLASSES = ("T5EncoderModel", "T5Model", "T5ForConditionalGeneration")


def _model(cls: str, proj: str, dtype, seed: int = 0):
    cfg = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=16,
        d_kv=6,  # H·d_kv = 18 ≠ d
        d_ff=24,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=3,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=12,
        feed_forward_proj=proj,
        dropout_rate=0.0,
        attn_implementation="eager",
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    model = getattr(transformers, cls)(cfg).to(dtype).eval()
    return randomize_(model, seed)


def _inputs(masked: bool):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(1, VOCAB, (2, N), generator=g)
    dec = torch.randint(1, VOCAB, (2, T), generator=g)
    keep = torch.ones(2, N, dtype=torch.long)
    dkeep = torch.ones(2, T, dtype=torch.long)
    if masked:
        keep[1, N - 4 :] = 0  # right padding, as T5's tokenizer pads
        dkeep[1, T - 3 :] = 0
    return ids, dec, keep, dkeep


def _compare(hf, cls: str, masked: bool, fp64: bool) -> float:
    with jax.disable_jit():  # small models of many shapes: op by op is faster than compiling
        return _compare_eager(hf, cls, masked, fp64)


def _compare_eager(hf, cls: str, masked: bool, fp64: bool) -> float:
    ids, dec, keep, dkeep = _inputs(masked)
    kw = {"attention_mask": keep} if masked else {}
    if cls != "T5EncoderModel":
        kw["decoder_input_ids"] = dec
        if masked:
            kw["decoder_attention_mask"] = dkeep
    with torch.no_grad(), hf_float64_reference(fp64):
        out = hf(ids, **kw)
    ref = to_np(out.logits if cls == "T5ForConditionalGeneration" else out.last_hidden_state)
    model = from_hf(hf)
    ji, jd = jnp.asarray(to_np(ids)), jnp.asarray(to_np(dec))
    kp, dkp = jnp.asarray(to_np(keep) == 0), jnp.asarray(to_np(dkeep) == 0)
    if cls == "T5EncoderModel":
        assert isinstance(model, T5Encoder)
        ours = jax.vmap(lambda i, p: model(i, key_padding_mask=p))(ji, kp)
        kept = to_np(keep).astype(bool)
    else:
        assert isinstance(model, T5EncoderDecoder)
        run = model.logits if cls == "T5ForConditionalGeneration" else model

        def one(i, d, p, q):
            return run(i, d, key_padding_mask=p, decoder_key_padding_mask=q)

        ours = jax.vmap(one)(ji, jd, kp, dkp)
        kept = to_np(dkeep).astype(bool)
    ref, ours = ref[kept].astype(np.float64), np.asarray(ours)[kept].astype(np.float64)
    diff = float(np.max(np.abs(ours - ref)))
    scale = float(np.max(np.abs(ref)))
    return diff / max(1.0, scale) if fp64 else diff / scale


@pytest.mark.parametrize("proj", ["relu", "gated-gelu"])
@pytest.mark.parametrize("cls", CLASSES)
def test_t5_matches_hf_with_padding(cls, proj):
    assert _compare(_model(cls, proj, torch.float64), cls, True, True) <= 1e-10
    assert _compare(_model(cls, proj, torch.float32), cls, True, False) <= 1e-5


def test_t5_matches_hf_without_mask():
    assert _compare(_model("T5Model", "gated-gelu", torch.float64), "T5Model", False, True) <= 1e-10


def test_float64_reference_is_needed_for_t5_layer_norm():
    # HF's T5LayerNorm takes the mean square in float32: the float64 model is off by ~1e-8
    hf = _model("T5EncoderModel", "relu", torch.float64)
    exact = _compare(hf, "T5EncoderModel", True, True)
    with torch.no_grad():
        ids, _, keep, _ = _inputs(True)
        plain = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    with torch.no_grad(), hf_float64_reference():
        ref = to_np(hf(ids, attention_mask=keep).last_hidden_state)
    assert exact <= 1e-10
    assert np.max(np.abs(plain - ref)) > 1e-12  # the float32 rounding the patch removes


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("buckets", "max_distance"), [(32, 128), (8, 12), (64, 256), (16, 40)])
def test_relative_position_buckets_are_hf_s(bidirectional, buckets, max_distance):
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-3000, 3000)
    want = T5Attention._relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance
    )
    got = relative_position_buckets(
        to_np(rel), bidirectional=bidirectional, num_buckets=buckets, max_distance=max_distance
    )
    np.testing.assert_array_equal(got, to_np(want))


def test_relative_position_bias_is_translation_invariant():
    table = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)))
    for bidirectional in (True, False):
        bias = RelativePositionBias(table, bidirectional=bidirectional, max_distance=12)
        b = np.asarray(bias(9, 9))
        for i in range(8):  # a Toeplitz matrix per head: b[m, i, j] depends on j - i only
            np.testing.assert_array_equal(b[:, i + 1, 1:], b[:, i, :-1])
    uni = np.asarray(RelativePositionBias(table, bidirectional=False, max_distance=12)(5, 5))
    np.testing.assert_array_equal(uni[:, 0, 1:], uni[:, 0, :1].repeat(4, 1))  # x̃ > x: bucket 0


def test_t5_stacks_share_one_bias_and_check_memory():
    hf = _model("T5Model", "relu", torch.float64)
    model = from_hf(hf)
    assert model.encoder.position_bias.bidirectional
    assert not model.decoder.position_bias.bidirectional
    assert model.decoder.causal and not model.encoder.causal
    assert (model.encoder.n_layers, model.decoder.n_layers) == (2, 3)
    enc = from_hf(hf.encoder)
    assert isinstance(enc, T5Stack)
    f = jnp.ones((4, 16))
    with pytest.raises(ValueError, match="memory="):
        model.decoder(f)
    with pytest.raises(ValueError, match="drop `memory=`"):
        enc(f, memory=f)


@pytest.mark.parametrize("cls", ["T5EncoderModel", "T5ForConditionalGeneration"])
def test_load_hf_of_a_saved_t5(tmp_path, cls):
    hf = _model(cls, "gated-gelu", torch.float64)
    hf.save_pretrained(tmp_path)
    loaded = load_hf(tmp_path)
    assert isinstance(loaded, T5Encoder if cls == "T5EncoderModel" else T5EncoderDecoder)
    ids, dec, keep, dkeep = _inputs(False)
    with torch.no_grad(), hf_float64_reference():
        if cls == "T5EncoderModel":
            ref = to_np(hf(ids).last_hidden_state)[0]
            ours = loaded(jnp.asarray(to_np(ids)[0]))
        else:
            ref = to_np(hf(ids, decoder_input_ids=dec).logits)[0]
            ours = loaded.logits(jnp.asarray(to_np(ids)[0]), jnp.asarray(to_np(dec)[0]))
    assert np.max(np.abs(np.asarray(ours) - ref)) <= 1e-10 * max(1.0, np.abs(ref).max())


def test_unsupported_t5_activation_names_the_option():
    hf = _model("T5EncoderModel", "relu", torch.float64)
    hf.config.dense_act_fn = "gelu_10"
    with pytest.raises(ValueError, match="feed_forward_proj"):
        from_hf(hf)

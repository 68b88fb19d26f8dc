"""The public models refuse a time step ``dt`` that is not a finite number > 0, as the
command line does (issue #38): ``SplitTransformer(theta, dt=nan)`` returned NaN, and
``dt = -0.25`` and ``dt = 0`` were accepted."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest

from transflow import LayerControls, SplitTransformer, stack_controls
from transflow.models._decoder import DecoderLayerControls, SplitDecoder
from transflow.models._flow import FlowModel, TokenEmbedding

BAD = [math.nan, -0.25, 0, 0.0, math.inf, -math.inf]


@pytest.fixture(scope="module")
def theta():
    return stack_controls([LayerControls.random(8, key=jax.random.key(i)) for i in range(2)])


@pytest.mark.parametrize("dt", BAD)
def test_split_transformer_refuses_bad_dt(theta, dt):
    with pytest.raises(ValueError, match=r"`dt` must be a finite number > 0"):
        SplitTransformer(theta, dt=dt)


@pytest.mark.parametrize("dt", [True, "0.5", [0.5]])
def test_split_transformer_refuses_non_numbers(theta, dt):
    with pytest.raises(TypeError, match="`dt`"):
        SplitTransformer(theta, dt=dt)


def test_split_transformer_accepts_a_positive_step(theta):
    out = SplitTransformer(theta, dt=0.5)(jnp.arange(32.0).reshape(4, 8) / 32)
    assert out.shape == (4, 8) and bool(jnp.all(jnp.isfinite(out)))


@pytest.fixture(scope="module")
def flow(theta):
    embed = TokenEmbedding(jnp.zeros((5, 8)), jnp.zeros((4, 8)))
    return FlowModel(embed, theta, jnp.zeros((8, 3)), jnp.zeros(3))


@pytest.mark.parametrize("dt", BAD)
def test_decoder_and_flow_model_refuse_bad_dt(theta, flow, dt):
    dec = DecoderLayerControls(
        theta.attn, theta.norm1, theta.attn, theta.norm2, theta.ffn, theta.norm2
    )
    assert SplitDecoder(dec, dt=0.5).dt == 0.5  # valid
    with pytest.raises(ValueError, match=r"SplitDecoder: `dt` must be"):
        SplitDecoder(dec, dt=dt)
    assert dataclasses.replace(flow, dt=0.5).dt == 0.5  # valid
    with pytest.raises(ValueError, match=r"FlowModel: `dt` must be"):
        dataclasses.replace(flow, dt=dt)

"""transflow.parallel in the test process (one CPU device): API, errors, 1-device meshes.

The checks on 8 host devices and on two processes run in subprocesses:
tests/test_parallel_devices.py.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from transflow import (
    Grid,
    LayerControls,
    LieScheme,
    NormParams,
    PreNormScheme,
    SplitTransformer,
    evolve,
    stack_controls,
)
from transflow.parallel import (
    ShardAxes,
    as_axes,
    controls_specs,
    make_mesh,
    max_rel_diff,
    memory_report,
    shard_evolve,
    to_host,
)

TOL64 = 1e-12  # relative, float64 (the bound)
TOL32 = 1e-5  # relative, float32


def _theta(getkey, d=8, n_heads=2, d_ff=16, layers=2, dtype=jnp.float64):
    theta = stack_controls(
        [
            LayerControls.random(d, n_heads=n_heads, d_ff=d_ff, bias=True, key=getkey())
            for _ in range(layers)
        ]
    )
    return jax.tree.map(lambda x: x.astype(dtype), theta)


def _mesh2():
    return make_mesh((1, 1), ("t", "f"), devices=jax.devices()[:1])


# --------------------------------------------------------------------------- axes / mesh
def test_shard_axes_spec_and_label():
    axes = ShardAxes(batch="b", tokens=["t1", "t2"], features="f")
    assert axes.spec() == P("b", ("t1", "t2"), "f")
    assert axes.label() == "batch×tokens×features"
    assert ShardAxes().spec() == P(None, None, None)
    assert as_axes({"tokens": "t"}) == ShardAxes(tokens="t")
    assert as_axes(None) == ShardAxes()


def test_shard_axes_rejects_reused_axis():
    with pytest.raises(ValueError, match="'t'.*tokens.*features"):
        ShardAxes(tokens="t", features=("f", "t"))


def test_as_axes_rejects_unknown_key():
    with pytest.raises(ValueError, match="tokenz"):
        as_axes({"tokenz": "t"})


def test_make_mesh_errors_name_shape_and_devices():
    with pytest.raises(ValueError, match=r"needs 8 devices, but 1"):
        make_mesh((2, 4), ("a", "b"), devices=jax.devices()[:1])
    with pytest.raises(ValueError, match="same length"):
        make_mesh((1,), ("a", "b"))
    with pytest.raises(ValueError, match="distinct"):
        make_mesh((1, 1), ("a", "a"), devices=jax.devices()[:1])


def test_make_mesh_uses_auto_axes():
    from jax.sharding import AxisType

    mesh = _mesh2()
    assert tuple(mesh.axis_types) == (AxisType.Auto, AxisType.Auto)
    assert dict(mesh.shape) == {"t": 1, "f": 1}


def test_controls_specs_split_heads_and_ffn_width(getkey):
    theta = _theta(getkey)
    specs = controls_specs(theta, ShardAxes(features="f"))
    assert specs.attn.wq == P(None, None, "f")
    assert specs.attn.wo == P(None, "f", None)
    assert specs.attn.bo == P(None, "f")
    assert specs.ffn.weights[0] == P(None, None, "f")
    assert specs.ffn.biases[1] == P(None, "f")
    assert specs.norm1.gain == P(None)  # scalar σ2 per layer: replicated
    rep = controls_specs(theta, ShardAxes(tokens="t"))
    assert all(
        s == P(*([None] * len(s))) for s in jax.tree.leaves(rep, is_leaf=lambda x: isinstance(x, P))
    )


# --------------------------------------------------------------------------- values
@pytest.mark.parametrize(
    "method, scheme", [("gspmd", LieScheme(ffn_branch_dt="2dt")), ("ring", PreNormScheme())]
)
def test_one_device_mesh_equals_evolve_float64(getkey, method, scheme):
    d, n = 8, 6
    theta = _theta(getkey, d=d)
    u = jax.random.normal(getkey(), (3, n, d))
    grid = Grid.interval(n, d, x_rule="gauss", y_rule="gauss")
    fnorm = NormParams(jnp.linspace(0.5, 1.5, d), jnp.linspace(-1.0, 1.0, d), 1e-5)
    ref = jax.vmap(
        lambda x: evolve(x, theta, scheme, grid=grid, causal=True, final_norm=fnorm, dt=0.5)
    )(u)
    out = shard_evolve(
        theta,
        u,
        _mesh2(),
        {"tokens": "t", "features": "f"},
        method=method,
        scheme=scheme,
        grid=grid,
        causal=True,
        final_norm=fnorm,
        dt=0.5,
    )
    assert out.shape == ref.shape and out.dtype == jnp.float64
    assert max_rel_diff(to_host(out), ref) <= TOL64


@pytest.mark.parametrize("method", ["gspmd", "ring"])
def test_one_device_mesh_float32_and_model(getkey, method):
    theta = _theta(getkey, dtype=jnp.float32)
    model = SplitTransformer(theta, PreNormScheme(hardmax=True))
    u = jax.random.normal(getkey(), (2, 5, 8), jnp.float32)
    ref = jax.vmap(model)(u)
    out = shard_evolve(model, u, _mesh2(), {"batch": "t"}, method=method)
    assert out.dtype == jnp.float32
    assert max_rel_diff(out, ref) <= TOL32


def test_chunked_attention_option_matches_dense(getkey):
    theta = _theta(getkey)
    u = jax.random.normal(getkey(), (2, 12, 8))
    ref = jax.vmap(lambda x: evolve(x, theta))(u)
    out = shard_evolve(
        theta,
        u,
        _mesh2(),
        {"tokens": "t"},
        attention_implementation="chunked",
        query_block=4,
        key_block=5,
    )
    assert max_rel_diff(out, ref) <= TOL64


def test_sharded_result_differs_for_a_different_model(getkey):
    """Guard against a vacuous comparison: another model gives a different result."""
    theta, other = _theta(getkey), _theta(getkey)
    u = jax.random.normal(getkey(), (2, 4, 8))
    ref = jax.vmap(lambda x: evolve(x, other))(u)
    out = shard_evolve(theta, u, _mesh2(), {"tokens": "t"}, method="ring")
    assert max_rel_diff(out, ref) > 1e-3


def test_memory_report_fields(getkey):
    theta = _theta(getkey)
    rep = memory_report(theta, jnp.ones((1, 16, 8)), _mesh2(), {"tokens": "t"})
    assert rep["temp"] > 0 and rep["output"] == 16 * 8 * 8
    assert rep["total"] == rep["temp"] + rep["argument"] + rep["output"] - rep["alias"]


# --------------------------------------------------------------------------- errors
def test_errors_name_argument_expected_and_actual(getkey):
    theta = _theta(getkey)
    mesh = _mesh2()
    with pytest.raises(ValueError, match=r"`u_batch` must have rank 3"):
        shard_evolve(theta, jnp.ones((4, 8)), mesh)
    with pytest.raises(ValueError, match=r"`method` must be one of"):
        shard_evolve(theta, jnp.ones((1, 4, 8)), mesh, method="pipeline")
    with pytest.raises(ValueError, match=r"mesh axis 'q' is not in the mesh"):
        shard_evolve(theta, jnp.ones((1, 4, 8)), mesh, {"tokens": "q"})
    with pytest.raises(TypeError, match="SplitTransformer or stacked LayerControls"):
        shard_evolve(theta.attn, jnp.ones((1, 4, 8)), mesh)
    with pytest.raises(ValueError, match="come from the SplitTransformer"):
        shard_evolve(SplitTransformer(theta), jnp.ones((1, 4, 8)), mesh, dt=0.5)
    with pytest.raises(ValueError, match="applies to method='gspmd'"):
        shard_evolve(
            theta, jnp.ones((1, 4, 8)), mesh, method="ring", attention_implementation="chunked"
        )


def test_divisibility_error_names_size_and_axis(getkey):
    """Needs 2 devices on an axis: checked before any compilation via a fake mesh shape."""
    from transflow.parallel._evolve import _check_divisible

    with pytest.raises(
        ValueError, match=r"n_tokens = 6 is not divisible by the 4 devices of mesh axis 't'"
    ):
        _check_divisible("u_batch's n_tokens", 6, "t", 4)
    _check_divisible("u_batch's n_tokens", 8, "t", 4)  # divisible: no error


@pytest.mark.parametrize("method", ["gspmd", "ring"])
def test_programs_are_reused_across_calls(getkey, method):
    from transflow.parallel._evolve import _prepare

    theta = _theta(getkey)
    u = jnp.ones((1, 4, 8))
    kw = dict(method=method, scheme=None, dt=None, grid=None, causal=False, final_norm=None)
    f1, _ = _prepare(theta, u, _mesh2(), {"tokens": "t"}, **kw)
    f2, _ = _prepare(_theta(getkey), u + 1, _mesh2(), {"tokens": "t"}, **kw)
    f3, _ = _prepare(theta, u, _mesh2(), {"tokens": "t"}, **{**kw, "causal": True})
    assert f1 is f2 and f1 is not f3

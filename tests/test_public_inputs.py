"""One input contract for the public API (issue 49): every public function and constructor
checks its arguments at the boundary, with an error whose first line names the argument.

A table lists, per public name, a call with valid arguments (it must succeed: the checks
refuse nothing valid) and, per argument, bad values (NaN, ±inf, 0 or a negative number
where a size or step is meant, a wrong shape, a wrong dtype, mismatched layers). Each bad
call must raise (no result is returned) with the argument named in the first line of the
message. A coverage test asserts that every name exported by ``transflow`` and its
subpackages is in the table or in ``EXEMPT`` with a reason.

tests/test_inputs.py holds the dtype/torch/empty-input policy (issue 17) and
tests/test_dt_validation.py the ``dt`` of the model classes (issue 38); the cases here
extend them to every entry point, with the same rule and the same message.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tomllib

import transflow
import transflow.analysis
from transflow import (
    Grid,
    LayerControls,
    SplitTransformer,
    evolve,
    stack_controls,
)

ROOT = Path(__file__).resolve().parents[1]
NAN, INF = math.nan, math.inf
BAD_STEP = [0, 0.0, -0.25, NAN, INF, -INF]  # a time step: finite and > 0
BAD_SIZE = [0, -1, 2.5, NAN, True]  # a size: an integer >= 1
BAD_NUMBER = [NAN, INF, -INF]  # any finite number


def _layer(d=8, seed=0, **kw):
    return LayerControls.random(d, key=jax.random.key(seed), **kw)


def _theta(d=8, n=2):
    return stack_controls([_layer(d, i) for i in range(n)])


def _u(n=4, d=8):
    return jnp.ones((n, d)) + jnp.arange(float(d)) / d


def _with(arr, value=NAN):
    return arr.at[(0,) * arr.ndim].set(value)


def _bad_structure(u):
    """A wrong shape and a wrong dtype in place of ``u``: what an operator checks.

    The operators (attention, project_s1, linear_y, ...) run inside every step of the
    loop of ``evolve``; a NaN check there would be a run-time check per step, so values
    are checked once at the entry points (``evolve``, the models) and the operators check
    only what is free at trace time (shapes, dtypes)."""
    return [u[..., :-1], u.astype(jnp.int32)]


def _bad_arrays(u):
    """NaN, +inf, a wrong shape and a wrong dtype in place of the array ``u``."""
    return [
        _with(u, NAN),
        _with(u, INF),
        u[..., :-1],
        u.astype(jnp.int32),
    ]


@dataclasses.dataclass(frozen=True)
class Case:
    """``call(**valid())`` succeeds; ``call(**{**valid(), arg: bad})`` raises, naming
    ``arg`` (or ``needle[arg]``) in the first line."""

    name: str  # the public name, e.g. "transflow.evolve" or "transflow.Grid.interval"
    call: Callable[..., Any]
    valid: Callable[[], dict]
    bad: dict[str, list]
    needle: dict[str, str] = dataclasses.field(default_factory=dict)


def _torch():
    return pytest.importorskip("torch", reason="the converter cases need PyTorch")


def _torch_layer(**kw):
    torch = _torch()
    torch.manual_seed(0)
    opts = dict(dropout=0.0, batch_first=True)
    opts.update(kw)
    return torch.nn.TransformerEncoderLayer(8, 2, 16, **opts).eval()


def _torch_nan_layer():
    layer = _torch_layer()
    with _torch().no_grad():
        layer.linear1.weight[0, 0] = math.nan
    return layer


def _torch_prelu_layer():
    # float64 parameters and a float32 PReLU: the activation is the problem, not the dtypes
    torch = _torch()
    return _torch_layer(activation=torch.nn.PReLU(), dtype=torch.float64)


def _maxout():
    from transflow.expressivity import zigzag_maxout

    return zigzag_maxout(2, 2)


def _shard(**kw):
    from transflow.parallel import make_mesh, shard_evolve

    mesh = make_mesh((1,), ("t",))
    return shard_evolve(kw.pop("controls"), kw.pop("u_batch"), mesh, {"tokens": "t"}, **kw)


def _path_pc(**kw):
    from transflow.continuous import PiecewiseConstant

    return PiecewiseConstant(kw.pop("stacked"), **kw)


def _path_pl(**kw):
    from transflow.continuous import PiecewiseLinear

    return PiecewiseLinear(kw.pop("values"), **kw)


def _path_basis(**kw):
    from transflow.continuous import BasisExpansion

    return BasisExpansion(kw.pop("coeffs"), **kw)


def _init_path(**kw):
    from transflow.continuous import init_path

    return init_path("linear", lambda k: LayerControls.random(4, key=k), **kw)


def _evolve_path(**kw):
    from transflow.continuous import PiecewiseConstant, evolve_path

    return evolve_path(kw.pop("u0"), PiecewiseConstant(_theta()), **kw)


def _count(**kw):
    from transflow.expressivity import count_linear_regions

    return count_linear_regions(_maxout(), **kw)


def _grid_count(**kw):
    from transflow.expressivity import grid_region_count

    return grid_region_count(_maxout(), **kw)


def _exact_1d(**kw):
    from transflow.expressivity import exact_regions_1d

    return exact_regions_1d(_maxout(), **kw)


def _lp_count(**kw):
    from transflow.expressivity import lp_region_count

    return lp_region_count(_maxout(), **kw)


def _from_torch(**kw):
    from transflow.interop import from_torch

    return from_torch(**kw)


def _layer_from_torch(**kw):
    from transflow.interop import layer_controls_from_torch

    return layer_controls_from_torch(**kw)


def _attn_p():
    from transflow import AttentionParams

    return AttentionParams.random(8, n_heads=2, key=jax.random.key(3))


def _op(fn_name):
    """A transflow operator called with an AttentionParams of d = 8."""

    def call(**kw):
        return getattr(transflow, fn_name)(kw.pop("u"), _attn_p(), **kw)

    return call


def _mlp_params():
    from transflow.expressivity import init_mlp

    return init_mlp(jax.random.PRNGKey(0), dim=1, depth=1, width=2)


def _models_dir():
    """A directory holding one saved model (sawtooth, D = 1, mlp, seed 0)."""
    import tempfile

    from transflow.expressivity import save_model

    directory = tempfile.mkdtemp()
    save_model(directory, "mlp", _mlp_params(), target="sawtooth", seed=0)
    return directory


def _save_model(**kw):
    from transflow.expressivity import save_model

    return save_model(**kw)


def _tmp_dir():
    import tempfile

    return tempfile.mkdtemp()


def _train_cell(**kw):
    from transflow.expressivity import make_target, train_cell

    return train_cell(make_target("sawtooth", teeth_log2=1), **kw)


def _load_model(**kw):
    from transflow.expressivity import load_model

    return load_model(**kw)


def _decoder_controls():
    t = _theta(n=2)
    return transflow.DecoderLayerControls(t.attn, t.norm1, t.attn, t.norm2, t.ffn, t.norm2)


def _lower(**kw):
    from transflow.parallel import lower_shard_evolve, make_mesh

    mesh = make_mesh((1,), ("t",))
    return lower_shard_evolve(kw.pop("controls"), kw.pop("u_batch"), mesh, {"tokens": "t"}, **kw)


def _flow_model(**kw):
    from transflow.control import FlowModel, TokenEmbedding

    embed = TokenEmbedding(jnp.zeros((5, 8)), jnp.zeros((4, 8)))
    return FlowModel(embed, _theta(), jnp.zeros((8, 3)), jnp.zeros(3), **kw)


def _zigzag(**kw):
    from transflow.expressivity import zigzag_maxout

    return zigzag_maxout(**kw)


def _from_hf(**kw):
    from transflow.interop import from_hf

    return from_hf(**kw)


def _order_problem():
    return transflow.schemes.OrderProblem.legendre(4, 2, path_size=2)


def _hf_vit_layer():
    pytest.importorskip("transformers", reason="the HF converter case needs transformers")
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTLayer

    _torch().manual_seed(0)
    cfg = ViTConfig(hidden_size=8, num_attention_heads=2, intermediate_size=16)
    return ViTLayer(cfg).eval()


_IN_BOX = dict(lo=0.0, hi=1.0)
_BAD_BOX = {"lo": [NAN, INF, -INF, 2.0], "hi": [NAN, INF, -INF, -1.0]}

CASES: list[Case] = [
    Case(
        "transflow.evolve",
        evolve,
        lambda: dict(u0=_u(), controls=_theta(), dt=0.5, grid=Grid.index(4, 8)),
        {"u0": _bad_arrays(_u()), "dt": BAD_STEP, "n_steps": [0, -1, 3]},
    ),
    Case(
        "transflow.SplitTransformer",
        lambda u, **kw: SplitTransformer(**kw)(u),
        lambda: dict(controls=_theta(), dt=0.5, u=_u()),
        {"dt": BAD_STEP, "u": _bad_arrays(_u())},
    ),
    Case(
        "transflow.parallel.shard_evolve",
        _shard,
        lambda: dict(controls=_theta(), u_batch=_u()[None], dt=0.5),
        {
            "u_batch": _bad_arrays(_u()[None]) + [_u()],
            "dt": BAD_STEP,
            "query_block": [0, -1, 2.5],
            "key_block": [0, -1],
        },
    ),
    Case(
        "transflow.Grid.index",
        Grid.index,
        lambda: dict(n_tokens=4, n_features=8),
        {"n_tokens": BAD_SIZE, "n_features": BAD_SIZE},
    ),
    Case(
        "transflow.Grid.uniform",
        Grid.uniform,
        lambda: dict(n_tokens=4, n_features=8, dx=0.5, dy=0.25),
        {"n_tokens": BAD_SIZE, "dx": BAD_STEP, "dy": BAD_STEP},
    ),
    Case(
        "transflow.Grid.interval",
        Grid.interval,
        lambda: dict(n_tokens=8, n_features=16, x_domain=(0, 2), y_rule="gauss"),
        {
            "n_features": BAD_SIZE,
            "x_domain": [(0, NAN), (NAN, 1), (0, INF), (1, 0), (0, 0), "ab", (0,)],
            "y_domain": [(0, NAN), (-INF, 0), (2, 1)],
            "x_rule": ["simpson", None],
            "y_rule": ["Gauss"],
        },
    ),
    Case(
        "transflow.Grid.image",
        Grid.image,
        lambda: dict(height=2, width=3, n_features=8),
        {"n_features": BAD_SIZE},
    ),
    Case(
        "transflow.LayerControls.random",
        lambda **kw: LayerControls.random(**kw, key=jax.random.key(0)),
        lambda: dict(d=8, n_heads=2, d_ff=16),
        {"d": [0, -1, 2.5], "n_heads": [0, -2, 1.0], "d_ff": [0, -4], "ffn_copies": [0, -1]},
    ),
    Case(
        "transflow.stack_controls",
        stack_controls,
        lambda: dict(layers=[_layer(8, 0), _layer(8, 1)]),
        {
            "layers": [
                [_layer(16, 0), _layer(8, 1)],
                [_layer(8, 0), _layer(8, 1, d_ff=16)],
                [_layer(8, 0), _layer(8, 1, n_heads=2)],
                [],
            ]
        },
        needle={"layers": "layer"},
    ),
    Case(
        "transflow.SplitTransformer(dt)",
        lambda **kw: SplitTransformer(**kw),
        lambda: dict(controls=_theta(), dt=0.25),
        {"dt": BAD_STEP + [True, "0.5"]},
    ),
    Case(
        "transflow.continuous.PiecewiseConstant",
        _path_pc,
        lambda: dict(stacked=_theta(), tau=0.5, t_start=1.0),
        {"tau": BAD_STEP, "t_start": BAD_NUMBER},
    ),
    Case(
        "transflow.continuous.PiecewiseLinear",
        _path_pl,
        lambda: dict(values=_theta(n=3), t0=0.0, t1=2.0),
        {"t0": BAD_NUMBER + [2.0], "t1": BAD_NUMBER + [0.0], "knots": [(0.0, 1.0)]},
    ),
    Case(
        "transflow.continuous.BasisExpansion",
        _path_basis,
        lambda: dict(coeffs=jnp.ones(3), t0=0.0, t1=1.0),
        {"t0": BAD_NUMBER, "t1": BAD_NUMBER + [-1.0], "basis": ["hermite"]},
    ),
    Case(
        "transflow.continuous.init_path",
        _init_path,
        lambda: dict(k=3, key=jax.random.key(0), t1=2.0),
        {"k": [0, -1, 2.5], "t1": BAD_NUMBER + [0.0], "t0": BAD_NUMBER},
        needle={"k": "k"},
    ),
    Case(
        "transflow.continuous.evolve_path",
        _evolve_path,
        lambda: dict(u0=_u(), n_steps=4),
        {"u0": _bad_arrays(_u()), "n_steps": [0, -1, 2.5], "where": ["right"]},
    ),
    Case(
        "transflow.expressivity.count_linear_regions",
        _count,
        lambda: dict(_IN_BOX, n_seed=8),
        {**_BAD_BOX, "n_seed": [0, -1], "time_budget": [0.0, -1.0, NAN]},
    ),
    Case(
        "transflow.expressivity.grid_region_count",
        _grid_count,
        lambda: dict(_IN_BOX, n=50),
        {**_BAD_BOX, "n": [0, -1, 2.5]},
    ),
    Case(
        "transflow.expressivity.exact_regions_1d",
        _exact_1d,
        lambda: dict(_IN_BOX),
        {**_BAD_BOX, "max_regions": [0, -1]},
    ),
    Case(
        "transflow.expressivity.lp_region_count",
        _lp_count,
        lambda: dict(_IN_BOX),
        dict(_BAD_BOX),
    ),
    Case(
        "transflow.expressivity.save_model",
        _save_model,
        lambda: dict(directory=_models_dir(), kind="mlp", params=_mlp_params(), target="t", seed=1),
        {
            "kind": ["cnn", None],
            "params": [{}, [], lambda: {"layers": _mlp_params()["layers"][:1]}],
            "target": ["", "a/b", 3],
            "seed": [-1, 2.5, NAN, True],
        },
    ),
    Case(
        "transflow.expressivity.load_model",
        _load_model,
        lambda: dict(directory=_models_dir(), target="sawtooth", depth=1, kind="mlp", seed=0),
        {
            "target": ["", "../sawtooth", None],
            "depth": BAD_SIZE + [-INF],
            "kind": ["cnn"],
            "seed": [-1, 2.5, NAN, True],
        },
    ),
    Case(
        "transflow.expressivity.train_cell",
        _train_cell,
        lambda: dict(
            depth=1,
            seed=0,
            model_dir=_tmp_dir(),
            width=2,
            n_heads=1,
            ffn_width=2,
            steps=2,
            batch=8,
            grid=8,
        ),  # fmt: skip
        {
            "depth": BAD_SIZE,
            "seed": [-1, 2.5, NAN, True],
            "steps": [1, 2.5, NAN],
            "batch": BAD_SIZE,
            "lr": BAD_NUMBER + [0.0, -1.0],
            "lam_start": BAD_NUMBER + [0.0],
            "lam_end": BAD_NUMBER + [0.0, 0.5],
            "grid": [0, 4, 2.5],
            "time_budget": [NAN, 0.0, -1.0],
        },
    ),
    Case(
        "transflow.attention",
        _op("attention"),
        lambda: dict(u=_u(), temperature=0.5),
        {"u": _bad_structure(_u())},
    ),
    Case(
        "transflow.attention_scores",
        _op("attention_scores"),
        lambda: dict(u=_u()),
        {"u": _bad_structure(_u())},
    ),
    Case(
        "transflow.chunked_attention",
        _op("chunked_attention"),
        lambda: dict(u=_u(), query_block=2, key_block=2),
        {"u": _bad_structure(_u()), "query_block": [0, -1], "key_block": [0, -1]},
    ),
    Case(
        "transflow.project_s1",
        transflow.project_s1,
        lambda: dict(v=_u(), eps=1e-5),
        {"v": [_u().astype(jnp.int32)], "eps": [NAN, -1.0, INF]},
    ),
    Case(
        "transflow.project_s2",
        transflow.project_s2,
        lambda: dict(v=_u()),
        {"v": [_u().astype(jnp.int32)]},
    ),
    Case(
        "transflow.linear_y",
        transflow.linear_y,
        lambda: dict(u=_u(), w=jnp.ones((8, 3))),
        {"u": _bad_structure(_u()), "w": [jnp.ones((7, 3)), jnp.ones(8)]},
        needle={"w": "`w`|`u` has shape"},  # a (7, 3) w: u's 8 features do not fit it
    ),
    Case(
        "transflow.causal_mask",
        transflow.causal_mask,
        lambda: dict(n_q=4),
        {"n_q": [0, -1, 2.5], "n_k": [0, -1]},
    ),
    Case(
        "transflow.padding_mask",
        transflow.padding_mask,
        lambda: dict(lengths=jnp.array([2, 4]), n=4),
        {"n": [0, -1, 2.5]},
    ),
    Case(
        "transflow.Remat",
        transflow.Remat,
        lambda: dict(mode="nested", chunk=2),
        {"mode": ["everything"], "chunk": [0, -1, 2.5]},
    ),
    Case(
        "transflow.Adaptive",
        transflow.Adaptive,
        lambda: dict(rtol=1e-4, atol=1e-6, max_steps=100),
        {
            "rtol": [0.0, -1.0, NAN, INF],
            "atol": [-1.0, NAN],
            "max_steps": [0, -1],
            "solver": ["euler2"],
        },
    ),
    *(
        Case(
            name,
            transflow.ReferenceTolerances,
            lambda: dict(solver="dopri5", rtol=1e-8, check_rtol=1e-7, coarse_rtol=1e-6),
            {
                "rtol": [0.0, -1.0, NAN, INF],
                "check_rtol": [-1.0, "1e-7"],
                "coarse_rtol": [-1.0, True],
                "solver": ["euler2"],
            },
        )
        for name in ("transflow.ReferenceTolerances", "transflow.control.ReferenceTolerances")
    ),
    Case(
        "transflow.make_scheme",
        transflow.make_scheme,
        lambda: dict(name="strang"),
        {"name": ["lie2", None]},
        needle={"name": "`scheme`"},  # the registry names the argument by what it selects
    ),
    Case(
        "transflow.parallel.lower_shard_evolve",
        _lower,
        lambda: dict(controls=_theta(), u_batch=_u()[None], dt=0.5),
        {"u_batch": [_u()[None][..., :-1], _u()], "dt": BAD_STEP},
    ),
    Case(
        "transflow.control.FlowModel",
        _flow_model,
        lambda: dict(dt=0.5),
        {"dt": BAD_STEP},
    ),
    Case(
        "transflow.expressivity.zigzag_maxout",
        _zigzag,
        lambda: dict(rank=2, depth=2, dim=1),
        {"rank": [0, -1, 2.5], "depth": [0, -1], "dim": [0, -1]},
    ),
    Case(
        "transflow.interop.from_hf",
        _from_hf,
        lambda: dict(module=_hf_vit_layer()),
        {"module": [lambda: "bert", _torch_layer]},
    ),
    Case(
        "transflow.NormParams",
        transflow.NormParams,
        lambda: dict(gain=jnp.ones(8), bias=jnp.zeros(8), eps=1e-5),
        {"eps": [NAN, INF, -1.0, "0.1"]},
    ),
    Case(
        "transflow.SplitDecoder",
        lambda **kw: transflow.SplitDecoder(_decoder_controls(), **kw),
        lambda: dict(dt=0.5),
        {"dt": BAD_STEP},
    ),
    Case(
        "transflow.interop.from_torch",
        _from_torch,
        lambda: dict(module=_torch_layer()),
        {
            "module": [_torch_prelu_layer, _torch_nan_layer, lambda: "layer"],
            "ffn_form": ["square"],
        },
        needle={"module": "module|activation"},
    ),
    Case(
        "transflow.interop.layer_controls_from_torch",
        _layer_from_torch,
        lambda: dict(layer=_torch_layer()),
        {"layer": [_torch_prelu_layer, _torch_nan_layer], "ffn_form": ["square"]},
        needle={"layer": "layer|activation"},
    ),
    # the numerical analysis of the schemes (transflow.schemes._analysis, issue 48)
    Case(
        "transflow.schemes.OrderProblem.legendre",
        lambda **kw: transflow.schemes.OrderProblem.legendre(**kw),
        lambda: dict(d=4, n_tokens=3, path_size=2, scale=0.5, path_seed=0),
        {
            "d": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "path_size": BAD_SIZE,
            "scale": [0, -1.0, NAN, INF],
            "path_seed": [-1, 1.5, NAN],
        },
    ),
    Case(
        "transflow.schemes.empirical_order",
        transflow.schemes.empirical_order,
        lambda: dict(n_steps=[8, 16], errors=[1e-2, 2.5e-3]),
        {
            "n_steps": [[8, 8], [0, 16], [8, NAN], "8,16"],
            "errors": [[1e-2, 0.0], [1e-2, NAN], [1.0]],
        },
    ),
    Case(
        "transflow.schemes.measure_order",
        lambda **kw: transflow.schemes.measure_order(**kw),
        lambda: dict(
            scheme=transflow.make_scheme("prenorm"),
            problem=_order_problem(),
            window=[2, 4],
            reference=_order_problem().u0,
        ),
        {"window": [[4, 4], [0, 4], [2, NAN], 4], "grid": [[-1], [2.5]]},
    ),
    Case(
        "transflow.schemes.measure_orders",
        lambda **kw: transflow.schemes.measure_orders(**kw),
        lambda: dict(
            schemes={"prenorm": transflow.make_scheme("prenorm")},
            problem=_order_problem(),
            windows={1: [2, 4]},
        ),
        {"windows": [{2: [2, 4]}], "reference_fields": [{"heun": transflow.make_scheme("heun")}]},
    ),
    Case(
        "transflow.schemes.convergence_errors",
        lambda **kw: transflow.schemes.convergence_errors(**kw),
        lambda: dict(
            scheme=transflow.make_scheme("prenorm"),
            problem=_order_problem(),
            reference=_order_problem().u0,
            n_steps=[2],
        ),
        {"n_steps": [[0], [NAN], 2], "reference": [jnp.zeros((3, 4))]},
    ),
    Case(
        "transflow.schemes.stability_function_error",
        transflow.schemes.stability_function_error,
        lambda: dict(scheme=transflow.make_scheme("rk4"), rates=[[-0.5 + 0.1j, -0.2]]),
        {"rates": [[[NAN, 0.0]], [[INF, 0.0]], [[1.0, 2.0, 3.0]], []]},
    ),
    Case(
        "transflow.schemes.layer_stable_dt",
        lambda **kw: transflow.schemes.layer_stable_dt(**kw),
        lambda: dict(
            scheme=transflow.make_scheme("prenorm"),
            controls=_layer(4),
            trajectory=_u(3, 4)[None] / 4,
        ),
        {"margin": [-0.1, NAN, INF]},
    ),
    Case(
        "transflow.schemes.implicit_solve_check",
        transflow.schemes.implicit_solve_check,
        lambda: dict(scheme=transflow.make_scheme("imex"), controls=_layer(), u=_u()),
        {"dt": BAD_STEP, "u": [_u()[0]], "seed": [-1, 1.5]},
    ),
    Case(
        "transflow.schemes.stability_survey",
        transflow.schemes.stability_survey,
        lambda: dict(d=4, n_tokens=2),
        {
            "stable_dt": ["rk4", ["rk5"]],
            "d": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "n_heads": [*BAD_SIZE, 3],
            "dt": BAD_STEP,
            "n_steps": BAD_SIZE,
        },
    ),
    Case(
        "transflow.schemes.imex_step_check",
        transflow.schemes.imex_step_check,
        lambda: dict(d=8, n_tokens=4, reps=2),
        {
            "scheme": [transflow.make_scheme("prenorm")],
            "d": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "n_heads": [*BAD_SIZE, 3],
            "dt": BAD_STEP,
            "reps": BAD_SIZE,
        },
        needle={"scheme": "imex_step_check: PreNormScheme lacks"},
    ),
    Case(
        "transflow.schemes.step_cpu_seconds",
        transflow.schemes.step_cpu_seconds,
        lambda: dict(scheme=transflow.make_scheme("prenorm"), controls=_layer(), u=_u(), reps=2),
        {"dt": BAD_STEP, "reps": BAD_SIZE},
    ),
    Case(
        "transflow.analysis.lyapunov_exponent",
        lambda **kw: transflow.analysis.lyapunov_exponent(**kw),
        lambda: dict(
            model=SplitTransformer(_theta(), dt=0.5), inputs=_u()[None], key=jax.random.key(0)
        ),
        {"n_iter": BAD_SIZE, "inputs": [_u()[None][:0]]},
    ),
]


# ------------------------------------------------------------------ issue 49, more entry points
def _scheme(name="strang"):
    return transflow.make_scheme(name)


def _j(m=4):
    return -jnp.eye(m)


def _path():
    from transflow.continuous import PiecewiseConstant

    return PiecewiseConstant(_theta())


def _stable(fn):
    def call(**kw):
        return getattr(transflow, fn)(kw.pop("scheme"), **kw)

    return call


BAD_ATTN_SCORES = [jnp.ones((4, 4)), _with(jnp.ones((2, 4, 4))).astype(jnp.int32)]

CASES += [
    Case(
        "transflow.AttentionParams.random",
        lambda **kw: transflow.AttentionParams.random(**kw, key=jax.random.key(0)),
        lambda: dict(d=8, n_heads=2),
        {"d": [0, -1, 2.5, NAN], "n_heads": [0, -2, 3, 1.0], "scale": BAD_NUMBER},
    ),
    Case(
        "transflow.unstack_controls",
        transflow.unstack_controls,
        lambda: dict(stacked=_theta()),
        {"stacked": [_layer(), "theta", None]},
    ),
    Case(
        "transflow.num_steps",
        transflow.num_steps,
        lambda: dict(stacked=_theta()),
        {"stacked": [_layer(), "theta"]},
    ),
    Case(
        "transflow.ConstantSteps",
        transflow.ConstantSteps,
        lambda: dict(unroll=2),
        {"unroll": [0, -1, 2.5, "fast", None]},
    ),
    Case(
        "transflow.SaveAt",
        transflow.SaveAt,
        lambda: dict(steps=True),
        {"steps": ["yes", None, 2]},
    ),
    Case(
        "transflow.mask_from_hf",
        transflow.mask_from_hf,
        lambda: dict(mask=jnp.array([1, 1, 0])),
        {"mask": [jnp.ones((2, 3)), jnp.ones((1, 1, 1, 1, 1)), "mask", jnp.ones((0,), int)]},
    ),
    Case(
        "transflow.mask_from_torch",
        transflow.mask_from_torch,
        lambda: dict(mask=jnp.zeros((3, 3), bool)),
        {"mask": ["mask", jnp.ones(3, bool), jnp.array([[0, 1], [NAN, 0]])]},
    ),
    Case(
        "transflow.activation_fn",
        transflow.activation_fn,
        lambda: dict(name="gelu"),
        {"name": ["swish2", None, "leaky_relu:nan"]},
        needle={"name": "`activation`"},  # the activation's name: the field it fills
    ),
    Case(
        "transflow.attention_weights",
        transflow.attention_weights,
        lambda: dict(scores=jnp.ones((2, 4, 4)), temperature=0.5),
        {"scores": BAD_ATTN_SCORES, "temperature": [-1.0, NAN, INF]},
    ),
    Case(
        "transflow.cross_attention",
        lambda **kw: transflow.cross_attention(kw.pop("u"), kw.pop("memory"), _attn_p(), **kw),
        lambda: dict(u=_u(), memory=_u(6)),
        {
            "u": _bad_structure(_u()),
            "memory": [_u(6).astype(jnp.int32), _u(6)[None]],
            "temperature": [-1.0, NAN],
            "query_block": [0, -1],
        },
    ),
    Case(
        "transflow.online_softmax_attention",
        transflow.online_softmax_attention,
        lambda: dict(q=jnp.ones((2, 4, 3)), k=jnp.ones((2, 5, 3)), v=jnp.ones((2, 5, 3))),
        {
            "q": [jnp.ones((4, 3)), jnp.ones((2, 4, 2)), jnp.ones((2, 4, 3), int)],
            "k": [jnp.ones((2, 5, 2)), jnp.ones((1, 5, 3))],
            "v": [jnp.ones((2, 4, 3)), jnp.ones((2, 5))],
            "query_block": [0, -1, 2.5],
            "key_block": [0, -1],
        },
        needle={"q": "`q`|`k`"},  # a d_k that differs between q and k: k is refused against q
    ),
    Case(
        "transflow.CausalScheme",
        transflow.CausalScheme,
        lambda: dict(inner=_scheme("prenorm")),
        {"inner": ["prenorm", None]},
    ),
    Case(
        "transflow.ButcherTableau",
        transflow.ButcherTableau,
        lambda: dict(a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0), order=2),
        {
            "a": [((), (NAN,)), ((), (1.0, 0.0))],
            "b": [(0.5, NAN), (1.0,), (0.7, 0.7)],
            "c": [(0.0, 0.5), (0.0, NAN)],
            "order": [0, -1, 2.5],
        },
    ),
    Case(
        "transflow.IMEXScheme",
        transflow.IMEXScheme,
        lambda: dict(tau=0.5),
        {
            "tau": BAD_STEP,
            "ffn_branch_dt": ["3dt"],
            "parameterization": ["fixed"],
            "temperature": [-1.0, NAN, INF],
            "implementation": ["fast"],
        },
    ),
    Case(
        "transflow.LieScheme",
        transflow.LieScheme,
        lambda: dict(ffn_branch_dt="2dt"),
        {"ffn_branch_dt": ["3dt"], "temperature": [NAN, -INF], "hardmax": ["yes"]},
    ),
    Case(
        "transflow.PreNormScheme",
        transflow.PreNormScheme,
        lambda: dict(temperature=2.0),
        {"temperature": [-1.0, NAN, INF], "implementation": ["fast"]},
    ),
    Case(
        "transflow.RungeKuttaScheme",
        transflow.RungeKuttaScheme,
        lambda: dict(method="rk4"),
        {"method": ["rk5", None], "field": ["both"], "temperature": [-0.5, NAN]},
    ),
    Case(
        "transflow.StrangScheme",
        transflow.StrangScheme,
        lambda: dict(form="postnorm"),
        {"form": ["mid"], "substep": ["rk4"], "temperature": [-1.0, INF], "untied": ["no"]},
    ),
    Case(
        "transflow.amplification_factor",
        _stable("amplification_factor"),
        lambda: dict(scheme=_scheme(), z_attention=-0.5, z_ffn=-0.25),
        {"scheme": ["strang"], "z_attention": [NAN, INF, complex(0, NAN)], "z_ffn": [NAN, -INF]},
    ),
    Case(
        "transflow.stability_function",
        _stable("stability_function"),
        lambda: dict(scheme=_scheme(), z_attention=-0.5, z_ffn=-0.25),
        {"scheme": ["strang"], "z_attention": [NAN, INF], "z_ffn": [NAN]},
    ),
    Case(
        "transflow.linear_step_matrix",
        _stable("linear_step_matrix"),
        lambda: dict(scheme=_scheme(), j_attention=_j(), j_ffn=_j(), dt=0.5),
        {
            "scheme": ["strang"],
            "j_attention": [_with(_j()), _j()[:, :-1], jnp.ones(4)],
            "j_ffn": [_with(_j(), INF), _j(3)],
            "dt": BAD_STEP,
        },
    ),
    Case(
        "transflow.largest_stable_dt",
        _stable("largest_stable_dt"),
        lambda: dict(scheme=_scheme("prenorm"), j_attention=_j(2), j_ffn=_j(2), n_grid=20),
        {
            "scheme": ["prenorm"],
            "j_attention": [_with(_j(2)), _j(2)[:, :-1]],
            "j_ffn": [_j(3), _with(_j(2), -INF)],
            "dt_max": BAD_STEP,
            "n_grid": [0, -1, 2.5],
            "rtol": [0.0, -1.0, NAN],
        },
    ),
    Case(
        "transflow.linear_run_growth",
        _stable("linear_run_growth"),
        lambda: dict(scheme=_scheme(), j_attention=_j(), j_ffn=_j(), dt=0.5, n_steps=4),
        {
            "j_attention": [_with(_j()), _j()[:, :-1]],
            "j_ffn": [_j(3)],
            "dt": BAD_STEP,
            "n_steps": [0, -1, 2.5],
        },
    ),
    Case(
        "transflow.confirm_stable_dt",
        _stable("confirm_stable_dt"),
        lambda: dict(
            scheme=_scheme("prenorm"),
            j_attention=_j(2),
            j_ffn=_j(2),
            dt_star=2.0,
            min_steps=20,
            max_steps=40,
        ),
        {
            "j_attention": [_with(_j(2)), _j(2)[:, :-1]],
            "j_ffn": [_j(3)],
            "dt_star": BAD_STEP,
            "factor": [0.0, -0.1, 1.0, NAN],
            "min_steps": [0, -1, 2.5],
            "max_steps": [0, 10],
            "growth": [1.0, 0.5, NAN, INF],
        },
    ),
    Case(
        "transflow.spectral_radius",
        transflow.spectral_radius,
        lambda: dict(m=_j()),
        {"m": [_with(_j()), _j()[:, :-1], jnp.ones(3), "m"]},
    ),
    Case(
        "transflow.declared_order",
        transflow.declared_order,
        lambda: dict(scheme=_scheme()),
        {"scheme": ["strang", None]},
    ),
    Case(
        "transflow.stage_controls",
        lambda **kw: transflow.stage_controls(_path(), **kw),
        lambda: dict(scheme=_scheme(), n_steps=4),
        {"scheme": ["strang"], "n_steps": [0, -1, 2.5, NAN]},
    ),
    Case(
        "transflow.sub_field_jacobians",
        lambda **kw: transflow.sub_field_jacobians(_layer(4), **kw),
        lambda: dict(u=_u(3, 4)),
        {"u": _bad_arrays(_u(3, 4)), "form": ["imex", None]},
    ),
    Case(
        "transflow.perturbation_growth",
        lambda **kw: transflow.perturbation_growth(lambda v: 2.0 * v, **kw, key=jax.random.key(0)),
        lambda: dict(x=jnp.ones(3), n_iter=4),
        {"x": [_with(jnp.ones(3)), jnp.ones(3, int)], "n_iter": [0, -1, 2.5]},
    ),
    Case(
        "transflow.reference_solution",
        lambda **kw: transflow.reference_solution(kw.pop("u0"), _path(), _scheme(), **kw),
        lambda: dict(u0=_u(), tolerances=transflow.ReferenceTolerances("dopri5", 1e-6)),
        {
            "u0": [_with(_u()), _with(_u(), INF), _u().astype(jnp.int32), _u()[0]],
            "tolerances": [1e-6, (1e-6, 1e-6), "dopri8"],
        },
    ),
    Case(
        "transflow.ffn_branch",
        lambda **kw: transflow.ffn_branch(kw.pop("z"), _layer().ffn, **kw),
        lambda: dict(z=_u(), dt=0.5),
        {"z": _bad_structure(_u())},
    ),
    Case(
        "transflow.DecoderLayerControls",
        transflow.DecoderLayerControls,
        lambda: dict(
            zip(
                "self_attn norm1 cross_attn norm2 ffn norm3".split(),
                (
                    _layer().attn,
                    _layer().norm1,
                    _layer().attn,
                    _layer().norm2,
                    _layer().ffn,
                    _layer().norm2,
                ),
            )
        ),
        {"cross_attn": [_layer(16).attn], "ffn": [_layer(16).ffn]},
    ),
]


def _cont(name):
    return getattr(importlib.import_module("transflow.continuous"), name)


def _mod(pkg, name):
    return getattr(importlib.import_module(f"transflow.{pkg}"), name)


def _flows():
    f = lambda t, u: -u  # noqa: E731
    return {"a": _cont("rk4_flow")(f), "b": _cont("euler_flow")(f)}


CASES += [
    Case(
        "transflow.continuous.SmoothPath",
        lambda **kw: _cont("SmoothPath")(_layer(), _layer(seed=1), **kw),
        lambda: dict(omega=2.0, t0=0.0, t1=1.0),
        {"omega": BAD_NUMBER, "t0": BAD_NUMBER + [1.0], "t1": BAD_NUMBER + [-1.0]},
    ),
    Case(
        "transflow.continuous.solve_adaptive",
        lambda **kw: _cont("solve_adaptive")(kw.pop("u0"), _path(), _scheme(), **kw),
        lambda: dict(u0=_u()),
        {"u0": [_with(_u()), _with(_u(), -INF), _u().astype(jnp.int32), _u()[0], _u()[:, :-1]]},
    ),
    Case(
        "transflow.continuous.integrate",
        lambda **kw: _cont("integrate")(_cont("lie")(["a", "b"]), _flows(), kw.pop("u0"), **kw),
        lambda: dict(u0=_u(), n_steps=4, t1=0.5),
        {
            "u0": [_with(_u()), _u().astype(jnp.int32), _u()[0]],
            "n_steps": [0, -1, 2.5],
            "t0": BAD_NUMBER + [0.5],
            "t1": BAD_NUMBER + [-1.0],
        },
    ),
    Case(
        "transflow.continuous.make_flow",
        lambda **kw: _cont("make_flow")(lambda t, u: -u, **kw),
        lambda: dict(solver="euler", n_sub=2),
        {"solver": ["rk5", None], "n_sub": [0, -1, 2.5]},
    ),
    Case(
        "transflow.continuous.rk4_flow",
        lambda **kw: _cont("rk4_flow")(lambda t, u: -u, **kw),
        lambda: dict(n_sub=2),
        {"n_sub": [0, -1, 2.5]},
    ),
    Case(
        "transflow.continuous.lie",
        lambda **kw: _cont("lie")(**kw),
        lambda: dict(operators=["a", "b"]),
        {"operators": [[], "ab", ["a", 1]]},
    ),
    Case(
        "transflow.continuous.strang",
        lambda **kw: _cont("strang")(**kw),
        lambda: dict(operators=["a", "b"]),
        {"operators": [[], "ab", ["a", None]]},
    ),
    Case(
        "transflow.continuous.parallel",
        lambda **kw: _cont("parallel")(**kw),
        lambda: dict(operators=["a", "b"]),
        {"operators": [[], "ab"]},
    ),
    Case(
        "transflow.continuous.paper_lie",
        lambda **kw: _cont("paper_lie")(**kw),
        lambda: dict(n_ffn=2),
        {"n_ffn": [0, -1, 2.5], "ffn_branch_dt": ["3dt"]},
    ),
    Case(
        "transflow.continuous.reference_solve",
        lambda **kw: _cont("reference_solve")(lambda t, u: -u, kw.pop("u0"), **kw),
        lambda: dict(u0=_u(), t1=0.5, rtol=1e-6, atol=1e-6),
        {
            "u0": [_with(_u()), _u().astype(jnp.int32)],
            "t0": BAD_NUMBER + [1.0],
            "t1": BAD_NUMBER,
            "rtol": [0.0, -1.0, NAN],
            "atol": [-1.0, NAN],
        },
    ),
    Case(
        "transflow.continuous.fit_slope",
        lambda **kw: _cont("fit_slope")(**kw),
        lambda: dict(h=[0.5, 0.25, 0.125], err=[1e-2, 2.5e-3, 6.25e-4]),
        {
            "h": [[0.5, NAN, 0.125], [0.5, 0.25], [0.5, -0.25, 0.1], [1.0]],
            "err": [[1e-2, INF, 1e-4], [1e-2, 0.0, 1e-4], [1e-2, 1e-3]],
        },
    ),
    Case(
        "transflow.continuous.full_model_controls",
        lambda **kw: _cont("full_model_controls")(**kw),
        lambda: dict(n_layers=2, d=4),
        {"n_layers": BAD_SIZE, "d": BAD_SIZE, "sigma1": BAD_NUMBER, "sigma2": BAD_NUMBER + [0.0]},
    ),
    Case(
        "transflow.continuous.clustering_trajectory",
        lambda **kw: _cont("clustering_trajectory")(**kw),
        lambda: dict(n_tokens=4, d=3, t1=0.5, dt=0.25),
        {
            "n_tokens": BAD_SIZE,
            "d": BAD_SIZE,
            "t1": BAD_STEP,
            "dt": BAD_STEP,
            "temperature": [-1.0, NAN, INF],
        },
    ),
    Case(
        "transflow.analysis.cosine_matrix",
        _mod("analysis", "cosine_matrix"),
        lambda: dict(u=_u()),
        {"u": [_with(_u()), _u().astype(jnp.int32), _u()[0], "u"]},
    ),
    Case(
        "transflow.analysis.effective_rank",
        _mod("analysis", "effective_rank"),
        lambda: dict(u=_u()),
        {"u": [_with(_u()), _u().astype(jnp.int32), _u()[0]]},
    ),
    Case(
        "transflow.analysis.distance_to_s1",
        _mod("analysis", "distance_to_s1"),
        lambda: dict(u=_u()),
        {
            "u": [_with(_u()), _u().astype(jnp.int32), _u()[0]],
            "sigma1": BAD_NUMBER,
            "sigma2": BAD_NUMBER + [-1.0],
        },
    ),
    Case(
        "transflow.analysis.count_clusters",
        _mod("analysis", "count_clusters"),
        lambda: dict(u_or_cos=_u(), threshold=0.9),
        {"u_or_cos": [_with(_u()), _u()[0]], "threshold": [NAN, 1.5, -2.0]},
    ),
    Case(
        "transflow.analysis.fit_order",
        _mod("analysis", "fit_order"),
        lambda: dict(factors=[1, 2, 4], differences=[1e-2, 5e-3, 2.5e-3]),
        {
            "factors": [[1, 2], [1, 0, 4], [1, NAN, 4]],
            # NaN or 0: a failed or exact refinement, left out of the fit (not refused)
            "differences": [[1e-2, -1.0, 1e-3], [1e-2, 1e-3], "d"],
        },
    ),
    Case(
        "transflow.analysis.refine_controls",
        _mod("analysis", "refine_controls"),
        lambda: dict(controls=_theta(), factor=2),
        {"factor": BAD_SIZE, "interpolation": ["cubic"]},
    ),
    Case(
        "transflow.analysis.control_path",
        _mod("analysis", "control_path"),
        lambda: dict(controls=_theta(), dt=0.5),
        {"dt": BAD_STEP, "interpolation": ["cubic"]},
    ),
    Case(
        "transflow.parallel.make_mesh",
        _mod("parallel", "make_mesh"),
        lambda: dict(shape=(1,), axis_names=("t",)),
        {"shape": [(0,), (-1,), (1, 1), (2.5,)], "axis_names": [("t", "u"), (1,)]},
    ),
    Case(
        "transflow.parallel.max_rel_diff",
        _mod("parallel", "max_rel_diff"),
        lambda: dict(a=_u(), b=_u()),
        {"a": [_with(_u()), _u()[0]], "b": [_with(_u(), INF), _u()[:, :-1]]},
    ),
    Case(
        "transflow.vision.conv_output_size",
        _mod("vision", "conv_output_size"),
        lambda: dict(n=8, kernel=3, stride=1, padding=1),
        {"n": BAD_SIZE, "kernel": BAD_SIZE + [20], "stride": BAD_SIZE, "padding": [-1, 2.5]},
    ),
    Case(
        "transflow.vision.patchify",
        _mod("vision", "patchify"),
        lambda: dict(image=jnp.ones((3, 4, 4)), patch_size=2),
        {
            "image": [jnp.ones((4, 4)), jnp.ones((3, 4, 4), int), jnp.ones((3, 1, 1))],
            "patch_size": [0, -1, 2.5, (2, 0)],
        },
    ),
    Case(
        "transflow.control.patchify",
        _mod("control", "patchify"),
        lambda: dict(image=jnp.ones((4, 4)), patch=2),
        {
            "image": [jnp.ones((3, 4, 4)), jnp.ones((4, 4), int)],
            "patch": [0, -1, 3, 2.5],
        },
    ),
    Case(
        "transflow.control.make_optimizer",
        lambda **kw: _mod("control", "make_optimizer")(**kw),
        lambda: dict(lr=1e-3, num_steps=10, warmup_steps=2),
        {
            "lr": BAD_STEP,
            "num_steps": BAD_SIZE,
            "warmup_steps": [-1, 2.5],
            "weight_decay": [-1.0, NAN],
            "clip_norm": [0.0, -1.0, NAN],
        },
    ),
    Case(
        "transflow.control.EpochOrder",
        _mod("control", "EpochOrder"),
        lambda: dict(n=10, batch_size=4, seed=0),
        {"n": BAD_SIZE, "batch_size": BAD_SIZE + [11], "seed": [2.5, NAN]},
    ),
    Case(
        "transflow.expressivity.lambert_w",
        _mod("expressivity", "lambert_w"),
        lambda: dict(z=2.0),
        {"z": BAD_NUMBER + [-1.0]},
    ),
    Case(
        "transflow.expressivity.softmax_max_constant",
        _mod("expressivity", "softmax_max_constant"),
        lambda: dict(n_tokens=4),
        {"n_tokens": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.softmax_gap_error",
        _mod("expressivity", "softmax_gap_error"),
        lambda: dict(gap=0.5, lam=10.0, n_tokens=4),
        {"gap": BAD_NUMBER + [-1.0], "lam": BAD_STEP, "n_tokens": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.constructed_capacity",
        lambda **kw: _mod("expressivity", "constructed_capacity")(**kw),
        lambda: dict(dim=1, depth=2, n_tokens=3),
        {"dim": BAD_SIZE, "depth": BAD_SIZE, "n_tokens": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.mlp_width_for",
        lambda **kw: _mod("expressivity", "mlp_width_for")(**kw),
        lambda: dict(target_params=100, dim=1, depth=2),
        {"target_params": BAD_SIZE, "dim": BAD_SIZE, "depth": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.init_mlp",
        lambda **kw: _mod("expressivity", "init_mlp")(jax.random.key(0), **kw),
        lambda: dict(dim=1, depth=2, width=4),
        {"dim": BAD_SIZE, "depth": BAD_SIZE, "width": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.init_transformer",
        lambda **kw: _mod("expressivity", "init_transformer")(jax.random.key(0), **kw),
        lambda: dict(dim=1, depth=2),
        {
            "dim": BAD_SIZE,
            "depth": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "width": BAD_SIZE,
            "n_heads": BAD_SIZE,
            "head_dim": BAD_SIZE,
            "ffn_width": BAD_SIZE,
        },
    ),
    Case(
        "transflow.interop.project_sphere",
        _mod("interop", "project_sphere"),
        lambda: dict(v=_u(), eps=1e-6),
        {"v": _bad_structure(_u())[1:], "eps": [NAN, -1.0, INF]},
    ),
    Case(
        "transflow.interop.rotary_frequencies",
        lambda **kw: _mod("interop", "rotary_frequencies")(**kw, dtype=jnp.float32),
        lambda: dict(head_dim=4, theta=10000.0),
        {"head_dim": BAD_SIZE + [3], "theta": BAD_STEP},
    ),
    Case(
        "transflow.interop.random_rms_controls",
        lambda **kw: _mod("interop", "random_rms_controls")(**kw, key=jax.random.key(0)),
        lambda: dict(d=8, n_heads=2, n_kv_heads=1, d_ff=16),
        {
            "d": BAD_SIZE,
            "n_heads": BAD_SIZE + [3],
            "n_kv_heads": BAD_SIZE + [3],
            "d_ff": BAD_SIZE,
            "eps": [NAN, -1.0],
            "rope_theta": [0.0, NAN],
        },
    ),
    Case(
        "transflow.interop.RMSNormParams",
        _mod("interop", "RMSNormParams"),
        lambda: dict(gain=jnp.ones(8), eps=1e-6),
        {"gain": [_with(jnp.ones(8)), jnp.ones(8, int)], "eps": [NAN, -1.0, INF]},
    ),
]


def _ffn(d=8, **kw):
    return _layer(d).ffn


CASES += [
    Case(
        "transflow.FFNParams",
        transflow.FFNParams,
        lambda: dict(weights=_ffn().weights, biases=_ffn().biases, residual=(True, True)),
        {
            "weights": [(jnp.ones((8, 8)), jnp.ones((7, 8)))],
            "biases": [(jnp.ones(8), jnp.ones(7)), (jnp.ones(8),)],
            "residual": [(True,), (True, "yes")],
            "activation": ["swish2"],
        },
        # an entry of a tuple argument is named with its index, e.g. `weights[1]`
        needle={
            "activation": "`activation`",
            "weights": "`weights",
            "biases": "`biases",
            "residual": "`residual",
        },
    ),
    Case(
        "transflow.continuous.RelaxedLieScheme",
        lambda **kw: _cont("RelaxedLieScheme")(**kw),
        lambda: dict(tau=0.5),
        {"tau": BAD_STEP, "ffn_branch_dt": ["3dt"], "temperature": [-1.0, NAN]},
    ),
    Case(
        "transflow.continuous.hybrid",
        lambda **kw: _cont("hybrid")(**kw),
        lambda: dict(groups=["a", ["b", "c"]]),
        {"groups": [[], "ab", ["a", [1, "b"]]], "ffn_branch_dt": ["3dt"]},
    ),
    Case(
        "transflow.continuous.Stage",
        lambda **kw: _cont("Stage")(**kw),
        lambda: dict(branches=(("a",),), start=0.0, end=0.5),
        {
            "start": BAD_NUMBER + [0.6],
            "end": BAD_NUMBER,
            "speed": [0.0, -1.0, NAN],
            "branches": [()],
        },
        needle={"start": "`start`"},  # start 0.6 after end 0.5: `end` > `start` is the rule
    ),
    Case(
        "transflow.continuous.SplittingSolver",
        lambda **kw: _cont("SplittingSolver")(_cont("lie")(["a", "b"]), **kw),
        lambda: dict(sub_solver="euler", n_sub=2),
        {"sub_solver": ["rk5"], "n_sub": [0, -1, 2.5]},
    ),
    Case(
        "transflow.continuous.linear_flow_exact",
        lambda **kw: _cont("linear_flow_exact")(**kw),
        lambda: dict(a=-jnp.eye(3), b=jnp.ones(3)),
        {
            "a": [_with(-jnp.eye(3)), jnp.ones((3, 2)), jnp.ones(3)],
            "b": [_with(jnp.ones(3)), jnp.ones(2)],
        },
    ),
    Case(
        "transflow.continuous.euler_flow",
        lambda **kw: _cont("euler_flow")(**kw),
        lambda: dict(f=lambda t, u: -u),
        {"f": ["f", None]},
    ),
    Case(
        "transflow.continuous.projection_flow",
        lambda **kw: _cont("projection_flow")(**kw),
        lambda: dict(project=lambda t, u: u),
        {"project": ["p", None]},
    ),
    Case(
        "transflow.analysis.refine",
        lambda **kw: _mod("analysis", "refine")(SplitTransformer(_theta(), dt=0.5), **kw),
        lambda: dict(factor=2),
        {"factor": BAD_SIZE, "interpolation": ["cubic"]},
    ),
    Case(
        "transflow.analysis.project_2d",
        _mod("analysis", "project_2d"),
        lambda: dict(states=jnp.ones((3, 4, 8)) + jnp.arange(8.0)),
        {"states": [_with(jnp.ones((3, 4, 8))), jnp.ones(3), "s"]},
    ),
    Case(
        "transflow.parallel.ShardAxes",
        _mod("parallel", "ShardAxes"),
        lambda: dict(tokens="t"),
        {"tokens": [1, 2.5], "batch": [("t", 3)]},
    ),
    Case(
        "transflow.parallel.as_axes",
        _mod("parallel", "as_axes"),
        lambda: dict(axes={"tokens": "t"}),
        {"axes": [{"sequence": "t"}, "t", {"tokens": 1}]},
        needle={"axes": "`axes`|`tokens`"},  # a bad entry is named by its key
    ),
    Case(
        "transflow.vision.FeatureConv",
        _mod("vision", "FeatureConv"),
        lambda: dict(kernel=jnp.ones(3)),
        {
            "kernel": [_with(jnp.ones(3)), jnp.ones(3, int)],
            "boundary": ["wrap"],
            "origin": [-1, 3, 2.5],
        },
    ),
    Case(
        "transflow.vision.DepthwiseConv2d",
        _mod("vision", "DepthwiseConv2d"),
        lambda: dict(kernel=jnp.ones((3, 3, 8)), scale=jnp.ones(8), shift=jnp.zeros(8)),
        {
            "kernel": [_with(jnp.ones((3, 3, 8))), jnp.ones((3, 8))],
            "scale": [jnp.ones(7), _with(jnp.ones(8))],
            "shift": [jnp.ones(7)],
            "stride": BAD_SIZE,
            "padding": [-1, 2.5],
        },
    ),
    Case(
        "transflow.models.RelativePositionBias",
        _mod("models", "RelativePositionBias"),
        lambda: dict(table=jnp.ones((32, 2)), max_distance=128),
        {"table": [_with(jnp.ones((32, 2))), jnp.ones(32)], "max_distance": BAD_SIZE},
    ),
    Case(
        "transflow.models.relative_position_buckets",
        lambda **kw: _mod("models", "relative_position_buckets")(**kw),
        lambda: dict(
            relative_position=jnp.arange(-3, 4), bidirectional=True, num_buckets=8, max_distance=16
        ),
        {"num_buckets": BAD_SIZE, "max_distance": BAD_SIZE, "bidirectional": ["yes"]},
    ),
    Case(
        "transflow.expressivity.random_maxout",
        lambda **kw: _mod("expressivity", "random_maxout")(np.random.default_rng(0), **kw),
        lambda: dict(d=1, widths=[2, 2], ranks=[2, 2]),
        {"d": BAD_SIZE, "widths": [[0, 2], [2, -1]], "ranks": [[2], [0, 2]], "d_out": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.make_target",
        lambda **kw: _mod("expressivity", "make_target")(**kw),
        lambda: dict(name="sawtooth", teeth_log2=2),
        {"name": ["zag", None], "teeth_log2": [-1, 2.5, NAN], "zigzag_depth": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.softmax_error_bound",
        lambda **kw: _mod("expressivity", "softmax_error_bound")(_maxout(), **kw),
        lambda: dict(lam=100.0, n_tokens=4),
        {"lam": BAD_STEP, "n_tokens": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.ibp_bounds",
        lambda **kw: _mod("expressivity", "ibp_bounds")(_maxout(), **kw),
        lambda: dict(_IN_BOX),
        dict(_BAD_BOX),
    ),
    Case(
        "transflow.interop.RotaryScaling",
        _mod("interop", "RotaryScaling"),
        lambda: dict(rope_type="linear", factor=2.0),
        {"rope_type": ["cubic"], "factor": [0.0, -1.0, NAN, INF]},
    ),
    Case(
        "transflow.control.TokenEmbedding",
        _mod("control", "TokenEmbedding"),
        lambda: dict(table=jnp.ones((5, 8)), pos=jnp.ones((4, 8))),
        {
            "table": [_with(jnp.ones((5, 8))), jnp.ones(5)],
            "pos": [jnp.ones((4, 7)), jnp.ones((4, 8), int)],
        },
    ),
    Case(
        "transflow.control.make_vit",
        lambda **kw: _mod("control", "make_vit")(**kw, key=jax.random.key(0)),
        lambda: dict(d=8, n_steps=1, n_heads=1, patch=2, image_shape=(4, 4), n_classes=3),
        {
            "d": BAD_SIZE,
            "n_steps": BAD_SIZE,
            "patch": BAD_SIZE + [3],
            "n_classes": BAD_SIZE,
            "dt": BAD_STEP,
            "image_shape": [(0, 4), (4,)],
        },
        needle={"patch": "`patch`|`image_shape`"},  # patch 3 does not tile the 4x4 image
    ),
    Case(
        "transflow.control.make_seq",
        lambda **kw: _mod("control", "make_seq")(**kw, key=jax.random.key(0)),
        lambda: dict(vocab=5, length=4, d=8, n_steps=1, n_heads=1),
        {"vocab": BAD_SIZE, "length": BAD_SIZE, "d": BAD_SIZE, "n_steps": BAD_SIZE, "dt": BAD_STEP},
    ),
    Case(
        "transflow.control.make_char_lm",
        lambda **kw: _mod("control", "make_char_lm")(**kw, key=jax.random.key(0)),
        lambda: dict(vocab=5, context=4, d=8, n_steps=1, n_heads=1),
        {
            "vocab": BAD_SIZE,
            "context": BAD_SIZE,
            "d": BAD_SIZE,
            "n_steps": BAD_SIZE,
            "dt": BAD_STEP,
        },
    ),
    Case(
        "transflow.control.sequence_batch",
        lambda **kw: _mod("control", "sequence_batch")(**kw, seed=0, step=0),
        lambda: dict(kind="sort", batch_size=2, length=4, vocab=5),
        {"kind": ["sort2"], "batch_size": BAD_SIZE, "length": BAD_SIZE, "vocab": BAD_SIZE},
    ),
    Case(
        "transflow.control.text_windows",
        lambda **kw: _mod("control", "text_windows")(np.arange(20), **kw),
        lambda: dict(context=4, starts=[0, 3]),
        {"context": BAD_SIZE + [30], "starts": [[-1], [17], [0.5]]},
        needle={"context": "`context`|`starts`"},  # a context longer than the text: no start fits
    ),
]


# ------------------------------------------------------------------ transflow.control
def _vit(**kw):
    from transflow.control import make_vit

    opts = dict(d=8, n_steps=2, n_heads=1, patch=2, image_shape=(4, 4), n_classes=3)
    return make_vit(**{**opts, **kw}, key=jax.random.key(0))


def _vit_prenorm():
    return _vit(path="linear", scheme=transflow.PreNormScheme())


def _images(n=3):
    return jax.random.uniform(jax.random.key(1), (n, 4, 4), jnp.float32)


def _labels(n=3):
    return jnp.arange(n) % 3


_BAD_MODEL = [None, "model"]
_BAD_IMAGES = [_with(_images()), jnp.zeros((0, 4, 4)), jnp.ones((3, 4, 4), bool)]
_BAD_LABELS = [jnp.zeros(2, jnp.int32), jnp.zeros(3)]
_BAD_DEPTHS = [[], [0], [2, -1], [2.5], "4", NAN]


def _ctl(name):
    return lambda **kw: _mod("control", name)(**kw)


def _opt():
    from transflow.control import make_optimizer

    return make_optimizer(1e-2, num_steps=2)


def _batch_fn(step):
    return _images(2), _labels(2)


def _seq_cfg(**kw):
    from transflow.control import SequenceConfig

    opts = dict(d=8, n_steps=1, n_heads=1, steps=2, batch_size=4, n_test=8, log_every=1)
    opts.update(eval_every=2, checkpoint_every=2, checkpoint_dir="run", warmup_steps=0)
    return SequenceConfig(**{**opts, **kw})


_TRAINED: dict[str, str] = {}


def _trained_dir():
    """A run directory holding the checkpoints of a 2-step sequence run (made once)."""
    if "dir" not in _TRAINED:
        import tempfile

        from transflow.control import run_training

        run_dir = tempfile.mkdtemp()
        run_training("sequence", _seq_cfg(), run_dir=run_dir, progress=lambda it, **k: it)
        _TRAINED["dir"] = str(Path(run_dir) / "checkpoints")
    return _TRAINED["dir"]


def _ckpt_dir():
    import tempfile

    from transflow.control import save_checkpoint

    d = tempfile.mkdtemp()
    save_checkpoint(d, 1, {"w": jnp.ones(2)})
    return d


CASES += [
    Case(
        "transflow.control.at_depth",
        _ctl("at_depth"),
        lambda: dict(model=_vit(), n_steps=4),
        {"model": _BAD_MODEL, "n_steps": BAD_SIZE, "reading": ["middle", None]},
    ),
    Case(
        "transflow.control.depth_accuracy",
        _ctl("depth_accuracy"),
        lambda: dict(model=_vit(), x=_images(), y=_labels(), depths=(2,), adaptive=None),
        {
            "model": _BAD_MODEL,
            "x": _BAD_IMAGES,
            "y": _BAD_LABELS,
            "depths": _BAD_DEPTHS,
            "batch_size": BAD_SIZE,
            "split": ["yes"],
            "reading": ["middle"],
            "adaptive": ["adaptive", 1e-5],
        },
    ),
    Case(
        "transflow.control.kink_straddles",
        _ctl("kink_straddles"),
        lambda: dict(model=_vit(), x=_images(), n_steps=2),
        {
            "model": _BAD_MODEL,
            "x": _BAD_IMAGES,
            "n_steps": BAD_SIZE,
            "method": ["euler", None],
            "reading": ["middle"],
        },
    ),
    Case(
        "transflow.control.depth_loss",
        lambda **kw: _mod("control", "depth_loss")(**kw)(_vit(), _images(), _labels()),
        lambda: dict(depths=[2, 4]),
        {
            "depths": _BAD_DEPTHS,
            "smoothness": [-1.0, NAN, INF, "0"],
            "loss_fn": [None, 3],
            "gradient": ["exact", None],
            "checkpoints": BAD_SIZE,
            "adjoint_solver": ["rk4"],
        },
    ),
    Case(
        "transflow.control.adaptive_logits",
        _ctl("adaptive_logits"),
        lambda: dict(model=_vit_prenorm(), x=_images()[0]),
        {
            "model": _BAD_MODEL,
            "x": [_with(_images()[0]), _with(_images()[0], INF), jnp.ones((4, 4), bool)],
            "stepsize_controller": ["adaptive", 1e-5],
            "split": ["yes", 1],
        },
    ),
    Case(
        "transflow.control.flow_logits",
        _ctl("flow_logits"),
        lambda: dict(model=_vit_prenorm(), x=_images()),
        {
            "model": _BAD_MODEL,
            "x": _BAD_IMAGES,
            "gradient": ["exact"],
            "checkpoints": BAD_SIZE,
            "adjoint_solver": ["rk4"],
        },
    ),
    Case(
        "transflow.control.cross_entropy_loss",
        _ctl("cross_entropy_loss"),
        lambda: dict(model=_vit(), x=_images(), y=_labels()),
        {"model": _BAD_MODEL, "x": [None, 3.0], "y": _BAD_LABELS + [None]},
    ),
    Case(
        "transflow.control.evaluate",
        _ctl("evaluate"),
        lambda: dict(model=_vit(), x=_images(), y=_labels(), batch_size=2),
        {
            "model": _BAD_MODEL,
            "x": _BAD_IMAGES,
            "y": [jnp.zeros(2, jnp.int32), jnp.zeros(())],
            "batch_size": BAD_SIZE,
            "loss_fn": [None],
        },
    ),
    Case(
        "transflow.control.make_step",
        _ctl("make_step"),
        lambda: dict(optimizer=_opt()),
        {"optimizer": [None, "adam", 1e-3], "loss_fn": [None, 3]},
    ),
    Case(
        "transflow.control.train",
        _ctl("train"),
        lambda: dict(
            model=_vit(),
            optimizer=_opt(),
            batch_fn=_batch_fn,
            num_steps=2,
            key=jax.random.key(0),
            progress=None,
        ),
        {
            "optimizer": [None, "adam"],
            "batch_fn": [None, (1, 2)],
            "num_steps": BAD_SIZE,
            "key": [None, 0, jnp.zeros(3)],
            "loss_fn": [None],
            "checkpoint_dir": [3, ""],
            "checkpoint_every": BAD_SIZE,
            "keep": BAD_SIZE,
            "log_every": BAD_SIZE,
            "eval_every": [-1, 2.5, NAN, True],  # 0, as None: only at the end
            "throttle": [-1.0, NAN, INF],
            "eval_fn": [3],
        },
    ),
    Case(
        "transflow.control.save_checkpoint",
        lambda **kw: _mod("control", "save_checkpoint")(**kw, state={"w": jnp.ones(2)}),
        lambda: dict(directory=_ckpt_dir(), step=2),
        {
            "directory": [None, 3, ""],
            "step": [-1, 2.5, NAN, True, "2"],
            "keep": BAD_SIZE,
            "meta": [[1], "x"],
        },
    ),
    Case(
        "transflow.control.load_latest_checkpoint",
        lambda **kw: _mod("control", "load_latest_checkpoint")(**kw, like={"w": jnp.zeros(2)}),
        lambda: dict(directory=_ckpt_dir()),
        {"directory": [None, 3], "log": [None, "stderr"]},
    ),
    Case(
        "transflow.control.list_checkpoints",
        _ctl("list_checkpoints"),
        lambda: dict(directory=_ckpt_dir()),
        {"directory": [None, 3, ""]},
    ),
    Case(
        "transflow.control.run_training",
        lambda **kw: _mod("control", "run_training")(**kw, progress=lambda it, **k: it),
        lambda: dict(task="sequence", cfg=_seq_cfg(steps=1), run_dir=_ckpt_dir()),
        {
            "task": ["sequences", None, 3],
            "cfg": [{"d": 8}, None],
            "run_dir": [None, 3],
            "seed": [-1, 2.5, NAN, "0"],
            "smoke": ["yes", 1],
        },
    ),
    Case(
        "transflow.control.load_trained",
        _ctl("load_trained"),
        lambda: dict(task="sequence", path=_trained_dir(), cfg=_seq_cfg()),
        {
            "task": ["sequences", None],
            "path": [None, 3],
            "seed": [-1, 2.5, "0"],
            "cfg": [{"d": 8}, 3],
        },
    ),
]


# ------------------------------------------------------------------ continuous, analysis
def _pc_path():
    from transflow.continuous import PiecewiseConstant

    return PiecewiseConstant(_theta())


def _vf(**kw):
    from transflow.continuous import vector_field

    return vector_field(**kw)(0.5, _u())


def _split_model(n=2):
    return SplitTransformer(_theta(n=n))


CASES += [
    Case(
        "transflow.continuous.vector_field",
        _vf,
        lambda: dict(scheme=transflow.PreNormScheme(), path=_pc_path()),
        {
            "scheme": [None, "prenorm"],
            "path": [None, _theta()],
            "grid": ["index", 3],
        },
    ),
    Case(
        "transflow.continuous.compare_adjoints",
        _mod("continuous", "compare_adjoints"),
        lambda: dict(
            u0=_u(),
            path=_pc_path(),
            scheme=transflow.PreNormScheme(),
            stepsize_controller=transflow.Adaptive(rtol=1e-4, atol=1e-4),
        ),
        {
            # a wrong feature size: d = 7 for a path of d = 8
            "u0": [
                _with(_u()),
                _with(_u(), INF),
                _u().astype(jnp.int32),
                _u()[0],
                _u()[:, :-1],
            ],
            "path": [None, _theta()],
            "scheme": [None, "prenorm"],
            "stepsize_controller": ["adaptive", 1e-4],
            "target": [_with(_u()), _u()[:, :-1]],
        },
    ),
    Case(
        "transflow.analysis.trajectory",
        _mod("analysis", "trajectory"),
        lambda: dict(model=_split_model(), x=_u()),
        {
            "x": _bad_arrays(_u()) + [jnp.ones((4, 8), bool)],
            "substeps": ["yes", 1],
            "grid": ["index"],
            "causal": ["yes"],
        },
        needle={"x": "`x`|`u`"},  # a SplitTransformer names its input `u`
    ),
    Case(
        "transflow.analysis.as_flow",
        _mod("analysis", "as_flow"),
        lambda: dict(model=_split_model(), x=_u()),
        {"x": _bad_arrays(_u()), "grid": ["index"], "causal": ["yes", 1]},
        needle={"x": "`x`|`u`"},  # a SplitTransformer names its input `u`
    ),
    Case(
        "transflow.analysis.depth_scaling",
        _mod("analysis", "depth_scaling"),
        lambda: dict(models=[_split_model(2), _split_model(4)]),
        {"models": [[], [_split_model(2)], None, lambda: _split_model(2)]},
    ),
]


# ------------------------------------------------------------------ transflow.expressivity
def _rng():
    return np.random.default_rng(0)


def _tf_params():
    from transflow.expressivity import init_transformer

    opts = dict(dim=1, depth=1, n_tokens=2, width=2, n_heads=1, head_dim=1, ffn_width=2)
    return init_transformer(jax.random.PRNGKey(0), **opts)


def _mlp_nan():
    p = _mlp_params()
    p["layers"][0]["w"] = p["layers"][0]["w"].at[0, 0].set(NAN)
    return p


def _mlp_mismatched():
    p = _mlp_params()
    p["layers"][1]["w"] = jnp.ones((1, 3))
    return p


def _tf_nan():
    p = _tf_params()
    p["embedding"] = p["embedding"].at[0, 0, 0].set(NAN)
    return p


_BAD_MLP = [{}, "params", {"layers": []}, _mlp_nan, _mlp_mismatched]
_BAD_TF = [{}, _mlp_params(), _tf_nan]
_W1 = np.array([[[1.0], [-1.0]]])  # |x| as one rank-2 maxout unit


def _reading():
    from transflow.expressivity import hardmax_reading

    f = hardmax_reading(_tf_params())
    return dict(
        blocks=list(f.blocks),
        embedding=f.embedding,
        positional=f.positional,
        readout_weight=f.readout_weight,
        readout_bias=f.readout_bias,
    )


def _ex(name):
    return lambda **kw: _mod("expressivity", name)(**kw)


CASES += [
    Case(
        "transflow.expressivity.MaxoutNetwork",
        _ex("MaxoutNetwork"),
        lambda: dict(weights=[_W1], biases=[np.zeros((1, 2))]),
        {
            "weights": [[np.full((1, 2, 1), NAN)], [np.ones((1, 2))], [["a"]], None, _W1],
            "biases": [[np.zeros((1, 3))], [np.full((1, 2), INF)], None],
            "readout_weight": [np.ones((1, 2)), np.array([[NAN]])],
            "readout_bias": [np.ones(2), np.array([INF])],
        },
        needle={"weights": "`weights", "biases": "`biases"},  # an entry: `weights[0]`
    ),
    Case(
        "transflow.expressivity.maxout_to_transformer",
        _ex("maxout_to_transformer"),
        lambda: dict(net=_maxout(), lo=0.0, hi=1.0),
        {
            "net": ["net", None],
            "lo": [NAN, INF, 2.0],
            "hi": [NAN, -INF],
            "variant": ["C"],
            "attention": ["softmax", 0.0, NAN, -1.0],
            "margin": [-1.0, NAN, INF, "1"],
            "bounds": [(NAN, NAN), (1.0,)],
        },
    ),
    Case(
        "transflow.expressivity.hinging_cpwl",
        _ex("hinging_cpwl"),
        lambda: dict(slopes=[[[1.0], [-1.0]]], intercepts=[[0.0, 0.0]], signs=[1.0]),
        {
            "slopes": [[[[NAN], [-1.0]]], [[1.0, -1.0]], "s"],
            "intercepts": [[[0.0, INF]], [[0.0]]],
            "signs": [[2.0], [NAN], [1.0, 1.0]],
        },
    ),
    Case(
        "transflow.expressivity.lattice_cpwl",
        _ex("lattice_cpwl"),
        lambda: dict(
            slopes=[[1.0], [-1.0], [0.0]], intercepts=[0.0, 0.0, 1.0], sets=[[0, 2], [1, 2]]
        ),
        {
            "slopes": [[[NAN], [-1.0], [0.0]], [1.0, -1.0, 0.0]],
            "intercepts": [[0.0, INF, 1.0], [0.0, 0.0]],
            "sets": [[], [[0, 3]], [[]], "ab", [[0.5]]],
        },
        needle={"sets": "`sets"},  # an entry is named with its index, e.g. `sets[0]`
    ),
    Case(
        "transflow.expressivity.lattice_eval",
        _ex("lattice_eval"),
        lambda: dict(
            slopes=[[1.0], [-1.0]], intercepts=[0.0, 0.0], sets=[[0, 1]], x=np.array([[0.5]])
        ),
        {
            "x": [np.array([[NAN]]), np.ones((2, 2)), np.ones(2), "x"],
            "sets": [[[0, 5]], None],
            "slopes": [[[INF], [1.0]]],
        },
        needle={"sets": "`sets"},
    ),
    Case(
        "transflow.expressivity.lattice_from_1d",
        _ex("lattice_from_1d"),
        lambda: dict(nodes=[0.0, 1.0, 2.0, 3.0], values=[0.0, 2.0, 1.0, 1.5]),
        {
            "nodes": [[0.0, NAN, 2.0, 3.0], [0.0, 2.0, 1.0, 3.0], [[0.0, 1.0]], "n"],
            "values": [[0.0, INF, 1.0, 1.5], [0.0, 1.0]],
        },
    ),
    Case(
        "transflow.expressivity.QuadraticRoot.irrational",
        lambda **kw: _mod("expressivity", "QuadraticRoot").irrational(**kw),
        lambda: dict(B=0, C=-2, branch=1),
        {"B": [NAN, INF, "1", None], "C": [NAN, 5], "branch": [1.5, NAN, "1"]},
    ),
    Case(
        "transflow.expressivity.HardmaxTransformer.random",
        lambda **kw: _mod("expressivity", "HardmaxTransformer").random(**kw),
        lambda: dict(key=jax.random.key(0), n_tokens=2, width=2, depth=1, n_heads=1, head_dim=1),
        {
            "key": [0, None],
            "in_dim": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "width": [0, -1],
            "depth": [0, 2.5],
            "attention": ["soft", NAN, 0.0],
        },
    ),
    Case(
        "transflow.expressivity.ConstantQueryTransformer.from_params",
        lambda **kw: _mod("expressivity", "ConstantQueryTransformer").from_params(**kw),
        _reading,
        {
            "blocks": [None, [(1, 2, 3)], "b"],
            "embedding": [lambda: _with(_reading()["embedding"]), jnp.ones((3, 3, 3, 3))],
            "positional": [lambda: _with(_reading()["positional"], INF), jnp.ones(2)],
            "readout_weight": [jnp.ones((1, 3)), lambda: _with(_reading()["readout_weight"])],
            "readout_bias": [jnp.ones(2), jnp.array([NAN])],
            "readout_token": [-1, 5, True],
            "attention": ["soft", NAN],
        },
        needle={"blocks": "`blocks"},  # an entry is named with its index, e.g. `blocks[0]`
    ),
    Case(
        "transflow.expressivity.restrict",
        _ex("restrict"),
        lambda: dict(f=_maxout(), origin=np.zeros(1), directions=np.ones(1)),
        {
            "f": ["f", None],
            "origin": [np.array([NAN]), np.zeros(2), "o"],
            "directions": [np.array([INF]), np.zeros(1), np.ones((3, 1))],
        },
    ),
    Case(
        "transflow.expressivity.max_errors",
        _ex("max_errors"),
        lambda: dict(a=np.ones(3), b=np.zeros(3)),
        {"a": [np.array([NAN, 0, 0]), np.ones(2), "a"], "b": [np.array([INF, 0, 0])]},
        needle={"a": "`a`", "b": "`b`"},
    ),
    Case(
        "transflow.expressivity.construction_checks",
        _ex("construction_checks"),
        lambda: dict(rng=_rng(), n=2, variants=("A",)),
        {"rng": [0, None], "n": BAD_SIZE, "variants": [("C",), (), "A"]},
    ),
    Case(
        "transflow.expressivity.outside_box_errors",
        _ex("outside_box_errors"),
        lambda: dict(rng=_rng(), n=2, radii=(1.0,)),
        {"rng": [0], "n": BAD_SIZE, "radii": [(NAN,), (-1.0,), (), 1.0]},
    ),
    Case(
        "transflow.expressivity.softmax_rows",
        _ex("softmax_rows"),
        lambda: dict(tokens=[2], lambdas=[10.0], n_grid=5, n_random=3),
        {
            "tokens": [[1], [2.5], [], 2],
            "lambdas": [[NAN], [0.0], [-1.0], [INF]],
            "n_grid": BAD_SIZE,
            "n_random": [0],
            "seed": [-1, 2.5, NAN],
        },
    ),
    Case(
        "transflow.expressivity.softmax_multilayer_rows",
        _ex("softmax_multilayer_rows"),
        lambda: dict(rng=_rng(), n=2, lambdas=(100.0,)),
        {"rng": [None], "n": BAD_SIZE, "lambdas": [(NAN,), (0.0,), ()]},
    ),
    Case(
        "transflow.expressivity.region_rows",
        _ex("region_rows"),
        lambda: dict(tokens_a=[2], tokens_b=[3], max_regions=3, n_seed=8),
        {
            "tokens_a": [[1], [2.5]],
            "tokens_b": [[2]],
            "max_regions": BAD_SIZE,
            "d": [0],
            "large": [0, NAN],
            "n_seed": [0, -1],
        },
    ),
    Case(
        "transflow.expressivity.partition_2d",
        _ex("partition_2d"),
        lambda: dict(T=2, D=2, relu=False),
        {"T": [1, 0, 2.5, NAN], "D": [1, -1], "seed": [-1, 2.5], "relu": ["yes"]},
    ),
    Case(
        "transflow.expressivity.relu_and_cpwl_checks",
        _ex("relu_and_cpwl_checks"),
        lambda: dict(rng=_rng(), n=2),
        {"rng": [0], "n": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.c8_regions",
        _ex("c8_regions"),
        lambda: dict(rng=_rng(), n_grid=100),
        {"rng": [0], "n_grid": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.precision_rows",
        _ex("precision_rows"),
        lambda: dict(rank=2, depths=(1,), n=11),
        {"rank": BAD_SIZE, "depths": [(0,), (), (NAN,)], "n": BAD_SIZE},
    ),
    Case(
        "transflow.expressivity.slice_study",
        lambda **kw: (_torch(), _mod("expressivity", "slice_study")(**kw))[1],
        lambda: dict(d_in=2, width=2, depth=1, n_dense=11, plane=False),
        {
            "seed": [-1, NAN],
            "d_in": BAD_SIZE,
            "width": [0],
            "depth": [0],
            "n_dense": [0],
            "plane": ["yes"],
        },
    ),
    Case(
        "transflow.expressivity.Target",
        _ex("Target"),
        lambda: dict(name="t", dim=1, fn=lambda xs: xs[:, 0]),
        {
            "name": ["", 3],
            "dim": [0, 3, 1.5],
            "fn": ["f", None],
            "network": ["n"],
            "regions": [0, -1, 2.5],
            "lo": [NAN, 2.0],
            "hi": [INF, -1.0],
        },
    ),
    Case(
        "transflow.expressivity.certified_regions",
        _ex("certified_regions"),
        lambda: dict(kind="mlp", params=_mlp_params(), dim=1),
        {
            "kind": ["cnn"],
            "params": _BAD_MLP,
            "dim": [2, 0, 3],
            "lo": [NAN, 2.0],
            "hi": [INF],
            "time_budget": [0.0, -1.0, NAN],
        },
        needle={"params": "`params"},  # an entry is named, e.g. `params['layers'][0]['w']`
    ),
    Case(
        "transflow.expressivity.hardmax_reading",
        _ex("hardmax_reading"),
        lambda: dict(params=_tf_params()),
        {"params": _BAD_TF, "lam": [0.0, NAN, -1.0, "x"]},
        needle={"params": "`params"},
    ),
    Case(
        "transflow.expressivity.mlp_network",
        _ex("mlp_network"),
        lambda: dict(params=_mlp_params()),
        {"params": _BAD_MLP + [None]},
        needle={"params": "`params"},
    ),
    Case(
        "transflow.expressivity.model_apply",
        _ex("model_apply"),
        lambda: dict(kind="mlp", params=_mlp_params(), xs=jnp.zeros((3, 1))),
        {
            "kind": ["cnn"],
            "params": _BAD_MLP,
            "xs": [jnp.zeros((3, 2)), jnp.full((3, 1), NAN), jnp.zeros(3), jnp.zeros((3, 1), int)],
            "lam": [NAN, -1.0],
        },
        needle={"params": "`params"},
    ),
    Case(
        "transflow.expressivity.n_params",
        _ex("n_params"),
        lambda: dict(params=_mlp_params()),
        {"params": ["p", None, {}, [1, 2]]},
    ),
    Case(
        "transflow.expressivity.reading_gap",
        _ex("reading_gap"),
        lambda: dict(params=_tf_params(), lam=100.0, dim=1, n=11),
        {"params": _BAD_TF, "lam": [0.0, NAN, INF], "dim": [2, 0], "n": BAD_SIZE},
        needle={"params": "`params"},
    ),
    Case(
        "transflow.expressivity.sampling_estimate",
        _ex("sampling_estimate"),
        lambda: dict(kind="mlp", params=_mlp_params(), dim=1, n=16),
        {
            "kind": ["cnn"],
            "params": _BAD_MLP,
            "dim": [2],
            "n": [4, 0, 2.5],
            "lo": [NAN],
            "hi": [INF, -1.0],
        },
        needle={"params": "`params"},
    ),
    Case(
        "transflow.expressivity.train_model",
        _ex("train_model"),
        lambda: dict(
            kind="mlp",
            params=_mlp_params(),
            target=_mod("expressivity", "make_target")("smooth1d"),
            steps=2,
            batch=4,
        ),
        {
            "kind": ["cnn"],
            "params": [{}, _mlp_nan],
            "target": ["sawtooth", None],
            "steps": [1, 0, 2.5],
            "lr": [0.0, NAN, INF, -1.0],
            "batch": BAD_SIZE,
            "lam_start": [0.0, NAN],
            "lam_end": [INF, -1.0],
            "seed": [-1, 2.5],
        },
        needle={"params": "`params"},
    ),
]


# ------------------------------------------------------------------ transflow.interop
def _io(name):
    return lambda **kw: _mod("interop", name)(**kw)


def _rms(d=8, seed=0):
    from transflow.interop import random_rms_controls

    return random_rms_controls(d, 2, 1, 16, key=jax.random.key(seed))


def _fields(module):
    return {f.name: getattr(module, f.name) for f in dataclasses.fields(module)}


def _rms_decoder_parts():
    from transflow.interop import RMSNormParams, RMSPreNormScheme

    stacked = jax.tree.map(lambda *x: jnp.stack(x), _rms(seed=0), _rms(seed=1))
    scheme = transflow.CausalScheme(RMSPreNormScheme())
    return dict(
        table=jnp.ones((5, 8)),
        decoder=SplitTransformer(stacked, scheme=scheme),
        final_norm=RMSNormParams(jnp.ones(8)),
        unembedding=jnp.ones((8, 5)),
    )


def _text_embedding(d=8):
    from transflow.interop import TextEmbedding

    norm = transflow.NormParams(jnp.ones(d), jnp.zeros(d), 1e-12)
    return TextEmbedding(jnp.eye(6, d), jnp.ones((8, d)), None, norm)


def _dense_head_parts():
    return dict(
        weights=(jnp.eye(3), jnp.ones((3, 2))),
        biases=(jnp.zeros(3), jnp.zeros(2)),
        norms=(None, None),
        activations=("tanh", None),
    )


def _dense_head(d=8):
    from transflow.interop import DenseHead

    return DenseHead((jnp.ones((d, 3)),), (jnp.zeros(3),), (None,), (None,))


def _hf_dir():
    """A directory holding a tiny saved BertModel (made once)."""
    if "hf" not in _TRAINED:
        pytest.importorskip("transformers", reason="load_hf needs transformers")
        import tempfile

        from transformers import BertConfig, BertModel

        _torch().manual_seed(0)
        d = tempfile.mkdtemp()
        cfg = BertConfig(
            hidden_size=8,
            num_attention_heads=2,
            intermediate_size=16,
            num_hidden_layers=1,
            vocab_size=20,
        )
        BertModel(cfg).save_pretrained(d)
        _TRAINED["hf"] = d
    return _TRAINED["hf"]


def _pt_file(content=None):
    """A torch state dict of a TransformerEncoderLayer with its sidecar (or ``content``
    written as the file)."""
    import json
    import tempfile

    path = Path(tempfile.mkdtemp()) / "layer.pt"
    if content is not None:
        path.write_bytes(content)
        return str(path)
    _torch().save(_torch_layer().state_dict(), path)
    Path(str(path) + ".json").write_text(json.dumps({"nhead": 2}))
    return str(path)


def _empty_dir():
    import tempfile

    return tempfile.mkdtemp()


def _with_f64_reference(**kw):
    pytest.importorskip("transformers", reason="hf_float64_reference patches transformers")
    with _mod("interop", "hf_float64_reference")(**kw):
        return True


def _torch_substeps(**kw):
    torch = _torch()
    kw = {
        k: (v() if callable(v) and not isinstance(v, torch.nn.Module) else v) for k, v in kw.items()
    }
    return _mod("interop", "torch_substeps")(**kw)


def _tt(shape=(4, 8), value=None, dtype=None):
    """A torch tensor, made when the case runs (torch is imported then)."""

    def make():
        torch = _torch()
        t = torch.ones(shape, dtype=torch.int64 if dtype == "int" else torch.float32)
        if value is not None:
            t[0, 0] = value
        return t

    return make


CASES += [
    Case(
        "transflow.interop.load_hf",
        _io("load_hf"),
        lambda: dict(path=_hf_dir()),
        {"path": [None, 3, "", _empty_dir], "dtype": ["float16", jnp.int32, "x"]},
    ),
    Case(
        "transflow.interop.load_torch_checkpoint",
        _io("load_torch_checkpoint"),
        lambda: dict(path=_pt_file()),
        {
            "path": [None, 3, "", lambda: _pt_file(b"not a checkpoint")],
            "trust_pickle": ["yes", 1],
            "defaults": [{"heads": 2}, "x"],
        },
    ),
    Case(
        "transflow.interop.RotaryAttentionParams",
        _io("RotaryAttentionParams"),
        lambda: _fields(_rms().attn),
        {
            "wq": [lambda: _with(_rms().attn.wq), lambda: _rms().attn.wq.astype(jnp.int32)],
            "wk": [jnp.ones((7, 4))],
            "bq": [jnp.zeros(7)],
            "bo": [jnp.full(8, INF)],
            "n_heads": [0, 2.5, True],
            "n_kv_heads": [3, 0],
            "rope_theta": [0.0, NAN],
            "rope_scaling": ["linear"],
        },
    ),
    Case(
        "transflow.interop.GatedFFNParams",
        _io("GatedFFNParams"),
        lambda: _fields(_rms().ffn),
        {
            "w_gate": [lambda: _with(_rms().ffn.w_gate)],
            "w_up": [jnp.ones((8, 15))],
            "b_gate": [jnp.zeros(15)],
            "b_down": [jnp.full(8, INF), jnp.zeros(7)],
            "activation": ["swish2"],
        },
    ),
    Case(
        "transflow.interop.RMSLayerControls",
        _io("RMSLayerControls"),
        lambda: _fields(_rms()),
        {
            "attn": ["a", None],
            "norm1": [lambda: _mod("interop", "RMSNormParams")(jnp.ones(7))],
            "ffn": [lambda: _rms(16).ffn],
            "norm2": ["n"],
        },
    ),
    Case(
        "transflow.interop.RMSPreNormScheme",
        _io("RMSPreNormScheme"),
        lambda: dict(implementation="dense"),
        {"implementation": ["fast", None]},
    ),
    Case(
        "transflow.interop.DenseHead",
        _io("DenseHead"),
        _dense_head_parts,
        {
            "weights": [
                (_with(jnp.eye(3)), jnp.ones((3, 2))),
                (jnp.eye(3), jnp.ones((4, 2))),
                None,
            ],
            "biases": [(jnp.zeros(3), jnp.zeros(3)), (jnp.zeros(3),)],
            "norms": [("n", None)],
            "activations": [("swish2", None)],
        },
        needle={
            "weights": "`weights",
            "biases": "`biases",
            "norms": "`norms",
            "activations": "`activation",
        },
    ),
    Case(
        "transflow.interop.HeadModel",
        _io("HeadModel"),
        lambda: dict(base=SplitTransformer(_theta()), head=_dense_head(), pooling="first"),
        {"base": ["m", None], "head": ["h"], "pooling": ["mean"], "pad_token_id": [-1, 2.5]},
    ),
    Case(
        "transflow.interop.CausalDecoder",
        _io("CausalDecoder"),
        lambda: dict(
            embedding=_mod("interop", "TokenEmbedding")(jnp.eye(5, 8), jnp.zeros((4, 8))),
            decoder=SplitTransformer(
                _theta(), scheme=transflow.CausalScheme(transflow.PreNormScheme())
            ),
            unembedding=jnp.ones((8, 5)),
        ),
        {
            "embedding": ["e", lambda: _mod("interop", "TokenEmbedding")(jnp.eye(5, 16), None)],
            "decoder": [lambda: SplitTransformer(_theta()), "d"],
            "unembedding": [jnp.ones((7, 5)), _with(jnp.ones((8, 5)))],
        },
        needle={"decoder": "`decoder"},  # a scheme that is not causal: `decoder.scheme`
    ),
    Case(
        "transflow.interop.RMSDecoder",
        _io("RMSDecoder"),
        _rms_decoder_parts,
        {
            "table": [_with(jnp.ones((5, 8))), jnp.ones(5), jnp.ones((5, 4))],
            "decoder": ["d"],
            "final_norm": ["n"],
            "unembedding": [jnp.ones((7, 5))],
            "sliding_window": [0, 2.5],
        },
        needle={"table": "`table`|`decoder`"},  # a d = 4 table: the decoder's d differs
    ),
    Case(
        "transflow.interop.TextEmbedding",
        _io("TextEmbedding"),
        lambda: _fields(_text_embedding(4)),
        {
            "word": [_with(jnp.eye(6, 4)), jnp.ones(6)],
            "positions": [jnp.ones((8, 3)), _with(jnp.ones((8, 4)), INF)],
            "token_types": [jnp.ones((2, 3))],
            "norm": ["n"],
            "padding_idx": [-1, 1.5],
        },
    ),
    Case(
        "transflow.interop.TextEncoder",
        _io("TextEncoder"),
        lambda: dict(
            embedding=_text_embedding(),
            encoder=SplitTransformer(_theta()),
            pooler=(jnp.eye(8), jnp.zeros(8)),
        ),
        {
            "embedding": ["e", lambda: _text_embedding(4)],
            "encoder": ["x"],
            "pooler": [
                (jnp.eye(8),),
                (jnp.eye(7), jnp.zeros(8)),
                (jnp.eye(8), _with(jnp.zeros(8))),
            ],
        },
        needle={"embedding": "`embedding`|`encoder`"},  # a d = 4 embedding: d differs
    ),
    Case(
        "transflow.interop.TokenEmbedding",
        _io("TokenEmbedding"),
        lambda: dict(table=jnp.eye(5, 4), positions=jnp.zeros((8, 4))),
        {
            "table": [_with(jnp.eye(5, 4)), jnp.ones(5)],
            "positions": [jnp.ones((8, 3)), _with(jnp.zeros((8, 4)), INF)],
        },
    ),
    Case(
        "transflow.interop.apply_rotary",
        _io("apply_rotary"),
        lambda: dict(x=jnp.ones((1, 3, 4)), positions=jnp.arange(3.0), theta=10000.0),
        {
            "x": [jnp.ones((3, 4)), jnp.ones((1, 3, 3)), jnp.ones((1, 3, 4), int)],
            "positions": [jnp.arange(4.0), jnp.ones((3, 1))],
            "theta": [0.0, NAN, -1.0],
            "scaling": ["linear"],
        },
    ),
    Case(
        "transflow.interop.gated_ffn",
        _io("gated_ffn"),
        lambda: dict(z=jnp.ones((4, 8)), f=_rms().ffn),
        {
            "z": [jnp.ones((4, 7)), jnp.ones((4, 8), int), "z"],
            "f": ["f", None],
            "record": ["yes"],
        },
    ),
    Case(
        "transflow.interop.hf_activation",
        _io("hf_activation"),
        lambda: dict(name="gelu"),
        {"name": ["swish2", None, 3], "option": [None, 3, ""]},
        needle={"name": "`hidden_act`"},  # named by the config option it came from
    ),
    Case(
        "transflow.interop.hf_float64_reference",
        _with_f64_reference,
        lambda: dict(enabled=True),
        {"enabled": ["yes", 1, None]},
    ),
    Case(
        "transflow.interop.rotary_attention",
        _io("rotary_attention"),
        lambda: dict(u=jnp.ones((5, 8)), p=_rms().attn),
        {
            "u": [jnp.ones((5, 7)), jnp.ones((5, 8), int), jnp.ones(8)],
            "p": ["p", None],
            "positions": [jnp.arange(4), jnp.ones((5, 2))],
            "causal": ["yes"],
            "implementation": ["fast"],
        },
    ),
    Case(
        "transflow.interop.torch_substeps",
        _torch_substeps,
        lambda: dict(layer=_torch_layer(), x=_tt()),
        {
            "layer": ["l", lambda: _torch().nn.Linear(8, 8)],
            "x": [np.ones((4, 8)), _tt((4, 7)), _tt(value=NAN), _tt(dtype="int")],
        },
    ),
]


# ------------------------------------------------------------------ transflow.analysis
def _an(name):
    return lambda **kw: _mod("analysis", name)(**kw)


def _flow():
    return _mod("analysis", "as_flow")(_split_model(), _u())


_BAD_X = _bad_arrays(_u()) + ["x"]

CASES += [
    Case(
        "transflow.analysis.Flow",
        _an("Flow"),
        lambda: dict(
            u0=_u(),
            controls=_theta(),
            scheme=transflow.LieScheme(),
            dt=0.5,
            grid=None,
            causal=False,
            final_norm=None,
        ),
        {
            "u0": [_with(_u()), _u()[0], _u().astype(jnp.int32)],
            "controls": [_layer(), "c"],
            "scheme": ["lie", None],
            "dt": BAD_STEP,
            "grid": ["index"],
            "causal": ["yes"],
            "final_norm": ["n"],
        },
    ),
    Case(
        "transflow.analysis.analyze",
        _an("analyze"),
        lambda: dict(model=_split_model(), x=_u(), factors=(1, 2)),
        {
            "model": ["m", None],
            "x": _BAD_X,
            "factors": [(0,), (1, NAN), "12"],
            "interpolation": ["cubic"],
            "threshold": [NAN, 2.0],
            "evaluate": [3],
            "keep_cosine": ["yes"],
            "progress": [3],
            "refine_inputs": [_with(_u()), "x"],
        },
        needle={"x": "`x`|`u`"},  # a SplitTransformer names its input `u`
    ),
    Case(
        "transflow.analysis.control_blocks",
        _an("control_blocks"),
        lambda: dict(model=_split_model()),
        {"model": ["m", None, _theta()]},
    ),
    Case(
        "transflow.analysis.control_increments",
        _an("control_increments"),
        lambda: dict(model=_split_model()),
        {"model": ["m", _theta()]},
    ),
    Case(
        "transflow.analysis.increment_scaling",
        _an("increment_scaling"),
        lambda: dict(model=_split_model(4)),
        {"model": ["m"], "strides": [[0], [NAN], [4], "1"]},
    ),
    Case(
        "transflow.analysis.iter_steps",
        lambda **kw: list(_mod("analysis", "iter_steps")(**kw)),
        lambda: dict(flow=_flow()),
        {"flow": ["f", None, lambda: _split_model()], "substeps": ["yes"]},
    ),
    Case(
        "transflow.analysis.model_output",
        _an("model_output"),
        lambda: dict(model=_split_model(), x=_u()),
        {"model": ["m"], "x": _BAD_X, "grid": ["index"], "causal": ["yes"]},
        needle={"x": "`x`|`u`"},
    ),
    Case(
        "transflow.analysis.refinement_study",
        _an("refinement_study"),
        lambda: dict(model=_split_model(), x=_u(), factors=(1, 2)),
        {
            "model": ["m"],
            "x": [_with(_u()), "x", _u()[..., :-1]],
            "factors": [(1,), (2, 1), (0, 2), (1, NAN)],
            "interpolation": ["cubic"],
            "evaluate": [3],
            "progress": [3],
        },
        needle={"x": "`x`|`u`"},
    ),
    Case(
        "transflow.analysis.step_diagnostics",
        _an("step_diagnostics"),
        lambda: dict(model=_split_model(), x=_u()),
        {
            "model": ["m"],
            "x": _BAD_X,
            "threshold": [NAN, 2.0],
            "s1": ["x", (0.0,), (NAN, 1.0), (0.0, -1.0)],
            "keep_cosine": ["yes"],
            "keep_states": [1],
            "progress": [3],
            "grid": ["index"],
            "causal": ["yes"],
        },
        needle={"x": "`x`|`u`"},
    ),
    Case(
        "transflow.analysis.substep_parents",
        _an("substep_parents"),
        lambda: dict(names=("ln1", "attention", "ln2", "ffn1", "residual")),
        {"names": ["ln1", None, (1, 2)]},
    ),
]


# ------------------------------------------------------------------ continuous: convergence studies
def _submodel(kind="a", **kw):
    return _cont("default_submodel")(kind, n_tokens=2, n_features=2, **kw)


CASES += [
    Case(
        "transflow.continuous.default_submodel",
        lambda **kw: _cont("default_submodel")(**kw),
        lambda: dict(kind="a", n_tokens=2, n_features=2),
        {
            "kind": ["d", None],
            "n_tokens": BAD_SIZE,
            "n_features": BAD_SIZE,
            "seed": [-1, 2.5, NAN],
            "constraint_active": ["yes"],
            "dtype": ["float16", jnp.int32],
        },
    ),
    Case(
        "transflow.continuous.s2_active_fraction",
        lambda **kw: _cont("s2_active_fraction")(**kw),
        lambda: dict(model=_submodel("c")[0], u0=_submodel("c")[1], t1=0.1, n_samples=3),
        {
            "model": ["m", lambda: _submodel("a")[0]],
            "u0": [lambda: _with(_submodel("c")[1]), jnp.ones(2)],
            "t1": BAD_STEP,
            "n_samples": BAD_SIZE,
            "tol": [-1.0, NAN],
        },
    ),
    Case(
        "transflow.continuous.expected_order",
        lambda **kw: _cont("expected_order")(**kw),
        lambda: dict(submodel="b", scheme="strang"),
        {"submodel": ["d", None], "scheme": ["rk4"], "b_splitting": ["half"]},
    ),
    Case(
        "transflow.continuous.scheme_for",
        lambda **kw: _cont("scheme_for")(**kw),
        lambda: dict(name="lie", model=_submodel()[0]),
        {"name": ["rk4", None], "model": ["m", None], "b_splitting": ["half"]},
    ),
    Case(
        "transflow.continuous.dt_convergence",
        lambda **kw: _cont("dt_convergence")(**kw),
        lambda: dict(
            model=_submodel()[0], u0=_submodel()[1], scheme_name="lie", t1=0.1, n_steps=(2, 4)
        ),
        {
            "model": ["m"],
            "u0": [lambda: _with(_submodel()[1]), jnp.ones(2)],
            "scheme_name": ["rk4"],
            "t1": BAD_STEP,
            "n_steps": [(0, 2), (2, NAN), ()],
            "reference": [(jnp.ones(2), 0.0), "r", lambda: (_submodel()[1], NAN)],
            "submodel": ["d"],
            "b_splitting": ["half"],
            "active_fraction": [1.5, NAN],
        },
    ),
    Case(
        "transflow.continuous.convergence_study",
        lambda **kw: _cont("convergence_study")(**kw),
        lambda: dict(
            kinds=("a",), schemes=("lie",), n_steps=(2, 4), t1=0.1, n_tokens=2, n_features=2
        ),
        {
            "kinds": [("d",), (), "a"],
            "schemes": [("rk4",)],
            "n_steps": [(0, 2), (NAN,)],
            "t1": BAD_STEP,
            "seed": [-1],
            "n_tokens": BAD_SIZE,
            "n_features": [0],
            "b_splitting": ["half", ["tangent", "half"]],
        },
    ),
    Case(
        "transflow.continuous.smooth_kernel_model",
        lambda **kw: _cont("smooth_kernel_model")(**kw),
        lambda: dict(grid=Grid.interval(4, 4)),
        {"grid": ["g", None, 4]},
    ),
    Case(
        "transflow.continuous.grid_convergence",
        lambda **kw: _cont("grid_convergence")(**kw),
        lambda: dict(sizes=(1, 3), n_ref=9, quantity="linear"),
        {
            "sizes": [(2,), (0,), (NAN,), ()],
            "n_ref": BAD_SIZE,
            "quantity": ["energy"],
            "t1": BAD_STEP,
            "n_time_steps": BAD_SIZE,
        },
    ),
    Case(
        "transflow.continuous.grid_refinement_study",
        lambda **kw: _cont("grid_refinement_study")(**kw),
        lambda: dict(quantities=("linear",), sizes=(1, 3), n_ref=9),
        {"quantities": [("energy",), (), "linear"], "sizes": [(2,)], "n_ref": [0]},
    ),
    Case(
        "transflow.continuous.full_model_refinement",
        lambda **kw: _cont("full_model_refinement")(**kw),
        lambda: dict(refinements=(1, 2), n_layers=1, n_tokens=2, d=2),
        {
            "sigma1": BAD_NUMBER,
            "sigma2": [0.0, NAN],
            "refinements": [(0, 1), (NAN,), ()],
            "n_layers": BAD_SIZE,
            "n_tokens": BAD_SIZE,
            "d": BAD_SIZE,
            "ffn_branch_dt": ["3dt"],
            "seed": [-1, 2.5],
        },
    ),
    Case(
        "transflow.continuous.nonconvergence_study",
        lambda **kw: _cont("nonconvergence_study")(**kw),
        lambda: dict(refinements=(1, 2), n_layers=1, n_tokens=2, d=2),
        {
            "refinements": [(0, 1), ()],
            "n_layers": BAD_SIZE,
            "n_tokens": [0],
            "d": [0, 2.5],
            "ffn_branch_dt": ["3dt"],
            "seed": [-1],
        },
    ),
]


# ------------------------------------------------------------------ continuous: operators as data
def _kernel(xi, y, t):
    return jnp.cos(jnp.pi * (xi - y)) * (1 + 0 * t)


def _sub_fields():
    m = _submodel()[0]
    return dict(kind=m.kind, attn=m.attn, linear=m.linear, norm=m.norm, grid=m.grid)


def _ode_term():
    import diffrax

    return diffrax.ODETerm(lambda t, y, a: -y)


CASES += [
    Case(
        "transflow.continuous.KernelAttention",
        lambda **kw: _cont("KernelAttention")(**kw).sample(Grid.interval(4, 4))(0.0),
        lambda: dict(wq=_kernel, wk=_kernel, wv=_kernel),
        {"wq": ["k", None], "wk": [3], "wv": ["v"]},
    ),
    Case(
        "transflow.continuous.KernelLinear",
        lambda **kw: _cont("KernelLinear")(**kw).sample(Grid.interval(4, 4))(0.0),
        lambda: dict(w=_kernel, b=None),
        {"w": ["w", None], "b": [3]},
    ),
    Case(
        "transflow.continuous.SubModel",
        lambda **kw: _cont("SubModel")(**kw),
        _sub_fields,
        {
            "kind": ["d"],
            "attn": ["a", None],
            "linear": [3],
            "norm": ["n"],
            "grid": ["g"],
            "temperature": [-1.0, NAN],
        },
    ),
    Case(
        "transflow.continuous.full_model_flows",
        lambda **kw: _cont("full_model_flows")(**kw),
        lambda: dict(controls=_pc_path()),
        {
            "controls": ["c", None],
            "grid": ["g"],
            "causal": ["yes"],
            "hardmax": [1],
            "temperature": [NAN, -1.0],
            "scheme": ["lie", transflow.PreNormScheme()],
        },
    ),
    Case(
        "transflow.continuous.tangent_s1",
        lambda **kw: _cont("tangent_s1")(**kw),
        lambda: dict(u=_u(), f=2 * _u()),
        {
            "u": [_u().astype(jnp.int32), "u"],
            "f": [_u()[:, :-1], _u().astype(jnp.int32)],
            "grid": [Grid.index(4, 7), "g"],
        },
        needle={"grid": "`grid`|`u`"},  # a grid of 7 features for a u of 8: u is refused
    ),
    Case(
        "transflow.continuous.y_mean",
        lambda **kw: _cont("y_mean")(**kw),
        lambda: dict(v=_u(), grid=None),
        {"v": ["v", _u().astype(jnp.int32)], "grid": ["g", Grid.index(4, 7)]},
        needle={"grid": "`grid`|`v`"},
    ),
    Case(
        "transflow.continuous.reference_error_estimate",
        lambda **kw: _cont("reference_error_estimate")(lambda t, u: -u, **kw),
        lambda: dict(u0=_u(), t1=0.1, tol=1e-6),
        {
            "u0": [_with(_u()), _u().astype(jnp.int32)],
            "t1": [NAN, -1.0],
            "tol": [0.0, -1.0, NAN],
        },
    ),
    Case(
        "transflow.continuous.SplittingScheme",
        lambda **kw: _cont("SplittingScheme")(**kw),
        lambda: dict(name="x", order=1, stages=_cont("lie")(["a", "b"]).stages),
        {"name": ["", 3], "order": [0, 2.5, NAN], "stages": [(), ("s",)]},
        needle={"stages": "`stages"},  # an entry is named with its index
    ),
    Case(
        "transflow.continuous.ProjectionTerm",
        lambda **kw: _cont("ProjectionTerm")(**kw),
        lambda: dict(project=lambda t, y, a: y),
        {"project": ["p", None]},
    ),
    Case(
        "transflow.continuous.flows_from_terms",
        lambda **kw: _cont("flows_from_terms")(**kw),
        lambda: dict(operators=["decay"], terms=_ode_term(), sub_solver="euler"),
        {
            "operators": ["d", [1]],
            "terms": ["t", None],
            "sub_solver": ["rk5"],
            "n_sub": [0, 2.5],
        },
    ),
    Case(
        "transflow.continuous.stack_leading",
        lambda **kw: _cont("stack_leading")(**kw),
        lambda: dict(trees=[jnp.zeros(2), jnp.ones(2)]),
        {
            "trees": [
                [],
                "t",
                [jnp.zeros(2), jnp.ones(3)],
                [jnp.zeros(2), (jnp.ones(2),)],
            ]
        },
        needle={"trees": "`trees"},
    ),
    Case(
        "transflow.continuous.TimeEmbeddingNet.init",
        lambda **kw: _cont("TimeEmbeddingNet").init(**kw),
        lambda: dict(base=jnp.zeros(3), n_freq=2, hidden=4, key=jax.random.key(0)),
        {
            "n_freq": [0, 2.5],
            "hidden": [0],
            "t0": [NAN],
            "t1": [INF, -1.0],
            "key": [0, None],
            "smooth": ["yes"],
        },
    ),
]


# ------------------------------------------------------------------ parallel, schemes
def _shard_axes():
    return _mod("parallel", "as_axes")({"features": "t"})


CASES += [
    Case(
        "transflow.parallel.controls_specs",
        _mod("parallel", "controls_specs"),
        lambda: dict(controls=_theta(), axes=_shard_axes()),
        {"controls": [_layer().attn, "c"], "axes": [{"features": "t"}, None]},
    ),
    Case(
        "transflow.parallel.to_host",
        _mod("parallel", "to_host"),
        lambda: dict(x=_u()),
        {"x": ["x", None, [1.0, 2.0]]},
    ),
    Case(
        "transflow.parallel.memory_report",
        lambda **kw: _mod("parallel", "memory_report")(
            kw.pop("controls"),
            kw.pop("u_batch"),
            _mod("parallel", "make_mesh")((1,), ("t",)),
            {"tokens": "t"},
            **kw,
        ),
        lambda: dict(controls=_theta(), u_batch=_u()[None], dt=0.5),
        {"u_batch": [_u()[None][..., :-1], _u()], "dt": BAD_STEP},
    ),
    Case(
        "transflow.schemes.check_consistent",
        lambda **kw: transflow.schemes.check_consistent(**kw) is None,  # None: it passed
        lambda: dict(scheme=transflow.PreNormScheme()),
        {"scheme": ["prenorm", None, transflow.LieScheme()], "consumer": [3, ""]},
        needle={"scheme": "`scheme`|LieScheme"},  # a scheme without a field: named by type
    ),
    Case(
        "transflow.schemes.check_masks",
        transflow.schemes.check_masks,
        lambda: dict(
            scheme=transflow.PreNormScheme(),
            u=_u(),
            n_heads=2,
            key_padding_mask=jnp.zeros(4, bool),
            attention_mask=None,
        ),
        {
            "scheme": ["s", None],
            "u": [_u()[0], "u"],
            "n_heads": [0, 2.5],
            "key_padding_mask": [jnp.zeros(3, bool), jnp.zeros(4, int), "m"],
            "attention_mask": [jnp.ones((3, 3), bool), "m"],
        },
    ),
    Case(
        "transflow.schemes.pre_ln_step",
        lambda **kw: transflow.schemes.pre_ln_step(transflow.PreNormScheme(), **kw),
        lambda: dict(
            attend=lambda p: p, u=_u(), controls=_layer(), dt=0.5, grid=None, record=False
        ),
        {
            "attend": ["a", None],
            "u": [_u()[0], _u().astype(jnp.int32)],
            "dt": [-1.0, NAN],
            "grid": ["g"],
            "record": ["yes"],
        },
    ),
    Case(
        "transflow.schemes.linear_sub_fields",
        transflow.schemes.linear_sub_fields,
        lambda: dict(ja=_j(), jg=_j()),
        {"ja": [_with(_j()), _j()[:, :-1], "j"], "jg": [_j(3), _with(_j(), INF)]},
    ),
    Case(
        "transflow.schemes.DenseOperators",
        transflow.schemes.DenseOperators,
        lambda: dict(grid=None, causal=False, implementation="dense"),
        {
            "grid": ["g"],
            "causal": ["yes"],
            "masks": [None, []],
            "implementation": ["fast"],
            "query_block": [0, 2.5],
            "key_block": [-1],
        },
    ),
    Case(
        "transflow.schemes.ConvPreNormScheme",
        transflow.schemes.ConvPreNormScheme,
        lambda: dict(grid_shape=(2, 2), n_prefix=1, temperature=1.0),
        {
            "grid_shape": [(2,), (0, 2), (2.5, 2), "22"],
            "n_prefix": [-1, 1.5],
            "hardmax": ["yes"],
            "temperature": [-1.0, NAN],
        },
    ),
]


# ------------------------------------------------------------------ vision (CvT)
def _vis(name):
    return lambda **kw: _mod("vision", name)(**kw)


def _dw(stride=1, seed=1):
    return _mod("vision", "DepthwiseConv2d").random(8, stride=stride, key=jax.random.key(seed))


def _conv_attn_parts():
    return dict(attn=_attn_p(), q_conv=_dw(1), k_conv=_dw(2), v_conv=_dw(2))


def _conv_attn():
    return _mod("vision", "ConvAttentionParams")(**_conv_attn_parts())


def _conv_layer_parts():
    layer = _layer()
    return dict(attn=_conv_attn(), norm1=layer.norm1, ffn=layer.ffn, norm2=layer.norm2)


def _conv_embedding(d=8):
    return _mod("vision", "ConvEmbedding")(jnp.ones((d, 3, 3, 3)) / 27, jnp.zeros(d), None, 2, 1)


def _cvt_stage_parts():
    c = _mod("vision", "ConvLayerControls")(**_conv_layer_parts())
    return dict(
        embedding=_conv_embedding(),
        cls_token=jnp.zeros(8),
        controls=jax.tree.map(lambda *x: jnp.stack(x), c, c),
    )


def _cvt_stage():
    return _mod("vision", "CvtStageModel")(**_cvt_stage_parts())


def _image():
    return jnp.ones((3, 8, 8)) * jnp.arange(8.0) / 8


CASES += [
    Case(
        "transflow.vision.ConvAttentionParams",
        _vis("ConvAttentionParams"),
        _conv_attn_parts,
        {
            "attn": ["a", None],
            "q_conv": ["q", 3],
            "k_conv": [_attn_p()],
            "scale": [0.0, -1.0, NAN],
        },
    ),
    Case(
        "transflow.vision.conv_attention",
        lambda **kw: _mod("vision", "conv_attention")(**kw),
        lambda: dict(u=jnp.ones((1 + 12, 8)), p=_conv_attn(), grid_shape=(3, 4), n_prefix=1),
        {
            "u": [jnp.ones((13, 7)), jnp.ones((13, 8), int), jnp.ones(8)],
            "p": ["p", None, _attn_p()],
            "grid_shape": [(3,), (0, 4), "34"],
            "n_prefix": [-1, 1.5],
            "hardmax": ["yes"],
            "temperature": [-1.0, NAN],
            "return_weights": [1],
        },
    ),
    Case(
        "transflow.vision.ConvLayerControls",
        _vis("ConvLayerControls"),
        _conv_layer_parts,
        {
            "attn": [_attn_p(), "a"],
            "norm1": ["n", lambda: transflow.NormParams(jnp.ones(16), jnp.zeros(16), 1e-5)],
            "ffn": ["f"],
            "norm2": [None],
        },
    ),
    Case(
        "transflow.vision.ConvEmbedding",
        _vis("ConvEmbedding"),
        lambda: dict(kernel=jnp.ones((8, 3, 3, 3)), bias=jnp.zeros(8), norm=None, stride=2),
        {
            "kernel": [_with(jnp.ones((8, 3, 3, 3))), jnp.ones((8, 3, 3))],
            "bias": [jnp.zeros(7), _with(jnp.zeros(8), INF)],
            "norm": ["n"],
            "stride": BAD_SIZE,
            "padding": [-1, 1.5],
        },
    ),
    Case(
        "transflow.vision.CvtStageModel",
        lambda **kw: _mod("vision", "CvtStageModel")(**kw)(_image()),
        _cvt_stage_parts,
        {
            "embedding": ["e", lambda: _conv_embedding(16)],
            "cls_token": [jnp.zeros(7), _with(jnp.zeros(8))],
            "controls": ["c", _layer()],
            "hardmax": ["yes"],
            "temperature": [NAN],
        },
        needle={"embedding": "`embedding`|`controls`"},  # d = 16 vs the controls' 8
    ),
    Case(
        "transflow.vision.CvtModel",
        lambda **kw: _mod("vision", "CvtModel")(**kw)(_image()),
        lambda: dict(stages=(_cvt_stage(),)),
        {"stages": [(), "s", ("s",)]},
        needle={"stages": "`stages"},
    ),
]


# ------------------------------------------------------------------ models (ViT, T5)
def _md(name):
    return lambda **kw: _mod("models", name)(**kw)


def _patch_parts():
    return dict(
        kernel=jnp.ones((3 * 4 * 4, 8)) / 48,
        bias=jnp.zeros(8),
        cls_token=jnp.zeros(8),
        pos_embedding=jnp.zeros((5, 8)),
        image_size=(8, 8),
        patch_size=(4, 4),
    )


def _patch_embedding():
    return _mod("models", "PatchEmbedding")(**_patch_parts())


def _readout():
    return _mod("models", "ClassTokenReadout")(
        transflow.NormParams.scalar(), jnp.eye(8), jnp.zeros(8), "tanh"
    )


def _t5_layer(cross=False):
    from transflow.interop import RMSNormParams

    norm = RMSNormParams(jnp.ones(8))
    extra = dict(cross=_attn_p(), cross_norm=norm) if cross else {}
    return _mod("models", "T5LayerControls")(
        attn=_attn_p(), attn_norm=norm, ffn=_layer().ffn, ffn_norm=norm, **extra
    )


def _t5_stack_parts(cross=False):
    from transflow.interop import RMSNormParams

    c = _t5_layer(cross)
    return dict(
        controls=jax.tree.map(lambda *x: jnp.stack(x), c, c),
        position_bias=_mod("models", "RelativePositionBias")(jnp.ones((32, 2)), max_distance=128),
        final_norm=RMSNormParams(jnp.ones(8)),
        causal=cross,
    )


def _t5_stack(cross=False):
    return _mod("models", "T5Stack")(**_t5_stack_parts(cross))


def _split_decoder():
    return transflow.SplitDecoder(_decoder_controls(), dt=0.5)


CASES += [
    Case(
        "transflow.models.PatchEmbedding",
        lambda **kw: _mod("models", "PatchEmbedding")(**kw)(jnp.ones((3, 8, 8))),
        _patch_parts,
        {
            "kernel": [_with(jnp.ones((48, 8))), jnp.ones((47, 8))],
            "bias": [jnp.zeros(7), _with(jnp.zeros(8), INF)],
            "cls_token": [jnp.zeros(7), _with(jnp.zeros(8))],
            "pos_embedding": [jnp.zeros((4, 8)), _with(jnp.zeros((5, 8)))],
            "image_size": [(8,), (0, 8), (2, 2)],
            "patch_size": [(4, 2.5), "44"],
        },
        needle={"image_size": "`image_size`|`patch_size`"},  # (2, 2) is below the patch
    ),
    Case(
        "transflow.models.ClassTokenReadout",
        lambda **kw: _mod("models", "ClassTokenReadout")(**kw)(_u(3, 8)),
        lambda: dict(
            norm=transflow.NormParams.scalar(),
            weight=jnp.eye(8),
            bias=jnp.zeros(8),
            activation="tanh",
        ),
        {
            "norm": ["n"],
            "weight": [_with(jnp.eye(8)), jnp.ones(8)],
            "bias": [jnp.zeros(7), _with(jnp.zeros(8))],
            "activation": ["swish2"],
            "token_index": [-1, 1.5],
        },
    ),
    Case(
        "transflow.models.VisionTransformer",
        lambda **kw: _mod("models", "VisionTransformer")(**kw)(jnp.ones((3, 8, 8))),
        lambda: dict(
            embedding=_patch_embedding(), encoder=SplitTransformer(_theta()), readout=_readout()
        ),
        {
            "embedding": ["e", None],
            "encoder": ["x", lambda: SplitTransformer(_theta(d=16))],
            "readout": ["r"],
        },
        needle={"encoder": "`encoder`|encoder's"},  # d = 16: the widths differ
    ),
    Case(
        "transflow.models.T5LayerControls",
        _md("T5LayerControls"),
        lambda: _fields(_t5_layer()),
        {
            "attn": ["a", None],
            "attn_norm": ["n"],
            "ffn": ["f", lambda: _layer(16).ffn],
            "ffn_norm": [lambda: _mod("interop", "RMSNormParams")(jnp.ones(7))],
            "cross": [_attn_p()],
        },
        needle={"cross": "`cross"},  # cross without cross_norm: both are named
    ),
    Case(
        "transflow.models.T5Stack",
        lambda **kw: _mod("models", "T5Stack")(**kw)(_u()),
        _t5_stack_parts,
        {
            "controls": ["c", _t5_layer],
            "position_bias": ["p"],
            "final_norm": [None],
            "causal": ["yes"],
        },
        needle={"controls": "`controls`|`stacked`"},  # unstacked controls: num_steps
    ),
    Case(
        "transflow.models.T5Encoder",
        lambda **kw: _mod("models", "T5Encoder")(**kw)(jnp.array([0, 3, 2])),
        lambda: dict(table=jnp.eye(5, 8), encoder=_t5_stack()),
        {"table": [_with(jnp.eye(5, 8)), jnp.eye(5, 7), jnp.ones(5)], "encoder": ["e"]},
        needle={"table": "`table`|`encoder`"},
    ),
    Case(
        "transflow.models.T5EncoderDecoder",
        lambda **kw: _mod("models", "T5EncoderDecoder")(**kw)(jnp.array([0, 3]), jnp.array([1])),
        lambda: dict(table=jnp.eye(5, 8), encoder=_t5_stack(), decoder=_t5_stack(cross=True)),
        {
            "table": [_with(jnp.eye(5, 8))],
            "encoder": ["e"],
            "decoder": ["d", _t5_stack],
            "lm_head": [jnp.ones((7, 5)), _with(jnp.ones((8, 5)))],
            "scale_decoder_outputs": ["yes"],
        },
    ),
    Case(
        "transflow.SplitEncoderDecoder",
        lambda **kw: transflow.SplitEncoderDecoder(**kw)(_u(3), _u(2)),
        lambda: dict(encoder=SplitTransformer(_theta()), decoder=_split_decoder()),
        {
            "encoder": ["e", lambda: SplitTransformer(_theta(d=16))],
            "decoder": ["d", None],
        },
        needle={"encoder": "`encoder`|`decoder`"},  # d = 16 vs the decoder's 8
    ),
    Case(
        "transflow.linearised_stability",
        lambda **kw: transflow.linearised_stability(**kw),
        lambda: dict(
            scheme=transflow.make_scheme("prenorm"),
            controls=_layer(4),
            trajectory=_u(3, 4)[None] / 4,
        ),
        {
            "trajectory": [_with(_u(3, 4)[None]), _u(3, 4)],
            "margin": [-0.1, NAN, INF],
            "form": ["cubic"],
            "scheme": ["prenorm"],
        },
    ),
]


# ------------------------------------------------------------------ control: records, text
def _al_controls(d=4):
    return _mod("control", "AttentionLinearControls").random(d, key=jax.random.key(0))


def _u4():
    return _u(3, 4) / 4


_BAD_U4 = [_with(_u(3, 4)), _u(3, 3), _u(3, 4).astype(jnp.int32)]

CASES += [
    Case(
        "transflow.control.PatchEmbedding",
        lambda **kw: _mod("control", "PatchEmbedding")(**kw)(jnp.ones((4, 4))),
        lambda: dict(
            weight=jnp.ones((4, 8)),
            bias=jnp.zeros(8),
            cls_token=None,
            pos=jnp.zeros((4, 8)),
            image_shape=(4, 4),
            patch=2,
        ),
        {
            "weight": [_with(jnp.ones((4, 8))), jnp.ones((3, 8))],
            "bias": [jnp.zeros(7)],
            "cls_token": [jnp.zeros(8)],  # one more token than `pos` holds
            "pos": [jnp.zeros((5, 8)), _with(jnp.zeros((4, 8)), INF)],
            "image_shape": [(4, 3), (4,), (0, 4)],
            "patch": BAD_SIZE,
        },
        needle={"cls_token": "`pos`|`cls_token`", "patch": "`patch`|`image_shape`"},
    ),
    Case(
        "transflow.control.AttentionLinearControls",
        lambda **kw: _mod("control", "AttentionLinearControls")(**kw),
        lambda: _fields(_al_controls()),
        {
            "attn": ["a", None],
            "w": [jnp.ones((4, 3)), _with(jnp.ones((4, 4)))],
            "b": [jnp.ones(3), _with(jnp.ones(4), INF)],
        },
    ),
    Case(
        "transflow.control.discrete_loss",
        lambda **kw: _mod("control", "discrete_loss")(**kw),
        lambda: dict(theta=_al_controls(), u0=_u4(), target=_u4(), t1=1.0, n_steps=4),
        {
            "theta": ["t", _attn_p()],
            "u0": [_u(3, 3), _u(3, 4).astype(jnp.int32)],
            "target": [_u(2, 4)],
            "t1": [-1.0, NAN],
            "n_steps": BAD_SIZE,
        },
    ),
    Case(
        "transflow.control.continuous_loss",
        lambda **kw: _mod("control", "continuous_loss")(**kw),
        lambda: dict(theta=_al_controls(), u0=_u4(), target=_u4(), t1=0.5, rtol=1e-4, atol=1e-4),
        {
            "theta": ["t"],
            "u0": [_u(3, 3)],
            "target": [_u(2, 4)],
            "t1": [-1.0, NAN],
            "adjoint": ["direct"],
        },
    ),
    Case(
        "transflow.control.adjoint_gradients",
        lambda **kw: _mod("control", "adjoint_gradients")(**kw),
        lambda: dict(theta=_al_controls(), u0=_u4(), target=_u4(), t1=0.25, refinements=(2,)),
        {
            "theta": ["t", None],
            "u0": _BAD_U4,
            "target": [_u(2, 4), _with(_u(3, 4))],
            "t1": BAD_STEP,
            "refinements": [(0,), (NAN,), ()],
        },
    ),
    Case(
        "transflow.control.bits_per_char",
        _ctl("bits_per_char"),
        lambda: dict(loss_nats=0.7),
        {"loss_nats": [NAN, INF, -1.0, "0.7"]},
    ),
    Case(
        "transflow.control.curves_from_history",
        _ctl("curves_from_history"),
        lambda: dict(history=[{"step": 1, "loss": 0.5, "train_accuracy": 0.9}]),
        {"history": ["h", None, [1, 2], [{"loss": 0.5}]]},
        needle={"history": "`history"},  # a bad record is named by its index
    ),
    Case(
        "transflow.control.load_text_split",
        _ctl("load_text_split"),
        lambda: dict(val_fraction=0.1, max_chars=1000),
        {
            "val_fraction": [0.0, 1.0, NAN, -0.1],
            "corpus": ["wiki", None],
            "max_chars": [-1, 2.5, True],
        },
    ),
    Case(
        "transflow.control.window_overlap",
        _ctl("window_overlap"),
        lambda: dict(train=np.array([1, 2, 3, 4, 5]), windows=np.array([[2, 3]])),
        {
            "train": [np.array([-1, 2]), np.ones(3)],
            "windows": [np.array([2, 3]), np.array([[-1, 2]]), np.ones((1, 2))],
        },
    ),
    Case(
        "transflow.control.CharNgram",
        _ctl("CharNgram"),
        lambda: dict(train=np.arange(20) % 5, vocab=5, max_order=2),
        {
            "train": [np.ones(5), "t", np.ones((2, 2), int)],
            "vocab": [0, 2.5],
            "max_order": [0, 1.5],
            "discount": [NAN, -1.0],
        },
    ),
    Case(
        "transflow.control.load_digits_split",
        _ctl("load_digits_split"),
        lambda: dict(test_fraction=0.2),
        {"test_fraction": [0.0, 1.0, NAN]},
    ),
]


def _problem_parts():
    return dict(model=_vit(), batch=_batch_fn, eval_fn=lambda m: {"accuracy": 1.0})


CASES += [
    Case(
        "transflow.control.grads_to_torch_layout",
        _ctl("grads_to_torch_layout"),
        lambda: dict(controls=_from_torch(module=_torch_layer()).controls, single_layer=True),
        {
            "controls": ["c", _layer().attn],
            "final_norm": ["n"],
            "single_layer": ["yes"],
        },
    ),
    Case(
        "transflow.control.checkpoint_dir_for",
        _ctl("checkpoint_dir_for"),
        lambda: dict(name="t", cfg=_seq_cfg(), run_dir=Path("run"), seed=0, smoke=False),
        {
            "name": ["", None],
            "cfg": [{"d": 8}, None],
            "run_dir": [None, 3],
            "seed": [-1, 2.5, NAN],
            "smoke": ["yes", 1],
        },
    ),
    Case(
        "transflow.control.stdlib_files",
        _ctl("stdlib_files"),
        lambda: dict(val_fraction=0.1, max_chars=50_000),
        {"val_fraction": [0.0, NAN, 1.5], "max_chars": [-1, 2.5, True]},
    ),
    Case(
        "transflow.control.validation_windows",
        _ctl("validation_windows"),
        lambda: dict(cfg=_mod("control", "DepthTextConfig")(context=8, n_val=4, max_chars=2000)),
        {"cfg": [None, {"context": 8}], "split": ["s", (1, 2, 3)]},
    ),
    Case(
        "transflow.control.Problem",
        _ctl("Problem"),
        _problem_parts,
        {
            "batch": ["b", None],
            "eval_fn": [3],
            "data_state": ["d"],
            "loss_fn": [3],
            "extra": [None, [1]],
        },
    ),
    Case(
        "transflow.control.TrainingTask",
        _ctl("TrainingTask"),
        lambda: dict(
            name="t",
            config=_mod("control", "SequenceConfig"),
            setup=lambda cfg, seed, key: None,
            smoke_caps={"d": 8},
        ),
        {
            "name": ["", 3],
            "config": [dict, None, "SequenceConfig"],
            "setup": [None],
            "smoke_caps": [{"depth": 2}, None],
            "smoke_set": [{"x": 1}],
        },
    ),
]


CASES += [
    Case(
        "transflow.control.gradient_peak_rss",
        lambda **kw: _mod("control", "gradient_peak_rss")(**kw),
        lambda: dict(n_steps=1, gradient="checkpointed", batch_size=1, d=4, checkpoints=1),
        {
            "n_steps": BAD_SIZE,
            "gradient": ["magic"],
            "batch_size": [0, 2.5],
            "d": [0],
            "checkpoints": [0, 2.5],
            "timeout": [0.0, -1.0, NAN],
        },
    ),
    Case(
        "transflow.control.text_baselines",
        _ctl("text_baselines"),
        lambda: dict(
            cfg=_mod("control", "DepthTextConfig")(context=8, n_val=4, max_chars=2000),
            orders=(1,),
        ),
        {"cfg": [{"context": 8}, "c"], "orders": [(0,), (1.5,), (), 2]},
    ),
]


# the training configs: every field is checked when the config is made (issue 49)
_TRAIN_BAD: dict[str, list] = {
    **{k: BAD_SIZE for k in ("d", "n_steps", "n_heads", "batch_size", "steps")},
    **{k: [-1, 2.5, NAN, True] for k in ("d_ff", "warmup_steps", "log_every", "eval_every")},
    "checkpoint_every": [-1, 2.5, INF],
    "scheme": ["liee", None, 3],
    "ffn_branch_dt": ["3dt", None],
    "remat": ["always", None],
    "lr": [0.0, -1e-3, NAN, INF, "1e-3"],
    "weight_decay": [-1e-4, NAN, INF],
    "throttle": [-1.0, NAN, INF],
    "resume": ["yes", 1],
    "checkpoint_dir": [3, "", None],
}
_DIGITS_BAD: dict[str, list] = {
    **_TRAIN_BAD,
    "patch": [*BAD_SIZE, 3],
    "pool": ["max", None],
    "test_fraction": [0.0, 1.0, -0.1, NAN, INF],
}
_DEPTH_BAD: dict[str, list] = {
    **_DIGITS_BAD,
    "path": ["spline", None],
    "path_size": BAD_SIZE,
    "train_depths": [[0], [2, -1], [2.5], "4", NAN],
    "smoothness": [-1.0, NAN, INF],
    "smooth_init": ["no"],
    "relax_tau": [0.0, -1.0, NAN, INF],
    "dt": BAD_STEP,
    "gradient": ["adjointt", None],
    "checkpoints": BAD_SIZE,
    "adjoint_solver": ["rk4", None],
    "activation": ["swish", None],
    "theta_at": ["start", None],
}

CASES += [
    Case(
        f"transflow.control.{name}",
        _ctl(name),
        dict,
        bad,
    )
    for name, bad in (
        ("TrainConfig", _TRAIN_BAD),
        ("DigitsConfig", _DIGITS_BAD),
        ("DepthDigitsConfig", _DEPTH_BAD),
        (
            "SequenceConfig",
            {
                **_TRAIN_BAD,
                "kind": ["sorted", None],
                **{k: BAD_SIZE for k in ("length", "vocab", "n_test")},
            },
        ),
        (
            "DepthTextConfig",
            {
                **_DEPTH_BAD,
                "context": BAD_SIZE,
                "val_fraction": [0.0, 1.0, NAN],
                "n_val": BAD_SIZE,
                "corpus": ["wiki", None],
                "max_chars": [-1, 2.5, NAN],
            },
        ),
    )
]


def _params():
    for case in CASES:
        for arg, values in case.bad.items():
            for i, _ in enumerate(values):
                yield pytest.param(case, arg, i, id=f"{case.name}-{arg}-{i}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _names_argument(line: str, arg: str, needle: str | None) -> bool:
    import re

    if needle is not None:
        return re.search(needle, line) is not None
    return f"`{arg}`" in line


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_valid_arguments_are_accepted(case):
    out = case.call(**case.valid())
    assert out is not None


@pytest.mark.parametrize("case, arg, i", list(_params()))
def test_bad_argument_is_refused_naming_it(case, arg, i):
    bad = case.bad[arg][i]
    bad = bad() if callable(bad) and not isinstance(bad, type) else bad
    kwargs = {**case.valid(), arg: bad}
    with pytest.raises(Exception) as info:  # noqa: PT011 (the type is checked below)
        out = case.call(**kwargs)
        jax.block_until_ready(out)  # a runtime check fires here at the latest
    assert isinstance(info.value, TypeError | ValueError), repr(info.value)
    line = _first_line(info.value)
    assert _names_argument(line, arg, case.needle.get(arg)), (
        f"{case.name}({arg}={bad!r}): the first line does not name `{arg}`: {line!r}"
    )


# ------------------------------------------------------------------ the issue's cases
@pytest.mark.parametrize("dt", [0.0, -0.25, NAN, INF])
def test_evolve_and_split_transformer_refuse_the_same_dt_with_the_same_message(dt):
    theta = _theta()
    with pytest.raises(ValueError) as a:
        evolve(_u(), theta, dt=dt, grid=Grid.index(4, 8))
    with pytest.raises(ValueError) as b:
        SplitTransformer(theta, dt=dt)
    msg_a, msg_b = str(a.value), str(b.value)
    assert msg_a.startswith("evolve: `dt` must be a finite number > 0")
    assert msg_a.removeprefix("evolve") == msg_b.removeprefix("SplitTransformer")


@pytest.mark.parametrize("dt", [0.0, -0.25, NAN, INF])
def test_evolve_refuses_a_bad_traced_dt_under_jit(dt):
    theta = _theta()
    run = eqx.filter_jit(lambda step: evolve(_u(), theta, dt=step))
    assert bool(jnp.all(jnp.isfinite(run(jnp.asarray(0.5)))))
    with pytest.raises(Exception, match=r"`dt` must be a finite number > 0"):
        jax.block_until_ready(run(jnp.asarray(dt)))


def test_nan_in_the_state_names_u_in_the_first_line():
    theta = _theta()
    with pytest.raises(ValueError) as info:
        evolve(_with(_u()), theta)
    assert _first_line(info.value).startswith("`u0` contains NaN or Inf (1 of 32 entries)")
    assert len(str(info.value).splitlines()) == 1
    with pytest.raises(ValueError) as info:
        SplitTransformer(theta)(_with(_u(), INF))
    assert _first_line(info.value).startswith("`u` contains NaN or Inf")


_HEADERS = {
    # the first line of a run-time error under each jit wrapper: JAX's/equinox's, fixed
    # by them (docs/reliability.md, "Under jit, the first line is JAX's or equinox's")
    "filter_jit": "Above is the stack outside of JIT. Below is the stack inside of JIT:",
    "jax.jit": "INTERNAL: CpuCallback error calling callback",
}


def _our_first_line(exc: BaseException) -> tuple[str, str]:
    """(the error's first line, the first line of the message transflow wrote): the line
    after equinox's ``EquinoxRuntimeError: `` marker, below the wrapper's header."""
    lines = str(exc).splitlines()
    ours = next(ln for ln in lines if "EquinoxRuntimeError: " in ln)
    return lines[0], ours.split("EquinoxRuntimeError: ", 1)[1]


@pytest.mark.parametrize("wrapper", ["filter_jit", "jax.jit"])
@pytest.mark.parametrize("arg", ["u0", "dt"])
def test_a_traced_bad_value_is_refused_at_run_time_naming_the_argument(wrapper, arg):
    """Under jit the value is unknown when the check is traced: equinox raises at run
    time. The error's first line is the wrapper's header (JAX and equinox fix it; no
    public API changes it); the first line of transflow's message, below it, names the
    argument as the untraced check does."""
    theta = _theta()
    jit = eqx.filter_jit if wrapper == "filter_jit" else jax.jit
    if arg == "u0":
        run, bad, start = jit(lambda u: evolve(u, theta)), _with(_u()), "`u0` contains NaN"
    else:
        run = jit(lambda s: evolve(_u(), theta, dt=s))
        bad, start = jnp.asarray(-0.25), "evolve: `dt` must be a finite number > 0"
    with pytest.raises(Exception) as info:  # noqa: PT011 (the type is JAX's, checked below)
        jax.block_until_ready(run(bad))
    first, ours = _our_first_line(info.value)
    assert first.startswith(_HEADERS[wrapper]), first
    assert ours.startswith(start), ours


def test_grid_interval_refuses_a_nan_domain():
    with pytest.raises(ValueError, match=r"^Grid.interval: `x_domain` must be an interval"):
        Grid.interval(8, 16, x_domain=(0, float("nan")))


def test_stack_controls_names_the_mismatched_layers_and_sizes():
    with pytest.raises(ValueError) as info:
        stack_controls([_layer(16, 0), _layer(8, 1)])
    line = _first_line(info.value)
    assert "`layers[1]` does not match `layers[0]`" in line
    assert "d_model 8 vs 16" in line


def test_from_torch_blames_the_prelu_activation_not_the_dtypes():
    from transflow.interop import from_torch

    with pytest.raises(ValueError) as info:
        from_torch(_torch_prelu_layer())
    line = _first_line(info.value)
    assert "activation" in line and "PReLU" in line and "dtype" not in line


def test_grid_interval_takes_x_rule_and_y_rule_as_documented():
    g = Grid.interval(8, 16, x_rule="gauss", y_rule="trapezoid")
    assert g.n_tokens == 8 and g.n_features == 16
    with pytest.raises(TypeError, match="rule"):
        Grid.interval(8, 16, rule="gauss")  # the old name in the docs is not an argument


# ------------------------------------------------------------------ coverage
def _declared_packages() -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["tool"]["setuptools"]["packages"]


def _public_callables() -> dict[str, Any]:
    """``package.name`` -> object, for every callable that a package exports (its
    ``__all__`` or its ``__init__``'s public names), one entry per object."""
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for package_name in _declared_packages():
        package = importlib.import_module(package_name)
        if hasattr(package, "__all__"):
            names = list(package.__all__)
        else:
            names = [
                n
                for n, v in vars(package).items()
                if not n.startswith("_") and not inspect.ismodule(v)
            ]
        for name in names:
            obj = getattr(package, name)
            if not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            out[f"{package_name}.{name}"] = obj
    return out


def _covered() -> set[int]:
    """ids of the objects that a case calls by its public name."""
    ids = set()
    for case in CASES:
        parts = case.name.split("(")[0].split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            ids.add(id(obj))
            # a classmethod case covers its class
            owner = getattr(obj, "__self__", None)
            if inspect.isclass(owner):
                ids.add(id(owner))
            break
    return ids


def test_the_table_covers_every_public_callable():
    from _public_exempt import EXEMPT

    public = _public_callables()
    covered = _covered()
    missing = sorted(
        name for name, obj in public.items() if id(obj) not in covered and name not in EXEMPT
    )
    assert not missing, f"add a Case (or an EXEMPT entry with a reason) for: {missing}"
    stale = sorted(set(EXEMPT) - set(public))
    assert not stale, f"EXEMPT names that are no longer public: {stale}"
    both = sorted(n for n in EXEMPT if id(public[n]) in covered)
    assert not both, f"covered by a Case, remove from EXEMPT: {both}"
    assert all(reason.strip() for reason in EXEMPT.values())

"""transflow.analysis: trajectories of every model type end at the model's output,
refine(model, 1) is the model, refinement of a converted encoder converges (first order),
token geometry, sub-step budgets, control smoothness, bad input, and experiment=analyze on
save_pretrained / torch / trained-digits checkpoints."""

from __future__ import annotations

import json
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import LayerControls, LieScheme, PreNormScheme, SplitTransformer, stack_controls
from transflow.analysis import (
    as_flow,
    control_increments,
    cosine_matrix,
    count_clusters,
    depth_scaling,
    distance_to_s1,
    effective_rank,
    increment_scaling,
    iter_steps,
    model_output,
    refine,
    refine_controls,
    refinement_study,
    step_diagnostics,
    trajectory,
)

torch = pytest.importorskip("torch", reason="the converted models need torch (reference extra)")
transformers = pytest.importorskip("transformers", reason="HF models need transformers")


# ----------------------------------------------------------------------------- models
def _split(scheme=None, n=3, d=8):
    layers = [
        LayerControls.random(d, n_heads=2, scale=0.7, key=jax.random.key(i)) for i in range(n)
    ]
    return SplitTransformer(stack_controls(layers), LieScheme() if scheme is None else scheme)


def _torch_encoder(norm_first=False, d=16, n_layers=4, d_ff=16, seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(
        d, 2, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    enc = torch.nn.TransformerEncoder(
        layer, n_layers, norm=torch.nn.LayerNorm(d), enable_nested_tensor=False
    )
    for module in enc.layers.modules():  # the encoder deep-copies one layer: redraw each
        if isinstance(module, torch.nn.MultiheadAttention):
            module._reset_parameters()
        elif isinstance(module, torch.nn.Linear):
            module.reset_parameters()
    return enc.double().eval()


def _vit_module(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.ViTConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=16,
        patch_size=8,
    )
    return transformers.ViTModel(cfg).eval()


def _gpt2_module(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, n_positions=16, vocab_size=50)
    return transformers.GPT2Model(cfg).eval()


def _bert_module(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        vocab_size=50,
        attn_implementation="eager",
    )
    return transformers.BertModel(cfg).eval()


def _llama_module(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=24,
        vocab_size=50,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
    )
    return transformers.LlamaModel(cfg).eval()


def _cvt_stage():
    from transformers import CvtConfig
    from transformers.models.cvt.modeling_cvt import CvtStage

    torch.manual_seed(0)
    cfg = CvtConfig(
        num_channels=3,
        patch_sizes=[3, 3],
        patch_stride=[2, 2],
        patch_padding=[1, 1],
        embed_dim=[8, 12],
        num_heads=[2, 3],
        depth=[2, 2],
        mlp_ratio=[2.0, 2.0],
        attention_drop_rate=[0.0, 0.0],
        drop_rate=[0.0, 0.0],
        drop_path_rate=[0.0, 0.0],
        qkv_bias=[True, False],
        cls_token=[False, True],
        qkv_projection_method=["dw_bn", "dw_bn"],
        kernel_qkv=[3, 3],
        padding_kv=[1, 1],
        stride_kv=[2, 2],
        padding_q=[1, 1],
        stride_q=[1, 1],
    )
    return CvtStage(cfg, 1).double().eval()


def _model(kind):
    """(model, one input) for every model type transflow builds, float64."""
    from transflow.interop import from_hf, from_torch

    rng = np.random.default_rng(0)
    if kind == "split_lie":
        return _split(), jnp.asarray(rng.normal(size=(5, 8)))
    if kind == "split_prenorm":
        return _split(PreNormScheme()), jnp.asarray(rng.normal(size=(5, 8)))
    if kind in ("torch_postln", "torch_preln"):
        pre = kind == "torch_preln"  # pre-LN with a lifted FFN (d_ff = 2d), post-LN square
        m = from_torch(_torch_encoder(norm_first=pre, d_ff=32 if pre else 16))
        return m, jnp.asarray(rng.normal(size=(6, 16)))
    if kind == "hf_vit":
        return from_hf(_vit_module(), dtype=jnp.float64), jnp.asarray(rng.normal(size=(3, 16, 16)))
    if kind == "hf_gpt2":
        return from_hf(_gpt2_module(), dtype=jnp.float64), jnp.asarray(rng.integers(0, 50, 7))
    if kind == "hf_bert":
        return from_hf(_bert_module(), dtype=jnp.float64), jnp.asarray(rng.integers(0, 50, 7))
    if kind == "hf_llama":
        return from_hf(_llama_module(), dtype=jnp.float64), jnp.asarray(rng.integers(0, 50, 7))
    if kind == "hf_cvt":
        return from_hf(_cvt_stage()), jnp.asarray(rng.normal(size=(8, 9, 11)))
    if kind == "digits":
        from transflow.control import make_vit

        m = make_vit(d=16, n_steps=3, n_heads=2, dtype=jnp.float64, key=jax.random.key(1))
        return m, jnp.asarray(rng.uniform(size=(8, 8)))
    raise AssertionError(kind)


KINDS = [
    "split_lie",
    "split_prenorm",
    "torch_postln",
    "torch_preln",
    "hf_vit",
    "hf_gpt2",
    "hf_bert",
    "hf_llama",
    "hf_cvt",
    "digits",
]


def _max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


# ----------------------------------------------------------------------------- trajectory
@pytest.mark.parametrize("kind", KINDS)
def test_trajectory_ends_at_the_model_output(kind):
    model, x = _model(kind)
    traj = trajectory(model, x)
    flow = as_flow(model, x)
    out = model_output(model, x)
    assert traj.dtype == jnp.float64
    assert traj.shape == (flow.num_steps + 1, *flow.u0.shape)
    assert _max_abs(traj[0], flow.u0) == 0.0
    assert _max_abs(traj[-1], out) <= 1e-12
    # the output also matches the model's own call where that returns the state
    if kind.startswith(("split", "torch", "hf_vit", "hf_gpt2", "hf_bert", "hf_llama")):
        assert _max_abs(traj[-1], model(x)) <= 1e-12
    if kind == "digits":
        assert _max_abs(traj[-1], model.features(x)) <= 1e-12
    # the states differ from step to step (the trajectory is not a copy of one state)
    assert all(_max_abs(traj[k], traj[k + 1]) > 1e-6 for k in range(flow.num_steps))


@pytest.mark.parametrize(
    "kind", ["split_lie", "torch_postln", "torch_preln", "hf_vit", "hf_gpt2", "hf_llama"]
)
def test_substep_trajectory(kind):
    model, x = _model(kind)
    subs = trajectory(model, x, substeps=True)
    traj = trajectory(model, x)
    flow = as_flow(model, x)
    names = flow.scheme.substep_names(flow.layer(0))
    keys = list(subs)
    assert keys[0] == "input"
    closing = flow.final_norm is not None
    assert len(keys) == 1 + flow.num_steps * len(names) + closing
    assert keys[1 : 1 + len(names)] == [f"1/{n}" for n in names]
    assert (keys[-1] == "final_norm") == closing
    assert _max_abs(list(subs.values())[-1], model_output(model, x)) <= 1e-12
    for n in range(1, flow.num_steps):  # the last sub-step of step n is u^n
        assert _max_abs(subs[f"{n}/{names[-1]}"], traj[n]) <= 1e-12


def test_iter_steps_streams_one_step_at_a_time():
    model, x = _model("torch_postln")
    records = iter_steps(as_flow(model, x))
    first = next(records)
    assert first.index == 1 and set(first.substeps) == {
        "attention",
        "ln1",
        "ffn1",
        "ffn2",
        "relax",
        "ln2",
    }
    rest = list(records)
    assert [r.index for r in rest] == [2, 3, 4] and "final_norm" in rest[-1].substeps
    diag = step_diagnostics(model, x)
    assert "states" not in diag  # states are not kept unless asked (keep_states=True)


# ----------------------------------------------------------------------------- refine
SLOW_TEXT = [pytest.param(k, marks=pytest.mark.slow) for k in ("hf_bert", "hf_llama")]


@pytest.mark.parametrize(
    "kind", ["split_lie", "torch_preln", "hf_vit", "hf_gpt2", "digits", *SLOW_TEXT]
)
def test_refine_one_is_the_identity(kind):
    model, x = _model(kind)
    for interp in ("constant", "linear"):
        same = refine(model, 1, interpolation=interp)
        assert _max_abs(model_output(same, x), model_output(model, x)) <= 1e-12
    c = as_flow(model, x).controls
    for a, b in zip(jax.tree.leaves(refine_controls(c, 1, "linear")), jax.tree.leaves(c)):
        assert _max_abs(a, b) == 0.0


@pytest.mark.parametrize("kind", ["split_lie", "hf_vit", "hf_gpt2", "digits", *SLOW_TEXT])
def test_refine_has_finer_steps_and_same_type(kind):
    model, x = _model(kind)
    flow = as_flow(model, x)
    fine = refine(model, 4)
    ff = as_flow(fine, x)
    assert type(fine) is type(model)
    assert ff.num_steps == 4 * flow.num_steps and ff.dt == flow.dt / 4
    wq, wq_fine = flow.controls.attn.wq, ff.controls.attn.wq
    assert _max_abs(wq_fine[4:8], jnp.repeat(wq[1:2], 4, axis=0)) == 0.0
    lin = as_flow(refine(model, 4, interpolation="linear"), x).controls.attn.wq
    # fine step 6 of 12 sits at s = 6/4 + 1/8 - 1/2 = 1.125 (cell midpoints at 0, 1, 2)
    assert _max_abs(lin[6], 0.875 * wq[1] + 0.125 * wq[2]) <= 1e-15
    assert _max_abs(model_output(fine, x), model_output(model, x)) > 1e-6


@pytest.mark.parametrize("interpolation", ["constant", "linear"])
def test_refinement_of_a_converted_encoder_converges(interpolation):
    """4-layer pre-LN torch encoder, torch's default (moderate) weights, drawn per layer:
    the outputs at factors 2, 4, 8, 16 converge at first order (explicit Euler on
    𝒜∘P_S1 and ℱ∘P_S1). The post-LN (paper) encoder does not: see the next test."""
    from transflow.interop import from_torch

    model = from_torch(_torch_encoder(norm_first=True, d=16, n_layers=4, d_ff=32))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 16)))
    st = refinement_study(model, x, (2, 4, 8, 16), interpolation=interpolation)
    succ = st["successive"]  # |out_4 - out_2|, |out_8 - out_4|, |out_16 - out_8|
    ratios = [a / b for a, b in zip(succ, succ[1:])]
    print(f"{interpolation}: successive {succ}, ratios {ratios}, fitted order {st['order']:.3f}")
    assert all(r >= 1.5 for r in ratios), ratios
    assert 0.8 <= st["order"] <= 1.3  # explicit Euler: first order (docs/analysis.md)


@pytest.mark.slow
def test_post_ln_refinement_keeps_an_order_one_projection_move():
    """Why the paper's post-LN scheme does not converge under refinement: the projection
    onto S2 (ReLU) inside the FFN branch does not depend on Δt, so the first FFN sub-step
    moves the state by ‖min(u², 0)‖ = O(1) in every fine step, while the attention
    increment (Δt·𝒜) shrinks like Δt."""
    from transflow.interop import from_torch

    model = from_torch(_torch_encoder(norm_first=False, d=16, n_layers=4, d_ff=16))
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 16)))
    coarse = step_diagnostics(model, x, keep_cosine=False)["increments"]
    fine = step_diagnostics(refine(model, 16), x, keep_cosine=False)["increments"]
    assert np.max(fine["attention"]) <= np.max(coarse["attention"]) / 8
    # Δt shrank 16x, the ReLU sub-step's move by less than 5x (→ ‖min(u², 0)‖ ≠ 0)
    assert np.min(fine["ffn1"]) >= 0.2 * np.min(coarse["ffn1"]) > 0.1
    st = refinement_study(model, x, (1, 2, 4, 8))
    assert min(st["ratios"]) < 1.5  # no first-order convergence


def test_refinement_study_records_evaluate():
    model, x = _model("split_lie")
    xs = jnp.stack([x, 2 * x])
    st = refinement_study(model, xs, (1, 2), evaluate=lambda m: {"layers": m.num_layers})
    assert [e["layers"] for e in st["evaluate"]] == [3, 6]
    assert st["change"][0] == 0.0 and st["change"][1] > 0


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("factor", [0, -2, 1.5, 2.0, True, "2", None])
def test_refine_rejects_a_bad_factor(factor):
    model, _ = _model("split_lie")
    with pytest.raises(ValueError, match="`factor`") as info:
        refine(model, factor)
    assert repr(factor) in str(info.value)


def test_refine_rejects_a_bad_interpolation():
    model, _ = _model("split_lie")
    with pytest.raises(ValueError, match="interpolation"):
        refine(model, 2, interpolation="cubic")


@pytest.mark.parametrize(
    "bad", [_torch_encoder, lambda: "model", lambda: LayerControls.random(4, key=jax.random.key(0))]
)
def test_unsupported_model_names_the_type_and_the_supported_ones(bad):
    obj = bad()
    for fn in (
        lambda: trajectory(obj, jnp.ones((3, 4))),
        lambda: refine(obj, 2),
        lambda: model_output(obj, jnp.ones((3, 4))),
        lambda: control_increments(obj),
    ):
        with pytest.raises(TypeError) as info:
            fn()
        msg = str(info.value)
        assert type(obj).__name__ in msg
        assert "SplitTransformer" in msg and "VisionTransformer" in msg and "FlowModel" in msg


def test_cvt_stage_cannot_be_refined():
    model, _ = _model("hf_cvt")
    with pytest.raises(TypeError, match="CvtStageModel"):
        refine(model, 2)


# ----------------------------------------------------------------------------- geometry
def test_geometry_on_constructed_states():
    same = jnp.tile(jnp.arange(1.0, 5.0), (6, 1))
    assert count_clusters(same, 0.99) == 1
    assert math.isclose(float(effective_rank(same)), 1.0, abs_tol=1e-12)
    eye = jnp.eye(4)
    assert count_clusters(eye, 0.5) == 4 and count_clusters(eye, -0.5) == 1
    assert math.isclose(float(effective_rank(eye)), 4.0, rel_tol=1e-12)
    c = cosine_matrix(jnp.array([[1.0, 0.0], [-3.0, 0.0]]))
    assert c.tolist() == [[1.0, -1.0], [-1.0, 1.0]]
    # distance to S1: mean α, std s -> sqrt((α - σ1)^2 + (s - σ2)^2)
    row = jnp.array([[0.0, 2.0, 4.0, 6.0]])  # α = 3, s = √5
    assert math.isclose(
        float(distance_to_s1(row, 1.0, 2.0)), math.sqrt(4 + (5**0.5 - 2) ** 2), rel_tol=1e-12
    )
    with pytest.raises(ValueError, match="threshold"):
        count_clusters(eye, 1.5)


def test_step_diagnostics_match_the_substep_trajectory():
    model, x = _model("torch_preln")
    diag = step_diagnostics(model, x, keep_states=True)
    subs = trajectory(model, x, substeps=True)
    traj = trajectory(model, x)
    assert _max_abs(diag["states"], traj) <= 1e-12
    # pre-LN: the attention update acts on the residual stream u^n, the FFN update on the
    # attention output (its increment is Δt·ℱ), the projections off the stream.
    assert math.isclose(
        diag["increments"]["attention"][1],
        float(jnp.linalg.norm(subs["2/attention"] - traj[1])),
        rel_tol=1e-12,
    )
    assert math.isclose(
        diag["increments"]["residual"][1],
        float(jnp.linalg.norm(subs["2/residual"] - subs["2/attention"])),
        rel_tol=1e-12,
    )
    assert math.isnan(diag["increments"]["ffn1"][0])  # lifting (d_ff ≠ d): no increment
    for k in range(traj.shape[0]):
        cos = np.asarray(cosine_matrix(traj[k]))
        off = cos[~np.eye(len(cos), dtype=bool)]
        assert math.isclose(diag["min_cosine"][k], off.min(), abs_tol=1e-12)
        assert math.isclose(diag["mean_cosine"][k], off.mean(), abs_tol=1e-12)
        assert diag["n_clusters"][k] == count_clusters(traj[k], 0.99)


def test_lie_scheme_states_lie_on_s1():
    """After every paper step the state is on S1(σ1, σ2) of the closing projection."""
    model, x = _model("split_lie")
    diag = step_diagnostics(model, 3.0 * x + 1.0)
    assert diag["distance_s1"][0] > 0.5
    assert np.all(diag["distance_s1"][1:] <= 1e-12)
    assert np.all(np.isfinite(diag["increments"]["ffn1"]))  # square FFN: residual sub-steps


# ----------------------------------------------------------------------------- controls
def test_control_smoothness_scaling():
    a, b = (LayerControls.random(6, key=jax.random.key(i)) for i in range(2))

    def path(n):  # θ(t) = (1 - t) a + t b at the step midpoints: a smooth control
        return SplitTransformer(
            stack_controls(
                [
                    jax.tree.map(lambda p, q, t=t: (1 - t) * p + t * q, a, b)
                    for t in (np.arange(n) + 0.5) / n
                ]
            )
        )

    const = SplitTransformer(stack_controls([a] * 4))
    assert all(np.all(v == 0) for v in control_increments(const).values())
    smooth = increment_scaling(path(16))
    assert smooth["strides"] == [1, 2, 4, 8]
    assert abs(smooth["beta"] - 1.0) <= 1e-9
    assert abs(depth_scaling([path(4), path(8), path(16)])["beta"] - 1.0) < 0.05
    iid = SplitTransformer(
        stack_controls([LayerControls.random(6, key=jax.random.key(10 + i)) for i in range(16)])
    )
    assert abs(increment_scaling(iid)["beta"]) < 0.3  # independent layers: no scaling
    inc = control_increments(iid)
    assert inc["attn.wq"].shape == (15,) and np.all(inc["attn.wq"] > 0.5)
    with pytest.raises(ValueError, match="strides"):
        increment_scaling(iid, strides=[16])


# ----------------------------------------------------------------------------- experiment
def _run(overrides, run_dir, *, smoke=True):
    from transflow.experiments.run import run_in_process

    extra = ["debug=smoke"] if smoke else []
    summary, _ = run_in_process(["experiment=analyze", *extra, *overrides], run_dir)
    return summary


def _check_run(run_dir, summary):
    from test_experiments import assert_verdicts_agree

    # console (run.log), report.md and summary.json agree; no enforced claim failed, and
    # the run says all claims pass exactly when every claim is enforced
    counts = assert_verdicts_agree(run_dir)
    assert counts["FAILED"] == counts["not checked"] == 0
    assert summary["claims_pass"] is (counts["not enforced"] == 0)
    assert (run_dir / "DONE").exists()
    # numbers in the report are formatted, and a missing one says so (never "nan")
    report = (run_dir / "report.md").read_text()
    assert not re.search(r"\bnan\b", report, re.IGNORECASE), report
    assert not re.search(r"\d\.\d{8,}", report.replace(str(run_dir), "")), report
    for fig in ("trajectories", "cosine", "geometry", "budgets", "smoothness", "refinement"):
        assert (run_dir / f"{fig}.png").stat().st_size > 0
    rows = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kinds = {r["kind"] for r in rows}
    assert {"step", "substep", "control", "refine", "final"} <= kinds
    with np.load(run_dir / "analysis.npz") as z:
        assert z["states"].shape[0] == summary["n_steps"] + 1
        assert z["cosine"].shape[1:] == (summary["n_tokens"], summary["n_tokens"])
    return rows


@pytest.mark.parametrize(
    "arch",
    ["vit", *(pytest.param(a, marks=pytest.mark.slow) for a in ("gpt2", "bert", "llama"))],
)
def test_analyze_a_save_pretrained_directory(arch, tmp_path):
    build = {"vit": _vit_module, "gpt2": _gpt2_module, "bert": _bert_module}
    module = build.get(arch, _llama_module)()
    module.save_pretrained(tmp_path / "model")
    summary = _run([f"task.model_path={tmp_path / 'model'}"], tmp_path / "run")
    assert summary["source"] == "hf" and summary["model"] == arch
    assert summary["n_steps"] == 2 and summary["dtype"] == "float64"
    assert summary["n_tokens"] == (5 if arch == "vit" else 8)  # 4 patches + class / seq_len
    _check_run(tmp_path / "run", summary)


@pytest.mark.slow
def test_analyze_a_torch_checkpoint(tmp_path):
    torch.save(_torch_encoder().float(), tmp_path / "encoder.pt")  # a whole-module pickle
    summary = _run([f"task.model_path={tmp_path}", "task.trust_pickle=true"], tmp_path / "run")
    assert summary["source"] == "torch" and summary["model"] == "TransformerEncoder"
    assert summary["n_steps"] == 4
    _check_run(tmp_path / "run", summary)


@pytest.mark.slow
def test_analyze_the_trained_digits_model(tmp_path):
    """A tiny train_digits run, then experiment=analyze on its checkpoint directory: the
    accuracy at refinement factor 1 is the one training reported (same fp32 model)."""
    from transflow.control import DigitsConfig, run_training

    dcfg = DigitsConfig(
        d=16,
        n_steps=3,
        steps=30,
        eval_every=30,
        checkpoint_every=30,
        warmup_steps=3,
        checkpoint_dir=str(tmp_path / "ckpt"),
    )
    train, _ = run_training(
        "digits", dcfg, run_dir=tmp_path / "train", progress=lambda it, **kw: it
    )
    summary = _run(
        [
            f"task.model_path={tmp_path / 'ckpt'}",
            "task.factors=[1,2,4]",
            "task.digits.d=16",
            "task.digits.n_steps=3",
            "task.digits.steps=30",
            "task.digits.warmup_steps=3",
            "precision=fp32",
        ],
        tmp_path / "run",
        smoke=False,
    )
    rows = _check_run(tmp_path / "run", summary)
    assert summary["source"] == "transflow" and summary["n_steps"] == 3
    refine_rows = [r for r in rows if r["kind"] == "refine"]
    assert [r["factor"] for r in refine_rows] == [1, 2, 4] * 2  # constant, then linear
    assert refine_rows[0]["test_accuracy"] == train["test_accuracy"]
    assert summary["test_accuracy"] == train["test_accuracy"]
    assert summary["scaling_beta"] is not None  # 3 layers: strides 1, 2


def test_analyze_bad_model_path_stops_before_compute(tmp_path):
    missing = tmp_path / "no_such_model"
    # checked with the config, before any work (experiments/tasks/analyze.py: check)
    with pytest.raises(ValueError, match="task.model_path.*no_such_model.*does not exist"):
        _run([f"task.model_path={missing}"], tmp_path / "run1")
    assert not (tmp_path / "run1" / "metrics.jsonl").exists()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="junk.*no recognised checkpoint"):
        _run([f"task.model_path={tmp_path / 'junk'}"], tmp_path / "run2")
    assert not (tmp_path / "run2" / "metrics.jsonl").exists()


def test_refinement_legend_and_report_say_when_an_order_is_missing(tmp_path):
    """Two refinement factors give one successive difference: no fitted order. The
    figure's legend and the report say so ("n/a", why); the summary holds null, not NaN."""
    import matplotlib

    matplotlib.use("Agg")
    from transflow.plotting import plot_refinement

    study = {
        "factors": [1, 2],
        "change": [0.0, 0.1],
        "successive": [0.1],
        "order": float("nan"),
    }
    fig = plot_refinement({"constant": study})
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("order n/a: 1 difference, 2 needed" in t for t in texts), texts
    assert not any("nan" in t for t in texts), texts
    matplotlib.pyplot.close(fig)
    summary = _run([], tmp_path)  # smoke: factors [1, 2]
    assert summary["refine_constant_order"] is None
    report = (tmp_path / "report.md").read_text()
    assert "refinement orders constant: n/a (2 refinement factors, 3 needed" in report
    assert "| refine_constant_order | n/a |" in report
    _check_run(tmp_path, summary)


# ----------------------------------------------------------------------------- analyze sources
def test_model_source_names_the_kind_or_refuses_naming_the_key(tmp_path):
    from transflow.analysis import model_source

    with pytest.raises(FileNotFoundError, match=r"task\.model_path="):
        model_source(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"model=.*no recognised checkpoint"):
        model_source(tmp_path, key="model")
    (tmp_path / "enc.pt").write_bytes(b"")
    assert model_source(tmp_path) == ("torch", tmp_path / "enc.pt")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert model_source(tmp_path / "hf")[0] == "hf"
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "ckpt-10.eqx").write_bytes(b"")
    assert model_source(tmp_path / "ck")[0] == "transflow"


@pytest.mark.parametrize("arch", ["torch_encoder", "gpt2"])
def test_a_random_module_its_inputs_and_its_study_records(arch):
    """experiment=analyze's random source in the library: the module converts, its inputs
    have the model's domain, refine(model, 1) is the model, and the study's records,
    arrays and summary are consistent."""
    from transflow import analysis as an

    sizes = dict(n_layers=2, d_model=8, n_heads=2, d_ff=16, seq_len=5)
    module = an.random_module(arch, seed=0, **sizes)
    model = an.cast_floats(an.model_from_module(module, jnp.float64), jnp.float64)
    xs, labels, what = an.flow_inputs(model, seed=0, n=3, seq_len=5, dtype=jnp.float64)
    assert labels is None and len(xs) == 3
    assert ("token ids" in what) == (arch == "gpt2")
    ident = an.refinement_identities(model, xs[0])
    assert ident["refine1_minus_model_max_abs"] <= 1e-12
    assert ident["linear_interpolation_at_factor1_max_abs"] == 0.0
    res = an.analyze(model, xs[0], refine_inputs=xs, factors=[1, 2])
    studies = {"constant": res["refinement"]}
    summary = an.analysis_summary(res, studies)
    assert summary["n_steps"] == 2 and summary["n_tokens"] == 5
    assert summary["refine_constant_order"] is None  # two factors: no fitted order
    assert an.no_order_reason(res["refinement"]).startswith("2 refinement factors")
    records = an.analysis_records(res, studies)
    assert [r["step"] for r in records if r["kind"] == "step"] == [0, 1, 2]
    assert [r["factor"] for r in records if r["kind"] == "refine"] == [1, 2]
    arrays = an.analysis_arrays(res, studies)
    assert arrays["states"].shape[0] == 3 and list(arrays["refine/constant/factors"]) == [1, 2]
    with pytest.raises(ValueError, match="`arch`"):
        an.random_module("cnn", seed=0)

"""Trained expressivity (issue #39): training, the hardmax reading, certified counts against
an independent dense-grid count, and the errors for bad options."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow import expressivity as ex


@pytest.fixture
def x64():
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


def test_training_reduces_loss_tiny():
    t = ex.make_target("sawtooth", teeth_log2=1)
    p0 = ex.init_transformer(
        jax.random.PRNGKey(0), dim=1, depth=1, n_tokens=2, width=4, n_heads=1, ffn_width=4
    )
    xs = jnp.linspace(0.0, 1.0, 257, dtype=jnp.float32)[:, None]
    apply = jax.jit(ex.model_apply, static_argnums=0)
    before = float(jnp.mean((apply("transformer", p0, xs, 1.0) - t.fn(xs)) ** 2))
    p, rec = ex.train_model("transformer", p0, t, steps=60, lr=1e-2, batch=64, lam_end=10.0)
    after = float(jnp.mean((apply("transformer", p, xs, 10.0) - t.fn(xs)) ** 2))
    assert after < 0.5 * before
    assert rec["loss"][-1] < rec["loss"][0]
    assert set(rec) == {"loss", "seconds", "mse", "mse_softmax"}


def test_readings_match_the_trained_forward(x64):
    p = ex.init_transformer(jax.random.PRNGKey(3), dim=2, depth=2)
    xs = np.random.default_rng(0).uniform(0, 1, (8, 2))
    hard = ex.hardmax_reading(p)
    assert hard.affine_logits and hard.hardmax
    p64 = jax.tree.map(jnp.float64, p)
    ours = np.asarray(ex.model_apply("transformer", p64, xs))
    theirs = np.asarray(jax.vmap(hard)(jnp.asarray(xs))[:, 0])
    np.testing.assert_allclose(theirs, ours, rtol=1e-12, atol=1e-12)
    soft = ex.hardmax_reading(p, lam=7.0)
    ours = np.asarray(ex.model_apply("transformer", p64, xs, 7.0))
    theirs = np.asarray(jax.vmap(soft)(jnp.asarray(xs))[:, 0])
    np.testing.assert_allclose(theirs, ours, rtol=1e-12, atol=1e-12)
    # the softmax model approaches the hardmax reading as λ grows (sampled, away from ties)
    assert ex.reading_gap(p, 1e6, dim=2, n=400) < ex.reading_gap(p, 1.0, dim=2, n=400)


@pytest.mark.parametrize(
    "kind, dim, depth, seed",
    [("transformer", 1, 2, 0), ("mlp", 1, 2, 0), ("transformer", 2, 1, 1), ("mlp", 2, 2, 0)],
)
def test_certified_count_equals_dense_grid(kind, dim, depth, seed, x64):
    key = jax.random.PRNGKey(seed)
    if kind == "transformer":
        p = ex.init_transformer(key, dim=dim, depth=depth, n_tokens=3, width=4)
    else:
        p = ex.init_mlp(key, dim=dim, depth=depth, width=4)
    r = ex.certified_regions(kind, p, dim=dim)
    assert r.certified
    f = ex.hardmax_reading(p) if kind == "transformer" else ex.mlp_network(p)
    n = 200000 if dim == 1 else 400
    grid = ex.grid_region_count(
        f, [0.0] * dim if dim == 2 else 0.0, [1.0] * dim if dim == 2 else 1.0, n
    )
    assert r.activation == grid["patterns"]
    if dim == 1:
        assert r.linear == grid["linear"]
    est = ex.sampling_estimate(kind, p, dim=dim, n=n)
    assert est["estimate"] <= r.activation <= est["estimate"] + est["error"]


def test_target_counts_certified(x64):
    for name, k in (("sawtooth", 3), ("zigzag2d", 1)):
        t = ex.make_target(name, teeth_log2=k)
        lo, hi = (0.0, 1.0) if t.dim == 1 else ([0.0, 0.0], [1.0, 1.0])
        r = ex.count_linear_regions(t.network, lo, hi)
        assert r.certified and r.linear == t.regions
        xs = np.random.default_rng(0).uniform(0, 1, (20, t.dim))
        np.testing.assert_allclose(
            np.asarray(t.fn(jnp.asarray(xs))), [float(t.network(x)[0]) for x in xs], atol=1e-12
        )


def test_mlp_width_matches_parameter_count():
    def mlp_params(w, dim, D):
        return ex.n_params(ex.init_mlp(jax.random.PRNGKey(0), dim=dim, depth=D, width=w))

    for dim, D in ((2, 3),):
        P = ex.n_params(ex.init_transformer(jax.random.PRNGKey(0), dim=dim, depth=D))
        w = ex.mlp_width_for(P, dim=dim, depth=D)
        gaps = [abs(mlp_params(v, dim, D) - P) for v in (w - 1, w, w + 1)]
        assert gaps[1] == min(gaps)  # the closest width


@pytest.mark.parametrize(
    "call, option",
    [
        (lambda: ex.init_transformer(jax.random.PRNGKey(0), dim=1, depth=0), "depth"),
        (lambda: ex.init_transformer(jax.random.PRNGKey(0), dim=1, depth=2.5), "depth"),
        (lambda: ex.init_transformer(jax.random.PRNGKey(0), dim=1, depth=1, width=0), "width"),
        (lambda: ex.init_transformer(jax.random.PRNGKey(0), dim=3, depth=1), "dim"),
        (lambda: ex.init_mlp(jax.random.PRNGKey(0), dim=1, depth=-1, width=4), "depth"),
        (lambda: ex.init_mlp(jax.random.PRNGKey(0), dim=1, depth=1, width=0), "width"),
        (lambda: ex.make_target("square"), "name"),
        (lambda: ex.make_target("sawtooth", teeth_log2=-1), "teeth_log2"),
        (lambda: ex.mlp_width_for(100, dim=1, depth=0), "depth"),
        (lambda: ex.certified_regions("cnn", {}, dim=1), "kind"),
        (lambda: ex.constructed_capacity(dim=1, depth=0, n_tokens=3), "depth"),
    ],
)
def test_bad_options_name_the_option(call, option):
    with pytest.raises(ValueError, match=f"`{option}`"):
        call()


def test_bad_training_options():
    t = ex.make_target("smooth1d")
    p = ex.init_mlp(jax.random.PRNGKey(0), dim=1, depth=1, width=2)
    pt = ex.init_transformer(jax.random.PRNGKey(0), dim=1, depth=1)
    with pytest.raises(ValueError, match="`lam_start`"):
        ex.train_model("transformer", pt, t, steps=10, lam_start=10.0, lam_end=1.0)
    with pytest.raises(TypeError, match="`params` must be a transformer parameter dict"):
        ex.train_model("transformer", p, t, steps=10)  # an MLP's parameters
    with pytest.raises(ValueError, match="`steps`"):
        ex.train_model("mlp", p, t, steps=1)
    with pytest.raises(ValueError, match="`kind`"):
        ex.train_model("rnn", p, t, steps=10)


# ------------------------------------------------------------------ saved models (issue 48)
@pytest.mark.parametrize("kind, dim, depth", [("transformer", 2, 2), ("mlp", 1, 3)])
def test_a_saved_model_reloads_bit_for_bit(kind, dim, depth, tmp_path, x64):
    key = jax.random.PRNGKey(5)
    if kind == "transformer":
        p = ex.init_transformer(key, dim=dim, depth=depth, n_tokens=3, width=4, ffn_width=6)
    else:
        p = ex.init_mlp(key, dim=dim, depth=depth, width=5)
    path = ex.save_model(tmp_path, kind, p, target="zigzag2d", seed=7)
    assert path == tmp_path / f"zigzag2d_D{depth}_{kind}_seed7.eqx"
    m = ex.load_model(tmp_path, target="zigzag2d", depth=depth, kind=kind, seed=7)
    assert (m.kind, m.dim, m.depth, m.seed, m.target) == (kind, dim, depth, 7, "zigzag2d")
    assert jax.tree.structure(m.params) == jax.tree.structure(p)
    for a, b in zip(jax.tree.leaves(m.params), jax.tree.leaves(p)):
        assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
    r0, r1 = (ex.certified_regions(kind, q, dim=dim) for q in (p, m.params))
    assert r1.certified and (r1.linear, r1.activation) == (r0.linear, r0.activation)


def test_load_model_names_what_is_missing(tmp_path):
    p = ex.init_mlp(jax.random.PRNGKey(0), dim=1, depth=1, width=3)
    ex.save_model(tmp_path, "mlp", p, target="sawtooth", seed=0)
    with pytest.raises(FileNotFoundError, match="sawtooth_D1_mlp_seed0"):
        ex.load_model(tmp_path, target="sawtooth", depth=1, kind="mlp", seed=1)
    with pytest.raises(ValueError, match="`params`"):  # an MLP saved as a transformer
        ex.save_model(tmp_path, "transformer", p, target="sawtooth", seed=0)
    with pytest.raises(ValueError, match="`target`"):
        ex.save_model(tmp_path, "mlp", p, target="../up", seed=0)


def _run_task(run_dir):
    """The trained_regions task at smoke size, narrowed to the one 2-D cell that the
    partition figure draws (depth 1, seeds 0 and 1), in ``run_dir``; its summary."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "transflow-run"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "transflow.experiments.run"]
    args = ["experiment=trained_regions", "debug=smoke", "task.targets=[zigzag2d]"]
    args += ["task.depths_2d=[1]", "task.seeds=[0,1]", "task.steps=30", "task.grid_2d=40"]
    proc = subprocess.run(
        [*cmd, *args, f"hydra.run.dir={run_dir}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=run_dir.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def task_run(tmp_path_factory):
    """One smoke run of the task (see :func:`_run_task`): its run directory and summary."""
    run_dir = tmp_path_factory.mktemp("trained_regions") / "run"
    run_dir.mkdir()
    return run_dir, _run_task(run_dir)


def test_the_partition_model_of_a_run_reloads_with_the_same_certified_count(task_run):
    """The task saves its models; the documented call reloads the figure's model, and the
    same certified counter gives the recorded count."""
    import json

    run_dir, summary = task_run
    shown = summary["partition_model"]
    assert (shown["target"], shown["depth"], shown["seed"]) == ("zigzag2d", 1, 0)
    assert (run_dir / "partition_2d.png").is_file()
    m = ex.load_model(
        run_dir / "models",
        target=shown["target"],
        depth=shown["depth"],
        kind=shown["kind"],
        seed=shown["seed"],
    )
    r = ex.certified_regions(m.kind, m.params, dim=m.dim)
    assert shown["certified"] and r.certified
    assert (r.linear, r.activation) == (shown["regions"], shown["activation"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    row = next(x for x in rows if (x.get("kind"), x.get("seed")) == ("transformer", 0))
    assert row["model_file"] == "models/zigzag2d_D1_transformer_seed0.eqx"
    assert row["regions"] == r.linear
    saved = sorted(p.name for p in (run_dir / "models").iterdir())
    assert saved == [  # every trained model of the run
        f"zigzag2d_D1_{k}_seed{s}.{e}"
        for k in ("mlp", "transformer")
        for s in (0, 1)
        for e in ("eqx", "json")
    ]
    assert (summary["n_jobs"], summary["n_records_reused"]) == (2, 0)
    for seed in (0, 1):  # one record per (cell, seed) job
        assert (run_dir / "cells" / "zigzag2d-D1" / f"seed{seed}" / "record.json").is_file()


def test_a_rerun_in_the_same_directory_reuses_every_record(task_run):
    """A second run in the same directory trains nothing (every job's record reused, no
    model file rewritten) and states the same claims with the same values and verdicts;
    the partition figure's model is then reloaded and recounted to the recorded count."""
    run_dir, first = task_run
    models = {p.name: p.stat().st_mtime_ns for p in (run_dir / "models").iterdir()}
    second = _run_task(run_dir)
    assert (second["n_jobs"], second["n_records_reused"]) == (2, 2)
    assert {p.name: p.stat().st_mtime_ns for p in (run_dir / "models").iterdir()} == models
    assert second["claims"] == first["claims"] and second["claims"]
    assert second["claims_verdicts"] == first["claims_verdicts"]
    assert second["partition_model"] == first["partition_model"]
    for key in ("models", "uncertified", "init_below_lower_bound", "init_outside_error"):
        assert second[key] == first[key], key


def test_train_cell_trains_counts_and_saves_both_models(tmp_path):
    """One job of the study in the library: a transformer and the MLP of the closest
    parameter count, from the same key, saved where the records say, each reloading to
    the recorded certified count."""
    t = ex.make_target("sawtooth", teeth_log2=1)
    opts = dict(width=4, n_heads=1, ffn_width=4, steps=20, batch=32, lam_end=10.0, grid=64)
    rows, counts = ex.train_cell(t, depth=2, seed=3, model_dir=tmp_path / "models", **opts)
    assert [r["kind"] for r in rows] == ["transformer", "mlp"]
    assert abs(rows[1]["params"] - rows[0]["params"]) <= rows[0]["params"] // 2
    for r in rows:
        assert (r["target"], r["depth"], r["seed"], r["dim"]) == ("sawtooth", 2, 3, 1)
        assert r["init_lower_bound_ok"] == (r["init_estimate"] <= r["activation_init"])
        m = ex.load_model(tmp_path / "models", target="sawtooth", depth=2, kind=r["kind"], seed=3)
        assert r["model_file"] == f"models/{m.path.name}"
        again = ex.certified_regions(m.kind, m.params, dim=1)
        assert again.certified == r["certified"] and again.linear == r["regions"]
        assert counts[r["kind"]].linear == r["regions"]
    assert "gap_max" in rows[0] and "gap_max" not in rows[1]


@pytest.mark.parametrize(
    "option, value", [("depth", 0), ("seed", -1), ("steps", 1), ("lr", float("nan")),
                      ("lam_end", 0.5), ("grid", 4), ("time_budget", -1.0)]
)  # fmt: skip
def test_train_cell_refuses_a_bad_option_naming_it(option, value, tmp_path):
    kw = dict(depth=1, seed=0, model_dir=tmp_path, steps=20, grid=64)
    with pytest.raises(ValueError, match=f"`{option}`"):
        ex.train_cell(ex.make_target("sawtooth"), **{**kw, option: value})
    assert not any(tmp_path.iterdir())  # refused before any work

"""The depth study's evaluation options of issue 50 (float64, small models, no training):
the adaptive solve split at the jumps of θ (``task.adaptive_split``), the local order per
doubling and the fraction of Heun steps whose stages straddle a ReLU kink."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from transflow.experiments.tasks import depth

from transflow import Adaptive, LayerControls, PreNormScheme, stack_controls
from transflow.analysis._depth_evaluation import _adaptive_solves, _local_orders
from transflow.control import depth_accuracy, make_vit


def _per_layer_model(d=8, n_layers=4, seed=0):
    m = make_vit(
        d=d,
        n_steps=n_layers,
        n_heads=1,
        scheme=PreNormScheme(),
        dtype=jnp.float64,
        key=jax.random.key(seed),
    )
    layers = [
        LayerControls.random(d, n_heads=1, dtype=jnp.float64, key=jax.random.key(seed + 1 + i))
        for i in range(n_layers)
    ]
    # T = 0.2 as the study's headline (dt = T / L)
    return dataclasses.replace(m, controls=stack_controls(layers), dt=0.2 / n_layers)


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_adaptive_split_solves_a_per_layer_model_piece_by_piece():
    """With ``task.adaptive_split`` the study's adaptive solve of a per-layer model (θ
    jumps at its 3 inner layer boundaries) is the split solve, at the same tolerance: its
    evaluation count and its logits differ from the solve straight across the jumps (kept
    beside it as ``adaptive.unsplit``), and it agrees with a split reference 1e5 times
    tighter; without the option only the unsplit solve runs."""
    with jax.enable_x64(True):
        m = _per_layer_model()
        x = np.asarray(jax.random.normal(jax.random.key(9), (6, 8, 8), jnp.float64))
        ref = depth_accuracy(
            m, x, np.zeros(6, int), [], adaptive=Adaptive(rtol=1e-10, atol=1e-10), split=True
        )
        z_ref = ref["adaptive_outputs"]
        y = np.argmax(z_ref, -1)
        cfg = depth.Config(rtol=1e-5, adaptive_split=True)
        opts = Adaptive(rtol=cfg.rtol, atol=cfg.rtol)
        got = _adaptive_solves(m, x, y, opts, True)
        old = _adaptive_solves(m, x, y, opts, False)
    assert set(got) == {"adaptive", "adaptive.unsplit"} and set(old) == {"adaptive"}
    split, unsplit = got["adaptive"], got["adaptive.unsplit"]
    # the unsplit solve is the one every run before the option made
    np.testing.assert_array_equal(unsplit["adaptive_outputs"], old["adaptive"]["adaptive_outputs"])
    assert unsplit["adaptive_nfev_mean"] == old["adaptive"]["adaptive_nfev_mean"]
    # the split solve is another solve: other counts, other logits
    assert split["adaptive_nfev_mean"] != unsplit["adaptive_nfev_mean"], (split, unsplit)
    assert _rel(split["adaptive_outputs"], unsplit["adaptive_outputs"]) > 0
    # ... of the same limit: the split solve within 10 tolerances of the reference, and
    # closer to it than the solve across the jumps (whose error control does not see them;
    # on this model 3.2e-5 against 1.9e-3, 62 against 442 evaluations per image)
    d_split = _rel(split["adaptive_outputs"], z_ref)
    d_unsplit = _rel(unsplit["adaptive_outputs"], z_ref)
    assert d_split < 10 * cfg.rtol and d_split < d_unsplit, (d_split, d_unsplit)
    assert split["adaptive_accuracy"] == 1.0
    # the step-size controller no longer finds the jumps by rejected steps
    assert split["adaptive_nfev_mean"] < unsplit["adaptive_nfev_mean"]


def test_adaptive_split_leaves_a_smooth_path_alone():
    """A Legendre path has no jump: split and unsplit are the same solve, bit for bit."""
    with jax.enable_x64(True):
        m = make_vit(
            d=8,
            n_steps=4,
            n_heads=1,
            path="legendre",
            scheme=PreNormScheme(),
            dtype=jnp.float64,
            key=jax.random.key(3),
        )
        x = np.asarray(jax.random.normal(jax.random.key(4), (3, 8, 8), jnp.float64))
        opts = Adaptive(rtol=depth.Config().rtol, atol=depth.Config().rtol)
        got = _adaptive_solves(m, x, np.zeros(3, int), opts, True)
    a, b = got["adaptive"], got["adaptive.unsplit"]
    np.testing.assert_array_equal(a["adaptive_outputs"], b["adaptive_outputs"])
    assert a["adaptive_nfev_mean"] == b["adaptive_nfev_mean"]


def test_adaptive_split_enters_the_record_key_only_when_on():
    from transflow.experiments.study.protocol import StudyConfig

    from transflow.control import ReferenceTolerances

    study = StudyConfig(eval_grid=[1, 2, 4], fit_windows={"prenorm": [2, 4]})
    ref = ReferenceTolerances("dopri5", 1e-8, 1e-7, 1e-6)
    task = depth.Config()
    key = depth.record_key(task, study, ref)
    assert depth.record_key(dataclasses.replace(task, adaptive_split=False), study, ref) == key
    assert depth.record_key(dataclasses.replace(task, adaptive_split=True), study, ref) != key


def _sliding_field_model(c: float, T: float = 1.0):
    """A d = 2 model whose pre-LN field is the constant f = (−c, c) and whose FFN
    pre-activations are the signs of w = v₁ − v₂ per token: no attention (V = 0), the
    FFN's first sub-step the identity (W₀ = b₀ = 0: its pre-activation is P_{S1'}v =
    (s, −s), s = sign w, for d = 2 with gain 1, bias 0), its second W₁ = −I, b₁ = (−c, c)
    (output b₁ whatever the ReLU gave). Each token's w falls at rate 2c, so it crosses 0
    in exactly one step when 0 < w(0) <= 2cT."""
    from transflow import NormParams, RungeKuttaScheme

    m = make_vit(
        d=2,
        n_steps=1,
        n_heads=1,
        dt=T,
        scheme=RungeKuttaScheme("heun"),
        dtype=jnp.float64,
        key=jax.random.key(0),
    )
    cont = LayerControls.random(2, n_heads=1, dtype=jnp.float64, key=jax.random.key(1))
    z, eye = jnp.zeros((2, 2)), jnp.eye(2)
    cont = dataclasses.replace(
        cont,
        attn=dataclasses.replace(cont.attn, wv=z, bv=jnp.zeros(2), wo=z, bo=jnp.zeros(2)),
        norm2=NormParams(jnp.asarray(1.0), jnp.asarray(0.0)),
        ffn=dataclasses.replace(
            cont.ffn, weights=(z, -eye), biases=(jnp.zeros(2), jnp.array([-c, c]))
        ),
    )
    return dataclasses.replace(m, controls=stack_controls([cont]))


def test_kink_straddles_counts_the_steps_where_a_token_crosses_by_hand():
    """On the sliding field the Heun stages of step n are w_n and w_n − 2cΔt per token
    (the field is constant, so w_n = w(0) − 2c nΔt exactly): step n straddles when some
    token has w_n > 0 >= w_n − 2cΔt, i.e. n = ceil(w(0)/(2cΔt)) − 1 < N. The fraction is
    the number of such distinct steps per example over N, averaged over the examples."""
    from transflow.control import kink_straddles

    with jax.enable_x64(True):
        x = np.asarray(jax.random.normal(jax.random.key(2), (5, 8, 8), jnp.float64))
        probe = _sliding_field_model(1.0)
        w0 = np.asarray(jax.vmap(probe.embed)(jnp.asarray(x)))
        w0 = w0[..., 0] - w0[..., 1]  # examples × tokens
        # 2cT near the median positive w(0) (about half the tokens cross), off every w(0)
        c = 1.0137 * float(np.median(w0[w0 > 0])) / 2
        m = _sliding_field_model(c)
        u0 = np.asarray(jax.vmap(m.embed)(jnp.asarray(x)))
        for n in (1, 3, 8, 32):
            got = kink_straddles(m, x, n)
            dt = 1.0 / n
            steps = [
                {int(np.ceil(w / (2 * c * dt))) - 1 for w in row if 0 < w <= 2 * c} for row in w0
            ]
            per_example = [len(s) / n for s in steps]
            assert got["fraction"] == np.mean(per_example), (n, got["fraction"], per_example)
            hand = np.zeros(n)
            for s in steps:
                hand[list(s)] += 1 / len(steps)
            np.testing.assert_allclose(got["per_step"], hand, rtol=0, atol=1e-15)
            # the stages are those of the field: the constant field moves u by T·(−c, c)
            np.testing.assert_allclose(got["features"], u0 + np.array([-c, c]), atol=1e-12)
    assert 0 < kink_straddles(m, x, 8)["fraction"] < 1  # the case is not trivial


def test_kink_straddles_steps_are_the_models_own_heun_steps():
    """On a random model (ReLU FFN, several units) the function's stage states are those
    of RungeKuttaScheme("heun"): its final states are the model's features at that depth;
    the fraction is 1 at N = 1 on this model and falls as N grows (a fixed set of crossings
    spread over more steps)."""
    from transflow import RungeKuttaScheme
    from transflow.control import at_depth, kink_straddles

    with jax.enable_x64(True):
        m = dataclasses.replace(_per_layer_model(), scheme=RungeKuttaScheme("heun"))
        x = np.asarray(jax.random.normal(jax.random.key(9), (4, 8, 8), jnp.float64))
        frac = []
        for n in (2, 8, 64):
            got = kink_straddles(m, x, n)
            own = jax.vmap(at_depth(m, n).features)(jnp.asarray(x))
            np.testing.assert_allclose(got["features"], own, rtol=0, atol=1e-12)
            frac.append(got["fraction"])
    assert frac[0] > frac[1] > frac[2] > 0, frac


def test_local_order_per_doubling_is_log2_of_successive_distance_ratios():
    """order_local.<s>.<N>: log(d(N′)/d(N)) / log(N/N′) between successive grid depths,
    per reading suffix; exact on distances C·N^(−p) whose p changes along the grid."""
    grid = [1, 2, 4, 8, 16]
    p = {2: 1.0, 4: 2.0, 8: 2.0, 16: 1.5}
    d = {1: 0.3}
    for lo, hi in zip(grid, grid[1:]):
        d[hi] = d[lo] * 2.0 ** (-p[hi])
    rec = {f"dist.heun.{n}@left": v for n, v in d.items()}
    got = _local_orders(rec, "heun", grid, "@left")
    assert set(got) == {f"order_local.heun.{n}@left" for n in grid[1:]}
    for n in grid[1:]:
        assert abs(got[f"order_local.heun.{n}@left"] - p[n]) < 1e-12
    rec["dist.heun.16@left"] = 0.0  # a zero distance has no order
    assert np.isnan(_local_orders(rec, "heun", grid, "@left")["order_local.heun.16@left"])


def test_claims_on_reading_free_metrics_are_not_restated_per_reading():
    """Under another reading a claim is restated with its metric suffixed only when the
    records hold that metric per reading; the adaptive solve's counts do not depend on the
    reading and are checked once (issue 50's confirmation declares such a claim)."""
    from transflow.experiments.study.protocol import ClaimSpec, StudyConfig

    claims = [
        ClaimSpec(name="n2", metric="acc.prenorm.2"),
        ClaimSpec(name="f", metric="nfev.adaptive"),
    ]
    study = StudyConfig(claims=claims)
    records = {"c": {15: {"acc.prenorm.2": 0.5, "acc.prenorm.2@left": 0.4, "nfev.adaptive": 130}}}
    got = depth.read_claims(study, "left", records)
    assert [(c.name, c.metric) for c in got.claims] == [("n2@left", "acc.prenorm.2@left")]
    # without records (or a metric no record has) every claim is restated, as before
    assert [c.name for c in depth.read_claims(study, "left").claims] == ["n2@left", "f@left"]


def test_partial_design_drops_claims_on_depths_outside_the_grid():
    """At smoke size (N = 1…8) a claim on order_local.heun.256 names a depth the grid does
    not have: with task.partial_design it is said and not checked, like a missing cell;
    claims on grid depths and on metrics without a depth are kept."""
    from transflow.experiments.study.protocol import ClaimSpec, StudyConfig

    study = StudyConfig(
        factors={"path": ["legendre"], "T": [0.2], "train": ["random"], "scheme": ["heun"]},
        headline={"path": "legendre", "T": 0.2, "train": "random", "scheme": "heun"},
        eval_grid=[1, 2, 4, 8],
        claims=[
            ClaimSpec(name="deep", metric="order_local.heun.256"),
            ClaimSpec(name="deep_left", metric="acc.heun.256@left"),
            ClaimSpec(name="n2", metric="acc.heun.2@left"),
            ClaimSpec(name="fit", metric="order.heun"),
        ],
    )
    kept = depth.within_design(study)
    assert [c.name for c in kept.claims] == ["n2", "fit"]

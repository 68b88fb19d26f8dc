"""The scheme contract (issue 47): every consumer dispatches on the capabilities a scheme
declares; a scheme without the one a consumer needs is refused in one line naming the
scheme and the capability; one registry; a new scheme needs no edit under src/.

- every scheme of the capability matrix × every consumer agrees with single-device
  ``evolve`` (float64) or raises the one-line refusal; the matrix page is generated;
- a test-local scheme (SSP-RK3, tests/_ssprk3.py) registered with one line runs through
  every consumer it declares, a training step of ``train_digits`` by name included;
- a source scan: no isinstance/hasattr/getattr on a concrete scheme class and no class-name
  string decides behaviour in src/; no concrete scheme class is subclassed.
"""

import ast
import dataclasses
import inspect
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transflow
from transflow import (
    LayerControls,
    amplification_factor,
    declared_order,
    evolve,
    make_scheme,
    stability_function,
    stack_controls,
    stage_controls,
)
from transflow.schemes import (
    AbstractScheme,
    MissingCapability,
    RelaxedLieScheme,
    linear_step_matrix,
    linearised_stability,
)
from transflow.schemes._matrix import CONSUMERS, capability_page, capability_row, matrix_schemes

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import _ssprk3  # noqa: E402  (registers "ssprk3" with one line)

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "transflow"
TOL = 1e-12


def _theta(scheme, n=2, d=8):
    return stack_controls(
        [
            LayerControls.random(
                d, n_heads=2, dtype=jnp.float64, ffn_copies=scheme.ffn_copies, key=jax.random.key(i)
            )
            for i in range(n)
        ]
    )


def _refused(match_scheme: str, capability: str):
    """The one-line refusal naming the scheme and the capability."""
    return pytest.raises(
        MissingCapability, match=rf"{match_scheme}.*lacks the capability {capability}"
    )


def _cap(consumer):
    return CONSUMERS[consumer].__name__


def _one_line(e):
    assert "\n" not in str(e.value), str(e.value)


# --------------------------------------------------------------------------- the matrix
ROWS = matrix_schemes()


def test_matrix_page_is_generated_from_the_code():
    page = (ROOT / "docs" / "scheme-capabilities.md").read_text()
    assert page == capability_page(), (
        "docs/scheme-capabilities.md is stale: python -m transflow.schemes._matrix > "
        "docs/scheme-capabilities.md"
    )
    assert "scheme-capabilities.md" in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.parametrize("label", list(ROWS))
def test_every_single_device_consumer_agrees_or_refuses(label):
    """evolve (plain, masks, attention_implementation), vector_field, Adaptive,
    declared_order, stage_controls, stability, linearised IMEX stability, the S1
    reference of the analysis and the training tasks' names, on one scheme."""
    scheme = ROWS[label]
    row = capability_row(scheme, label.strip("`") in transflow.SCHEME_NAMES)
    name = type(scheme).__name__
    with jax.enable_x64(True):
        theta = _theta(scheme)
        u = jax.random.normal(jax.random.key(9), (5, 8), jnp.float64)
        ref = evolve(u, theta, scheme, dt=0.1)
        assert bool(jnp.all(jnp.isfinite(ref)))

        # masks: an all-False padding mask is the unmasked computation
        no_pad = jnp.zeros((5,), bool)
        if row["evolve (masks)"]:
            got = evolve(u, theta, scheme, dt=0.1, key_padding_mask=no_pad)
            assert float(jnp.max(jnp.abs(got - ref))) <= TOL * float(jnp.max(jnp.abs(ref)))
        else:
            with _refused(name, _cap("evolve (masks)")) as e:
                evolve(u, theta, scheme, dt=0.1, key_padding_mask=no_pad)
            _one_line(e)

        consumer = "evolve (attention_implementation)"
        if row[consumer]:
            got = evolve(u, theta, scheme, dt=0.1, attention_implementation="chunked")
            assert float(jnp.max(jnp.abs(got - ref))) <= 1e-10 * float(jnp.max(jnp.abs(ref)))
        else:
            with _refused(name, _cap(consumer)) as e:
                evolve(u, theta, scheme, dt=0.1, attention_implementation="chunked")
            _one_line(e)

        one = jax.tree.map(lambda x: x[0], theta)
        consumer = "vector_field, Adaptive, adaptive_logits"
        if row[consumer]:
            f = scheme.vector_field(u, one)
            h = 1e-5  # central difference of the step: O(h²) ≈ 1e-10
            fd = (scheme.step(u, one, h) - scheme.step(u, one, -h)) / (2 * h)
            assert float(jnp.max(jnp.abs(f - fd))) <= 1e-7 * float(jnp.max(jnp.abs(f)))
            assert declared_order(scheme) == scheme.order >= 1
        else:
            with _refused(name, _cap(consumer)) as e:
                transflow.schemes.check_consistent(scheme)
            _one_line(e)
            assert declared_order(scheme) is None
            with _refused(name, _cap(consumer)):
                evolve(u, theta, scheme, stepsize_controller=transflow.Adaptive())

        # stage_controls: the controls at the scheme's declared nodes run through evolve
        from transflow.continuous import PiecewiseConstant

        path = PiecewiseConstant(theta)
        staged = stage_controls(path, scheme, 2)
        got = evolve(u, staged, scheme, dt=path.step_size(2))
        if tuple(scheme.nodes) == (0.5,):
            np.testing.assert_array_equal(got, evolve(u, theta, scheme, dt=path.step_size(2)))

        consumer = "stability_function, linear_step_matrix"
        z = (-0.3 + 0.2j, -0.5 - 0.1j)
        if row[consumer]:
            r = complex(stability_function(scheme, *z))
            assert abs(complex(amplification_factor(scheme, *z)) - r) <= TOL
        else:
            with _refused(name, _cap(consumer)) as e:
                stability_function(scheme, *z)
            _one_line(e)
            with _refused(name, _cap(consumer)):
                linear_step_matrix(scheme, -np.eye(2), -np.eye(2), 0.1)

        consumer = 'linearised_stability(form="imex")'
        if not row[consumer]:
            with _refused(name, _cap(consumer)) as e:
                linearised_stability(scheme, one, u[None], form="imex")
            _one_line(e)

    if row["training tasks (scheme=name)"]:
        from transflow.control._tasks import _scheme

        assert _scheme(label.strip("`"), "dt") == make_scheme(label.strip("`"))


def test_the_analysis_reads_the_s1_reference_by_capability():
    from transflow.analysis._flow import as_flow
    from transflow.analysis._geometry import _s1_reference

    for label, scheme in ROWS.items():
        theta = _theta(scheme)  # norm2 with σ1 = 0.3, σ2 = 2 (the default is (0, 1))
        norm2 = dataclasses.replace(
            theta.norm2, bias=theta.norm2.bias + 0.3, gain=2 * theta.norm2.gain
        )
        theta = dataclasses.replace(theta, norm2=norm2)
        u = jax.random.normal(jax.random.key(1), (5, 8), jnp.float64)
        flow = as_flow(transflow.SplitTransformer(theta, scheme, 0.1), u)
        sig = _s1_reference(flow, "auto")(1)
        post = capability_row(scheme)["analysis: S1 reference of norm2"]
        want = (jnp.mean(theta.norm2.bias[0]), jnp.mean(theta.norm2.gain[0]))
        assert (tuple(map(float, sig)) == tuple(map(float, want))) == post, label


def test_causal_decoder_needs_the_causal_capability():
    from transflow.models import CausalDecoder, TokenEmbedding

    emb = TokenEmbedding(jnp.eye(5, 8), None)
    theta = _theta(make_scheme("prenorm"))
    with pytest.raises(ValueError, match="AbstractCausal.*PreNormScheme"):
        CausalDecoder(emb, transflow.SplitTransformer(theta, make_scheme("prenorm")))
    CausalDecoder(
        emb, transflow.SplitTransformer(theta, transflow.CausalScheme(make_scheme("prenorm")))
    )


def _shard_cells(only=None, staged=False) -> list[dict]:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    args = [sys.executable, str(ROOT / "tests" / "_scheme_shard_cells.py")]
    if only is not None or staged:
        args.append(json.dumps(only))
    if staged:
        args.append("staged")
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check_shard_cells(records):
    rows = {**ROWS, "`ssprk3`": make_scheme("ssprk3"), "bug: RelaxedLieScheme(tau=0.5)": None}
    for r in records:
        scheme = rows[r["scheme"]]
        ring = r["method"] == "ring"
        supported = (
            True
            if scheme is None
            else capability_row(scheme)["shard_evolve ring" if ring else "shard_evolve gspmd"]
        )
        assert r["status"] == ("ok" if supported else "refused"), r
        if supported:
            assert r["rel"] <= TOL, r
        else:
            assert "\n" not in r["message"], r
            assert f"{type(scheme).__name__} lacks the capability AbstractShardable" in r["message"]


def test_ring_runs_the_relaxed_scheme_it_used_to_get_wrong():
    """The issue's reproduction: method="ring" with RelaxedLieScheme(tau=0.5), dt=0.1 on 2
    host devices agrees with vmapped evolve to 1e-12 (it differed by 0.43: the ring applied
    the exact projections), with tokens or features split, and with a padding mask; the
    ring refuses IMEX (no shardable step) in one line; the causal wrapper runs."""
    only = ["bug: RelaxedLieScheme(tau=0.5)", "`imex`", "`CausalScheme(LieScheme())`", "`ssprk3`"]
    records = _shard_cells(only)
    assert len(records) == 4 * len(only)
    _check_shard_cells(records)


def _staged_rows():
    return [
        label
        for label, s in {**ROWS, "`ssprk3`": make_scheme("ssprk3")}.items()
        if tuple(s.nodes) != (0.5,)
    ]


def test_the_ring_runs_staged_controls_with_the_features_split():
    """Every scheme with stages (θ at its nodes, ``stage_controls``: a stage axis after the
    time axis) on 2 host devices: ring with the features split (the heads, the FFN width
    and σ split on the last axes, not on the stage axis) and with the tokens split, and
    gspmd with the features split, agree with vmapped evolve to 1e-12 or refuse in one
    line. (The features-split cells failed before the specs counted from the end: rk4's
    3 nodes were split over 2 devices, heun's weights by rows.)"""
    staged = _staged_rows()
    assert {"`heun`", "`rk4`"} <= set(staged)
    records = _shard_cells(staged, staged=True)
    assert len(records) == 3 * len(staged) and all(r["staged"] for r in records)
    assert {r["method"] for r in records} == {"ring", "gspmd"}
    _check_shard_cells(records)


@pytest.mark.slow
def test_every_scheme_on_both_shard_methods_agrees_or_refuses():
    """Every row of the matrix × shard_evolve gspmd (tokens) and ring (tokens, features,
    tokens with a padding mask) on 2 host devices, and the staged cells of every scheme
    with stages."""
    records = _shard_cells()
    assert len(records) == 4 * (len(ROWS) + 2) + 3 * len(_staged_rows())
    _check_shard_cells(records)


# ------------------------------------------------------------------ a scheme from outside
def test_a_scheme_from_outside_runs_through_every_consumer_it_declares():
    s = make_scheme("ssprk3")
    assert isinstance(s, _ssprk3.SSPRK3Scheme) and "ssprk3" not in transflow.SCHEME_NAMES
    row = capability_row(s)
    assert all(
        row[c]
        for c in CONSUMERS
        if c
        not in (
            'linearised_stability(form="imex")',
            "CausalDecoder",
            "analysis: S1 reference of norm2",
        )
    )
    with jax.enable_x64(True):
        theta = _theta(s)
        u = jax.random.normal(jax.random.key(3), (5, 8), jnp.float64)
        one = jax.tree.map(lambda x: x[0], theta)
        # the stability polynomial of the step code is 1 + z + z²/2 + z³/6
        for z in ((-0.3 + 0.2j, -0.5 - 0.1j), (-1.0, 0.0), (0.2j, -0.1)):
            r = complex(stability_function(s, *z))
            zz = complex(z[0]) + complex(z[1])
            assert abs(r - (1 + zz + zz**2 / 2 + zz**3 / 6)) <= TOL
            assert abs(complex(amplification_factor(s, *z)) - r) <= TOL
        assert declared_order(s) == 3
        # third order on frozen controls: halving Δt divides the one-step error by 16
        exact = evolve(u, stack_controls([one] * 256), make_scheme("rk4"), dt=1 / 256)
        errs = [
            float(jnp.max(jnp.abs(evolve(u, stack_controls([one] * n), s, dt=1 / n) - exact)))
            for n in (8, 16)
        ]
        assert 6.0 < errs[0] / errs[1] < 10.0  # global order 3: ratio 8
        f = s.vector_field(u, one)
        f_ref = make_scheme("heun").vector_field(u, one)  # the same continuous limit a + g
        assert float(jnp.max(jnp.abs(f - f_ref))) <= TOL * float(jnp.max(jnp.abs(f_ref)))
        got = evolve(u, theta, s, dt=0.1, key_padding_mask=jnp.zeros((5,), bool))
        np.testing.assert_allclose(got, evolve(u, theta, s, dt=0.1), rtol=0, atol=1e-13)
        adaptive = evolve(
            u,
            transflow.continuous.PiecewiseConstant(theta),
            s,
            stepsize_controller=transflow.Adaptive(rtol=1e-10, atol=1e-10),
        )
        fine = evolve(u, transflow.continuous.PiecewiseConstant(theta), s, n_steps=64)
        assert float(jnp.max(jnp.abs(adaptive - fine))) <= 1e-4


def test_a_scheme_from_outside_trains_by_name(tmp_path):
    """One training step of train_digits with scheme="ssprk3" (registered in the test)."""
    from transflow.control import DigitsConfig, run_training

    every_step = dict(steps=1, warmup_steps=1, eval_every=1, checkpoint_every=1, log_every=1)
    ckpt = str(tmp_path / "ckpt")
    cfg = DigitsConfig(
        d=8, n_steps=1, scheme="ssprk3", batch_size=8, checkpoint_dir=ckpt, **every_step
    )
    quiet = {"progress": lambda it, **kw: it, "message": lambda m: None}
    summary, result = run_training("digits", cfg, run_dir=tmp_path / "run", **quiet)
    assert np.isfinite(summary["test_accuracy"])
    assert isinstance(result.model.scheme, _ssprk3.SSPRK3Scheme)


def test_register_scheme_refuses_a_taken_name():
    with pytest.raises(ValueError, match="'lie' is taken"):
        transflow.register_scheme("lie", lambda **o: make_scheme("prenorm", **o))
    transflow.register_scheme("ssprk3", _ssprk3.SSPRK3Scheme)  # the same entry again: fine


# ------------------------------------------------------------------------ source scans
def _scheme_classes() -> dict[str, type]:
    out = {}
    for m in list(sys.modules.values()):
        if getattr(m, "__name__", "").startswith("transflow"):
            for c in vars(m).values():
                if inspect.isclass(c) and issubclass(c, AbstractScheme):
                    out[c.__name__] = c
    return out


def _concrete(c) -> bool:
    return not (inspect.isabstract(c) or c.__abstractvars__ or c.__abstractclassvars__)


def test_every_scheme_class_is_abstract_or_final():
    import transflow.interop  # noqa: F401
    import transflow.vision  # noqa: F401

    classes = _scheme_classes()
    assert {"LieScheme", "RelaxedLieScheme", "CausalScheme", "ConvPreNormScheme"} <= set(classes)
    for name, c in classes.items():
        if _concrete(c):
            assert c.__module__.startswith("transflow.schemes."), (name, c.__module__)
        for base in c.__mro__[1:]:
            if issubclass(base, AbstractScheme):
                assert not _concrete(base), f"{name} subclasses the concrete {base.__name__}"
        if not _concrete(c):
            assert name.startswith(("Abstract", "_Abstract", "AttentionOptions")), name


def test_no_concrete_scheme_class_or_its_name_decides_behaviour_in_src():
    """The library and the experiments tasks (issue 48: the schemes task dispatched on
    IMEXScheme/StrangScheme) alike."""
    import transflow.interop  # noqa: F401
    import transflow.vision  # noqa: F401

    concrete = {n for n, c in _scheme_classes().items() if _concrete(c)}
    bad = []
    files = [*sorted(SRC.rglob("*.py")), *sorted((ROOT / "experiments").rglob("*.py"))]
    assert any(p.name == "schemes.py" and p.parent.name == "tasks" for p in files)
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                fn = node.func.id
                if fn in ("isinstance", "issubclass") and len(node.args) == 2:
                    names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                    names |= {
                        n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)
                    }
                    if names & concrete:
                        bad.append(f"{where}: {fn}(…, {sorted(names & concrete)})")
                if fn in ("hasattr", "getattr") and node.args:
                    text = ast.unparse(node.args[0])
                    if "scheme" in text.lower():
                        bad.append(f"{where}: {fn}({text}, …)")
            if isinstance(node, ast.Compare):
                consts = [
                    n.value
                    for n in [node.left, *node.comparators]
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                ]
                if set(consts) & concrete:
                    bad.append(f"{where}: compares with the class name {consts}")
    assert not bad, "scheme dispatch on a concrete class or name:\n" + "\n".join(bad)


def test_the_ring_recodes_no_step():
    ring = (SRC / "parallel" / "_ring.py").read_text()
    for step in ("def lie_step", "def prenorm_step", "def ffn_branch"):
        assert step not in ring
    evolve_src = (SRC / "parallel" / "_evolve.py").read_text()
    assert "scheme.advance(" in evolve_src and "lie_step" not in evolve_src


def test_refusals_are_one_line_and_name_scheme_and_capability():
    lie = make_scheme("lie")
    from transflow.continuous import PiecewiseConstant, vector_field

    theta = stack_controls([LayerControls.random(4, key=jax.random.key(0))])
    with pytest.raises(MissingCapability) as e:
        vector_field(lie, PiecewiseConstant(theta))
    msg = str(e.value)
    assert "\n" not in msg and "LieScheme" in msg and "AbstractODEScheme" in msg
    wrapped = transflow.CausalScheme(lie)
    match = r"CausalScheme\(LieScheme\) lacks .*LieScheme is not"
    with pytest.raises(MissingCapability, match=match):
        transflow.schemes.check_consistent(wrapped)
    assert dataclasses.is_dataclass(RelaxedLieScheme(tau=0.5))


@pytest.mark.parametrize("label", list(ROWS))
def test_at_depth_reads_theta_as_declared_for_every_scheme(label):
    """at_depth's readings × the model's theta_at, for every scheme: a 2-layer per-layer
    model (τ = 0.1) at N = 1 runs one step of Δt = 0.2 whose midpoint is the layer
    boundary. With ``theta_at="midpoint"`` (or a one-node scheme, or "average") the step
    runs layer 2 ("right"), layer 1 ("left") or their mean ("average"); with
    ``theta_at="nodes"`` a Runge–Kutta stage at c Δt reads layer 1 for c < 1/2, layer 2
    for c > 1/2 (from inside the step), and at c = 1/2 the layer the reading names. What
    the model steps with (``step_controls``, what ``features`` evolves) equals that
    selection to ≤ 1e-12 (float64); the evolution of given controls is checked above."""
    from transflow.control import FlowModel, TokenEmbedding, at_depth

    scheme = ROWS[label]
    nodes = tuple(float(c) for c in scheme.nodes)
    with jax.enable_x64(True):
        theta = _theta(scheme)
        emb = TokenEmbedding(jnp.ones((11, 8), jnp.float64), jnp.zeros((5, 8), jnp.float64))
        head = jnp.ones((8, 3), jnp.float64)
        layer = [jax.tree.map(lambda a, i=i: a[i], theta) for i in range(2)]
        mean = jax.tree.map(lambda a: jnp.mean(a, axis=0), theta)
        for theta_at in ("midpoint", "nodes"):
            model = FlowModel(emb, theta, head, jnp.zeros(3), scheme, dt=0.1, pool="mean",
                              theta_at=theta_at)  # fmt: skip
            for reading in ("right", "left", "average"):
                at_boundary = layer[1] if reading == "right" else layer[0]
                if reading == "average":
                    want = mean
                elif theta_at == "nodes" and nodes != (0.5,):
                    staged = [layer[0] if c < 0.5 else layer[1] if c > 0.5 else at_boundary
                              for c in nodes]  # fmt: skip
                    want = jax.tree.map(lambda *a: jnp.stack(a), *staged)
                else:
                    want = at_boundary
                want = jax.tree.map(lambda a: a[None], want)  # one step
                got, dt = at_depth(model, 1, reading).step_controls()
                assert dt == pytest.approx(0.2, rel=1e-15), (theta_at, reading)
                diffs = jax.tree.map(lambda g, w: float(jnp.max(jnp.abs(g - w))), got, want)
                assert max(jax.tree.leaves(diffs)) <= TOL, (theta_at, reading, diffs)


@pytest.mark.parametrize("label", list(ROWS))
def test_at_depth_agrees_with_evolve_or_refuses_the_adaptive_solve(label):
    """at_depth (every scheme): a per-layer model at 2 N_t steps equals evolve on the
    controls with every layer repeated twice at Δt/2 (≤ 1e-12, float64); its adaptive
    evaluation (adaptive_logits) equals the read-out of reference_solution with the same
    tolerances, or is refused in one line naming the scheme and AbstractODEScheme."""
    from transflow import Adaptive, ReferenceTolerances, reference_solution
    from transflow.continuous import PiecewiseConstant
    from transflow.control import FlowModel, TokenEmbedding, adaptive_logits, at_depth

    scheme = ROWS[label]
    with jax.enable_x64(True):
        theta = _theta(scheme)
        table, pos = (
            jax.random.normal(jax.random.key(k), s, jnp.float64)
            for k, s in ((4, (11, 8)), (6, (5, 8)))
        )
        emb = TokenEmbedding(table, pos)
        head = jax.random.normal(jax.random.key(5), (8, 3), jnp.float64)
        model = FlowModel(emb, theta, head, jnp.zeros(3), scheme, dt=0.1, pool="mean")
        x = jnp.array([1, 4, 2, 7, 3])
        got = at_depth(model, 4)(x)
        twice = jax.tree.map(lambda a: jnp.repeat(a, 2, axis=0), theta)
        u0 = emb(x)
        want = model.readout(evolve(u0, twice, scheme, dt=0.05, grid=emb.grid()))
        assert float(jnp.max(jnp.abs(got - want))) <= TOL * float(jnp.max(jnp.abs(want)))
        tol = ReferenceTolerances("tsit5", 1e-9)
        if capability_row(scheme)["vector_field, Adaptive, adaptive_logits"]:
            logits, _ = adaptive_logits(model, x, tol.reference)
            path = PiecewiseConstant(theta, tau=0.1)
            ref = model.readout(reference_solution(u0, path, scheme, tol, grid=emb.grid()))
            assert float(jnp.max(jnp.abs(logits - ref))) <= TOL * float(jnp.max(jnp.abs(ref)))
        else:
            with _refused(type(scheme).__name__, "AbstractODEScheme") as e:
                adaptive_logits(model, x, Adaptive())
            _one_line(e)

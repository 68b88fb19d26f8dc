"""Run every scheme of the capability matrix (and the test-local SSP-RK3) through
shard_evolve on 2 host devices and print one JSON record per cell (issue 47); a scheme
with stages (``nodes`` other than the midpoint) also runs on staged controls
(:func:`transflow.stage_controls` of a linear path: θ at every node of a step) with the
features split and the tokens split.

Run by tests/test_scheme_contract.py in a fresh interpreter with
``XLA_FLAGS=--xla_force_host_platform_device_count=2``. A cell is ``ok`` with the
relative difference from ``vmap(evolve)`` (float64), or ``refused`` with the one-line
message of the missing capability."""

import json
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import _ssprk3  # noqa: E402,F401  (registers "ssprk3")
from transflow import (  # noqa: E402
    LayerControls,
    evolve,
    make_scheme,
    stack_controls,
    stage_controls,
)
from transflow.continuous import init_path  # noqa: E402
from transflow.parallel import make_mesh, max_rel_diff, shard_evolve, to_host  # noqa: E402
from transflow.schemes import MissingCapability, RelaxedLieScheme  # noqa: E402
from transflow.schemes._matrix import matrix_schemes  # noqa: E402


def _run(rec, out, scheme, theta, want, u, mesh, axes, method, dt, **kw):
    try:
        got = shard_evolve(theta, u, mesh, axes, method=method, scheme=scheme, dt=dt, **kw)
        rec.update(status="ok", rel=max_rel_diff(to_host(got), want))
    except MissingCapability as e:
        rec.update(status="refused", message=str(e))
    out.append(rec)


def staged_cells(label, scheme, mesh, u) -> list[dict]:
    """ring (features split, tokens split) and gspmd (features split) on the controls at
    the scheme's nodes of 3 steps of a linear path; none for a one-node scheme."""
    if tuple(scheme.nodes) == (0.5,):
        return []

    def draw(k):
        copies = scheme.ffn_copies
        return LayerControls.random(16, n_heads=2, dtype=jnp.float64, ffn_copies=copies, key=k)

    path = init_path("linear", draw, 2, key=jax.random.key(0))
    theta, dt = stage_controls(path, scheme, 3), path.step_size(3)
    assert theta.attn.wq.shape[:2] == (3, len(scheme.nodes))  # a stage axis
    want = jax.vmap(lambda x: evolve(x, theta, scheme, dt=dt))(u)
    out = []
    for method, axes in (
        ("ring", {"features": "a"}),
        ("ring", {"tokens": "a"}),
        ("gspmd", {"features": "a"}),
    ):
        rec = {"scheme": label, "method": method, "axes": axes, "masked": False, "staged": True}
        _run(rec, out, scheme, theta, want, u, mesh, axes, method, dt)
    return out


def cells(only=None, staged_only=False):
    schemes = dict(matrix_schemes())
    schemes["`ssprk3`"] = make_scheme("ssprk3")
    schemes["bug: RelaxedLieScheme(tau=0.5)"] = RelaxedLieScheme(tau=0.5)
    if only:
        schemes = {k: v for k, v in schemes.items() if k in only}
    mesh = make_mesh((2,), ("a",))
    u = jax.random.normal(jax.random.key(9), (2, 8, 16), jnp.float64)
    pad = jnp.zeros((2, 8), bool).at[:, -2:].set(True)
    out = []
    for label, scheme in schemes.items():
        theta = stack_controls(
            [
                LayerControls.random(
                    16,
                    n_heads=2,
                    dtype=jnp.float64,
                    ffn_copies=scheme.ffn_copies,
                    key=jax.random.key(i),
                )
                for i in range(2)
            ]
        )
        if not staged_only:
            ref = jax.vmap(lambda x, th=theta, s=scheme: evolve(x, th, s, dt=0.1))(u)
            ref_pad = jax.vmap(
                lambda x, p, th=theta, s=scheme: evolve(x, th, s, dt=0.1, key_padding_mask=p)
            )
            for method, axes, masked in (
                ("gspmd", {"tokens": "a"}, False),
                ("ring", {"tokens": "a"}, False),
                ("ring", {"features": "a"}, False),
                ("ring", {"tokens": "a"}, True),
            ):
                rec = {"scheme": label, "method": method, "axes": axes, "masked": masked}
                kw = {"key_padding_mask": pad} if masked else {}
                want = ref_pad(u, pad) if masked else ref
                _run(rec, out, scheme, theta, want, u, mesh, axes, method, 0.1, **kw)
        out += staged_cells(label, scheme, mesh, u)
    return out


if __name__ == "__main__":
    only = json.loads(sys.argv[1]) if len(sys.argv) > 1 else None
    print(json.dumps(cells(only, staged_only="staged" in sys.argv[2:])))

"""transflow.parallel on 8 CPU host devices and on two processes (jax.distributed).

The number of CPU devices is fixed when JAX starts its backend, and the test process (and
every xdist worker) already runs JAX with one device. So each check starts a fresh
``python -m transflow.parallel._selftest`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` in its environment; nothing leaks
into the other tests. Every subprocess is bounded by a timeout.

The problem (``_selftest._DEFAULTS``): batch 4, 64 tokens, d = 32, 8 heads, d_ff = 64,
2 Lie steps with biases, Gauss–Legendre quadrature grids on Ω_x and Ω_y (weighted softmax
and weighted LayerNorm). Mesh (2, 4) with axes ("a", "b"); the assignments are
``_selftest.DEFAULT_ASSIGNMENTS``. Tolerances (relative, max|Δ| / max|ref|): float64
1e-12, float32 1e-5.
"""

import pytest

from transflow.parallel._selftest import DEFAULT_ASSIGNMENTS, run_distributed, run_subprocess

TOL = {"float64": 1e-12, "float32": 1e-5}
EXPECTED_SPEC = {
    "tokens": "P(None, ('a', 'b'), None)",
    "features": "P(None, None, ('a', 'b'))",
    "tokens_x_features": "P(None, 'a', 'b')",
    "batch_x_tokens": "P('a', 'b', None)",
}


def _check(records, expected_count):
    assert len(records) == expected_count
    for r in records:
        assert r["out_spec"] == EXPECTED_SPEC[r["assignment"]], r
        assert r["max_rel_diff_vs_single_device"] <= TOL[r["dtype"]], r


def test_sharded_equals_single_device_float64_fast():
    """Every assignment with the compiler-partitioned jit; the ring and the chunked
    operator on the assignments that exercise them most."""
    pairs = [[label, "gspmd"] for label in DEFAULT_ASSIGNMENTS] + [
        ["tokens_x_features", "ring"],
        ["batch_x_tokens", "ring"],
        ["tokens", "gspmd+chunked"],
    ]
    records = run_subprocess("check", {"dtypes": ["float64"], "pairs": pairs}, timeout=600)
    _check(records, len(pairs))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sharded_equals_single_device_all(dtype):
    """Every assignment × {gspmd, ring, gspmd+chunked attention}."""
    records = run_subprocess("check", {"dtypes": [dtype]}, timeout=900)
    _check(records, 3 * len(DEFAULT_ASSIGNMENTS))


@pytest.mark.slow
def test_sharded_equals_single_device_causal_prenorm_index_grid():
    records = run_subprocess(
        "check",
        {
            "dtypes": ["float64"],
            "causal": True,
            "scheme": "prenorm",
            "grid": "index",
            "methods": ["gspmd", "ring"],
        },
        timeout=900,
    )
    _check(records, 2 * len(DEFAULT_ASSIGNMENTS))


def test_token_sharding_memory_falls_like_one_over_p():
    """Compiled per-device temporaries (activations, scores) at P = 8 vs P = 1 token
    devices: < 0.5× (1/P would be 0.125; the replicated controls and the collectives'
    buffers do not shrink)."""
    records = run_subprocess(
        "memory",
        {
            "n_tokens": 1024,
            "d_model": 32,
            "n_heads": 2,
            "d_ff": None,
            "n_layers": 2,
            "grid": "index",
            "dtype": "float32",
            "methods": ["gspmd", "ring"],
            "token_devices": [1, 8],
        },
        timeout=600,
    )
    by = {(r["method"], r["token_devices"]): r for r in records}
    for method in ("gspmd", "ring"):
        one, eight = by[(method, 1)], by[(method, 8)]
        assert eight["temp"] < 0.5 * one["temp"], (method, one, eight)
        assert eight["output"] * 8 == one["output"]  # the state itself is split exactly


def _gloo_missing() -> bool:
    """True if this jaxlib has no gloo TCP collectives (then CPU processes cannot talk)."""
    try:
        from jax._src.lib import _jax
    except ImportError:  # pragma: no cover - layout of other jaxlib versions
        return False  # let the test itself find out
    return not hasattr(_jax, "make_gloo_tcp_collectives")


needs_gloo = pytest.mark.skipif(
    _gloo_missing(),
    reason="this jaxlib has no gloo CPU collectives (jax_cpu_collectives_implementation="
    "'gloo'), so two CPU processes cannot run one sharded program; see docs/parallel.md",
)


@needs_gloo
def test_two_processes_jax_distributed_match_single_process():
    """Two processes on 127.0.0.1 (4 host devices each, gloo CPU collectives) evolve one
    batch together on a (2, 4) mesh spanning both; each gathers the global result and
    compares it with its own single-device evolution."""
    records = run_distributed(
        {
            "devices": 4,
            "dtypes": ["float64"],
            "methods": ["gspmd"],
            "assignments": {"tokens_x_features": {"tokens": "a", "features": "b"}},
        },
        num_processes=2,
        timeout=600,
    )
    assert sorted(r["process_id"] for r in records) == [0, 1]
    for r in records:
        assert r["process_count"] == 2 and r["device_count"] == 8
        assert r["local_device_count"] == 4
        assert r["max_rel_diff_vs_single_process"] <= TOL["float64"], r
    assert records[0]["checksum"] == records[1]["checksum"]


@pytest.mark.slow
@needs_gloo
def test_two_processes_ring_attention():
    records = run_distributed(
        {
            "devices": 4,
            "dtypes": ["float64"],
            "methods": ["ring"],
            "assignments": {"batch_x_tokens": {"batch": "a", "tokens": "b"}},
        },
        num_processes=2,
        timeout=600,
    )
    for r in records:
        assert r["max_rel_diff_vs_single_process"] <= TOL["float64"], r

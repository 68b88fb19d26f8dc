"""Self-checks of :mod:`transflow.parallel` that need several devices or processes.

On CPU, several devices exist only if ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
is set before JAX starts its backend, so these checks run in a fresh process::

    python -m transflow.parallel._selftest check  '<json options>'   # sharded == single
    python -m transflow.parallel._selftest memory '<json options>'   # memory vs P
    python -m transflow.parallel._selftest worker '<json options>'   # one process of a
                                                                     # jax.distributed run

Each prints one JSON document (the records) as its last line of stdout. The command sets
``XLA_FLAGS`` itself (from ``"devices"``) when it is not set yet. The tests
(tests/test_parallel*.py) and the ``sharded`` experiment call :func:`run_subprocess`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

__all__ = [
    "DEFAULT_ASSIGNMENTS",
    "run_subprocess",
    "free_port",
    "run_distributed",
    "check_records",
    "memory_records",
]

#: The axis assignments of the checks on a ``(2, 4)`` mesh with axes ``("a", "b")``.
DEFAULT_ASSIGNMENTS: dict[str, dict[str, Any]] = {
    "tokens": {"tokens": ["a", "b"]},
    "features": {"features": ["a", "b"]},
    "tokens_x_features": {"tokens": "a", "features": "b"},
    "batch_x_tokens": {"batch": "a", "tokens": "b"},
}

_DEFAULTS: dict[str, Any] = dict(
    devices=8,
    mesh=[2, 4],
    axis_names=["a", "b"],
    assignments=DEFAULT_ASSIGNMENTS,
    methods=["gspmd", "ring", "gspmd+chunked"],
    dtypes=["float64", "float32"],
    batch=4,
    n_tokens=64,
    d_model=32,
    n_heads=8,
    d_ff=64,
    n_layers=2,
    grid="gauss",
    causal=False,
    masks=False,
    scheme="lie",
    seed=0,
    query_block=16,
    key_block=16,
)


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return env


def run_subprocess(mode: str, options: dict[str, Any] | None = None, *, timeout: float = 300):
    """Run ``python -m transflow.parallel._selftest <mode>`` with its host devices set.

    Returns the parsed JSON of the last stdout line. Raises ``RuntimeError`` with the
    tail of stderr if the process fails, ``subprocess.TimeoutExpired`` after ``timeout``.
    """
    opts = {**_DEFAULTS, **(options or {})}
    cmd = [sys.executable, "-m", "transflow.parallel._selftest", mode, json.dumps(opts)]
    proc = subprocess.run(
        cmd, env=_env(int(opts["devices"])), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(cmd[:4])}` failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_distributed(
    options: dict[str, Any] | None = None, *, num_processes: int = 2, timeout: float = 240
) -> list[dict[str, Any]]:
    """Start ``num_processes`` workers on 127.0.0.1 that run one sharded evolve together.

    Each worker has ``devices`` host devices (the mesh spans all processes' devices),
    calls ``jax.distributed.initialize(coordinator_address="127.0.0.1:<free port>", ...)``
    with gloo CPU collectives, evolves with :func:`shard_evolve` and compares the
    gathered result with its own single-device evolution. Returns each worker's record.
    Raises ``RuntimeError`` (with the workers' stderr) if one fails, and kills all workers
    after ``timeout`` seconds.
    """
    import time

    opts = {**_DEFAULTS, **(options or {})}
    opts["num_processes"] = num_processes
    opts["port"] = free_port()
    procs = []
    for i in range(num_processes):
        cmd = [
            sys.executable,
            "-m",
            "transflow.parallel._selftest",
            "worker",
            json.dumps({**opts, "process_id": i}),
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                env=_env(int(opts["devices"])),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            left = max(1.0, deadline - time.monotonic())
            outs.append(p.communicate(timeout=left))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    records = []
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"worker {i} failed (exit {p.returncode}):\n{err[-4000:]}")
        records.append(json.loads(out.strip().splitlines()[-1]))
    return records


# --------------------------------------------------------------------------- problems
def _problem(opts, dtype_name: str):
    import jax
    import jax.numpy as jnp

    from .. import Grid, LayerControls, LieScheme, PreNormScheme, stack_controls

    dtype = jnp.dtype(dtype_name)
    d, n = int(opts["d_model"]), int(opts["n_tokens"])
    key = jax.random.key(int(opts["seed"]))
    k_u, *k_layers = jax.random.split(key, 1 + int(opts["n_layers"]))
    theta = stack_controls(
        [
            LayerControls.random(
                d, n_heads=int(opts["n_heads"]), d_ff=opts["d_ff"], bias=True, key=k
            )
            for k in k_layers
        ]
    )
    theta = jax.tree.map(lambda x: x.astype(dtype), theta)
    u = jax.random.normal(k_u, (int(opts["batch"]), n, d), dtype)
    grid = None
    if opts["grid"] == "gauss":
        grid = Grid.interval(n, d, x_rule="gauss", y_rule="gauss", dtype=dtype)
    elif opts["grid"] != "index":
        raise ValueError(f"`grid` must be 'index' or 'gauss', got {opts['grid']!r}.")
    scheme = {"lie": LieScheme(), "prenorm": PreNormScheme()}[opts["scheme"]]
    return theta, u, grid, scheme


def _masks(opts, u) -> dict:
    """With ``masks=True``: ragged padding (lengths n, 3n/4, n/2, ...) and a random
    per-head additive mask with −∞ entries (some rows fully masked)."""
    import jax
    import jax.numpy as jnp

    if not opts.get("masks"):
        return {}
    B, n, _ = u.shape
    H = int(opts["n_heads"])
    lengths = jnp.maximum(n - jnp.arange(B) * (n // 4), 1)
    kpm = jnp.arange(n)[None, :] >= lengths[:, None]
    key = jax.random.key(int(opts["seed"]) + 1)
    f = jax.random.normal(key, (B, H, n, n), u.dtype)
    keep = jax.random.uniform(jax.random.fold_in(key, 1), (B, H, n, n)) > 0.2
    return {"key_padding_mask": kpm, "attention_mask": jnp.where(keep, f, -jnp.inf)}


def _reference(theta, u, grid, scheme, causal, masks=None):
    """Single-device ``vmap(evolve)`` on the first device only."""
    import jax

    from .. import evolve

    dev = jax.local_devices()[0]
    theta, u, grid, masks = jax.device_put((theta, u, grid, masks or {}), dev)
    f = jax.jit(jax.vmap(lambda x, mk: evolve(x, theta, scheme, grid=grid, causal=causal, **mk)))
    return f(u, masks)


def check_records(opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Sharded vs single-device results for every (dtype, assignment, method)."""
    import jax
    import numpy as np

    from ._evolve import max_rel_diff, shard_evolve, to_host
    from ._mesh import make_mesh

    mesh_shape = [int(s) for s in opts["mesh"]]
    mesh = make_mesh(
        mesh_shape, opts["axis_names"], devices=jax.devices()[: int(np.prod(mesh_shape))]
    )
    records = []
    for dtype_name in opts["dtypes"]:
        theta, u, grid, scheme = _problem(opts, dtype_name)
        masks = _masks(opts, u)
        ref = np.asarray(_reference(theta, u, grid, scheme, bool(opts["causal"]), masks))
        pairs = opts.get("pairs") or [
            (label, m) for label in opts["assignments"] for m in opts["methods"]
        ]
        for label, method in pairs:
            axes = opts["assignments"][label]
            base, _, impl = method.partition("+")
            out = shard_evolve(
                theta,
                u,
                mesh,
                axes,
                method=base,
                scheme=scheme,
                grid=grid,
                causal=bool(opts["causal"]),
                attention_implementation=impl or None,
                query_block=int(opts["query_block"]),
                key_block=int(opts["key_block"]),
                **masks,
            )
            records.append(
                dict(
                    assignment=label,
                    axes={k: v for k, v in axes.items()},
                    mesh=dict(zip(opts["axis_names"], mesh_shape)),
                    method=method,
                    masks=bool(masks),
                    dtype=dtype_name,
                    max_rel_diff_vs_single_device=max_rel_diff(to_host(out), ref),
                    out_spec=str(out.sharding.spec),
                )
            )
    return records


def memory_records(opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-device compiled memory of token sharding over P = 1, 2, 4, ... devices."""
    import jax
    import jax.numpy as jnp

    from ._evolve import memory_report
    from ._mesh import make_mesh

    o = {**opts, "grid": opts.get("grid", "index")}
    theta, _, grid, scheme = _problem({**o, "batch": 1}, opts.get("dtype", "float32"))
    u = jnp.zeros((1, int(o["n_tokens"]), int(o["d_model"])), theta.attn.wq.dtype)
    records = []
    for method in opts["methods"]:
        base, _, impl = method.partition("+")
        for P in opts["token_devices"]:
            mesh = make_mesh((P,), ("t",), devices=jax.devices()[:P])
            rep = memory_report(
                theta,
                u,
                mesh,
                {"tokens": "t"},
                method=base,
                scheme=scheme,
                grid=grid,
                attention_implementation=impl or None,
                query_block=int(o["query_block"]),
                key_block=int(o["key_block"]),
            )
            records.append(dict(method=method, token_devices=P, **rep))
    return records


def _worker(opts: dict[str, Any]) -> dict[str, Any]:
    """One process of a two-process ``jax.distributed`` run (loopback only)."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{int(opts['port'])}",
        num_processes=int(opts["num_processes"]),
        process_id=int(opts["process_id"]),
        initialization_timeout=int(opts.get("init_timeout", 60)),
    )
    try:
        import numpy as np

        from ._evolve import max_rel_diff, shard_evolve, to_host
        from ._mesh import make_mesh

        theta, u, grid, scheme = _problem(opts, opts["dtypes"][0])
        mesh_shape = [int(s) for s in opts["mesh"]]
        mesh = make_mesh(mesh_shape, opts["axis_names"])
        method = opts["methods"][0]
        axes = next(iter(opts["assignments"].values()))
        out = shard_evolve(
            theta,
            np.asarray(u),
            mesh,
            axes,
            method=method,
            scheme=scheme,
            grid=grid,
            causal=bool(opts["causal"]),
        )
        full = to_host(out)
        # The single-process result, computed locally on this process's first device.
        ref = np.asarray(_reference(theta, u, grid, scheme, bool(opts["causal"])))
        return dict(
            process_id=jax.process_index(),
            process_count=jax.process_count(),
            device_count=jax.device_count(),
            local_device_count=jax.local_device_count(),
            method=method,
            axes=axes,
            max_rel_diff_vs_single_process=max_rel_diff(full, ref),
            checksum=float(np.sum(full)),
        )
    finally:
        jax.distributed.shutdown()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ("check", "memory", "worker"):
        raise SystemExit(f"usage: python -m {__name__} check|memory|worker '<json options>'")
    opts = {**_DEFAULTS, **(json.loads(argv[1]) if len(argv) > 1 else {})}
    if "device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={int(opts['devices'])}"
        )
    import jax

    jax.config.update("jax_enable_x64", True)
    if argv[0] == "worker":
        result: Any = _worker(opts)
    else:
        if jax.device_count() < int(opts["devices"]):
            raise SystemExit(
                f"expected {opts['devices']} devices, JAX has {jax.device_count()}: XLA_FLAGS "
                "must be set before JAX starts."
            )
        result = check_records(opts) if argv[0] == "check" else memory_records(opts)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

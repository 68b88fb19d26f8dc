"""Training steps per second on the digits task: transflow vs torch's eager equivalent.

transflow: the ``experiment=train_digits`` model (:func:`transflow.control.make_vit`, the
defaults of :class:`transflow.control.DigitsConfig`: d = 32, 4 steps, 2 heads, 2×2
patches, batch 64) and its jitted optax step (:func:`transflow.control.make_step`: AdamW
after global-norm clipping), with ``remat="step"`` (the task's default) and
``remat="none"``. torch: the same sizes as an eager module (a linear patch embedding with
positions, a 4-layer post-LN ``nn.TransformerEncoder`` with d_ff = 32 and no dropout,
mean pooling, a linear head), cross-entropy, ``clip_grad_norm_`` and ``AdamW``. Both see
the same batches; candidates are timed interleaved in alternating order.

    .venv/bin/python benchmarks/bench_training.py [--threads 1] [--rounds 30] [--out DIR]

Writes ``training.json`` with steps/s (median over rounds) for each candidate, the ratio
transflow steps/s ÷ torch steps/s per round, the load average and the JAX version; the run
is marked invalid (``valid``) when the load average is not below the core count.
"""

from __future__ import annotations

import argparse

from _common import (
    env_info,
    fmt,
    interleaved,
    load_average,
    per_round_ratio,
    pin_threads,
    validity,
    write_result,
)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", default=None, help="results directory")
    args = ap.parse_args(argv)
    threads = pin_threads(args.threads)
    load_before = load_average()

    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    from transflow.control import DigitsConfig, make_optimizer, make_step, make_vit
    from transflow.control._data import load_digits_split

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = DigitsConfig()
    x_train, y_train, _, _ = load_digits_split(cfg.test_fraction)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(x_train), size=cfg.batch_size)
    xb = np.asarray(x_train[idx], np.float32)
    yb = np.asarray(y_train[idx], np.int32)

    steps = {}
    for remat in ("step", "none"):
        model = make_vit(
            d=cfg.d,
            n_steps=cfg.n_steps,
            n_heads=cfg.n_heads,
            patch=cfg.patch,
            remat=remat,
            key=jax.random.key(0),
        )
        opt = make_optimizer(cfg.lr, num_steps=10**6, warmup_steps=0, weight_decay=1e-4)
        state = {"m": model, "s": opt.init(eqx.filter(model, eqx.is_inexact_array))}
        step = make_step(opt)
        xj, yj, key = jnp.asarray(xb), jnp.asarray(yb), jax.random.key(1)

        def run(state=state, step=step, xj=xj, yj=yj, key=key):
            state["m"], state["s"], loss, _ = step(state["m"], state["s"], xj, yj, key)
            loss.block_until_ready()

        steps[f"transflow_remat_{remat}"] = run

    d, p = cfg.d, cfg.patch
    n_tok = (8 // p) ** 2

    class TorchViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Linear(p * p, d)
            self.pos = torch.nn.Parameter(0.02 * torch.randn(n_tok, d))
            layer = torch.nn.TransformerEncoderLayer(d, cfg.n_heads, d, 0.0, batch_first=True)
            self.enc = torch.nn.TransformerEncoder(layer, cfg.n_steps, enable_nested_tensor=False)
            self.head = torch.nn.Linear(d, 10)

        def forward(self, img):
            b = img.shape[0]
            patches = img.reshape(b, 8 // p, p, 8 // p, p).permute(0, 1, 3, 2, 4)
            u = self.embed(patches.reshape(b, n_tok, p * p)) + self.pos
            return self.head(self.enc(u).mean(dim=1))

    tmodel = TorchViT().train()
    topt = torch.optim.AdamW(tmodel.parameters(), lr=cfg.lr, weight_decay=1e-4)
    xt, yt = torch.from_numpy(xb), torch.from_numpy(yb.astype(np.int64))

    def torch_step():
        topt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(tmodel(xt), yt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
        topt.step()

    steps["torch_eager"] = torch_step
    timings = interleaved(steps, warmup=args.warmup, rounds=args.rounds)
    load_after = load_average()
    valid, why = validity(
        cores=1, load_before=load_before, load_after=load_after, speedup=None
    )  # thread scaling is the layer benchmark's sanity figure
    result = {
        "benchmark": "training",
        "config": {
            "d": d,
            "n_steps": cfg.n_steps,
            "n_heads": cfg.n_heads,
            "patch": p,
            "batch_size": cfg.batch_size,
        },
        "threads": threads,
        "timings_s": timings,
        "steps_per_s": {k: 1.0 / v["median"] for k, v in timings.items()},
        "ratio_steps_per_s_vs_torch": {
            k: per_round_ratio(timings, "torch_eager", k)
            for k in timings
            if k.startswith("transflow")
        },
        "load_average_before": load_before,
        "load_average_after": load_after,
        "valid": valid,
        "validity": why or ["load below the core count"],
        **env_info(),
    }
    path = write_result("training", result, args.out)
    print(
        f"[bench_training] jax {result['jax_version']}, torch {result['torch_version']}, "
        f"threads {threads}, load {load_before:.2f} -> {load_after:.2f}"
    )
    for k, s in timings.items():
        print(f"  {k:22s} {fmt(s)}  = {1.0 / s['median']:.1f} steps/s")
    for k, r in result["ratio_steps_per_s_vs_torch"].items():
        print(f"  {k} steps/s ÷ torch: {r['median']:.2f} (per round {r['min']:.2f}-{r['max']:.2f})")
    print(f"  valid run: {valid}" + ("" if valid else f" ({'; '.join(why)})"))
    print(f"  -> {path}")
    return result


if __name__ == "__main__":
    main()

"""FVIT (F-ViT): the attention kernel γ(x*, x̃) of one query patch x* over the 2-D patch grid
Ω_x of a ViT layer, from transflow beside the same from the HuggingFace ``ViTLayer``.

A 1-layer HF ``ViTModel`` (float64, eager attention, non-square 6 × 8 patch grid, 2 heads)
with random unit-scale weights; head 0 is given a *local* kernel (2-D sin/cos position
embeddings and W^Q = W^K = 2·I on its feature block), head 1 keeps random weights. The
model is loaded with :func:`transflow.interop.from_hf`; transflow's kernel is
``attention_weights(attention_scores(P_S1(f), θ.attn))`` on the initial condition f built
by :class:`transflow.vision.PatchEmbedding`, HF's is ``output_attentions``. Columns:
transflow, HF, log10 |difference|. HF's eager softmax is run in float64 (as in the tests;
HF itself rounds γ to float32, the ``max_abs_gamma_stock_eager`` number in the JSON).
"""

from __future__ import annotations

import pathlib

FIGURE = {
    "id": "FVIT",
    "title": "Attention kernel of one query patch over the 2-D patch grid, "
    "transflow vs HuggingFace ViTLayer",
    "command": "make figures  (python paper_figures/make_all.py FVIT)",
    "config": "library call: transflow.interop.from_hf(ViTModel) (seed 0)",
}


def _hf_model(smoke: bool):
    import numpy as np
    import torch
    from transformers import ViTConfig, ViTModel

    from transflow.interop import randomize_

    image, patch, d, heads = ((12, 16), 4, 16, 2) if smoke else ((24, 32), 4, 16, 2)
    cfg = ViTConfig(
        hidden_size=d,
        num_attention_heads=heads,
        intermediate_size=2 * d,
        num_hidden_layers=1,
        image_size=image,
        patch_size=patch,
        num_channels=3,
        attn_implementation="eager",
    )
    m = randomize_(ViTModel(cfg).double().eval(), 0)
    gh, gw = image[0] // patch, image[1] // patch
    dk = d // heads
    with torch.no_grad():
        rr, cc = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        a = 2 * np.pi / max(gh, gw) / 1.5
        feats = [f(k * a * z) for k in (1, 2) for z in (rr, cc) for f in (np.sin, np.cos)]
        pos = m.embeddings.position_embeddings[0]
        pos[1:, :dk] = torch.from_numpy(1.5 * np.stack([f.ravel() for f in feats[:dk]], -1))
        m.embeddings.patch_embeddings.projection.weight.mul_(0.3)
        at = m.layers[0].attention
        for proj in (at.q_proj, at.k_proj):
            proj.weight[:dk] = 0.0
            proj.weight[:dk, :dk] = 2.0 * torch.eye(dk, dtype=torch.float64)
            proj.bias[:dk] = 0.0
    return m, (gh, gw), image


def _image(image):
    import numpy as np

    h, w = image
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    blob = np.exp(-((yy - 0.35) ** 2 + (xx - 0.7) ** 2) / 0.02)
    return np.stack([np.sin(3 * xx) + blob, np.cos(2 * yy) - blob, xx * yy])


def make(out_dir: pathlib.Path) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch

    import transflow
    from transflow.interop import fp64_vit_softmax, from_hf
    from transflow.plotting import figure_smoke, plot_vit_attention, save_figure

    jax.config.update("jax_enable_x64", True)
    smoke = figure_smoke()
    hf, (gh, gw), image = _hf_model(smoke)
    img = _image(image)
    x = torch.from_numpy(img)[None]
    with torch.no_grad():
        with fp64_vit_softmax(True):
            ref = hf(x, output_attentions=True).attentions[0][0].numpy()
        stock = hf(x, output_attentions=True).attentions[0][0].numpy()

    model = from_hf(hf)
    f = model.initial_condition(jnp.asarray(img))
    theta = model.encoder.layer(0)
    p1 = transflow.project_s1(f, theta.norm1.bias, theta.norm1.gain, eps=theta.norm1.eps)
    gamma = np.asarray(transflow.attention_weights(transflow.attention_scores(p1, theta.attn)))

    q_r, q_c = gh // 2 - 1, gw - 3
    qi = 1 + q_r * gw + q_c  # token index of the query patch (token 0: class token)
    rows = []
    for h in range(gamma.shape[0]):
        ours, theirs = gamma[h, qi, 1:].reshape(gh, gw), ref[h, qi, 1:].reshape(gh, gw)
        rows.append(
            {
                "head": h,
                "transflow": ours,
                "hf": theirs,
                "cls_weight": gamma[h, qi, 0],
                "max_abs_diff": float(np.max(np.abs(ours - theirs))),
            }
        )
    fig = plot_vit_attention(
        rows,
        grid_shape=(gh, gw),
        query_patch=(q_r, q_c),
        title=f"attention kernel of the query patch $x^*$ = ({q_r}, {q_c}) (red ×) on the "
        f"{gh} × {gw} patch grid $\\Omega_x$",
    )
    numbers = {
        "grid_shape": [gh, gw],
        "query_patch": [q_r, q_c],
        "max_abs_gamma": float(np.max(np.abs(gamma - ref))),
        "max_abs_gamma_stock_eager": float(np.max(np.abs(gamma - stock))),
        "smoke": smoke,
    }
    save_figure(fig, out_dir, FIGURE["id"], {**numbers, "heads": rows})
    return numbers

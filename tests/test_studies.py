"""The studies as library functions (transflow.interop): their arguments are checked and
named before any work starts; the enumeration of configurations is what the tasks run."""

from __future__ import annotations

import pytest

from transflow.interop import (
    HF_FAMILIES,
    EquivalenceConfig,
    build_torch_reference,
    equivalence_configurations,
    hf_configurations,
    hf_equivalence_rows,
    hf_zoo_configurations,
    hf_zoo_rows,
)


def test_equivalence_configurations_are_the_product_plus_stacks():
    cfg = EquivalenceConfig(nhead=[1, 2, 4], encoder_layers=2)
    rows = equivalence_configurations(cfg, num_layers=1)
    assert len(rows) == 2 * 2 * 3 * 2 * 2 * 2 + 2
    stacks = [r for r in rows if r["stack"]]
    assert [(r["norm_first"], r["num_layers"], r["final_norm"]) for r in stacks] == [
        (False, 2, True),
        (True, 2, True),
    ]
    assert len({tuple(sorted(r.items(), key=str)) for r in rows}) == len(rows)  # distinct
    with pytest.raises(ValueError, match="task.nhead"):
        equivalence_configurations(EquivalenceConfig(nhead=[]))


def test_hf_configurations_are_seeded_and_checked():
    for fam in HF_FAMILIES:
        a, b = hf_configurations(fam, 3, seed=1), hf_configurations(fam, 3, seed=1)
        assert a == b and len(a) == 3 and all(c["d"] % c["heads"] == 0 for c in a)
    assert hf_configurations("vit_layer", 3, seed=2) != hf_configurations("vit_layer", 3, seed=1)
    with pytest.raises(ValueError, match="family"):
        hf_configurations("bert", 1, seed=0)
    with pytest.raises(ValueError, match="families"):
        hf_equivalence_rows(["vit_layer", "bert"], 1)


def test_build_torch_reference_names_missing_and_unknown_fields():
    pytest.importorskip("torch", reason="the reference layers are PyTorch modules")
    with pytest.raises(ValueError, match="lacks the fields"):
        build_torch_reference({"d_model": 8})
    model = dict(
        source="torch_random",
        d_model=8,
        nhead=2,
        dim_feedforward=None,
        num_layers=1,
        norm_first=False,
        activation="relu",
        bias=True,
        layer_norm_eps=1e-5,
        final_norm=False,
        init_seed=0,
        randomize_affine=False,
    )
    with pytest.raises(ValueError, match="unknown model fields"):
        build_torch_reference(model, heads=2)
    with pytest.raises(TypeError, match="model_cfg"):
        build_torch_reference([("d_model", 8)])


@pytest.mark.slow  # ~12 s of CPU per row; the slow tier also runs the whole experiment
@pytest.mark.parametrize("family", ["vit", "cvt"])
def test_hf_zoo_vit_and_cvt_rows_run(family):
    """The full ``experiment=hf_equivalence`` builds its ViT/CvT rows through the interop
    study (its smoke run has none); one row of each agrees in float64 and float32."""
    import jax

    from transflow.interop import hf_zoo_vit_row as vit_row

    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        row = vit_row(family, 0, 0)
    finally:
        jax.config.update("jax_enable_x64", old)
    assert row["err_fp64"] <= 1e-10 and row["err_fp32"] <= 1e-5, row


def test_hf_zoo_configurations_are_seeded_and_checked():
    for fam in ("bert", "llama", "rope", "heads", "activations", "t5"):
        a, b = hf_zoo_configurations(fam, 2, seed=1), hf_zoo_configurations(fam, 2, seed=1)
        assert a == b and a and all(c["d"] % c["heads"] == 0 for c in a)
    assert hf_zoo_configurations("bert", 2, seed=2) != hf_zoo_configurations("bert", 2, seed=1)
    with pytest.raises(ValueError, match="`family`"):
        hf_zoo_configurations("vit_layer", 1, seed=0)
    with pytest.raises(ValueError, match="families"):
        hf_zoo_rows(["bert", "gpt"], 1)


def test_hf_zoo_rows_agree_with_and_without_padding():
    """The rows of ``experiment=hf_equivalence`` for one maskable family: the unpadded and
    the padded batch, each agreeing in float64 and float32."""
    import jax

    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        rows = hf_zoo_rows(["distilbert"], 1, seed=0)
        padded_only = hf_zoo_rows(["distilbert"], 1, seed=0, unmasked=False)
    finally:
        jax.config.update("jax_enable_x64", old)
    assert [r["mask"] for r in rows] == ["none", "padded"]
    assert [r["mask"] for r in padded_only] == ["padded"]
    for r in rows:
        assert r["family"] == "distilbert" and r["err_fp64"] <= 1e-10, r
        assert r["err_fp32"] <= 1e-5, r

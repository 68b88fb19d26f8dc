"""FVIT (F-ViT) regenerates (smoke size): PNG, PDF, JSON, and the kernels agree."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from _reference import require

require("transformers", reason="FVIT loads a HuggingFace ViTModel")

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "paper_figures" / "fvit_attention.py"


@pytest.mark.slow
def test_fvit_attention_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFLOW_SMOKE", "1")
    spec = importlib.util.spec_from_file_location("paper_figures_fvit_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    numbers = module.make(tmp_path)
    for ext in ("png", "pdf", "json"):
        assert (tmp_path / f"FVIT.{ext}").stat().st_size > 0
    assert numbers["smoke"] is True and numbers["grid_shape"] == [3, 4]
    assert numbers["max_abs_gamma"] <= 1e-12
    # stock HF eager rounds γ to float32: visible, but bounded
    assert numbers["max_abs_gamma_stock_eager"] <= 1e-6
    data = json.loads((tmp_path / "FVIT.json").read_text())
    for head in data["heads"]:
        assert abs(sum(map(sum, head["transflow"])) + head["cls_weight"] - 1.0) <= 1e-12

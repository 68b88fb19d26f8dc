"""F5 (F-ViT) regenerates (smoke size): PNG, PDF, JSON, and the kernels agree."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

pytest.importorskip("transformers", reason="F5 loads a HuggingFace ViTModel")

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "paper_figures" / "f5_vit_attention.py"


@pytest.mark.slow
def test_f5_vit_attention_smoke(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFLOW_SMOKE", "1")
    spec = importlib.util.spec_from_file_location("paper_figures_f5_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    numbers = module.make(tmp_path)
    for ext in ("png", "pdf", "json"):
        assert (tmp_path / f"F5.{ext}").stat().st_size > 0
    assert numbers["smoke"] is True and numbers["grid_shape"] == [3, 4]
    assert numbers["max_abs_gamma"] <= 1e-12
    # stock HF eager rounds γ to float32: visible, but bounded
    assert numbers["max_abs_gamma_stock_eager"] <= 1e-6
    data = json.loads((tmp_path / "F5.json").read_text())
    for head in data["heads"]:
        assert abs(sum(map(sum, head["transflow"])) + head["cls_weight"] - 1.0) <= 1e-12

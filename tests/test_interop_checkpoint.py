"""Safe loading of torch checkpoints: ``weights_only=True`` by default, whole-module
pickles only with ``trust_pickle`` (``task.trust_pickle=true`` in experiment=analyze).

A crafted ``.pt`` whose unpickling creates a marker file is refused without the opt-in (the
marker never appears) and loads with it; a state dict with a sidecar JSON (or the task's
``n_heads``) converts and analyses without it.
"""

from __future__ import annotations

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the checkpoint tests need PyTorch")

from test_hf_helpers import randomize_, to_np  # noqa: E402
from transflow.interop import from_torch, load_torch_checkpoint  # noqa: E402


class _Touch:
    """Unpickling this object creates ``path`` (stands for arbitrary code in a pickle)."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


def _encoder(norm=True):
    layer = torch.nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(
        layer, 2, norm=torch.nn.LayerNorm(16) if norm else None, enable_nested_tensor=False
    )
    return randomize_(enc.double().eval(), 0)


def _crafted(tmp_path):
    marker = tmp_path / "MARKER"
    enc = _encoder()
    enc.payload = _Touch(marker)  # a plain attribute: pickled with the module
    path = tmp_path / "crafted.pt"
    torch.save(enc, path)
    assert not marker.exists()
    return path, marker


def _run(overrides, run_dir):
    from transflow.experiments.run import run_in_process

    summary, _ = run_in_process(["experiment=analyze", "debug=smoke", *overrides], run_dir)
    return summary


def test_crafted_pickle_is_refused_without_opt_in(tmp_path):
    path, marker = _crafted(tmp_path)
    with pytest.raises(ValueError, match=r"crafted\.pt.*trust_pickle"):
        load_torch_checkpoint(path)
    assert not marker.exists()
    # the experiment refuses it too, before any compute
    with pytest.raises(ValueError, match=r"task\.trust_pickle=true"):
        _run([f"task.model_path={path}"], tmp_path / "run")
    assert not marker.exists()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    # with the opt-in the file is unpickled (its code runs: the marker appears)
    module = load_torch_checkpoint(path, trust_pickle=True)
    assert marker.exists()
    assert isinstance(module, torch.nn.TransformerEncoder) and not module.training


@pytest.mark.slow
def test_crafted_pickle_analyses_with_opt_in(tmp_path):
    path, marker = _crafted(tmp_path)
    summary = _run([f"task.model_path={path}", "task.trust_pickle=true"], tmp_path / "run")
    assert marker.exists()
    assert summary["source"] == "torch" and summary["claims_pass"] is True


@pytest.mark.parametrize("norm", [True, False])
def test_state_dict_with_sidecar_matches_torch(tmp_path, norm):
    enc = _encoder(norm)
    path = tmp_path / "encoder.pt"
    torch.save(enc.state_dict(), path)
    pathlib.Path(str(path) + ".json").write_text(json.dumps({"nhead": 4}))
    module = load_torch_checkpoint(path)
    assert (module.norm is not None) == norm and len(module.layers) == 2
    x = torch.randn(1, 7, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = to_np(enc(x)[0])
    out = from_torch(module)(jnp.asarray(to_np(x[0])))
    assert float(np.max(np.abs(np.asarray(out) - ref))) <= 1e-12


def test_state_dict_errors_name_the_path(tmp_path):
    enc = _encoder()
    path = tmp_path / "encoder.pt"
    torch.save(enc.state_dict(), path)
    with pytest.raises(ValueError, match=r"encoder\.pt.*nhead"):
        load_torch_checkpoint(path)  # no sidecar, no default: heads unknown
    side = pathlib.Path(str(path) + ".json")
    side.write_text(json.dumps({"nhead": 4, "heads": 4}))
    with pytest.raises(ValueError, match=r"unknown keys \['heads'\]"):
        load_torch_checkpoint(path)
    side.write_text(json.dumps({"nhead": 4, "num_layers": 3}))
    with pytest.raises(ValueError, match=r"encoder\.pt.*does not fit"):
        load_torch_checkpoint(path)
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"truncated\.pt.*cannot be read"):
        load_torch_checkpoint(bad)


@pytest.mark.slow
def test_state_dict_analyses_without_opt_in(tmp_path):
    """experiment=analyze on a state dict: no opt-in, heads from task.n_heads."""
    enc = _encoder()
    torch.save(enc.float().state_dict(), tmp_path / "encoder.pt")
    summary = _run([f"task.model_path={tmp_path / 'encoder.pt'}", "task.n_heads=4"], tmp_path / "r")
    assert summary["source"] == "torch" and summary["model"] == "TransformerEncoder"
    assert summary["n_steps"] == 2 and summary["claims_pass"] is True

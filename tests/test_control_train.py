"""Checkpoints, resume and the training loop of transflow.control (issue 7)."""

import dataclasses
import os
import pathlib
import signal
import subprocess
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from transflow.control import (
    CheckpointError,
    DigitsConfig,
    EpochOrder,
    SequenceConfig,
    load_digits_split,
    load_latest_checkpoint,
    make_optimizer,
    make_vit,
    save_checkpoint,
    sequence_batch,
    train,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- checkpoints
def _state(v):
    return {"w": jnp.full((3,), v, jnp.float32), "step": np.asarray(int(v), np.int64)}


def _like():
    return _state(0.0)


def test_checkpoint_roundtrip_is_bitwise(tmp_path):
    x = jax.random.normal(jax.random.key(0), (4, 5), jnp.float32)
    save_checkpoint(tmp_path, 7, {"x": x}, meta={"cpu_seconds": 1.5})
    state, step, meta = load_latest_checkpoint(tmp_path, {"x": jnp.zeros((4, 5), jnp.float32)})
    assert step == 7 and meta == {"cpu_seconds": 1.5}
    assert np.asarray(state["x"]).tobytes() == np.asarray(x).tobytes()


def test_checkpoint_keeps_newest(tmp_path):
    for s in range(1, 6):
        save_checkpoint(tmp_path, s, _state(s), keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-00000004.eqx", "ckpt-00000005.eqx"]


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "header"])
def test_corrupt_checkpoint_falls_back_with_message(tmp_path, damage):
    save_checkpoint(tmp_path, 1, _state(1))
    path = save_checkpoint(tmp_path, 2, _state(2))
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[-3] ^= 0xFF
    elif damage == "truncate":  # a half-written file
        raw = raw[: len(raw) // 2]
    elif damage == "empty":
        raw = b""
    else:
        raw = raw[:9] + b"{not json" + raw[20:]
    path.write_bytes(bytes(raw))
    messages = []
    state, step, _ = load_latest_checkpoint(tmp_path, _like(), log=messages.append)
    assert step == 1 and float(state["w"][0]) == 1.0
    assert len(messages) == 1
    assert "ckpt-00000002.eqx" in messages[0] and "falling back" in messages[0]


def test_half_written_tmp_file_is_ignored(tmp_path):
    save_checkpoint(tmp_path, 3, _state(3))
    (tmp_path / ".ckpt-00000004.eqx.123.tmp").write_bytes(b"TFCKPT1\n{")
    messages = []
    _, step, _ = load_latest_checkpoint(tmp_path, _like(), log=messages.append)
    assert step == 3
    assert any("half-written" in m for m in messages)
    assert not list(tmp_path.glob("*.tmp"))


def test_no_checkpoint_returns_none(tmp_path):
    assert load_latest_checkpoint(tmp_path / "missing", _like()) is None
    assert load_latest_checkpoint(tmp_path, _like()) is None  # an empty directory


def test_all_checkpoints_corrupt_raises_naming_the_directory(tmp_path):
    """Never a silent restart from step 0: the error names the directory and the way out."""
    save_checkpoint(tmp_path, 1, _state(1)).write_bytes(b"garbage")
    raw = save_checkpoint(tmp_path, 2, _state(2)).read_bytes()
    (tmp_path / "ckpt-00000002.eqx").write_bytes(raw[:-5])
    messages = []
    with pytest.raises(CheckpointError) as info:
        load_latest_checkpoint(tmp_path, _like(), log=messages.append)
    msg = str(info.value)
    assert str(tmp_path) in msg and "resume=false" in msg and "all 2 checkpoints" in msg
    assert len(messages) == 2  # each file's reason was reported
    # train() passes it on rather than training from scratch
    with pytest.raises(CheckpointError, match="resume=false"):
        _tiny_training(tmp_path, 4)


def test_checkpoint_of_another_structure_raises(tmp_path):
    save_checkpoint(tmp_path, 1, _state(1))
    with pytest.raises(ValueError, match="different configuration"):
        load_latest_checkpoint(
            tmp_path, {"w": jnp.zeros((4,), jnp.float32), "step": np.asarray(0, np.int64)}
        )


def test_save_checkpoint_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="step"):
        save_checkpoint(tmp_path, -1, _state(1))
    with pytest.raises(ValueError, match="keep"):
        save_checkpoint(tmp_path, 1, _state(1), keep=0)


# ----------------------------------------------------------------------------- data order
def test_epoch_order_is_a_pure_function_of_seed_and_step():
    a, b = EpochOrder(100, 16, seed=3), EpochOrder(100, 16, seed=3)
    assert a.steps_per_epoch == 6
    for s in (0, 5, 6, 40):
        np.testing.assert_array_equal(a.indices(s), b.indices(s))
    epoch0 = np.concatenate([a.indices(s) for s in range(6)])
    assert len(set(epoch0.tolist())) == 96  # no repeats within an epoch
    assert not np.array_equal(a.permutation(0), a.permutation(1))
    assert not np.array_equal(a.indices(0), EpochOrder(100, 16, seed=4).indices(0))
    assert a.state(13) == (2, 1)
    with pytest.raises(ValueError, match="batch_size"):
        EpochOrder(10, 11, seed=0)


def test_digits_split_and_sequence_tasks():
    xtr, ytr, xte, yte = load_digits_split(0.2, seed=0)
    assert xtr.shape[1:] == (8, 8) and xtr.dtype == np.float32
    assert len(xtr) + len(xte) == 1797 and abs(len(xte) - 0.2 * 1797) < 10
    assert 0.0 <= xtr.min() and xtr.max() <= 1.0
    assert set(np.unique(yte)) == set(range(10))
    x, y = sequence_batch("sort", 4, 6, 10, seed=0, step=3)
    np.testing.assert_array_equal(y, np.sort(x, axis=1))
    x2, _ = sequence_batch("sort", 4, 6, 10, seed=0, step=3)
    np.testing.assert_array_equal(x, x2)
    xt, _ = sequence_batch("sort", 4, 6, 10, seed=0, step=3, split="test")
    assert not np.array_equal(x, xt)
    xr, yr = sequence_batch("reverse", 2, 5, 7, seed=1, step=0)
    np.testing.assert_array_equal(yr, xr[:, ::-1])
    with pytest.raises(ValueError, match="kind"):
        sequence_batch("copy", 2, 5, 7, seed=1, step=0)


# ----------------------------------------------------------------------------- train loop
def _tiny_training(ckpt, num_steps, *, every=3, messages=None):
    xtr, ytr, _, _ = load_digits_split(seed=0)
    order = EpochOrder(len(xtr), 8, seed=0)
    model = make_vit(d=8, n_steps=1, n_heads=1, dtype=jnp.float32, key=jax.random.key(0))
    opt = make_optimizer(1e-2, num_steps=num_steps, warmup_steps=2)
    return train(
        model,
        opt,
        lambda s: (xtr[order.indices(s)], ytr[order.indices(s)]),
        num_steps,
        key=jax.random.key(1),
        checkpoint_dir=ckpt,
        checkpoint_every=every,
        data_state=order.state,
        log_every=2,
        progress=None,
        message=(messages.append if messages is not None else print),
    )


def _leaves_bytes(model):
    return [np.asarray(x).tobytes() for x in jax.tree.leaves(eqx.filter(model, eqx.is_array))]


def test_train_resume_in_process_is_bitwise(tmp_path):
    ref = _tiny_training(tmp_path / "ref", 10)
    assert ref.resumed_from is None and ref.step == 10
    # a float32 model stays float32 (x64 is on in the tests)
    dtypes = {x.dtype for x in jax.tree.leaves(eqx.filter(ref.model, eqx.is_inexact_array))}
    assert dtypes == {jnp.dtype(jnp.float32)}
    assert [p.name for p in sorted((tmp_path / "ref").iterdir())] == [
        "ckpt-00000006.eqx",
        "ckpt-00000009.eqx",
        "ckpt-00000010.eqx",
    ]
    # "interrupt" after step 6: drop the later checkpoints, and damage the newest one left
    run = tmp_path / "ref"
    (run / "ckpt-00000010.eqx").unlink()
    raw = (run / "ckpt-00000009.eqx").read_bytes()
    (run / "ckpt-00000009.eqx").write_bytes(raw[: len(raw) - 10])
    messages = []
    res = _tiny_training(run, 10, messages=messages)
    assert res.resumed_from == 6
    assert any("ckpt-00000009.eqx is unusable" in m for m in messages)
    assert any("resuming from step 6" in m for m in messages)
    assert _leaves_bytes(res.model) == _leaves_bytes(ref.model)
    # the history of the first run is carried over, so curves are complete after a resume
    assert [h["step"] for h in res.history if "loss" in h] == [2, 4, 6, 8, 10]
    assert [h["loss"] for h in res.history] == [h["loss"] for h in ref.history]


def test_train_rejects_bad_arguments():
    model = make_vit(d=8, n_steps=1, n_heads=1, key=jax.random.key(0))
    opt = make_optimizer(1e-2, num_steps=3)
    with pytest.raises(ValueError, match="num_steps"):
        train(model, opt, lambda s: None, 0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="checkpoint_every"):
        train(model, opt, lambda s: None, 3, key=jax.random.key(0), checkpoint_every=0)


# ----------------------------------------------------------------------------- tasks
def test_task_configs_derive_from_library_configs():
    """experiments/tasks/train_*.py derive their Config from the library's (one set of
    fields and defaults) and add only claim thresholds; the two library configs share
    TrainConfig, and the runner is one function for both tasks."""
    from transflow.experiments.tasks import train_digits, train_sequence

    from transflow.control import TRAINING_TASKS, TrainConfig

    for task_cfg, lib_cfg in (
        (train_digits.Config, DigitsConfig),
        (train_sequence.Config, SequenceConfig),
    ):
        assert issubclass(lib_cfg, TrainConfig) and issubclass(task_cfg, lib_cfg)
        lib_fields = {f.name for f in dataclasses.fields(lib_cfg)}
        extra = {f.name for f in dataclasses.fields(task_cfg)} - lib_fields
        assert extra and all(name.startswith("min_") for name in extra), extra
    assert {t.config for t in TRAINING_TASKS.values()} == {DigitsConfig, SequenceConfig}
    assert SequenceConfig().n_steps == 2 and DigitsConfig().n_steps == 4


# ----------------------------------------------------------------------------- SIGKILL resume
TINY = [
    "steps=24",
    "d=8",
    "n_steps=1",
    "n_heads=1",
    "batch_size=16",
    "checkpoint_every=4",
    "eval_every=1000",
    "warmup_steps=2",
    "log_every=4",
]


def _cli(run_dir, *extra):
    env = {
        **os.environ,
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "transflow.control",
            "digits",
            "--run-dir",
            str(run_dir),
            *TINY,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow  # three ~10 s CPU subprocess runs (two in parallel); ~30 s on 2 idle cores
def test_sigkill_then_rerun_is_bitwise_identical(tmp_path):
    """A real SIGKILL mid-run; the rerun resumes (skipping a half-written newest checkpoint)
    and ends with the same bits as an uninterrupted run of the same command."""
    ref = _cli(tmp_path / "ref")  # the uninterrupted run, concurrently
    victim = _cli(tmp_path / "killed", "throttle=0.25")
    ckpts = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while len(list(ckpts.glob("ckpt-*.eqx"))) < 2:
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "no checkpoint written within 300 s"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "final.eqx").exists()
    done = sorted(ckpts.glob("ckpt-*.eqx"))
    last_step = int(done[-1].stem.split("-")[1])
    assert 8 <= last_step < 24
    # simulate a crash during the write of the newest checkpoint: cut it in half
    raw = done[-1].read_bytes()
    done[-1].write_bytes(raw[: len(raw) // 2])

    out, err = _cli(tmp_path / "killed").communicate(timeout=600)
    assert f"checkpoint {done[-1]} is unusable" in err, err
    assert f"resuming from step {last_step - 4} of 24" in err, err
    ref_out, ref_err = ref.communicate(timeout=600)
    assert ref.returncode == 0, ref_err
    a = (tmp_path / "ref" / "final.eqx").read_bytes()
    b = (tmp_path / "killed" / "final.eqx").read_bytes()
    assert a == b


# ----------------------------------------------------------------------------- kill mid-write
_PAUSING_WRITER = """
import os, sys, time
sys.path.insert(0, {tests!r})
import jax
jax.config.update("jax_enable_x64", True)  # as in conftest: the same state structure
jax.config.update("jax_numpy_dtype_promotion", "strict")
from transflow.control import _checkpoint
import test_control_train as t

class Pausing:
    # a checkpoint file that stops for good half-way through its payload
    def __init__(self, f):
        self.f, self.calls = f, 0
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self.f.__exit__(*exc)
    def write(self, b):
        self.calls += 1
        if self.calls == 3:  # magic, header, then the payload
            self.f.write(b[: len(b) // 2])
            self.f.flush()
            os.fsync(self.f.fileno())
            open({marker!r}, "w").close()
            time.sleep(600)
        return self.f.write(b)
    def flush(self):
        self.f.flush()
    def fileno(self):
        return self.f.fileno()

def pausing_open(path, mode="r", *args, **kwargs):
    f = open(path, mode, *args, **kwargs)
    return Pausing(f) if "ckpt-00000006" in str(path) and "w" in mode else f

_checkpoint.open = pausing_open  # shadows the builtin inside the checkpoint module only
t._tiny_training({run!r}, 10)
"""


@pytest.mark.slow  # a JAX subprocess plus two in-process trainings: ~20-40 s on 2 busy cores
def test_sigkill_during_checkpoint_write_then_resume_is_bitwise(tmp_path):
    """SIGKILL while ckpt 6 is half on disk: the rerun discards the partial file, resumes
    from step 3 and ends with the same bits as an uninterrupted run."""
    run, marker = tmp_path / "killed", tmp_path / "paused"
    script = _PAUSING_WRITER.format(tests=str(ROOT / "tests"), marker=str(marker), run=str(run))
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    victim = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert victim.poll() is None, victim.communicate()
        assert time.monotonic() < deadline, "the writer never reached checkpoint 6"
        time.sleep(0.05)
    partial = list(run.glob(".ckpt-00000006.eqx.*.tmp"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0  # mid-write, on disk
    victim.send_signal(signal.SIGKILL)
    victim.communicate()
    assert victim.returncode == -signal.SIGKILL
    assert sorted(p.name for p in run.glob("ckpt-*.eqx")) == ["ckpt-00000003.eqx"]

    messages = []
    res = _tiny_training(run, 10, messages=messages)
    assert any("half-written" in m and partial[0].name in m for m in messages), messages
    assert res.resumed_from == 3
    ref = _tiny_training(tmp_path / "ref", 10)
    assert _leaves_bytes(res.model) == _leaves_bytes(ref.model)
    assert [h["loss"] for h in res.history] == [h["loss"] for h in ref.history]

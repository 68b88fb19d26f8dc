"""Atomic, checksummed checkpoints of a training state, with fallback on corruption.

A checkpoint file ``ckpt-<step:08d>.eqx`` is::

    b"TFCKPT1\\n"
    one JSON line: {"step": s, "nbytes": n, "sha256": h, "meta": {...}}
    n bytes: equinox.tree_serialise_leaves(state)

It is written to a temporary file in the same directory, flushed and ``fsync``-ed, then
renamed over the final name (``os.replace`` is atomic on POSIX) and the directory is
``fsync``-ed. A crash therefore leaves either the complete new file or none (plus a
stray ``.tmp`` file, which is ignored and removed). On load the length and the SHA-256 of
the payload are checked; a truncated or corrupted file is reported and the previous good
checkpoint is used instead. If every checkpoint is corrupt, loading raises a
:class:`CheckpointError` naming the directory and the ``resume=false`` way out rather than
restarting from step 0.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx

from .._errors import CheckpointError, check_callable, check_number, check_path  # noqa: E501 (one error type for every checkpoint reader)

__all__ = [
    "save_checkpoint",
    "load_latest_checkpoint",
    "list_checkpoints",
    "CheckpointError",
]

_MAGIC = b"TFCKPT1\n"
_NAME = re.compile(r"^ckpt-(\d{8,})\.eqx$")


def _say(msg: str) -> None:
    print(f"[transflow.control] {msg}", file=sys.stderr, flush=True)


def list_checkpoints(directory: str | os.PathLike) -> list[tuple[int, pathlib.Path]]:
    """``(step, path)`` of the checkpoint files in ``directory``, oldest first."""
    check_path("directory", directory, "list_checkpoints")
    d = pathlib.Path(directory)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _NAME.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def _fsync_dir(d: pathlib.Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    directory: str | os.PathLike,
    step: int,
    state: Any,
    *,
    meta: dict | None = None,
    keep: int | None = 3,
) -> pathlib.Path:
    """Write ``state`` (any pytree of arrays) atomically as the checkpoint of ``step``.

    Args:
        directory: checkpoint directory (created if needed).
        step: global step the state belongs to (the file name sorts by it).
        state: pytree to save with ``equinox.tree_serialise_leaves``.
        meta: small JSON-serialisable dict stored in the header (e.g. CPU seconds).
        keep: keep only the newest ``keep`` checkpoints (``None``: keep all).

    Returns:
        The path of the written checkpoint.

    Example:
        >>> import tempfile, jax.numpy as jnp
        >>> from transflow.control import save_checkpoint, load_latest_checkpoint
        >>> d = tempfile.mkdtemp()
        >>> _ = save_checkpoint(d, 3, {"w": jnp.ones(2)})
        >>> state, step, meta = load_latest_checkpoint(d, {"w": jnp.zeros(2)})
        >>> step, state["w"].tolist()
        (3, [1.0, 1.0])
    """
    owner = "save_checkpoint"
    check_path("directory", directory, owner)
    check_number("step", step, owner, lower=0, strict=False, integer=True, example="0")
    if keep is not None:
        check_number("keep", keep, owner, lower=0, integer=True, example="3 (or None)")
    if meta is not None and not isinstance(meta, dict):
        raise TypeError(f"{owner}: `meta` must be a dict or None, got {type(meta).__name__}.")
    step = int(step)
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    eqx.tree_serialise_leaves(buf, state)
    payload = buf.getvalue()
    header = {
        "step": step,
        "nbytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "meta": meta or {},
    }
    final = d / f"ckpt-{step:08d}.eqx"
    tmp = d / f".{final.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(_MAGIC)
        f.write(json.dumps(header, sort_keys=True).encode() + b"\n")
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(d)
    if keep is not None:
        for _, old in list_checkpoints(d)[:-keep]:
            old.unlink(missing_ok=True)
    return final


def read_checkpoint(path: str | os.PathLike) -> tuple[dict, bytes]:
    """Read and verify one checkpoint file; returns ``(header, payload)``.

    Raises:
        CheckpointError: wrong magic, unreadable header, wrong length or checksum.
    """
    p = pathlib.Path(path)
    raw = p.read_bytes()
    if not raw.startswith(_MAGIC):
        raise CheckpointError(f"{p.name}: not a transflow checkpoint (bad magic bytes)")
    nl = raw.find(b"\n", len(_MAGIC))
    if nl < 0:
        raise CheckpointError(f"{p.name}: truncated header")
    try:
        header = json.loads(raw[len(_MAGIC) : nl])
        nbytes, digest = int(header["nbytes"]), str(header["sha256"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{p.name}: unreadable header ({e})") from e
    payload = raw[nl + 1 :]
    if len(payload) != nbytes:
        raise CheckpointError(
            f"{p.name}: truncated or padded payload: expected {nbytes} bytes, got "
            f"{len(payload)} (half-written?)"
        )
    got = hashlib.sha256(payload).hexdigest()
    if got != digest:
        raise CheckpointError(
            f"{p.name}: checksum mismatch (expected sha256 {digest[:12]}…, "
            f"got {got[:12]}…): the file is corrupt"
        )
    return header, payload


def load_latest_checkpoint(
    directory: str | os.PathLike,
    like: Any,
    *,
    log: Callable[[str], None] = _say,
) -> tuple[Any, int, dict] | None:
    """Load the newest *valid* checkpoint in ``directory`` into the structure of ``like``.

    Corrupt or truncated checkpoints are skipped with a message through ``log`` (default:
    stderr) naming the file and the reason, and the previous good one is used. Stray
    temporary files of interrupted writes are removed with a message.

    Args:
        directory: the checkpoint directory.
        like: a pytree with the structure, shapes and dtypes of the saved state.
        log: where messages go.

    Returns:
        ``(state, step, meta)``, or ``None`` if there is no checkpoint file at all.

    Raises:
        CheckpointError: there are checkpoint files but every one is corrupt; the message
            names the directory and the ways out (``resume=false`` for ``transflow-run``,
            another or an emptied ``checkpoint_dir`` for :func:`train`). Training never
            restarts from step 0 silently.
        ValueError: a checkpoint passes its checksum but does not fit ``like`` (it was
            written by a different configuration).
    """
    check_path("directory", directory, "load_latest_checkpoint")
    check_callable("log", log, "load_latest_checkpoint", "print")
    d = pathlib.Path(directory)
    if not d.is_dir():
        return None
    for tmp in sorted(d.glob(".ckpt-*.tmp")):
        log(f"removing half-written temporary checkpoint {tmp.name} (interrupted write)")
        tmp.unlink(missing_ok=True)
    found = list_checkpoints(d)
    for step, path in reversed(found):
        try:
            header, payload = read_checkpoint(path)
        except (CheckpointError, OSError) as e:
            log(f"checkpoint {path} is unusable: {e}; falling back to the previous checkpoint")
            continue
        try:
            state = eqx.tree_deserialise_leaves(io.BytesIO(payload), like)
        except Exception as e:
            raise ValueError(
                f"checkpoint {path} is intact but does not match the current model/optimizer "
                f"structure ({type(e).__name__}: {e}). It was written by a different "
                "configuration: use another checkpoint directory or delete it."
            ) from e
        return state, step, header.get("meta", {})
    if found:
        names = ", ".join(p.name for _, p in found)
        raise CheckpointError(
            f"all {len(found)} checkpoints in {d} are corrupt ({names}; reasons above); "
            "refusing to restart from step 0 silently. To start over, rerun with "
            "`resume=false` (transflow-run / python -m transflow.control), or delete the "
            "directory or pass another `checkpoint_dir` to train()."
        )
    return None

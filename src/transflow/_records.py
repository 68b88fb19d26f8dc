"""Records: the JSON-safe form of what studies return (used by run directories and figures)."""

from __future__ import annotations

import dataclasses
import enum
import pathlib
from typing import Any

__all__ = ["to_jsonable"]


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/JAX arrays and scalars, paths, enums and dataclasses to JSON types.

    Arrays become (nested) lists; non-finite floats stay floats (``NaN``/``Infinity`` in
    the JSON text, which Python's ``json`` reads back).

    Example:
        >>> import numpy as np
        >>> to_jsonable({"err": np.float32(0.5), "v": np.arange(2)})
        {'err': 0.5, 'v': [0, 1]}
    """
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    try:  # OmegaConf containers, without importing omegaconf for plain values
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, DictConfig | ListConfig):
            return to_jsonable(OmegaConf.to_container(obj, resolve=True))
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if hasattr(obj, "__array__") or hasattr(obj, "dtype"):
        import numpy as np

        arr = np.asarray(obj)
        if arr.dtype.kind == "c":
            return {"real": to_jsonable(arr.real), "imag": to_jsonable(arr.imag)}
        return arr.tolist()
    return str(obj)

"""Lossless JSON encoding of rollout data, and structural equality.

JSON has no tuples, numpy arrays, non-string keys, bytes or NaN. `encode` turns such values
into small tagged objects (`{"$tuple": [...]}`, `{"$ndarray": {...}}`, ...) and `decode` turns
them back, so `decode(json.loads(json.dumps(encode(x))))` is equivalent to `x` (same types,
same dtypes, same shapes). Dictionaries whose keys start with `$` are escaped so they can
never be mistaken for a tag.

`equivalent(a, b)` compares such values structurally (type-sensitive, NaN equals NaN, arrays
by dtype, shape and contents); records use it for `==`.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rolloutlib.errors import SerializationError, describe

__all__ = ["decode", "encode", "equivalent", "register"]

_Encoder = Callable[[Any], Any]
_Decoder = Callable[[Any], Any]
_CODECS: dict[type, tuple[str, _Encoder]] = {}
_DECODERS: dict[str, _Decoder] = {}


def register(cls: type, tag: str, to_data: _Encoder, from_data: _Decoder) -> None:
    """Teach the codec a class: `to_data(obj)` must return encodable data."""
    _CODECS[cls] = (tag, to_data)
    _DECODERS[tag] = from_data


def _float(value: float) -> Any:
    if math.isfinite(value):
        return value
    return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def encode(value: Any, path: str = "$") -> Any:
    """Encode `value` as JSON-compatible data (see the module docstring)."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return _float(value)
    if kind is list:
        return [encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: encode(v, f"{path}.{k}") for k, v in value.items()}
        return {
            "$dict": [
                [encode(k, f"{path}<key>"), encode(v, f"{path}[{k!r}]")] for k, v in value.items()
            ]
        }
    if kind is tuple:
        return {"$tuple": [encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, np.ndarray):
        if value.dtype.fields is not None or value.dtype.kind in "mMV":
            raise SerializationError(f"{path}: arrays of dtype {value.dtype} are not supported")
        return {
            "$ndarray": {
                "dtype": value.dtype.str if value.dtype.kind != "O" else "object",
                "shape": list(value.shape),
                "data": encode(value.ravel().tolist(), path),
            }
        }
    if isinstance(value, np.generic):
        if value.dtype.kind in "mMV":
            raise SerializationError(f"{path}: numpy {value.dtype} values are not supported")
        return {"$npscalar": {"dtype": value.dtype.str, "value": encode(value.item(), path)}}
    if kind is complex:
        return {"$complex": [_float(value.real), _float(value.imag)]}
    if kind is bytes:
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if kind is set or kind is frozenset:
        items = [encode(v, f"{path}{{}}") for v in value]
        return {"$set" if kind is set else "$frozenset": items}
    codec = _CODECS.get(kind)
    if codec is not None:
        tag, to_data = codec
        return {tag: encode(to_data(value), path)}
    # Subclasses of builtins (str enums, OrderedDict, ...) are encoded as their base type.
    for base in (str, int, float, dict, list, tuple):
        if isinstance(value, base) and not isinstance(value, bool):
            return encode(base(value), path)  # type: ignore[call-overload]
    raise SerializationError(
        f"{path}: cannot encode {describe(value)} of type {kind.__qualname__} as JSON"
    )


def _decode_float(data: Any) -> float:
    if isinstance(data, dict):
        return float(data["$float"])
    return float(data)


def decode(data: Any) -> Any:
    """Inverse of `encode`."""
    kind = type(data)
    if kind is list:
        return [decode(v) for v in data]
    if kind is not dict:
        return data
    if len(data) == 1:
        ((key, payload),) = data.items()
        if key.startswith("$"):
            return _decode_tagged(key, payload)
    return {k: decode(v) for k, v in data.items()}


def _decode_tagged(tag: str, payload: Any) -> Any:
    try:
        if tag == "$float":
            return float(payload)
        if tag == "$tuple":
            return tuple(decode(v) for v in payload)
        if tag == "$dict":
            return {_hashable(decode(k)): decode(v) for k, v in payload}
        if tag == "$ndarray":
            dtype = np.dtype(object if payload["dtype"] == "object" else payload["dtype"])
            flat = decode(payload["data"])
            if dtype.kind == "O":
                array = np.empty(len(flat), dtype=object)
                for i, item in enumerate(flat):  # element-wise: nested lists stay objects
                    array[i] = item
            else:
                array = np.array(flat, dtype=dtype)
            return array.reshape(payload["shape"])
        if tag == "$npscalar":
            return np.dtype(payload["dtype"]).type(decode(payload["value"]))
        if tag == "$complex":
            return complex(_decode_float(payload[0]), _decode_float(payload[1]))
        if tag == "$bytes":
            return base64.b64decode(payload)
        if tag == "$set":
            return {decode(v) for v in payload}
        if tag == "$frozenset":
            return frozenset(decode(v) for v in payload)
        decoder = _DECODERS.get(tag)
        if decoder is not None:
            return decoder(decode(payload))
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"malformed {tag} value {describe(payload)}: {exc}") from exc
    raise SerializationError(f"unknown tag {tag!r} with value {describe(payload)}")


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    return key


def equivalent(a: Any, b: Any) -> bool:
    """Structural, type-sensitive equality that treats NaN as equal to NaN."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is float:
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equivalent(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(equivalent(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "O":
            return all(equivalent(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, np.generic):
        if a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc":
            return bool(a == b) or bool(np.isnan(a) and np.isnan(b))
        return bool(a == b)
    try:
        return bool(a == b)
    except Exception:
        return False

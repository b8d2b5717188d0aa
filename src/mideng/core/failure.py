"""Recorded failures (on_error="record"): stored as data, rebuilt without unpickling.

The exception's class is found by import path and rebuilt from its JSON-able args, so
``except PaymentDeclined`` keeps working on a replay. Anything that can't be rebuilt that way
comes back as RecordedFailureError carrying the original type name and message.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from mideng.core.canonical import to_jsonable
from mideng.errors import RecordedFailureError


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or, when that raises, the exception's type named instead: a failure's
    text is written after the work ran, where an error of its own would leave it unsettled."""
    try:
        return str(exc)
    except Exception as err:
        return f"{type(exc).__qualname__} (its str() raised {type(err).__name__})"


def encode_failure(exc: BaseException) -> bytes:
    """The failure as stored. Never raises: it is spelt after the body ran, and an error here
    would leave the claim held, for a retry to take over once its lease lapsed and run the body
    again. So arguments that can't be spelt (a model_dump that raises, a value that contains
    itself) are left out, and a ``str()`` that raises is named instead of quoted."""
    cls = type(exc)
    name = f"{cls.__module__}:{cls.__qualname__}"
    message = message_of(exc)
    try:
        return json.dumps(
            {"type": name, "message": message, "args": to_jsonable(list(exc.args))}
        ).encode("utf-8")
    except Exception:  # TypeError, and whatever else spelling the arguments raises
        return json.dumps({"type": name, "message": message, "args": None}).encode("utf-8")


def rebuild_failure(data: bytes) -> BaseException:
    try:
        info = json.loads(data)
        type_name, message, args = str(info["type"]), str(info["message"]), info.get("args")
    except (ValueError, KeyError, TypeError):
        return RecordedFailureError("unknown", "a recorded failure could not be read")
    cls = _find(type_name)
    if cls is not None and args is not None:
        try:
            exc = cls(*args)
            if str(exc) == message:
                exc.__mideng_replayed__ = True  # type: ignore[attr-defined]
                return exc
        except Exception:
            pass
    return RecordedFailureError(type_name, message)


def _find(type_name: str) -> type[Exception] | None:
    module_name, _, qualname = type_name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if isinstance(obj, type) and issubclass(obj, Exception) else None

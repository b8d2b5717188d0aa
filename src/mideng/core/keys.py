"""Keys: the business identity of one operation, rendered from a call's arguments.

A key is the business identity (trade no., order no., ``order:123456``), never a number minted
per call: a key that changes on every retry dedupes nothing. A template such as
``"{notify.trade_no}"`` is rendered over the *bound* arguments, so it reads the same whether the
caller passed the value by position or by name.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from mideng.core.canonical import fingerprint
from mideng.errors import InvalidKeyError, KeyMissingError

MAX_KEY_LENGTH = 255
MAX_SCOPE_LENGTH = 128

KeySpec = str | Callable[..., Any] | None

_FORMATTER = string.Formatter()


def check_scope(scope: object) -> str:
    if not isinstance(scope, str) or not scope or len(scope) > MAX_SCOPE_LENGTH:
        raise InvalidKeyError(
            f"scope must be a non-empty string of at most {MAX_SCOPE_LENGTH} characters, "
            f"got {scope!r}"
        )
    return scope


def check_key(key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKeyError(
            f"key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}. Use the business "
            "identity, not the payload (or hash it yourself on purpose)"
        )
    return key


def bind(
    signature: inspect.Signature, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def template_fields(template: str) -> list[str]:
    """The root argument names a template reads (``{notify.trade_no}`` -> ``notify``)."""
    roots = []
    for _, field, _, _ in _FORMATTER.parse(template):
        if field is None:
            continue
        if not field or field.isdigit():
            raise InvalidKeyError(f"key template {template!r} must name arguments, not positions")
        root = field.split(".", 1)[0].split("[", 1)[0]
        roots.append(root)
    return roots


def selector(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Any]:
    """Call ``fn`` with the bound arguments it names (all of them if it takes **kwargs).

    So ``payload=lambda notify: notify`` works on ``def handle(notify, *, channel="web")``.
    """
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return lambda arguments: fn(**arguments)
    names = [
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    return lambda arguments: fn(**{n: arguments[n] for n in names if n in arguments})


def render(spec: KeySpec, arguments: Mapping[str, Any]) -> str:
    """Render a key from a template, a callable over the call's arguments, or all arguments."""
    if spec is None:
        try:
            return "sha256:" + fingerprint(arguments)
        except TypeError as exc:
            raise KeyMissingError(
                f"no key= given and the arguments can't be hashed ({exc}); pass key= naming the "
                "business identity, e.g. key='{order.id}'"
            ) from exc
    if callable(spec):
        return check_key(selector(spec)(arguments))
    try:
        return check_key(_FORMATTER.vformat(spec, (), arguments))
    except (KeyError, AttributeError, IndexError, LookupError) as exc:
        raise KeyMissingError(f"key template {spec!r} could not be rendered: {exc!r}") from exc

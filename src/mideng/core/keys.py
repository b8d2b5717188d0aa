"""Keys: the business identity of one operation, rendered from a call's arguments.

A key is the business identity (trade no., order no., ``order:123456``), never a number minted
per call: a key that changes on every retry dedupes nothing. A template such as
``"{notify.trade_no}"`` is rendered over the *bound* arguments, so it reads the same whether the
caller passed the value by position or by name.
"""

from __future__ import annotations

import functools
import inspect
import string
from _string import formatter_field_name_split  # type: ignore[import-not-found]
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
    if "\x00" in scope:
        raise InvalidKeyError(f"scope contains a NUL character: {scope!r}")
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
    # PostgreSQL's text can't hold NUL, and no business identity needs one: refuse it here,
    # the same for every store, instead of as a store failure on one of them.
    if "\x00" in key:
        raise InvalidKeyError(f"key contains a NUL character: {key!r}")
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


Accessor = tuple[str, list[tuple[bool, Any]], str, str | None]
_CONVERSIONS: dict[str, Callable[[object], str]] = {"r": repr, "s": str, "a": ascii}


def compile_template(template: str) -> Callable[[Mapping[str, Any]], str]:
    """Parse a key template once; rendering is then a walk over prepared accessors.

    Same syntax as str.format with named fields (attribute and index access, conversions and
    format specs), minus nested replacement fields, which a key has no use for.
    """
    parts: list[str | Accessor] = []
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        if literal:
            parts.append(literal)
        if field is None:
            continue
        if not field or field[0].isdigit() or "{" in (spec or ""):
            raise InvalidKeyError(f"key template {template!r} must name arguments plainly")
        first, rest = formatter_field_name_split(field)
        parts.append((str(first), list(rest), spec or "", conversion))

    def render_compiled(arguments: Mapping[str, Any]) -> str:
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            first, chain, spec, conversion = part
            try:
                value = arguments[first]
                for is_attr, name in chain:
                    value = getattr(value, name) if is_attr else value[name]
            except (KeyError, AttributeError, IndexError, LookupError, TypeError) as exc:
                raise KeyMissingError(
                    f"key template {template!r} could not be rendered: {exc!r}"
                ) from exc
            if conversion:
                value = _CONVERSIONS[conversion](value)
            out.append(format(value, spec))
        return check_key("".join(out))

    return render_compiled


def fast_binder(
    signature: inspect.Signature,
) -> Callable[[tuple[Any, ...], Mapping[str, Any]], dict[str, Any]]:
    """``bind`` without inspect's per-call overhead for plain signatures.

    Any call it can't map with certainty (extra, missing or doubled arguments, *args,
    positional-only) goes to inspect's bind, which raises the proper TypeError.
    """
    params = signature.parameters
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(p.kind not in plain for p in params.values()):
        return lambda args, kwargs: bind(signature, args, kwargs)
    positional = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
    count = len(params)

    def bind_fast(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if len(args) <= len(positional):
            arguments = dict(defaults)
            arguments.update(zip(positional, args, strict=False))
            arguments.update(kwargs)
            if len(arguments) == count and all(
                k in params and k not in positional[: len(args)] for k in kwargs
            ):
                return arguments
        return bind(signature, args, kwargs)

    return bind_fast


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
    return _compiled(spec)(arguments)


_compiled = functools.lru_cache(maxsize=1024)(compile_template)

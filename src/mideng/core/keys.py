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
from typing import Any, NoReturn

from mideng.core.canonical import fingerprint
from mideng.errors import InvalidKeyError, KeyMissingError

MAX_KEY_LENGTH = 255
MAX_SCOPE_LENGTH = 128

KeySpec = str | Callable[..., Any] | None

_FORMATTER = string.Formatter()


# The stores keep the entry-layer primitives' rows beside the guarded records: on memory,
# SQLite and SQL a token or a debounce window is a record at (prefix + scope, key). A guarded
# scope spelled with one of these prefixes would share those rows (an issued token would
# overwrite a stored result), so guarded scopes may not start with them.
TOKEN_PREFIX = "token:"
HIT_PREFIX = "hit:"
RESERVED_PREFIXES = {
    TOKEN_PREFIX: "anti-resubmit tokens (TokenService)",
    HIT_PREFIX: "debounce windows (Debouncer)",
}
_RESERVED = tuple(RESERVED_PREFIXES)


def utf8_error(text: str) -> UnicodeEncodeError | None:
    """What encoding ``text`` as UTF-8 raises, or None: a lone surrogate (bytes decoded with
    surrogateescape, a badly decoded header) has no UTF-8 form."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc
    return None


def _refuse_bad_text(value: str, what: str) -> None:
    """Raise for a NUL or a lone surrogate; return for any other (non-ASCII) text."""
    # PostgreSQL's text can't hold NUL, and no business identity needs one: refuse it here,
    # the same for every store, instead of as a store failure on one of them.
    if "\x00" in value:
        raise InvalidKeyError(f"{what} contains a NUL character: {value!r}")
    # Text with no UTF-8 form: every store but memory would fail to send it, and memory would
    # run the body.
    error = utf8_error(value)
    if error is not None:
        raise InvalidKeyError(
            f"{what} contains a lone surrogate {value[error.start]!r} at index {error.start}, "
            f"which is not text any store can hold; decode the bytes it came from strictly: "
            f"{value!r}"
        ) from error


def check_text(value: str, what: str) -> str:
    """``value`` if every store can hold it (no NUL, no lone surrogate); InvalidKeyError if not."""
    if "\x00" in value or not value.isascii():
        _refuse_bad_text(value, what)
    return value


def _refuse_bad_scope(scope: object) -> NoReturn:
    raise InvalidKeyError(
        f"scope must be a non-empty string of at most {MAX_SCOPE_LENGTH} characters, got {scope!r}"
    )


# Every guarded call checks its scope, and a service names a handful of scopes over and over:
# one that passed is let through again by a set lookup, cheaper than the checks it skips.
# Bounded (and emptied when full), since HTTP makes a scope per principal.
_PASSED: set[str] = set()
_MAX_PASSED = 4096


def check_scope(scope: object) -> str:
    """A guarded scope (Guard, @idempotent, transactional mode, the operator tools)."""
    if type(scope) is str and scope in _PASSED:  # exact str: a subclass could redefine ==
        return scope
    if not isinstance(scope, str) or not scope or len(scope) > MAX_SCOPE_LENGTH:
        _refuse_bad_scope(scope)
    # isascii() is one C scan: only text that fails it can hold a lone surrogate.
    if "\x00" in scope or not scope.isascii():
        _refuse_bad_text(scope, "scope")
    if scope.startswith(_RESERVED):
        prefix = next(p for p in _RESERVED if scope.startswith(p))
        raise InvalidKeyError(
            f"scope {scope!r} starts with {prefix!r}, which is reserved for "
            f"{RESERVED_PREFIXES[prefix]}: the stores keep those rows under that prefix, so "
            "this scope would share them. Name the guarded scope another way"
        )
    if type(scope) is str:
        if len(_PASSED) >= _MAX_PASSED:
            _PASSED.clear()
        _PASSED.add(scope)
    return scope


def check_entry_scope(scope: object) -> str:
    """A TokenService or Debouncer scope: any name, since the store itself puts the reserved
    prefix in front of it (so it is checked here without the prefix, never with it)."""
    if not isinstance(scope, str) or not scope or len(scope) > MAX_SCOPE_LENGTH:
        _refuse_bad_scope(scope)
    if "\x00" in scope or not scope.isascii():
        _refuse_bad_text(scope, "scope")
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
    if "\x00" in key or not key.isascii():
        _refuse_bad_text(key, "key")
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

    only = parts[0] if len(parts) == 1 else None
    if isinstance(only, tuple) and only[1:] == ([], "", None):
        name = only[0]  # "{trade_no}", the usual template: one argument as it is, no walk

        def render_plain(arguments: Mapping[str, Any]) -> str:
            try:
                value = arguments[name]
            except (KeyError, LookupError, TypeError) as exc:
                raise KeyMissingError(
                    f"key template {template!r} could not be rendered: {exc!r}"
                ) from exc
            return value if type(value) is str else format(value, "")

        return render_plain

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
        # Unchecked: whoever uses the key checks it once (``render``; the Guard's prepare).
        return "".join(out)

    return render_compiled


def plain_field(template: str) -> str | None:
    """The argument a template is, when it is just ``"{name}"`` (``compile_template``'s plain
    case: that argument rendered as it is); None for any other template."""
    parsed = list(_FORMATTER.parse(template))
    if len(parsed) != 1:
        return None
    literal, field, spec, conversion = parsed[0]
    if literal or not field or field[0].isdigit() or spec or conversion is not None:
        return None
    first, rest = formatter_field_name_split(field)
    return str(first) if not list(rest) else None


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
    exact = count == len(positional)  # every parameter may come by position

    def bind_fast(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        if exact and not kwargs and len(args) == count:  # the usual call: all by position
            return dict(zip(positional, args, strict=True))
        if len(args) <= len(positional):
            arguments = dict(defaults)
            arguments.update(zip(positional, args, strict=False))
            arguments.update(kwargs)
            if len(arguments) == count and (
                not kwargs or all(k in params and k not in positional[: len(args)] for k in kwargs)
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
    return check_key(_compiled(spec)(arguments))


_compiled = functools.lru_cache(maxsize=1024)(compile_template)

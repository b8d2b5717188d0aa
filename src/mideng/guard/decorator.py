"""``@idempotent``: one decorator for ``def`` and ``async def`` (placeholder, run, mark done).

The scope is an explicit string: renaming a function must not silently open a new key space
in which every old operation runs again. The key is rendered from the call's bound arguments.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from mideng.core.callables import is_async
from mideng.core.keys import (
    KeySpec,
    check_scope,
    compile_template,
    fast_binder,
    plain_field,
    render,
    selector,
    template_fields,
)
from mideng.core.policy import Policy
from mideng.errors import ConfigurationError, KeyMissingError

if TYPE_CHECKING:
    from mideng.guard.driver import Driver

F = TypeVar("F", bound=Callable[..., Any])


def build(
    resolve: Callable[[], Driver],
    scope: str | Callable[..., Any],
    key: KeySpec,
    payload: Callable[..., Any] | None,
    options: dict[str, Any],
) -> Any:
    """The decorator (or, for the bare form, the decorated function)."""
    if callable(scope):
        # Bare form: the function's qualified name is the scope and all arguments are the key.
        # Convenient for scripts; services should name the scope so a rename keeps old keys.
        fn = scope
        return _decorate(resolve, f"{fn.__module__}.{fn.__qualname__}", None, None, {}, fn)
    check_scope(scope)
    if payload is not None and not callable(payload):
        raise ConfigurationError("payload= must be a callable over the call's arguments")

    def decorate(fn: F) -> F:
        return _decorate(resolve, scope, key, payload, options, fn)  # type: ignore[return-value]

    return decorate


def _decorate(
    resolve: Callable[[], Driver],
    scope: str,
    key: KeySpec,
    payload: Callable[..., Any] | None,
    options: dict[str, Any],
    fn: Callable[..., Any],
) -> Callable[..., Any]:
    signature = inspect.signature(fn)
    _check_template(key, signature, fn)
    binder = fast_binder(signature)
    key_of: Callable[[Any], Any]
    if callable(key):
        key_of = selector(key)
    elif isinstance(key, str):
        key_of = compile_template(key)
    else:
        key_of = lambda arguments: render(None, arguments)  # noqa: E731
    payload_of = selector(payload) if payload is not None else None
    cache: dict[int, tuple[Policy, Policy]] = {}
    at, count = _key_position(key, payload, signature)

    def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Driver, Any]:
        guard = resolve()
        if at >= 0 and not kwargs and len(args) == count:
            # The key is one argument, "{name}", and every argument came by position (the
            # usual decorated call): it is read where it stands, with no binding to make (no
            # payload, so nothing else reads the arguments).
            value = args[at]
            rendered = value if type(value) is str else format(value, "")
            body_payload = None
        else:
            arguments = binder(args, kwargs)
            rendered = key_of(arguments)  # Driver.prepare checks it
            body_payload = payload_of(arguments) if payload_of is not None else None
        policy = None  # no options of its own: the scope's policy, which prepare looks up
        if options:
            base = guard.policy(scope)
            cached = cache.get(id(guard))
            if cached is None or cached[0] is not base:
                cached = cache[id(guard)] = (base, base.merged(**options))
            policy = cached[1]
        return guard, guard.prepare(scope, rendered, fn, body_payload, policy)

    if is_async(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            guard, call = prepare(args, kwargs)
            return await guard.adrive(call, fn, args, kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            guard, call = prepare(args, kwargs)
            return guard.drive(call, fn, args, kwargs)

        wrapper = sync_wrapper
    wrapper.__mideng_scope__ = scope  # type: ignore[attr-defined]
    return wrapper


def _key_position(
    key: KeySpec, payload: Callable[..., Any] | None, signature: inspect.Signature
) -> tuple[int, int]:
    """Where a ``"{name}"`` key's argument sits when a call passes every parameter by
    position, and how many parameters that is; (-1, 0) when the key (or a payload) needs
    the bound arguments."""
    field = plain_field(key) if isinstance(key, str) and payload is None else None
    params = list(signature.parameters.values())
    if field is None or any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return -1, 0
    names = [p.name for p in params]
    return (names.index(field), len(names)) if field in names else (-1, 0)


def _check_template(key: KeySpec, signature: inspect.Signature, fn: Callable[..., Any]) -> None:
    """Fail at import time, not on the first payment, when a template names no argument."""
    if not isinstance(key, str):
        return
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    for root in template_fields(key):
        if root not in params:
            raise KeyMissingError(
                f"key template {key!r} reads {root!r}, which {fn.__qualname__} does not take "
                f"(parameters: {', '.join(params)})"
            )

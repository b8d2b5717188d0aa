"""OpenTelemetry spans for guarded calls: ``tracing.enable()``.

One ``mideng.call`` span per guarded call, current while it runs (so the body's own spans are
its children), and a ``mideng.store.<operation>`` child span per store call. Attributes (names
stable, listed in docs/observability.md): ``mideng.scope``, ``mideng.store``,
``mideng.request_id``, the key as ``mideng.key_hash`` (or ``mideng.key`` when asked),
``mideng.outcome``, ``mideng.fence``, ``mideng.replayed``, ``mideng.attempts``. An exception
out of the call or a store call is recorded on its span, whose status becomes ERROR.

Only ``opentelemetry-api`` is needed (the ``[otel]`` extra): spans go to whatever tracer
provider the application set up, or to the one passed here.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mideng.errors import ConfigurationError
from mideng.observability import watch

KEY_MODES = ("hash", "plain", "omit")


def _api() -> Any:
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigurationError(
            "mideng tracing needs opentelemetry-api: pip install 'mideng[otel]'"
        ) from exc
    return trace


def key_hash(scope: str, key: str) -> str:
    """The key as spans carry it by default: stable per (scope, key), not readable."""
    return hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()[:32]


class Spans:
    """The tracing side of the observer (watch.Tracing)."""

    def __init__(self, tracer: Any, key: str) -> None:
        self._trace = _api()
        self.tracer = tracer
        self.key = key

    def call(self, call: Any, store: str, name: str = "mideng.call") -> Any:
        attributes: dict[str, Any] = {"mideng.scope": call.scope, "mideng.store": store}
        if call.request_id is not None:
            attributes["mideng.request_id"] = call.request_id
        if self.key == "plain":
            attributes["mideng.key"] = call.key
        elif self.key == "hash":
            attributes["mideng.key_hash"] = key_hash(call.scope, call.key)
        return self.tracer.start_as_current_span(name, attributes=attributes)

    def store_call(self, operation: str, scope: str, store: str) -> Any:
        return self.tracer.start_as_current_span(
            f"mideng.store.{operation}", attributes={"mideng.scope": scope, "mideng.store": store}
        )

    def claimed(self, outcome: str, record: Any) -> None:
        span = self._trace.get_current_span()
        span.set_attributes(
            {
                "mideng.outcome": outcome,
                "mideng.fence": record.fence,
                "mideng.attempts": record.attempts,
                "mideng.replayed": outcome == "replay",
            }
        )

    def fail_open(self, step: str) -> None:
        span = self._trace.get_current_span()
        span.set_attributes({"mideng.outcome": "fail_open", "mideng.fail_open_step": step})


def enable(tracer_provider: Any = None, *, key: str = "hash") -> Spans:
    """Trace every guarded call in the process through ``tracer_provider`` (the global one
    when None). ``key``: ``"hash"`` (default; ``mideng.key_hash``), ``"plain"`` (the key
    itself as ``mideng.key``: only where keys carry nothing private) or ``"omit"``."""
    if key not in KEY_MODES:
        raise ConfigurationError(f"key= must be one of {', '.join(KEY_MODES)}, got {key!r}")
    trace = _api()
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("mideng")
    except PackageNotFoundError:  # run from a source tree
        own = ""
    spans = Spans(trace.get_tracer("mideng", own, tracer_provider=tracer_provider), key)
    watch.install(tracing=spans)
    return spans


def disable() -> None:
    watch.install(tracing=None)

"""OpenTelemetry spans for guarded calls: ``tracing.enable()``.

One ``mideng.call`` span per guarded call, current while it runs (so the body's own spans are
its children), and a ``mideng.store.<operation>`` child span per store call. Attributes (names
stable, listed in docs/observability.md): ``mideng.scope``, ``mideng.store``,
``mideng.request_id``, the key as ``mideng.key_hash`` (or ``mideng.key`` when asked),
``mideng.outcome``, ``mideng.fence``, ``mideng.replayed``, ``mideng.attempts``. An exception
out of the call or a store call is recorded on its span, whose status becomes ERROR.

The application's code runs inside these spans (a sampler, a span processor's ``on_start`` and
``on_end``, an exporter run as a span ends), at every step of a call: after its claim, between
its body and its completion, after the completion. What it raises is logged and the call goes
on (``Traced``, ``Spans.claimed``), never out of the call: there it would leave a claim held
after its body ran (a retry takes it over once the lease runs out and runs the body again) or
turn a replay or a success into an error.

Only ``opentelemetry-api`` is needed (the ``[otel]`` extra): spans go to whatever tracer
provider the application set up, or to the one passed here.
"""

from __future__ import annotations

import hashlib
from typing import Any

from mideng.errors import ConfigurationError
from mideng.observability import logs, observers

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


class Traced:
    """One span's ``with``: the tracer's ``start_as_current_span``, whose own failures are
    logged, never raised into the call it traces; the call's own exception passes through as
    it would."""

    __slots__ = ("attributes", "name", "span", "tracer")

    def __init__(self, tracer: Any, name: str, attributes: dict[str, Any]) -> None:
        self.tracer = tracer
        self.name = name
        self.attributes = attributes
        self.span: Any = None

    def __enter__(self) -> Any:
        try:
            self.span = self.tracer.start_as_current_span(self.name, attributes=self.attributes)
            return self.span.__enter__()
        except Exception as exc:  # started untraced: no span of its own, none to end
            self.span = None
            logs.span_failed(self.name, "start", exc)
            return _api().INVALID_SPAN

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        span, self.span = self.span, None
        if span is None:
            return
        try:
            # The call's own exception comes back as False (use_span records it and
            # re-raises it, which the context manager answers False to); a span that ends
            # badly raises its own, after the context was detached.
            span.__exit__(kind, exc, tb)
        except Exception as failed:
            if failed is not exc:
                logs.span_failed(self.name, "end", failed)


class Spans:
    """The tracing side of the observer (observers.Tracing)."""

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
        return Traced(self.tracer, name, attributes)

    def store_call(self, operation: str, scope: str, store: str) -> Any:
        return Traced(
            self.tracer,
            f"mideng.store.{operation}",
            {"mideng.scope": scope, "mideng.store": store},
        )

    def claimed(self, outcome: str, record: Any) -> None:
        # Between the claim and the body (or the replay): what the span raises is logged.
        span = self._trace.get_current_span()
        try:
            span.set_attributes(
                {
                    "mideng.outcome": outcome,
                    "mideng.fence": record.fence,
                    "mideng.attempts": record.attempts,
                    "mideng.replayed": outcome == "replay",
                }
            )
        except Exception as exc:
            logs.span_failed("mideng.call", "attributes", exc)

    def fail_open(self, step: str) -> None:
        span = self._trace.get_current_span()
        try:  # the body has run (or runs) unguarded: the span's failure is only logged
            span.set_attributes({"mideng.outcome": "fail_open", "mideng.fail_open_step": step})
        except Exception as exc:
            logs.span_failed("mideng.call", "attributes", exc)


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
    observers.install(tracing=spans)
    return spans


def disable() -> None:
    observers.install(tracing=None)

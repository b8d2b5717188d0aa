"""An in-memory tracer provider written against opentelemetry-api alone (no SDK): every span
it makes is kept, finished or not, with its parent, attributes, status and exceptions."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags


class RecordedSpan(Span):
    def __init__(self, name: str, parent: SpanContext | None, attributes: Mapping[str, Any]):
        trace_id = parent.trace_id if parent is not None else random.getrandbits(128)
        self.name = name
        self.parent = parent
        self.context = SpanContext(
            trace_id, random.getrandbits(64), is_remote=False, trace_flags=TraceFlags(1)
        )
        self.attributes: dict[str, Any] = dict(attributes)
        self.status = Status(StatusCode.UNSET)
        self.exceptions: list[BaseException] = []
        self.ended = False

    def end(self, end_time: int | None = None) -> None:
        assert not self.ended, f"{self.name} ended twice"
        self.ended = True

    def get_span_context(self) -> SpanContext:
        return self.context

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.attributes.update(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.attributes[key] = value

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        pass

    def update_name(self, name: str) -> None:
        self.name = name

    def is_recording(self) -> bool:
        return not self.ended

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self.status = status if isinstance(status, Status) else Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.exceptions.append(exception)


class MemoryTracer(trace.Tracer):
    def __init__(self, spans: list[RecordedSpan], lock: threading.Lock) -> None:
        self.spans = spans
        self.lock = lock

    def make(
        self, name: str, parent: SpanContext | None, attributes: Mapping[str, Any]
    ) -> RecordedSpan:
        return RecordedSpan(name, parent, attributes)

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> Span:
        parent = trace.get_current_span(context).get_span_context()
        span = self.make(name, parent if parent.is_valid else None, attributes or {})
        with self.lock:
            self.spans.append(span)
        return span

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Sequence[trace.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes)
        with trace.use_span(span, end_on_exit, record_exception, set_status_on_exception) as s:
            yield s


class MemoryTracerProvider(trace.TracerProvider):
    def __init__(self) -> None:
        self.spans: list[RecordedSpan] = []
        self._lock = threading.Lock()

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        return MemoryTracer(self.spans, self._lock)

    def named(self, name: str) -> list[RecordedSpan]:
        return [s for s in self.spans if s.name == name]


class RefusingTracerProvider(MemoryTracerProvider):
    """A provider whose span named ``target[0]`` fails once at ``target[1]``: ``"start"`` (a
    sampler or span processor's ``on_start`` raising), ``"end"`` (a processor's ``on_end``, or
    an exporter it runs, raising as the span ends) or ``"attributes"`` (setting attributes on
    it). ``refused`` counts the failures; ``target`` None fails nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.target: tuple[str, str] | None = None
        self.refused = 0

    def refuse(self, name: str, phase: str) -> None:
        if self.target == (name, phase) and not self.refused:
            self.refused += 1
            raise RuntimeError(f"{name} {phase} failed (injected)")

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace.Tracer:
        return RefusingTracer(self)


class RefusingSpan(RecordedSpan):
    provider: RefusingTracerProvider

    def end(self, end_time: int | None = None) -> None:
        super().end(end_time)
        self.provider.refuse(self.name, "end")

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.provider.refuse(self.name, "attributes")
        super().set_attributes(attributes)


class RefusingTracer(MemoryTracer):
    def __init__(self, provider: RefusingTracerProvider) -> None:
        super().__init__(provider.spans, provider._lock)
        self.provider = provider

    def make(
        self, name: str, parent: SpanContext | None, attributes: Mapping[str, Any]
    ) -> RecordedSpan:
        self.provider.refuse(name, "start")
        span = RefusingSpan(name, parent, attributes)
        span.provider = self.provider
        return span

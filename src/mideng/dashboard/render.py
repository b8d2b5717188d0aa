"""The pages as HTML: Jinja2 templates from the package, autoescaped, with the few filters
they share. Everything a store or a payload holds reaches the page escaped, and previews pass
through the configured redaction first."""

from __future__ import annotations

import datetime
import functools
from typing import Any

from mideng.dashboard.settings import Redact


@functools.cache
def environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("mideng.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["age"] = age
    env.filters["when"] = when
    env.filters["text"] = text
    return env


def render(template: str, values: dict[str, Any], redact: Redact) -> bytes:
    from mideng.dashboard.pages import preview

    def shown(value: Any) -> str | None:
        return None if value is None else redact(value if isinstance(value, str) else text(value))

    page = environment().get_template(template)
    html: str = page.render(**values, preview=lambda r: shown(preview(r)), redact=shown)
    return html.encode()


def age(seconds: float | None) -> str:
    """A duration as an operator reads it: 42 s, 7 min, 3.5 h, 2.0 d."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )


def text(value: Any) -> str:
    """Stored bytes as text (invalid UTF-8 shown replaced, never raised)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)

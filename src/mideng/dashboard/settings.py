"""What a dashboard is given: its store, the outbox's database, who may see it, what it may do.

Safe by default: actions are off, only loopback names are accepted in the Host header, and a
dashboard that would listen beyond loopback must be given a way to authenticate (a token, or
a callable that names the operator from a request's headers).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mideng.errors import ConfigurationError

#: Host header names a dashboard answers by default: loopback only.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")

#: Payload fields hidden by default: a JSON member whose name says it holds a secret.
SECRET_FIELDS = re.compile(
    r'("(?:[^"]*(?:password|passwd|secret|token|authorization|api[_-]?key|card|cvv|iban)[^"]*)"'
    r'\s*:\s*)("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*)',
    re.IGNORECASE,
)

#: Who a request is from, given its headers (lower-case names): a name, or None (refused).
Authenticate = Callable[[Mapping[str, str]], "str | None"]
#: How a payload preview is shown: the text, as the operator may see it.
Redact = Callable[[str], str]


def redact_patterns(patterns: Sequence[str | re.Pattern[str]]) -> Redact:
    """A redaction that replaces every match of each pattern with ``***`` (a pattern with a
    group keeps the text of its first group, e.g. a field's name)."""
    compiled = [re.compile(p) if isinstance(p, str) else p for p in patterns]

    def redact(text: str) -> str:
        for pattern in compiled:
            text = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + '"***"', text)
        return text

    return redact


default_redact = redact_patterns([SECRET_FIELDS])


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


@dataclass
class Settings:
    """A dashboard's configuration (``mideng.dashboard.app`` and the Django include)."""

    store: Any
    db: Any = None
    outbox_table: str = "mideng_outbox"
    actions: bool = False
    token: str | None = None
    authenticate: Authenticate | None = None
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES
    redact: Redact | Sequence[str | re.Pattern[str]] = field(default=default_redact)
    page_size: int = 50
    title: str = "mideng"
    #: ``redact`` as a callable.
    redaction: Redact = field(init=False)

    def __post_init__(self) -> None:
        given = self.redact
        self.redaction = given if callable(given) else redact_patterns(given)
        if self.token is not None and len(self.token) < 16:
            raise ConfigurationError("a dashboard token has at least 16 characters")
        if not 1 <= self.page_size <= 500:
            raise ConfigurationError("page_size is between 1 and 500")

    @property
    def authenticated(self) -> bool:
        """Whether requests must say who they are from (a token or a callable)."""
        return self.token is not None or self.authenticate is not None

    def check_bind(self, host: str) -> None:
        """Refuse to listen beyond loopback without authentication."""
        if not is_loopback(host) and not self.authenticated:
            raise ConfigurationError(
                f"refusing to listen on {host} without authentication: give a --token "
                "(or listen on 127.0.0.1)"
            )

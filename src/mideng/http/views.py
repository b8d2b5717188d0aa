"""What the synchronous frameworks (Django, Flask) share: the per-view decorators (the
anti-resubmit token and the debounce gate around one view), written once over what each
framework reads from a view's call and how it answers, and the holding of a streamed response.

A framework is a ``SyncViews`` subclass; its module hands out the bound decorators
(``require_token = _Views().require_token``).
"""

from __future__ import annotations

import functools
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

from mideng.http.core import Incoming, StoredResponse
from mideng.http.debounce import DebounceGate, Debouncer
from mideng.http.resubmit import TOKEN_FIELD, TOKEN_HEADER, BizKey, TokenGate
from mideng.tokens import TokenService


class _Response(Protocol):
    @property
    def status_code(self) -> int: ...


#: What a framework's view returns (Django: an HttpResponseBase; Flask: anything it makes into a
#: response).
V = TypeVar("V", bound=_Response)


def held(body: Iterable[bytes], limit: int) -> list[bytes] | Iterator[bytes]:
    """A streamed response body read whole while it fits in ``limit`` bytes: its chunks. Past
    that, the body to pass through in its place: the chunks read, then the rest unread."""
    chunks: list[bytes] = []
    size = 0
    rest = iter(body)
    for chunk in rest:
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return itertools.chain(chunks, rest)
    return chunks


class SyncViews(ABC, Generic[V]):
    """What the decorators need from a framework whose views return ``V``; each reading takes
    the view's positional arguments (a Django view's request is its first)."""

    @abstractmethod
    def incoming(self, args: tuple[Any, ...]) -> Incoming:
        """The request as the core sees it."""

    @abstractmethod
    def route(self, args: tuple[Any, ...]) -> str | None:
        """The template of the route that matched (Django's URL pattern, Flask's URL rule)."""

    @abstractmethod
    def form(self, args: tuple[Any, ...]) -> Mapping[str, Any] | None:
        """The submitted form fields, where a token may travel."""

    @abstractmethod
    def native(self, response: StoredResponse) -> V:
        """A refusal as the framework's response."""

    @abstractmethod
    def respond(self, returned: V) -> V:
        """What the view returned, as its response."""

    def require_token(
        self,
        service: TokenService,
        biz_key: BizKey,
        *,
        header: str = TOKEN_HEADER,
        field: str = TOKEN_FIELD,
    ) -> Callable[[Callable[..., V]], Callable[..., V]]:
        """Consume the token (header or form field) before the view; restore it if the view
        raises or answers 5xx, so the user can submit again."""
        gate = TokenGate(service, biz_key, header, field)

        def decorate(view: Callable[..., V]) -> Callable[..., V]:
            @functools.wraps(view)
            def guarded(*args: Any, **kwargs: Any) -> V:
                form = self.form(args)  # read before the token is consumed: it may refuse
                admitted = gate.admit(self.incoming(args), form)
                if isinstance(admitted, StoredResponse):
                    return self.native(admitted)
                return gate.run_admitted(
                    admitted,
                    lambda: self.respond(view(*args, **kwargs)),
                    lambda response: response.status_code,
                )

            return guarded

        return decorate

    def debounce(
        self,
        debouncer: Debouncer,
        principal: Callable[[Incoming], str | None],
        *,
        operation: str | None = None,
    ) -> Callable[[Callable[..., V]], Callable[..., V]]:
        """Refuse (429) a principal's second call within the window; ``operation`` defaults to
        the method and the template of the route (Django's URL pattern, Flask's URL rule)."""
        gate = DebounceGate(debouncer, principal, operation)

        def decorate(view: Callable[..., V]) -> Callable[..., V]:
            @functools.wraps(view)
            def guarded(*args: Any, **kwargs: Any) -> V:
                refusal = gate.check(self.incoming(args), self.route(args))
                if refusal is not None:
                    return self.native(refusal)
                return view(*args, **kwargs)

            return guarded

        return decorate

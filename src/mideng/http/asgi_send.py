"""Sending a response over ASGI: its start (the headers the middleware sets added, the
request id unless the response carries one) and its body, in one pass per reply."""

from __future__ import annotations

from mideng.http.asgi_ids import REQUEST_ID_BYTES, Message, Send
from mideng.http.core import REQUEST_ID_HEADER, StoredResponse

Encoded = tuple[frozenset[str], tuple[tuple[bytes, bytes], ...], bool]
_NOTHING_ADDED: Encoded = (frozenset(), (), False)

# Each ``added`` that send_response was given: its names, its fields as bytes, whether it sets
# the request id. A server sends a few (the retention header of each policy); made per reply,
# they were a dict and two encodings per field on every request.
_ADDED: dict[tuple[tuple[str, str], ...], Encoded] = {}
_ADDED_KEPT = 64


async def send_response(
    send: Send,
    response: StoredResponse,
    tag: bytes | None = None,
    added: tuple[tuple[str, str], ...] = (),
) -> None:
    """Send ``response`` with the headers ``added`` set; ``tag``: the request id, set unless
    the response carries one."""
    start, body = messages(response, tag, added)
    await send(start)
    await send(body)


def messages(
    response: StoredResponse, tag: bytes | None = None, added: tuple[tuple[str, str], ...] = ()
) -> tuple[Message, Message]:
    """``send_response``'s two messages: the start and the whole body."""
    names, extra, sets_id = _encoded(added) if added else _NOTHING_ADDED
    if sets_id:
        tag = None
    headers = []
    for n, v in response.headers:
        if n in names:
            continue
        if n == REQUEST_ID_HEADER:
            tag = None
        headers.append((n.encode("latin-1"), v.encode("latin-1")))
    headers += extra
    if tag is not None:
        headers.append((REQUEST_ID_BYTES, tag))
    return (
        {"type": "http.response.start", "status": response.status, "headers": headers},
        {"type": "http.response.body", "body": response.body, "more_body": False},
    )


def _encoded(added: tuple[tuple[str, str], ...]) -> Encoded:
    """The names of ``added``, its fields as bytes, and whether it sets the request id;
    remembered per value (a list is not remembered)."""
    known = _ADDED.get(added) if type(added) is tuple else None
    if known is None:
        known = (
            frozenset([n for n, _ in added]),
            tuple([(n.encode("latin-1"), v.encode("latin-1")) for n, v in added]),
            any(n == REQUEST_ID_HEADER for n, _ in added),
        )
        if type(added) is tuple:
            if len(_ADDED) >= _ADDED_KEPT:
                _ADDED.clear()
            _ADDED[added] = known
    return known

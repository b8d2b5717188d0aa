"""What the Redis store sends and what the replies mean, written once for sync and async.

Each method returns a Command: what to send (mostly one Lua operation, with its key and
arguments) and the function that turns the reply into the store's answer. RedisStore runs Commands
with a redis-py client or with a redis.asyncio one; nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from mideng.core.audit import AuditEntry, AuditRow
from mideng.core.record import (
    Claim,
    ClaimRequest,
    ExpiryPolicy,
    Outcome,
    Record,
    Resolution,
    Ticket,
)
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.stores.base import check_resolvable, is_unresolved, lease_lost
from mideng.stores.batch import Completed, Completion
from mideng.stores.redis.rows import (
    claims,
    completions,
    decode,
    instant,
    joined,
    opt,
    opt_bytes,
    put_args,
    row,
    seconds,
)
from mideng.stores.redis.scripts import Script, Scripts

T = TypeVar("T")
_GLOB = re.compile(r"([*?\[\]\\])")
# A claim's reply code -> Outcome, as numbered in claim.lua.
OUTCOMES = (
    Outcome.ACQUIRED,
    Outcome.REPLAY,
    Outcome.IN_PROGRESS,
    Outcome.MISMATCH,
    Outcome.UNRESOLVED,
)


class Command(Generic[T]):
    """One command for Redis and what its reply means.

    With a ``script``, ``args`` are its key and arguments, and the runner calls it by
    whichever form the server has (FCALL or EVALSHA); without, ``args`` are the command.
    """

    __slots__ = ("args", "finish", "script")

    def __init__(
        self,
        args: tuple[Any, ...],
        finish: Callable[[Any], T],
        script: Script | None = None,
    ) -> None:
        self.args = args
        self.finish = finish
        self.script = script


def _ok(reply: Any) -> None:
    return None


def _time(reply: Any) -> float:
    seconds, micros = reply
    return int(seconds) + int(micros) / 1e6


def _audit_rows(reply: Any) -> list[AuditRow]:
    rows = []
    for raw, values in reply:
        ident = raw.decode() if isinstance(raw, bytes) else str(raw)
        # A flat list of names and values; redis-py's cluster client hands a dict.
        pairs = (
            values.items()
            if isinstance(values, dict)
            else zip(values[::2], values[1::2], strict=True)
        )
        got = {_str(name): _str(value) for name, value in pairs}
        at = int(ident.split("-", 1)[0]) / 1000
        rows.append(
            AuditRow(
                ident,
                at,
                got.get("operator", ""),
                got.get("action", ""),
                got.get("target", ""),
                got.get("before", ""),
                got.get("after", ""),
            )
        )
    return rows


def _str(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _escape(scope: str) -> str:
    # The first unescaped ':' ends the scope, so ("a:b", "c") and ("a", "b:c") stay apart.
    if ":" in scope or "\\" in scope:
        scope = scope.replace("\\", "\\\\").replace(":", "\\:")
    if scope[:1] == "}":
        # "{}" is an empty hash tag, for which Redis hashes the whole key name: the keys
        # beside the record (steps, token, window) would land in other cluster slots.
        return "\\" + scope
    return scope


class Commands:
    """The commands of one key prefix.

    A record is one hash at ``{prefix}:{scope:key}`` (a long result or error in pieces inside
    it, see rows.INLINE); tokens and debounce windows sit beside it
    at ``{prefix}:token:{scope:key}`` and ``{prefix}:hit:{scope:key}``. The braces are a hash
    tag: everything about one (scope, key) lives in one cluster slot.
    """

    def __init__(self, prefix: str, scripts: Scripts) -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ConfigurationError(f"key prefix must be non-empty and brace-free: {prefix!r}")
        self.prefix = prefix
        self.scripts = scripts

    def key(self, scope: str, key: str) -> str:
        return f"{self.prefix}:{{{_escape(scope)}:{key}}}"

    def _names(self, scope: str, pairs: list[tuple[str, str]]) -> list[str]:
        """``key(s, k)`` for each pair, the usual scope's part made once: a batch's keys
        mostly share one scope."""
        head = f"{self.prefix}:{{{_escape(scope)}:"
        return [head + k + "}" if s == scope else self.key(s, k) for s, k in pairs]

    def identity(self, name: bytes) -> tuple[str, str] | None:
        """(scope, key) back from a record's Redis key; None if it is not one of ours."""
        text = name.decode()
        head = self.prefix + ":{"
        if not text.startswith(head) or not text.endswith("}"):
            return None
        inner, i = text[len(head) : -1], 0
        scope: list[str] = []
        while i < len(inner):
            ch = inner[i]
            if ch == ":":
                return "".join(scope), inner[i + 1 :]
            if ch == "\\":
                i += 1
                ch = inner[i : i + 1]
            scope.append(ch)
            i += 1
        return None

    def side_key(self, kind: str, scope: str, key: str) -> str:
        return f"{self.prefix}:{kind}:{{{_escape(scope)}:{key}}}"

    def pattern(self, scope: str | None) -> str:
        """SCAN MATCH for the records of one scope, or of all."""
        head = _GLOB.sub(r"\\\1", self.prefix) + ":{"
        return head + "*" if scope is None else head + _GLOB.sub(r"\\\1", _escape(scope)) + ":*"

    def script(
        self, script: Script, key: str, args: tuple[Any, ...], finish: Callable[[Any], T]
    ) -> Command[T]:
        return Command((key, *args), finish, script)

    def claim(self, req: ClaimRequest) -> Command[Claim]:
        scope, key = req.scope, req.key

        def finish(reply: bytes) -> Claim:
            code, _, record = decode(scope, key, reply)
            assert record is not None
            return Claim(OUTCOMES[code], record)

        return self.script(
            self.scripts.claim,
            self.key(scope, key),
            (
                req.owner,
                seconds(req.lease),
                seconds(req.ttl),
                opt(req.fingerprint),
                "u" if req.on_expiry is ExpiryPolicy.UNKNOWN else "t",
                opt(req.request_id),
                str(req.max_attempts),
            ),
            finish,
        )

    def claim_many(self, reqs: Sequence[ClaimRequest]) -> Command[list[Claim]]:
        """One claim_many.lua call over ``reqs``: distinct keys that share their terms
        (lease, ttl, on_expiry, max_attempts; the first request's are sent) and, on a
        cluster, one slot."""
        first = reqs[0]
        args: list[Any] = [len(reqs)]
        args += self._names(first.scope, [(r.scope, r.key) for r in reqs])
        args += (
            seconds(first.lease),
            seconds(first.ttl),
            "u" if first.on_expiry is ExpiryPolicy.UNKNOWN else "t",
            str(first.max_attempts),
        )
        for r in reqs:
            args += (r.owner, opt(r.fingerprint), opt(r.request_id))

        def finish(reply: bytes) -> list[Claim]:
            return [Claim(OUTCOMES[code], record) for code, record in claims(reqs, reply)]

        return Command(tuple(args), finish, self.scripts.claim_many)

    def complete_many(self, items: Sequence[Completion]) -> Command[list[Completed]]:
        """One complete_many.lua call over ``items``: distinct keys that share their codec
        and ttl (the first item's are sent) and, on a cluster, one slot. A ticket that lost
        its key answers its LeaseLostError in place."""
        first = items[0]
        args: list[Any] = [len(items)]
        args += self._names(first.ticket.scope, [(i.ticket.scope, i.ticket.key) for i in items])
        args += (first.codec, seconds(first.ttl))
        for i in items:
            args += (i.ticket.owner, i.ticket.fence, i.result)

        def finish(reply: bytes) -> list[Completed]:
            return [
                record if done and record is not None else lease_lost(item.ticket, record)
                for item, (done, record) in zip(items, completions(items, reply), strict=True)
            ]

        return Command(tuple(args), finish, self.scripts.complete_many)

    def fenced(
        self,
        script: Script,
        ticket: Ticket,
        args: tuple[Any, ...],
        result: bytes | None = None,
        error: bytes | None = None,
    ) -> Command[Record]:
        def finish(reply: bytes) -> Record:
            code, _, record = decode(ticket.scope, ticket.key, reply, result, error)
            if code == 0 or record is None:
                raise lease_lost(ticket, record)
            return record

        return self.script(
            script, self.key(ticket.scope, ticket.key), (ticket.owner, ticket.fence, *args), finish
        )

    def complete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Command[Record]:
        return self.fenced(
            self.scripts.complete, ticket, (result, codec, seconds(ttl)), result=result
        )

    def fail(self, ticket: Ticket, error: bytes, ttl: float | None) -> Command[Record]:
        return self.fenced(self.scripts.fail, ticket, (error, seconds(ttl)), error=error)

    def release(self, ticket: Ticket) -> Command[None]:
        def finish(reply: bytes) -> None:
            code, _, record = decode(ticket.scope, ticket.key, reply)
            if code == 0:
                raise lease_lost(ticket, record)

        return self.script(
            self.scripts.release,
            self.key(ticket.scope, ticket.key),
            (ticket.owner, ticket.fence),
            finish,
        )

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Command[Record]:
        return self.fenced(self.scripts.heartbeat, ticket, (seconds(lease), seconds(ttl)))

    def get(self, scope: str, key: str) -> Command[Record | None]:
        def finish(reply: bytes) -> Record | None:
            return decode(scope, key, reply)[2]

        return self.script(self.scripts.get, self.key(scope, key), (), finish)

    def now(self) -> Command[float]:
        """The server's clock (TIME: seconds and microseconds), the one its scripts use."""
        return Command(("TIME",), _time)

    @property
    def audit(self) -> str:
        """The audit stream: no record's name, each of which has a hash tag."""
        return f"{self.prefix}:audit"

    def add_audit(self, entry: AuditEntry) -> Command[None]:
        fields = (
            ("operator", entry.operator),
            ("action", entry.action),
            ("target", entry.target),
            ("before", entry.before),
            ("after", entry.after),
        )
        return Command(("XADD", self.audit, "*", *(v for pair in fields for v in pair)), _ok)

    def audit_rows(self, before: str | None, count: int) -> Command[list[AuditRow]]:
        """The ``count`` entries before the stream id ``before`` (None: the newest), newest
        first; the time of each is its id's (the server's clock when it was added)."""
        return Command(
            ("XREVRANGE", self.audit, "+" if before is None else f"({before}", "-", "COUNT", count),
            _audit_rows,
        )

    def forget(self, scope: str, key: str) -> Command[bool]:
        return Command(("DEL", self.key(scope, key)), bool)

    def resolve(self, scope: str, key: str, how: Resolution) -> Command[Record]:
        def finish(reply: bytes) -> Record:
            code, now, current = decode(scope, key, reply)
            if code == 0 or current is None:
                check_resolvable(scope, key, current, instant(now), how.seen)
                raise IdempotencyError(f"{scope}:{key} could not be resolved")
            return current

        seen = ("", "") if how.seen is None else (how.seen.status.value, how.seen.fence)
        return self.script(
            self.scripts.resolve,
            self.key(scope, key),
            (
                opt_bytes(how.result),
                opt(how.codec),
                "2" if how.evict else "1" if how.failed else "0",
                seconds(how.ttl),
                *seen,
            ),
            finish,
        )

    def put(self, record: Record) -> Command[bool]:
        return self.script(
            self.scripts.put,
            self.key(record.scope, record.key),
            tuple(put_args(record)),
            lambda n: n == 1,
        )

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> Command[None]:
        ms = max(1, math.ceil(ttl * 1000))
        return Command(("SET", self.side_key("token", scope, key), token, "PX", ms), _ok)

    def take_token(self, scope: str, key: str, token: str) -> Command[bool]:
        return self.script(
            self.scripts.take_token,
            self.side_key("token", scope, key),
            (token,),
            lambda n: n == 1,
        )

    def hit(self, scope: str, key: str, window: float, limit: int) -> Command[float | None]:
        if limit < 1:
            raise ConfigurationError(f"hit limit must be at least 1: {limit!r}")
        return self.script(
            self.scripts.hit,
            self.side_key("hit", scope, key),
            (seconds(window), limit),
            lambda v: None if v is None else float(v),
        )


def stuck(
    commands: Commands,
    names: list[bytes],
    values: list[Any],
    scope: str | None,
    now: float,
    limit: int,
) -> list[Record]:
    """The unresolved records among HGETALLs of records (``steps.fields``), oldest first."""
    found = []
    for name, fields in zip(names, values, strict=True):
        identity = commands.identity(name)
        record = None if identity is None else row(*identity, joined(fields))
        if record is None or (scope is not None and record.scope != scope):
            continue
        if is_unresolved(record, now):
            found.append(record)
    return sorted(found, key=lambda r: r.updated_at)[:limit]

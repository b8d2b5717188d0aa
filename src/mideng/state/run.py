"""Running a primitive on the caller's connection: the only code written twice, sync and async.

Through mideng.db.site, with no savepoint: inside the caller's open transaction the statement
is one more of theirs (it commits or rolls back with their work, and a duplicate or a 0-row
answer leaves that transaction as it was); with none open (autocommit use) the site begins
one, commits it when the primitive answers and rolls it back when it raises. A Session
(sync or async) with ``autoflush`` and pending ORM changes is flushed first, as its own
``execute`` would be, so the statement sees those rows; its transaction is then the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mideng.db.site import AsyncSite, Site
from mideng.db.statements import Op, T
from mideng.observability import logs

#: What a primitive hands the runner: given the statement kind and the connection's dialect
#: (to compile its statements the first time), the operation to drive.
Make = Callable[[str, Any], Op[T]]


def _pending(session: Any) -> bool:
    return bool(session.new or session.dirty or session.deleted)


def run(conn: Any, make: Make[T]) -> T:
    site = Site(conn)
    if site.session and conn.autoflush and _pending(conn):
        conn.flush()  # as Session.execute does: the statement sees the ORM's pending rows
        site = Site(conn)  # the flush began the session's transaction: now the caller's
    kind = site.open(savepoint=False)
    try:
        answer = site.run(make(kind, site.connection.dialect))
    except BaseException:
        try:
            site.rollback(whole=False)  # the site's own transaction; never the caller's
        except Exception as exc:
            logs.statement_rollback_failed(exc)
        raise
    site.commit()
    return answer


async def arun(conn: Any, make: Make[T]) -> T:
    site = AsyncSite(conn)
    if site.session and conn.sync_session.autoflush and _pending(conn):
        await conn.flush()
        site = AsyncSite(conn)
    kind = await site.open(savepoint=False)
    try:
        answer = await site.run(make(kind, site.connection.dialect))
    except BaseException:
        try:
            await site.rollback(whole=False)
        except Exception as exc:
            logs.statement_rollback_failed(exc)
        raise
    await site.commit()
    return answer

"""The key layout's version, per key prefix: ``{prefix}:layout`` holds it.

What a Redis store writes under a prefix (a record's hash and its fields, the steps hash, the
token and window keys beside it) is its key layout. A store reads the prefix's layout once,
with its first connection, in one round trip that also writes it where none is kept yet (a
prefix used before layouts were written holds layout 1). A layout newer than this mideng
knows is refused, naming the release that wrote it: an older release must not read or write
keys whose meaning changed.

Layout 2 cuts a result or error longer than ``rows.INLINE`` bytes into pieces inside the
record's hash, named by its ``rows.CUT`` field (the field itself holding ``rows.IN_PIECES``,
which a layout-1 process still running fails to decode), so the hash stays a listpack whatever
the result's size (up to ``rows.PIECES`` pieces), and writes times as whole microseconds
(``rows.instant``). A layout-1 record is a layout-2 record with nothing cut and its times in
seconds, so a prefix in layout 1 moves to layout 2 as it is read: its key is rewritten to 2
(from then on a layout-1 release refuses the prefix instead of replaying a result it cannot
see), its records are read and replayed as they are, and each is written in layout 2 by the
next operation that changes it (a hash holding a long value whole is written again whole,
as a listpack).
"""

from __future__ import annotations

from mideng.errors import SchemaVersionError
from mideng.stores.redis.commands import Command
from mideng.version import __version__

#: The layout this mideng reads and writes.
LAYOUT = 2

#: The older layouts this mideng reads (and moves to LAYOUT).
READS = ("1",)

# Read the prefix's layout, writing ours where there is none or it is one we move from (the
# ARGV after ours): one round trip either way. Answers what was held.
_READ_OR_WRITE = (
    "local held = redis.call('GET', KEYS[1]) "
    "if held then "
    "  local number = string.match(held, '^[^ ]*') "
    "  for i = 2, #ARGV do "
    "    if number == ARGV[i] then redis.call('SET', KEYS[1], ARGV[1]) end "
    "  end "
    "  return held "
    "end "
    "redis.call('SET', KEYS[1], ARGV[1]) "
    "return false"
)


def key(prefix: str) -> str:
    return f"{prefix}:layout"


def check(prefix: str) -> Command[None]:
    """The command that reads (or first writes) ``prefix``'s layout, moves an older one this
    mideng reads to its own, and refuses another."""
    mine = f"{LAYOUT} {__version__}"

    def judged(reply: bytes | str | None) -> None:
        if reply is None:
            return  # ours is written now
        held = reply.decode() if isinstance(reply, bytes) else str(reply)
        number, _, release = held.partition(" ")
        if number == str(LAYOUT) or number in READS:
            return
        if number.isdigit() and int(number) > LAYOUT:
            raise SchemaVersionError(
                f"the Redis keys under {prefix!r} are in key layout {number}, newer than this "
                f"mideng ({__version__}) knows (up to {LAYOUT}): install mideng "
                f"{release or 'of that layout'} or later"
            )
        raise SchemaVersionError(
            f"the Redis key {key(prefix)!r} holds {held!r}, not a key layout this mideng "
            f"({__version__}) reads (it writes layout {LAYOUT})"
        )

    return Command(("EVAL", _READ_OR_WRITE, 1, key(prefix), mine, *READS), judged)

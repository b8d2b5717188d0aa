"""The key layout's version, per key prefix: ``{prefix}:layout`` holds it.

What a Redis store writes under a prefix (a record's hash and its fields, the steps hash, the
token and window keys beside it) is its key layout. A store reads the prefix's layout once,
with its first connection, in one round trip that also writes it where none is kept yet (a
prefix used before layouts were written holds today's, layout 1). A layout newer than this
mideng knows is refused, naming the release that wrote it: an older release must not read or
write keys whose meaning changed. No command moves a prefix from one layout to another yet;
one will come with the first layout after this one.
"""

from __future__ import annotations

from mideng.errors import SchemaVersionError
from mideng.stores.redis.commands import Command
from mideng.version import __version__

#: The layout this mideng reads and writes.
LAYOUT = 1

# Read the prefix's layout, writing ours where there is none: one round trip either way.
_READ_OR_WRITE = (
    "local held = redis.call('GET', KEYS[1]) "
    "if held then return held end "
    "redis.call('SET', KEYS[1], ARGV[1]) "
    "return false"
)


def key(prefix: str) -> str:
    return f"{prefix}:layout"


def check(prefix: str) -> Command[None]:
    """The command that reads (or first writes) ``prefix``'s layout and refuses another."""
    mine = f"{LAYOUT} {__version__}"

    def judged(reply: bytes | str | None) -> None:
        if reply is None:
            return  # ours is written now
        held = reply.decode() if isinstance(reply, bytes) else str(reply)
        number, _, release = held.partition(" ")
        if number == str(LAYOUT):
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

    return Command(("EVAL", _READ_OR_WRITE, 1, key(prefix), mine), judged)

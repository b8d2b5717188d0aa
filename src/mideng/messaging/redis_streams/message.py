"""Redis Streams' messages: an entry read as a ``Message`` (one at a time from redis-py's
reply, or many from one compact reply), and the entry a dead letter leaves.

An entry's ``body`` field is the message body and every other field a header;
``Message.id`` is the entry id, ``raw`` the entry id and its fields as redis-py gives them.

New entries are read in one compact reply: XREADGROUP run by a script on the server.
redis-py parses an XREADGROUP reply in Python, a line at a time: an entry's id, its field
count and each field and value cost a readline each, which is most of what a plain consume
loop spends on a message (18-22 µs here). The script below runs the same XREADGROUP (``>``,
COUNT, no BLOCK: scripts may not block) and answers one bulk string, each entry a field count
and length-prefixed strings, which ``entries`` cuts with ``struct`` and slices. The group's
state changes exactly as the command's would: the entries are delivered to the member and
added to its pending list.

The reply is bytes, cut as bytes: the client must not decode replies (``decode_responses``),
which ``consume`` sees to for its own client.
"""

from __future__ import annotations

import struct
from typing import Any

from mideng.messaging.headers import decoded
from mideng.messaging.message import Message

#: The field that holds the body; every other field of an entry is a header.
BODY = b"body"


def id_text(entry_id: bytes) -> str:
    return entry_id.decode("ascii")  # an entry id is two numbers and a dash


def message_of(entry_id: bytes, fields: dict[bytes, bytes], attempt: int | None = None) -> Message:
    """The Message for one entry: field ``body`` is the body, the others are headers
    (``headers.decoded``: an entry's fields are bytes, and a header's bytes stay its own)."""
    body = b""
    headers: dict[str, str] = {}
    for name, value in fields.items():
        if name == BODY:
            body = value
        else:
            headers[decoded(name)] = decoded(value)
    return Message(body, headers, id_text(entry_id), attempt, (entry_id, fields))


def dead_fields(message: Message, reason: str) -> dict[bytes, Any]:
    """The fields of the entry a dead letter leaves in the dead stream: the entry's own, byte
    for byte (its headers' text has escapes where a field was not UTF-8), the reason, and the
    id it came from."""
    _entry_id, fields = message.raw
    return {**fields, b"dead-reason": reason, b"dead-from": message.id}


# -- new entries in one compact reply ----------------------------------------------------------

# KEYS[1] the stream; ARGV: group, consumer, count, then the ids of entries to XACK first (the
# last batch's, settled). A reply of no entries is the empty string. Each entry: '>I4' count
# of strings (the id, then field, value, field, value ...), their '>I4' lengths, the strings.
# The count is as wide as a length, since an entry may hold any number of fields: a two-byte
# count wrapped past 65,535 strings (32,767 field pairs) and the reply was cut in the wrong
# places, which ended consume with that entry and every one after it left pending.
READ = """
local last, first = #ARGV, 4
while first <= last do  -- in slices: unpack has a limit on how many values it returns
  local upto = math.min(first + 999, last)
  redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, first, upto))
  first = upto + 1
end
local found = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3],
                         'STREAMS', KEYS[1], '>')
if not found then return '' end
local out = {}
local pack = struct.pack
for _, entry in ipairs(found[1][2]) do
  local id, fields = entry[1], entry[2]
  local lengths = {pack('>I4', #fields + 1), pack('>I4', #id)}
  for i = 1, #fields do
    lengths[#lengths + 1] = pack('>I4', #fields[i])
  end
  out[#out + 1] = table.concat(lengths) .. id .. table.concat(fields)
end
return table.concat(out)
"""

_unpack_count = struct.Struct(">I").unpack_from
#: Entries of up to this many strings share a cached unpacker of their lengths; a larger one
#: gets one of its own: an unpacker grows with its count, and entries of ever new sizes would
#: fill the cache without bound.
CACHED_COUNTS = 256


def entries(reply: bytes, attempt: int | None) -> list[Message]:
    """The Messages of one reply, as ``message_of`` makes them: field ``body``
    the body, every other field a header (``headers.decoded``), ``raw`` the entry id and its
    fields as redis-py would give them."""
    out: list[Message] = []
    pos, end = 0, len(reply)
    while pos < end:
        (count,) = _unpack_count(reply, pos)
        pos += 4
        lengths = _lengths(count)(reply, pos)
        pos += 4 * count
        length = lengths[0]
        entry_id = reply[pos : pos + length]
        pos += length
        fields: dict[bytes, bytes] = {}
        headers: dict[str, str] = {}
        body = b""
        for i in range(1, count, 2):
            length = lengths[i]
            name = reply[pos : pos + length]
            pos += length
            length = lengths[i + 1]
            value = fields[name] = reply[pos : pos + length]
            pos += length
            if name == BODY:
                body = value
            else:
                headers[decoded(name)] = decoded(value)
        out.append(Message(body, headers, entry_id.decode(), attempt, (entry_id, fields)))
    return out


_LENGTHS: dict[int, Any] = {}


def _lengths(count: int) -> Any:
    """The unpacker of ``count`` lengths, made once per count (entries of one stream mostly
    have the same number of fields) up to CACHED_COUNTS."""
    found = _LENGTHS.get(count)
    if found is None:
        found = struct.Struct(f">{count}I").unpack_from
        if count <= CACHED_COUNTS:
            _LENGTHS[count] = found
    return found


class CompactReader:
    """The read script on one client, loaded on first use (and again after a server restart:
    redis-py's Script sends the script itself when the server no longer has it)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.script = client.register_script(READ)

    async def read(
        self, stream: str, group: str, name: str, count: int, acks: list[str]
    ) -> list[Message]:
        """Up to ``count`` new entries, after acking ``acks`` in the same call."""
        reply = await self.script(keys=[stream], args=[group, name, count, *acks])
        return entries(reply, 1) if reply else []

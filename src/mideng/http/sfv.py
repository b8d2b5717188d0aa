"""A small parser for RFC 8941 Structured Field Items (the shape of ``Idempotency-Key``).

Only what an Item can hold is parsed: a bare item (string, token, integer, decimal, byte
sequence, boolean) followed by parameters. Lists and dictionaries are not needed here: a header
value with a top-level comma is not an Item and is refused.
"""

from __future__ import annotations

import base64
import binascii
import re
import string
from decimal import Decimal

from mideng.core.keys import MAX_KEY_LENGTH

_ALPHA = frozenset(string.ascii_letters)
_DIGITS = frozenset(string.digits)
_TCHAR = frozenset("!#$%&'*+-.^_`|~") | _ALPHA | _DIGITS
_TOKEN_REST = _TCHAR | frozenset(":/")
_KEY_FIRST = frozenset(string.ascii_lowercase) | {"*"}
_KEY_REST = _KEY_FIRST | _DIGITS | frozenset("_-.")
_BASE64 = frozenset(string.ascii_letters + string.digits + "+/=")


class SFVError(ValueError):
    """The text is not a valid Structured Field Item."""


class Token(str):
    """An sf-token, kept apart from an sf-string of the same characters."""

    __slots__ = ()


BareItem = str | Token | int | Decimal | bytes | bool
Parameters = dict[str, BareItem]


def parse_item(text: str) -> tuple[BareItem, Parameters]:
    """Parse one Item; raises SFVError on anything RFC 8941 does not allow."""
    parser = _Parser(text.strip(" \t"))
    item = parser.bare_item()
    params = parser.parameters()
    if not parser.done():
        raise SFVError(f"unexpected {parser.peek()!r} at offset {parser.pos}")
    return item, params


class _Parser:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def done(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        return char

    def bare_item(self) -> BareItem:
        first = self.peek()
        if first == "-" or first in _DIGITS:
            return self.number()
        if first == '"':
            return self.string()
        if first == "*" or first in _ALPHA:
            return self.token()
        if first == ":":
            return self.byte_sequence()
        if first == "?":
            return self.boolean()
        raise SFVError(f"no item starts with {first!r}")

    def string(self) -> str:
        self.take()
        out: list[str] = []
        while not self.done():
            char = self.take()
            if char == "\\":
                escaped = self.take()
                if escaped not in ('"', "\\"):
                    raise SFVError('only \\" and \\\\ may be escaped in an sf-string')
                out.append(escaped)
            elif char == '"':
                return "".join(out)
            elif not " " <= char <= "~":
                raise SFVError(f"character {char!r} is not allowed in an sf-string")
            else:
                out.append(char)
        raise SFVError("unterminated sf-string")

    def token(self) -> Token:
        start = self.pos
        self.pos += 1
        while self.peek() in _TOKEN_REST:
            self.pos += 1
        return Token(self.text[start : self.pos])

    def number(self) -> int | Decimal:
        start = self.pos
        if self.peek() == "-":
            self.pos += 1
        if self.peek() not in _DIGITS:
            raise SFVError("a number needs a digit")
        dot = -1
        while self.peek() in _DIGITS or (self.peek() == "." and dot < 0):
            if self.peek() == ".":
                dot = self.pos
            self.pos += 1
        text = self.text[start : self.pos]
        digits = text.lstrip("-")
        if dot < 0:
            if len(digits) > 15:
                raise SFVError("an sf-integer has at most 15 digits")
            return int(text)
        whole, _, frac = digits.partition(".")
        if len(whole) > 12 or not 1 <= len(frac) <= 3:
            raise SFVError("an sf-decimal has at most 12 integer and 1 to 3 fraction digits")
        return Decimal(text)

    def byte_sequence(self) -> bytes:
        self.take()
        end = self.text.find(":", self.pos)
        if end < 0:
            raise SFVError("unterminated byte sequence")
        chunk = self.text[self.pos : end]
        self.pos = end + 1
        if not set(chunk) <= _BASE64:
            raise SFVError("a byte sequence is base64")
        try:
            return base64.b64decode(chunk, validate=True)
        except binascii.Error as exc:
            raise SFVError(f"bad base64 in byte sequence: {exc}") from exc

    def boolean(self) -> bool:
        self.take()
        char = self.take()
        if char not in ("0", "1"):
            raise SFVError("an sf-boolean is ?0 or ?1")
        return char == "1"

    def parameters(self) -> Parameters:
        params: Parameters = {}
        while self.peek() == ";":
            self.take()
            while self.peek() == " ":
                self.take()
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.take()
                value = self.bare_item()
            params[key] = value
        return params

    def key(self) -> str:
        if self.peek() not in _KEY_FIRST:
            raise SFVError("a parameter key starts with a lowercase letter or '*'")
        start = self.pos
        while self.peek() in _KEY_REST:
            self.pos += 1
        return self.text[start : self.pos]


# The Idempotency-Key's own reading of an Item (``parse_key``).
_PLAIN_STRING = re.compile(r'[ \t]*"([ !#-\[\]-~]*)"[ \t]*')
# A bare key, accepted leniently: token characters plus what UUIDs, base64 and URL-ish keys
# use; never a quote, comma, semicolon or space (those would start another item or field).
_LENIENT_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z:/=@]+")


def parse_key(value: str, *, lenient: bool = True) -> str | None:
    """The key from an Idempotency-Key field value, or None when malformed."""
    plain = _PLAIN_STRING.fullmatch(value)
    if plain is not None:  # the common case: one quoted string, no escapes, no parameters
        key = plain.group(1)
        return key if 0 < len(key) <= MAX_KEY_LENGTH else None
    try:
        item, _params = parse_item(value)
    except SFVError:
        item = None
    if isinstance(item, str) and (lenient or not isinstance(item, Token)):
        key = str(item)
    elif lenient and _LENIENT_KEY.fullmatch(value.strip(" \t")):
        key = value.strip(" \t")
    else:
        return None
    return key if 0 < len(key) <= MAX_KEY_LENGTH else None

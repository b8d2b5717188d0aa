"""The Redis store's Lua code: the function library, the scripts, and how a server takes them.

Every operation is ``lua/record.lua`` (the shared head: fields, clock, read, save, reply)
followed by the operation's own file, so each rule is written once. The head's field
declarations come from ``rows.FIELDS``, written in when the files are read. The same files
make two forms of the code:

- a function library (Redis 7+): the head runs once, when the library is loaded, and each
  operation is a registered function called with ``FCALL``. This is the fast form: an
  ``EVALSHA`` re-runs the head (a dozen closures and tables) on every call, which costs more
  server time than reading and answering the record.
- one script per operation, for ``EVALSHA`` on servers without functions (Redis 6).

The library's name carries a hash of its text, so two versions of mideng sharing one server
never replace each other's functions. ``Calls`` picks the form a server takes and says what
to load when the server lacks it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from mideng.stores.redis.rows import LUA_MARK, lua_fields


@dataclass(frozen=True)
class Script:
    name: str
    text: str  # the EVALSHA form: head + operation
    sha: str
    function: str  # the FCALL form: this operation's name in the library
    keys: int = 1  # how many of its arguments are keys; VARIABLE: its first argument says


def _read(name: str) -> str:
    return (
        resources.files("mideng.stores.redis")
        .joinpath("lua")
        .joinpath(f"{name}.lua")
        .read_text("utf-8")
    )


def _head() -> str:
    text = _read("record")
    if text.count(LUA_MARK) != 1:
        raise RuntimeError(f"lua/record.lua must have one {LUA_MARK.strip()} line")
    return text.replace(LUA_MARK, lua_fields())


def _library_name(head: str, bodies: dict[str, str]) -> str:
    digest = hashlib.sha1(head.encode("utf-8"))
    for name, body in bodies.items():
        digest.update(f"\0{name}\0{body}".encode())
    return f"mideng_{digest.hexdigest()[:16]}"


def _library(name: str, head: str, bodies: dict[str, str]) -> str:
    # An operation file is a script body over KEYS and ARGV; as a function it takes them as
    # parameters, so the same text serves both forms.
    parts = [f"#!lua name={name}\n", head]
    for op, body in bodies.items():
        parts.append(
            f"\nredis.register_function('{name}_{op}', function(KEYS, ARGV)\n{body}\nend)\n"
        )
    return "".join(parts)


@dataclass(frozen=True)
class Scripts:
    claim: Script
    complete: Script
    fail: Script
    release: Script
    heartbeat: Script
    resolve: Script
    get: Script
    put: Script
    take_token: Script
    hit: Script
    begin_steps: Script
    record_step: Script
    claim_many: Script
    complete_many: Script
    head: str  # lua/record.lua with its field declarations, shared by every operation
    library: str  # the FUNCTION LOAD text holding every operation

    def all(self) -> list[Script]:
        return [getattr(self, name) for name in _OPERATIONS]

    @classmethod
    def load(cls) -> Scripts:
        head = _head()
        bodies = {name: _read(name) for name in _OPERATIONS}
        lib = _library_name(head, bodies)
        scripts = {
            name: Script(
                name,
                head + body,
                hashlib.sha1((head + body).encode("utf-8")).hexdigest(),
                f"{lib}_{name}",
                _KEYS.get(name, 1),
            )
            for name, body in bodies.items()
        }
        return cls(**scripts, head=head, library=_library(lib, head, bodies))


_OPERATIONS = tuple(
    name for name in Scripts.__dataclass_fields__ if name not in ("head", "library")
)


#: A Script.keys for an operation over any number of records (a batch): the command's first
#: argument is how many of the arguments after it are keys.
VARIABLE = -1

# Operations over more than the record: a multi-step operation's steps hash beside it; a
# batch's records.
_KEYS = {"begin_steps": 2, "record_step": 2, "claim_many": VARIABLE, "complete_many": VARIABLE}

_scripts: Scripts | None = None


def scripts() -> Scripts:
    """The scripts, read from the package once per process."""
    global _scripts
    if _scripts is None:
        _scripts = Scripts.load()
    return _scripts


class Calls:
    """How one server takes the operations: as functions (FCALL) until it says it has none,
    then as scripts (EVALSHA); and what to load when it says one is missing."""

    def __init__(self, scripts: Scripts, noscript: type[BaseException]) -> None:
        self.scripts = scripts
        self.functions = True
        # redis-py's NoScriptError: an EVALSHA of a script the server does not hold.
        self._noscript = noscript

    def form(self, script: Script | None, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The command calling ``script`` with ``args`` (its key and arguments); without a
        script, ``args`` are the command."""
        if script is None:
            return args
        if script.keys == VARIABLE:  # args start with their number of keys
            if self.functions:
                return ("FCALL", script.function, *args)
            return ("EVALSHA", script.sha, *args)
        if self.functions:
            return ("FCALL", script.function, script.keys, *args)
        return ("EVALSHA", script.sha, script.keys, *args)

    def loads(self, exc: BaseException) -> list[tuple[str, ...]]:
        """The commands loading what an error reply says is missing: the library (a new
        server, a restart without persistence, FUNCTION FLUSH) or the scripts (NOSCRIPT; or
        a server without functions, Redis 6, which is then called by script from now on).
        Everything is loaded at once, so the complete() after a claim() does not pay again.
        Any other error is raised."""
        text = str(exc).lower()
        if not isinstance(exc, self._noscript):
            if self.functions and "function not found" in text:
                # Named as redis-py names it: a cluster client sends it to every primary,
                # and direct.pack() splits the name into its words.
                return [("FUNCTION LOAD", "REPLACE", self.scripts.library)]
            if not (self.functions and "unknown command" in text and "fcall" in text):
                raise exc
            self.functions = False
        return [("SCRIPT LOAD", script.text) for script in self.scripts.all()]

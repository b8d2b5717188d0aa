"""A declared state machine over a status column, advanced by one conditional UPDATE.

    orders_flow = StateMachine(
        {"NEW": ["PAID", "CANCELLED"], "PAID": ["SHIPPED", "REFUNDED"], "SHIPPED": ["DONE"]},
        initial="NEW",
    )
    orders_flow.advance(conn, orders, {"id": 42}, "PAID")

``advance`` sends ``UPDATE … SET status = :to WHERE <where> AND status IN (<every state that
may lead to :to>)`` and reads the row only when it changed nothing, to tell a duplicate
(``AlreadyThere``, a success) from an illegal transition (``Illegal(current, direction)``:
the target behind the row, ahead of it or on another branch) or a missing row (``Missing``).
The check and the write are one statement, so no transition is decided on a status that
another caller has changed since it was read. A state no transition leads to (the initial
one) has no such UPDATE: the read alone answers.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from mideng.db.django_models import is_model
from mideng.db.statements import Op
from mideng.errors import ConfigurationError
from mideng.state.compiled import speech
from mideng.state.defaults import fill
from mideng.state.models import on_table, refused_async
from mideng.state.ops import APPLIED, conditional
from mideng.state.primitives import checked_where
from mideng.state.results import AlreadyThere, Applied, Conflict, Direction, Illegal, Missing
from mideng.state.run import Make, arun, run
from mideng.state.statements import (
    UpdateOf,
    UpdateShape,
    cached,
    core_table,
    keep,
    own_column,
    read_shape,
    update_shape,
    values_of,
    version_bump,
)

AdvanceAnswer = Applied | AlreadyThere | Illegal | Missing | Conflict

# Where the target lies from the current state, by (the current state is reachable from the
# target, the target is reachable from the current state).
_DIRECTIONS = {
    (True, False): Direction.BEHIND,
    (False, True): Direction.AHEAD,
    (False, False): Direction.ASIDE,
    (True, True): Direction.BOTH,
}


def _states_of(
    transitions: Mapping[Any, Iterable[Any]],
) -> tuple[list[Any], type[enum.Enum] | None]:
    named = [*transitions, *(t for targets in transitions.values() for t in targets)]
    kinds = {type(s) for s in named if isinstance(s, enum.Enum)}
    if not kinds:
        wrong = [s for s in named if not isinstance(s, str)]
        if wrong:
            raise ConfigurationError(f"states are strings or members of one Enum, not {wrong!r}")
        return list(dict.fromkeys(named)), None
    if len(kinds) > 1:
        raise ConfigurationError(
            f"states come from one Enum, not {sorted(k.__name__ for k in kinds)}"
        )
    members = kinds.pop()
    strays = [s for s in named if not isinstance(s, members)]
    if strays:
        raise ConfigurationError(f"{strays!r} are not states of {members.__name__}")
    return list(members), members


class StateMachine:
    """States and the transitions between them; ``advance`` applies one to a row.

    ``transitions``: ``{state: [targets…]}``, states as strings or members of one Enum (then
    every member is a state). A state with no outgoing edges is terminal; one no edge leads
    to (the initial state) is a target of ``advance`` like any other. ``column`` holds
    the state; ``version_column`` the version ``advance(..., version=)`` checks and bumps.
    Checked here, once: targets that are not states of the Enum, states unreachable from
    ``initial`` (when given), a state declared ``terminal`` that has outgoing edges.
    """

    def __init__(
        self,
        transitions: Mapping[Any, Iterable[Any]],
        *,
        column: str = "status",
        initial: Any = None,
        terminal: Iterable[Any] | None = None,
        version_column: str = "version",
    ) -> None:
        if not transitions:
            raise ConfigurationError("a state machine needs at least one transition")
        states, members = _states_of(transitions)
        self.states: tuple[Any, ...] = tuple(states)
        self.enum = members
        self.column = column
        self.version_column = version_column
        self._targets = {s: frozenset(transitions.get(s, ())) for s in states}
        self._sources = {s: frozenset(f for f in states if s in self._targets[f]) for s in states}
        self._after = {s: self._onward(s) for s in states}
        self.terminal = frozenset(s for s in states if not self._targets[s])
        self.initial = initial
        if initial is not None:
            self._check(initial)
            unreachable = set(states) - {initial} - self._after[initial]
            if unreachable:
                raise ConfigurationError(
                    f"states {sorted(map(str, unreachable))} are unreachable from {initial!r}"
                )
        for state in terminal or ():
            self._check(state)
            if self._targets[state]:
                raise ConfigurationError(
                    f"{state!r} is declared terminal but leads to "
                    f"{sorted(map(str, self._targets[state]))}"
                )

    def _check(self, state: Any) -> Any:
        if state not in self._targets:
            raise ConfigurationError(f"{state!r} is not a state of this machine")
        return state

    def _onward(self, start: Any) -> frozenset[Any]:
        seen: set[Any] = set()
        todo = [start]
        while todo:
            for nxt in self._targets[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return frozenset(seen)

    def allowed(self, state: Any) -> frozenset[Any]:
        """The states ``state`` may move to (empty for a terminal one)."""
        return self._targets[self._check(state)]

    def sources(self, state: Any) -> frozenset[Any]:
        """The states that may move to ``state`` (empty for one no transition leads to, such
        as the initial state)."""
        return self._sources[self._check(state)]

    def reachable(self, state: Any) -> frozenset[Any]:
        """The states a row in ``state`` may come to by one transition or more (``state``
        itself only when a cycle leads back to it)."""
        return self._after[self._check(state)]

    def _direction(self, current: Any, target: Any) -> Direction:
        """Where ``target`` lies from a row in ``current``, another state; a ``current`` that
        is none of the machine's (the column holds something else) leads nowhere and is
        reached from nowhere."""
        behind = current in self._after[target]
        ahead = target in self._after.get(current, ())
        return _DIRECTIONS[behind, ahead]

    # -- advance --------------------------------------------------------------------------
    def _advance(
        self,
        table: Any,
        where: Mapping[str, Any],
        to: Any,
        version: int | None,
        values: Mapping[str, Any] | None,
    ) -> Make[AdvanceAnswer]:
        core_table(table)
        sources = self.sources(to)
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise ConfigurationError(f"version={version!r}: the version read before, an int")
        names = checked_where(table, where)
        given = values_of(table, values, "set") if values else ()
        versioned = version is not None

        def make(dialect: Any) -> Op[AdvanceAnswer]:
            spoken = speech(dialect)
            cache_key = ("advance", self, spoken.key, to, names, given, versioned)
            plan = cached(table, cache_key) or keep(
                table,
                cache_key,
                self._plan(UpdateOf(table, spoken.kind, dialect, names, given), to, versioned),
            )
            shape, base, decode = plan
            params = dict(base)
            params.update(zip(shape.where_names, where.values(), strict=True))
            if values:
                params.update(zip(shape.value_names, values.values(), strict=True))
            if versioned:
                params["ver"] = version
            if shape.filled:
                fill(shape.filled, params, {self.column: base["to"], **(values or {})}, dialect)
            applied = Applied(version + 1) if version is not None else APPLIED

            def judge(row: Any) -> Any:
                current = decode.get(row[0], row[0])
                if current == to:
                    return AlreadyThere()
                if current not in sources:
                    return Illegal(current, self._direction(current, to))
                if versioned and row[1] != version:
                    return Conflict(row[1])
                return None  # a legal source now: it changed since the UPDATE, send it again

            return conditional(shape.update, shape.read, params, params, applied, judge)

        return make

    def _plan(
        self, of: UpdateOf, to: Any, versioned: bool
    ) -> tuple[UpdateShape, dict[str, Any], dict[Any, Any]]:
        from sqlalchemy import Enum as SQLEnum
        from sqlalchemy import bindparam

        col = own_column(of.table, self.column, f"column {self.column!r}")
        ver = None
        if versioned:
            ver = own_column(of.table, self.version_column, f"column {self.version_column!r}")
        # A SQLAlchemy Enum column binds the members itself; any other column stores values.
        members = isinstance(col.type, SQLEnum) and col.type.enum_class is not None

        def stored(state: Any) -> Any:
            return state.value if isinstance(state, enum.Enum) and not members else state

        sources = sorted(self.sources(to), key=str)
        base = {"to": stored(to), **{f"s{i}": stored(s) for i, s in enumerate(sources)}}
        decode = {stored(s): s for s in self.states}
        # The columns advance sets, and reads back after a miss.
        own = [col] if ver is None else [col, ver]
        if not sources:
            # Nothing leads to ``to`` (an initial state): an UPDATE could only miss, so the
            # read is the whole advance and tells the duplicate from the rest.
            return read_shape(of, sets=own, picked=own), base, decode
        target = bindparam("to", type_=col.type)
        allowed = [bindparam(f"s{i}", type_=col.type) for i in range(len(sources))]
        sets: dict[Any, Any] = {col: target}
        conds = [col.in_(allowed)]
        binds = [target, *allowed]
        if ver is not None:
            bump, check, read_version = version_bump(ver)
            sets[ver] = bump
            conds.append(check)
            binds.append(read_version)
        return update_shape(of, sets=sets, conds=conds, binds=binds, picked=own), base, decode

    def advance(
        self,
        conn: Any,
        table: Any,
        where: Any,
        to: Any,
        *,
        version: int | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> AdvanceAnswer:
        """Move the row ``where`` picks to ``to``, if its state may lead there: ``Applied``
        (``Applied(version + 1)`` with ``version``), ``AlreadyThere``,
        ``Illegal(current, direction)``, ``Missing``, or with ``version``
        ``Conflict(current_version)``. ``values``: more columns set by the same UPDATE. Any
        state of the machine may be ``to``; one no transition leads to answers from the read
        of the row alone (``AlreadyThere``, ``Illegal`` or ``Missing``). ``table`` may be a
        Django model, with a Django connection; ``where`` then a primary key value too, and
        the machine's columns name its fields (mideng.state.models)."""
        if is_model(table):
            conn, table, where, values = on_table(conn, table, where, values)
        return run(conn, self._advance(table, where, to, version, values))

    async def aadvance(
        self,
        conn: Any,
        table: Any,
        where: Any,
        to: Any,
        *,
        version: int | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> AdvanceAnswer:
        if is_model(table):
            raise refused_async(table)
        return await arun(conn, self._advance(table, where, to, version, values))

    def __repr__(self) -> str:
        edges = {str(s): sorted(map(str, t)) for s, t in self._targets.items() if t}
        return f"StateMachine({edges}, column={self.column!r})"

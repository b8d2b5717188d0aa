"""The survey capability: what an operator's ``stats`` and ``scan`` read from a store.

A ``Survey`` is counted where the records are: GROUP BY and index range counts on a SQL
table (``stores.record_table.survey``, run by ``stores.sql.survey`` and
``stores.sqlite.survey``), a SCAN of every master on Redis (``stores.redis.survey``), one
pass over the records of the memory store (``LocalSurvey`` here), the durable store's behind
a hybrid (``stores.hybrid.survey``). ``purge_older`` deletes finished
records last written before a cutoff, whatever their own retention says.

Records only: token and debounce rows (``token:`` / ``hit:`` scopes) are not surveyed.

The listing capability (``ListingStore``) pages through records for an operator's screen: by
keyset, never by offset, so the thousandth page costs what the first does. A page of one scope
or of every scope follows the primary key ``(scope, key)``; a page of processing records
across scopes follows ``(lease_until, scope, key)``, the order of the servers' ``(status,
lease_until)`` index, the oldest lease (the longest dead holder) first. UNKNOWN records keep no
lease; across scopes they are read through that index by status and ordered by key.
"""

from __future__ import annotations

import abc
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from mideng.core.keys import HIT_PREFIX, TOKEN_PREFIX
from mideng.core.record import Record, Status
from mideng.stores.base import KEEP, LocalStore

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: Remaining retention, as (label, upper bound in seconds); past the last, ``"longer"``.
EXPIRY_BUCKETS: tuple[tuple[str, float], ...] = (
    ("1m", 60.0),
    ("1h", 3600.0),
    ("1d", 86400.0),
    ("7d", 7 * 86400.0),
    ("30d", 30 * 86400.0),
)
EXPIRY_LABELS = ("expired", *(label for label, _ in EXPIRY_BUCKETS), "longer", "never")
STATUSES = tuple(s.value for s in Status)
#: Called with how many records were counted so far (a progress bar's position).
Progress = Callable[[int], None] | None
#: Stuck records listed at most (all are counted).
STUCK_LISTED = 100


def expiry_label(remaining: float | None) -> str:
    """The bucket of a record with ``remaining`` seconds of retention (None: never expires)."""
    if remaining is None:
        return "never"
    if remaining <= 0:
        return "expired"
    for label, bound in EXPIRY_BUCKETS:
        if remaining <= bound:
            return label
    return "longer"


@dataclass(slots=True)
class Stuck:
    """A processing record whose lease ran out ``lapsed`` seconds ago, not taken over."""

    scope: str
    key: str
    fence: int
    lapsed: float
    request_id: str | None


@dataclass(slots=True)
class Big:
    scope: str
    key: str
    bytes: int


@dataclass
class Survey:
    """Counts over a store's records at ``now`` (the store's clock, epoch seconds)."""

    now: float
    by_scope: dict[str, dict[str, int]] = field(default_factory=dict)
    stuck_count: int = 0
    stuck: list[Stuck] = field(default_factory=list)
    oldest_processing_since: float | None = None
    #: When the longest-waiting UNKNOWN record became UNKNOWN (its last write).
    oldest_unknown_since: float | None = None
    expiry: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EXPIRY_LABELS, 0))
    no_expiry_by_scope: dict[str, int] = field(default_factory=dict)
    biggest: list[Big] = field(default_factory=list)
    #: Redis masters (or databases) the counts came from.
    nodes: int = 1
    #: Whether the counts of ``ESTIMATED_STATUSES`` (and so ``total``) are estimates: a big
    #: table's succeeded records are sampled or taken from the database's statistics, while
    #: the other statuses are counted exactly through an index (``SurveyTerms.exact``).
    estimated: bool = False
    #: Estimated counts the store could not split by scope, by status (in ``total``).
    unscoped: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        scoped = sum(sum(statuses.values()) for statuses in self.by_scope.values())
        return scoped + sum(self.unscoped.values())

    def by_status(self) -> dict[str, int]:
        """Records per status across the scopes (with the unscoped estimates)."""
        found = dict.fromkeys(STATUSES, 0)
        for statuses in [*self.by_scope.values(), self.unscoped]:
            for status, n in statuses.items():
                found[status] = found.get(status, 0) + n
        return found

    @property
    def unknown(self) -> int:
        return sum(statuses.get("unknown", 0) for statuses in self.by_scope.values())

    @property
    def oldest_processing_age(self) -> float | None:
        since = self.oldest_processing_since
        return None if since is None else max(self.now - since, 0.0)

    @property
    def oldest_unknown_age(self) -> float | None:
        since = self.oldest_unknown_since
        return None if since is None else max(self.now - since, 0.0)

    def count(self, scope: str, status: str, n: int = 1) -> None:
        statuses = self.by_scope.setdefault(scope, {})
        statuses[status] = statuses.get(status, 0) + n

    def merge(self, other: Survey, biggest: int) -> None:
        """Add another node's counts (a Redis Cluster master) to these."""
        for scope, statuses in other.by_scope.items():
            for status, n in statuses.items():
                self.count(scope, status, n)
        self.stuck_count += other.stuck_count
        self.stuck = sorted([*self.stuck, *other.stuck], key=lambda s: -s.lapsed)[:STUCK_LISTED]
        if other.oldest_processing_since is not None and (
            self.oldest_processing_since is None
            or other.oldest_processing_since < self.oldest_processing_since
        ):
            self.oldest_processing_since = other.oldest_processing_since
        if other.oldest_unknown_since is not None and (
            self.oldest_unknown_since is None
            or other.oldest_unknown_since < self.oldest_unknown_since
        ):
            self.oldest_unknown_since = other.oldest_unknown_since
        for label, n in other.expiry.items():
            self.expiry[label] += n
        for scope, n in other.no_expiry_by_scope.items():
            self.no_expiry_by_scope[scope] = self.no_expiry_by_scope.get(scope, 0) + n
        self.biggest = heapq.nlargest(biggest, [*self.biggest, *other.biggest], key=_size)
        self.nodes += other.nodes
        self.estimated = self.estimated or other.estimated
        for status, n in other.unscoped.items():
            self.unscoped[status] = self.unscoped.get(status, 0) + n


def _size(big: Big) -> int:
    return big.bytes


def surveyed(scope: str, prefix: str | None) -> bool:
    """Whether a record of ``scope`` is in a survey of ``prefix`` (records only)."""
    if scope.startswith((TOKEN_PREFIX, HIT_PREFIX)):
        return False
    return prefix is None or scope.startswith(prefix)


class Tally:
    """A survey built one record at a time (embedded stores, each Redis batch)."""

    def __init__(self, now: float, grace: float, biggest: int) -> None:
        self.survey = Survey(now)
        self.grace = grace
        self.biggest = biggest
        self._heap: list[tuple[int, int, Big]] = []
        self._seen = 0

    def add(
        self,
        record: Record,
        remaining: float | None,
        size: int,
    ) -> None:
        """One record; ``remaining``: seconds of retention left (None: none set)."""
        s = self.survey
        label = expiry_label(remaining)
        s.expiry[label] += 1
        if label == "expired":  # gone as far as any caller can tell; purge deletes it
            return
        s.count(record.scope, record.status.value)
        if label == "never":
            s.no_expiry_by_scope[record.scope] = s.no_expiry_by_scope.get(record.scope, 0) + 1
        if record.status is Status.UNKNOWN and (
            s.oldest_unknown_since is None or record.updated_at < s.oldest_unknown_since
        ):
            s.oldest_unknown_since = record.updated_at
        if record.status is Status.PROCESSING:
            since = record.created_at
            if s.oldest_processing_since is None or since < s.oldest_processing_since:
                s.oldest_processing_since = since
            lapsed = s.now - (record.lease_until or 0.0)
            if lapsed > self.grace:
                s.stuck_count += 1
                s.stuck.append(
                    Stuck(record.scope, record.key, record.fence, lapsed, record.request_id)
                )
        if self.biggest > 0:
            self._seen += 1
            item = (size, -self._seen, Big(record.scope, record.key, size))
            if len(self._heap) < self.biggest:
                heapq.heappush(self._heap, item)
            elif item > self._heap[0]:
                heapq.heapreplace(self._heap, item)

    def done(self) -> Survey:
        s = self.survey
        s.stuck = sorted(s.stuck, key=lambda x: -x.lapsed)[:STUCK_LISTED]
        s.biggest = [big for _, _, big in sorted(self._heap, reverse=True)]
        return s


def record_size(record: Record) -> int:
    return len(record.result or b"") + len(record.error or b"")


def finished_before(record: Record, cutoff: float) -> bool:
    """Whether ``purge_older`` takes this record: finished, and last written before cutoff."""
    return record.status in (Status.SUCCEEDED, Status.FAILED) and record.updated_at <= cutoff


#: The statuses whose counts a big SQL table estimates; every other status is counted exactly.
ESTIMATED_STATUSES = ("succeeded",)
#: Records above which a SQL table's succeeded ones are estimated (``SurveyTerms``): below it
#: the exact GROUP BY over the table answers in well under 300 ms on every SQL store.
ESTIMATE_ABOVE = 100_000

#: Statuses listed across scopes by their lease, oldest first (``RecordQuery.by_lease``).
LEASED_STATUSES = ("processing",)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page ended: its last record's place in the page's order."""

    scope: str
    key: str
    lease_until: float | None = None

    @classmethod
    def after(cls, record: Record) -> Position:
        return cls(record.scope, record.key, record.lease_until)


@dataclass(frozen=True, slots=True)
class RecordQuery:
    """A page of records: of ``scope`` (None: every scope's records), of ``status`` (None:
    any), the ``limit`` that follow ``after`` (None: from the first)."""

    scope: str | None = None
    status: str | None = None
    after: Position | None = None
    limit: int = 50

    @property
    def by_lease(self) -> bool:
        """Whether the page follows ``(lease_until, scope, key)`` rather than the key."""
        return self.scope is None and self.status in LEASED_STATUSES

    def order(self, record: Record) -> tuple[float, str, str]:
        """``record``'s place in this page's order (the embedded stores sort by it)."""
        lease = (record.lease_until or 0.0) if self.by_lease else 0.0
        return (lease, record.scope, record.key)

    def takes(self, record: Record) -> bool:
        """Whether ``record`` belongs on this page or a later one (embedded stores)."""
        if not surveyed(record.scope, None):
            return False
        if self.scope is not None and record.scope != self.scope:
            return False
        if self.status is not None and record.status.value != self.status:
            return False
        after = self.after
        if after is None:
            return True
        if self.scope is not None:  # a page of one scope stays in it: the key orders it
            return record.key > after.key
        lease = (after.lease_until or 0.0) if self.by_lease else 0.0
        return self.order(record) > (lease, after.scope, after.key)


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Records last written since ``since``, counted per ``width`` seconds and status:
    ``(bucket, status, count)``, bucket 0 the first ``width`` seconds after ``since``."""

    since: float
    width: float
    counts: list[tuple[int, str, int]]
    #: Whether the counts are estimates (a big table's sample, ``ListingStore.outcomes``).
    estimated: bool = False


class SurveyOptions(TypedDict, total=False):
    """What ``survey`` may be asked besides its prefix (``SurveyTerms`` has their defaults)."""

    grace: float
    biggest: int
    progress: Progress
    spread: bool
    exact: bool
    estimate_above: int


@dataclass(frozen=True, slots=True)
class SurveyTerms:
    """What a survey counts: the records of scopes starting with ``prefix`` (None: all);
    as stuck, processing ones whose lease ran out more than ``grace`` seconds ago; the
    ``biggest`` by stored bytes (0: none). ``progress`` is told how many were counted.
    ``spread``: whether the spread of remaining retention is counted (on a SQL table, nine
    range counts that a page wanting only the statuses can skip). A SQL table holding more
    than ``estimate_above`` records (as its statistics say) has its succeeded records
    estimated, unless ``exact``, or the spread or the biggest records are asked (they read
    every row anyway): ``Survey.estimated`` says so."""

    prefix: str | None = None
    grace: float = 60.0
    biggest: int = 10
    progress: Progress = None
    spread: bool = True
    exact: bool = False
    estimate_above: int = ESTIMATE_ABOVE

    @property
    def estimable(self) -> bool:
        """Whether these terms let a big table's bulk be estimated."""
        return not self.exact and not self.spread and self.biggest <= 0

    def reported(self, found: Survey) -> Survey:
        """``found``, its total told to ``progress`` (a store that counts in one go)."""
        if self.progress is not None:
            self.progress(found.total)
        return found


class SurveyStore(abc.ABC):
    """The survey capability, sync and async: a store counts ``SurveyTerms`` its own way."""

    def survey(self, prefix: str | None = None, **options: Unpack[SurveyOptions]) -> Survey:
        """Count the records (of scopes starting with ``prefix``): by scope and status,
        stuck ones, the oldest processing one, the spread of remaining retention, the
        biggest by stored bytes (``SurveyTerms``)."""
        return self.count_records(SurveyTerms(prefix, **options))

    async def asurvey(self, prefix: str | None = None, **options: Unpack[SurveyOptions]) -> Survey:
        return await self.acount_records(SurveyTerms(prefix, **options))

    @abc.abstractmethod
    def count_records(self, terms: SurveyTerms) -> Survey:
        """The survey ``terms`` ask for."""

    @abc.abstractmethod
    async def acount_records(self, terms: SurveyTerms) -> Survey: ...

    @abc.abstractmethod
    def purge_older(self, age: float, limit: int | None = None) -> int:
        """Delete finished (succeeded or failed) records last written more than ``age``
        seconds ago; never a processing or UNKNOWN one. Returns how many."""

    @abc.abstractmethod
    async def apurge_older(self, age: float, limit: int | None = None) -> int: ...


class ListingStore(abc.ABC):
    """The listing capability, sync and async: pages of records by keyset, and the records
    of one request id."""

    @abc.abstractmethod
    def list_records(self, query: RecordQuery) -> list[Record]:
        """Up to ``query.limit`` live records that follow ``query.after`` in the page's order
        (module docstring); the last one's ``Position.after`` starts the next page."""

    @abc.abstractmethod
    async def alist_records(self, query: RecordQuery) -> list[Record]: ...

    @abc.abstractmethod
    def with_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        """Up to ``limit`` live records written by the request ``request_id``."""

    @abc.abstractmethod
    async def awith_request_id(self, request_id: str, limit: int = 20) -> list[Record]: ...

    @abc.abstractmethod
    def outcomes(self, since: float, width: float) -> Outcomes:
        """Records last written since ``since`` by status, per ``width`` seconds."""

    @abc.abstractmethod
    async def aoutcomes(self, since: float, width: float) -> Outcomes: ...


class LocalSurvey(LocalStore, SurveyStore, ListingStore):
    """The survey of an embedded store: one pass over its records (``LocalStore._records``)."""

    def count_records(self, terms: SurveyTerms) -> Survey:
        tally = Tally(self._now(), terms.grace, terms.biggest)
        for record in self._records():
            if surveyed(record.scope, terms.prefix):
                expires = record.expires_at
                remaining = None if expires is None else expires - tally.survey.now
                tally.add(record, remaining, record_size(record))
        return terms.reported(tally.done())

    async def acount_records(self, terms: SurveyTerms) -> Survey:
        return await self._offload(self.count_records, terms)

    def purge_older(self, age: float, limit: int | None = None) -> int:
        cutoff = self._now() - age
        doomed = [
            r for r in self._records() if surveyed(r.scope, None) and finished_before(r, cutoff)
        ]
        gone = 0
        for r in doomed[:limit]:
            # Checked again inside the record's own transaction: a claim since then keeps it.
            def step(current: Record | None, now: float) -> tuple[bool, Record | None]:
                if current is None or not finished_before(current, cutoff):
                    return False, KEEP
                return True, None

            gone += self._transact(r.scope, r.key, step)
        return gone

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        return await self._offload(self.purge_older, age, limit)

    def _live(self) -> list[Record]:
        now = self._now()
        return [r for r in self._records() if not r.expired(now)]

    def list_records(self, query: RecordQuery) -> list[Record]:
        taken = [r for r in self._live() if query.takes(r)]
        return heapq.nsmallest(query.limit, taken, key=query.order)

    async def alist_records(self, query: RecordQuery) -> list[Record]:
        return await self._offload(self.list_records, query)

    def with_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        found = [r for r in self._live() if r.request_id == request_id and surveyed(r.scope, None)]
        return sorted(found, key=RecordQuery().order)[:limit]

    async def awith_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return await self._offload(self.with_request_id, request_id, limit)

    def outcomes(self, since: float, width: float) -> Outcomes:
        counted: dict[tuple[int, str], int] = {}
        for r in self._records():
            if r.updated_at >= since and surveyed(r.scope, None):
                at = (int((r.updated_at - since) // width), r.status.value)
                counted[at] = counted.get(at, 0) + 1
        return Outcomes(since, width, [(b, status, n) for (b, status), n in counted.items()])

    async def aoutcomes(self, since: float, width: float) -> Outcomes:
        return await self._offload(self.outcomes, since, width)

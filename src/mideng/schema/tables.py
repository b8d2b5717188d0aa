"""What a schema version is about: a set of tables named after one table.

Table names are the caller's (a store's ``table=``, an outbox's ``table=``), so one database
may hold several record tables and several outboxes, each at its own version. A set is a
record table with its steps table (``records``), or an outbox with its per-key table
(``outbox``); the version table keys its rows by the set's component and main table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mideng.db.dialect import is_mysql
from mideng.db.statements import check_table
from mideng.errors import ConfigurationError

RECORDS, OUTBOX = "records", "outbox"
COMPONENTS = (RECORDS, OUTBOX)
#: What each component's main table is called when the caller names none.
DEFAULT_NAMES = {RECORDS: "mideng_records", OUTBOX: "mideng_outbox"}
#: The families whose DDL differs: MariaDB and MySQL share theirs.
FAMILIES = ("postgresql", "mysql", "sqlite")


def family_of(kind: str) -> str:
    """The DDL family of a statement kind (``mideng.db.dialect``): MariaDB's is MySQL's."""
    family = "mysql" if is_mysql(kind) else kind
    if family not in FAMILIES:
        raise ConfigurationError(f"no schema for {kind!r}; known: {', '.join(FAMILIES)}")
    return family


def steps_table(records: str) -> str:
    """The steps table of multi-step operations beside a record table."""
    return f"{records}_steps"


def audit_table(main: str) -> str:
    """The audit table of operators' actions beside a record table or an outbox."""
    return f"{check_table(main)}_audit"


def keys_table(outbox: str) -> str:
    """An outbox's per-key table (each key's sequence and the relay's lease on it)."""
    return f"{check_table(outbox)}_keys"


@dataclass(frozen=True, order=True)
class TableSet:
    """A component's tables, named after its main table."""

    component: str
    name: str

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ConfigurationError(
                f"no schema component {self.component!r}; known: {', '.join(COMPONENTS)}"
            )
        check_table(self.name)

    @property
    def tables(self) -> tuple[str, str]:
        """The main table, then the one beside it."""
        if self.component == RECORDS:
            return self.name, steps_table(self.name)
        return self.name, keys_table(self.name)

    @property
    def what(self) -> str:
        """How messages name it: ``record table mideng_records``, ``outbox mideng_outbox``."""
        return f"record table {self.name}" if self.component == RECORDS else f"outbox {self.name}"

    def __str__(self) -> str:
        return f"{self.component} {self.name}"


def records(name: str = DEFAULT_NAMES[RECORDS]) -> TableSet:
    return TableSet(RECORDS, name)


def outbox(name: str = DEFAULT_NAMES[OUTBOX]) -> TableSet:
    return TableSet(OUTBOX, name)

"""mideng.schema: the versioned schema of mideng's tables.

mideng keeps tables in its users' databases: a record table with its steps table, and an
outbox with its per-key table, under names the user picks. Their schema is an ordered list of
migrations (``migrations``), each a list of idempotent, online-where-possible changes per
database (``changes``, spelt out in ``records`` and ``outbox``); a version table
(``versions``) records which of them each set of tables (``tables``) has had. A ``plan`` says
what would run; ``apply.migrate`` runs it under the set's lock (``lock``), and
``apply.needed`` is what a store or an outbox decides at start-up.

Everything that touches a database is an operation on ``mideng.db``'s runtime, so the same
code runs for ``mideng migrate``, for a store creating its tables at start-up, inside an
Alembic revision (``mideng.schema.alembic``) and, as text, in a Django migration
(``mideng.schema.django``).

It sits between ``mideng.db`` and the stores: it imports the runtime, the stores import it.
"""

from mideng.schema.apply import LOCK_WAIT, Applied, Need, command, migrate, needed
from mideng.schema.migrations import CURRENT, MIGRATIONS, Migration
from mideng.schema.plan import Plan, plan
from mideng.schema.tables import OUTBOX, RECORDS, TableSet, outbox, records
from mideng.schema.versions import VERSION_TABLE, Found, survey

__all__ = [
    "CURRENT",
    "LOCK_WAIT",
    "MIGRATIONS",
    "OUTBOX",
    "RECORDS",
    "VERSION_TABLE",
    "Applied",
    "Found",
    "Migration",
    "Need",
    "Plan",
    "TableSet",
    "command",
    "migrate",
    "needed",
    "outbox",
    "plan",
    "records",
    "survey",
]

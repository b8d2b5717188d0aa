"""mideng schema version 3: the audit tables of operators' actions; indexes by request id,
and SQLite's by lease."""

from __future__ import annotations

from mideng.schema import alembic

revision = "mideng_0003"
down_revision: str | None = "mideng_0002"
branch_labels: tuple[str, ...] | None = None
depends_on: str | None = None


def upgrade() -> None:
    alembic.upgrade(3)


def downgrade() -> None:
    alembic.downgrade(3)

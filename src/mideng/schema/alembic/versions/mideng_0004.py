"""mideng schema version 4: the audit tables of operators' actions, and indexes by request id."""

from __future__ import annotations

from mideng.schema import alembic

revision = "mideng_0004"
down_revision: str | None = "mideng_0003"
branch_labels: tuple[str, ...] | None = None
depends_on: str | None = None


def upgrade() -> None:
    alembic.upgrade(4)


def downgrade() -> None:
    alembic.downgrade(4)

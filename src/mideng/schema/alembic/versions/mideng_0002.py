"""mideng schema version 2: an index of operations by the time they began, on the steps table."""

from __future__ import annotations

from mideng.schema import alembic

revision = "mideng_0002"
down_revision: str | None = "mideng_0001"
branch_labels: tuple[str, ...] | None = None
depends_on: str | None = None


def upgrade() -> None:
    alembic.upgrade(2)


def downgrade() -> None:
    alembic.downgrade(2)

"""mideng schema version 1: the record, steps and outbox tables of mideng 0.1.0."""

from __future__ import annotations

from mideng.schema import alembic

revision = "mideng_0001"
down_revision: str | None = None
branch_labels: tuple[str, ...] | None = ("mideng",)
depends_on: str | None = None


def upgrade() -> None:
    alembic.upgrade(1)


def downgrade() -> None:
    alembic.downgrade(1)

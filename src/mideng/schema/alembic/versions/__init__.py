"""mideng's Alembic revisions, one per migration (``mideng.schema.migrations``). Alembic loads
them from here through ``version_locations``; none is imported by mideng itself."""

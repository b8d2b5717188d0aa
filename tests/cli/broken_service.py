"""A service module whose import fails (its settings are missing), for ``--guard``."""

raise RuntimeError("PAYMENTS_DB is not set\n(the service reads it at import)")

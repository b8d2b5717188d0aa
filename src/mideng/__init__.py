"""mideng (幂等): run each business operation once, whatever retries and redeliveries do."""

from mideng.context import get_request_id, request_id_scope, set_request_id
from mideng.core.record import ExpiryPolicy, Outcome, Record, Status
from mideng.errors import (
    IdempotencyError,
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    StoreUnavailableError,
    UnresolvedError,
)
from mideng.guard import Driver, Guard, configure, default_guard, idempotent
from mideng.stores.base import Store
from mideng.stores.registry import open_store, register_store
from mideng.version import __version__

__all__ = [
    "Driver",
    "ExpiryPolicy",
    "Guard",
    "IdempotencyError",
    "InProgressError",
    "LeaseLostError",
    "Outcome",
    "PayloadMismatchError",
    "Record",
    "Status",
    "Store",
    "StoreUnavailableError",
    "UnresolvedError",
    "__version__",
    "configure",
    "default_guard",
    "get_request_id",
    "idempotent",
    "open_store",
    "register_store",
    "request_id_scope",
    "set_request_id",
]

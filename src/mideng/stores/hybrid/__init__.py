"""The hybrid store: Redis answers duplicates fast; a durable store is the truth.

- ``store``: ``HybridStore``, every operation that decides written once as a procedure of the
  store calls it makes (mideng.core.effects), run with the sync or the async clients; the
  copies Redis may answer with (``from_copy``), and the outage that sets Redis aside a moment;
- ``batch``: ``HybridBatch``, the store with batch claims and completions, what
  ``open_store(redis_url, durable=...)`` builds;
- ``steps``, ``survey``: the steps and survey capabilities, the durable store's.
"""

from mideng.moved import old_module
from mideng.stores.hybrid import store
from mideng.stores.hybrid.store import HybridStore

__all__ = ["HybridStore"]

# What this path held as one module besides the store, answered for one release.
_HOMES = dict.fromkeys(("Outage", "from_copy", "replayable"), store)


__getattr__ = old_module(__name__, _HOMES)

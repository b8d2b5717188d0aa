"""Multi-step operations: partial success that resumes at the first unfinished step.

``@guard.operation(scope, key=...)`` makes a function an operation and ``@guard.step(name)``
each function it calls for an effect; a re-run of the operation gets its finished steps'
results back and resumes at the first unfinished one. What this package holds, by module:

- ``operation``: the operation as a guarded call whose body begins its steps; ``register``:
  the operations a Guard knows, by scope, for reconcile to run again;
- ``steps``: the steps, and ``step_key()`` / ``step_id()``: inside a running step, its
  deterministic downstream key (to send to a remote API as its Idempotency-Key, so a step
  killed after the remote call but before its record is re-sent with the same key and the
  provider dedupes it) and its identity (``name#n``);
- ``pending``, ``reconcile`` and ``stale``: the operator views, which ``guard.pending()``,
  ``guard.reconcile()`` and ``guard.stale()`` (and their async twins) run;
- ``results``: what they answer, as types: ``PendingOperation`` with its ``OperationState``,
  ``Reconciled`` with its ``ReconcileOutcome``, ``StaleTask``;
- ``loops``: ``reconcile_forever`` / ``areconcile_forever``, a worker loop that finishes
  operations whose holders died (the other way is cron running ``mideng operations
  reconcile``);
- ``methods``: the Guard's methods (``Operations``, which ``Guard`` mixes in).

See docs/multi-step-operations.md.
"""

from mideng.operations.loops import areconcile_forever, reconcile_forever
from mideng.operations.results import (
    OperationState,
    PendingOperation,
    Reconciled,
    ReconcileOutcome,
    SeenOperation,
    StaleTask,
)
from mideng.operations.steps import step_id, step_key

__all__ = [
    "OperationState",
    "PendingOperation",
    "ReconcileOutcome",
    "Reconciled",
    "SeenOperation",
    "StaleTask",
    "areconcile_forever",
    "reconcile_forever",
    "step_id",
    "step_key",
]

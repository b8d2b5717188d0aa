"""Deprecated: a batch's store calls are ``mideng.messaging.batch_claims``; this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

from mideng.messaging import batch_claims
from mideng.moved import old_module

__getattr__ = old_module(__name__, dict.fromkeys(("claim_all", "complete_all"), batch_claims))

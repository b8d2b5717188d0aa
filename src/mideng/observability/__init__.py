"""What mideng tells operators: log lines (``logs``), Prometheus metrics (``metrics``),
OpenTelemetry spans (``tracing``); ``watch`` is the switch the Guard looks at.

A leaf: it imports nothing from mideng but ``errors`` and ``context``, and anything may
import it. Metrics and spans are off until enabled, and cost a guarded call one attribute test
while off.
"""

"""What mideng tells operators: log lines (``logs``), Prometheus metrics (``metrics``, recorded
into ``recorder``'s series by ``store_metrics``' counted view of a store and by
``transactional`` for transactional blocks; ``record_gauges`` for what a store holds),
OpenTelemetry spans (``tracing``); ``observers`` holds the switches the Guard looks at.

A leaf: it imports nothing from mideng but ``errors``, ``context`` and ``moved``, and anything
may import it. Metrics and spans are off until enabled, and cost a guarded call one attribute test
while off.
"""

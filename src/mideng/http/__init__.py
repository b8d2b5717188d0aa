"""The HTTP entry layer: Idempotency-Key middleware (ASGI, WSGI, Django), request ids,
anti-resubmit token helpers and per-principal debounce. Framework modules import their
framework lazily: ``mideng.http.asgi`` needs nothing, ``mideng.http.django`` needs Django."""

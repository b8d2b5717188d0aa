"""Who the customer is: the user the ``X-Customer`` header names, made on first sight.

This stands in for the shop's real sign-in (a session, a token) so that the README's curl
commands stay one line. It trusts the header, so use it only where a gateway in front sets
the header itself and drops the client's; otherwise replace it with your authentication.
``@idempotent_view`` keys belong to ``request.user``, whichever middleware sets it.
"""

from django.contrib.auth.middleware import RemoteUserMiddleware


class CustomerHeaderMiddleware(RemoteUserMiddleware):
    header = "HTTP_X_CUSTOMER"

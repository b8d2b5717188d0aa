"""The test project's ASGI application, for a server in another process."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.http.djangoproject.live_settings")
application = get_asgi_application()

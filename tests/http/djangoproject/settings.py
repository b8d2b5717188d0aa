"""Settings of the test project: the idempotency middleware configured the Django way."""

from __future__ import annotations

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "tests.http.djangoproject.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
USE_TZ = True
MIDDLEWARE = [
    "mideng.http.django.IdempotencyMiddleware",
]
MIDENG_HTTP = {
    "guard": "tests.http.djangoproject.views.guard",
    "principal": "tests.http.djangoproject.views.tenant_of",
    "max_body": 1024,
    "max_response": 4096,
    "routes": [],
}

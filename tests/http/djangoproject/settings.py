"""Settings of the test project: the idempotency middleware configured the Django way."""

from __future__ import annotations

from mideng.http.core import Route

SECRET_KEY = "tests-only-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
ROOT_URLCONF = "tests.http.djangoproject.urls"
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
USE_TZ = True
MIDDLEWARE = [
    "mideng.http.django.IdempotencyMiddleware",
    "tests.http.djangoproject.users.header_user",
]
MIDENG_HTTP = {
    "guard": "tests.http.djangoproject.views.guard",
    "principal": "tests.http.djangoproject.views.tenant_of",
    "max_body": 1024,
    "max_response": 4096,
    # The views under /v/ guard themselves (@idempotent_view): the middleware lets them by.
    "routes": [Route("/v/*", guarded=False)],
}
# One template, for a view whose TemplateResponse Django would render after it returns.
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "OPTIONS": {
            "loaders": [("django.template.loaders.locmem.Loader", {"order.txt": "order {{ run }}"})]
        },
    }
]
# DRF without its app, the auth app or templates: JSON in and out, users from BearerUser.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tests.http.djangoproject.users.BearerUser"],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}

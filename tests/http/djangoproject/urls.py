from __future__ import annotations

from django.urls import path

from tests.http.djangoproject import views

urlpatterns = [
    path("orders", views.orders),
    path("status/<int:code>", views.status),
    path("stream", views.stream),
    path("big", views.big),
    path("explode", views.explode),
    path("token", views.issue_token),
    path("submit", views.submit),
    path("create", views.create_once),
]

from __future__ import annotations

from django.urls import include, path

urlpatterns = [path("ops/", include("mideng.dashboard.django"))]

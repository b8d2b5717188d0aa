from __future__ import annotations

from django.urls import path

from tests.http.djangoproject import decorated, views

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

urlpatterns += [
    path("v/fbv", decorated.fbv),
    path("v/afbv", decorated.afbv),
    path("v/templated", decorated.templated),
    path("v/cbv", decorated.Orders.as_view()),
    path("v/cbv/<int:number>", decorated.Order.as_view()),
    path("v/apiview", decorated.ApiOrders.as_view()),
    path("v/viewset/place", decorated.OrderActions.as_view({"post": "place"})),
]

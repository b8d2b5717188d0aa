from django.urls import path

from orders import views

urlpatterns = [
    path("orders", views.create_order, name="create-order"),
    path("orders/<str:number>", views.order_detail, name="order-detail"),
    path("pay/notify", views.pay_notify, name="pay-notify"),
    path("metrics", views.prometheus, name="metrics"),
]

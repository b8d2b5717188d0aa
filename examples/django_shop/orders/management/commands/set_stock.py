"""``python manage.py set_stock SKU QUANTITY PRICE``: put a product on the shelf (or restock it)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orders.models import Stock


class Command(BaseCommand):
    help = "Set a product's units on the shelf and its price in cents."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("sku")
        parser.add_argument("quantity", type=int)
        parser.add_argument("price", type=int, help="in cents")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["quantity"] < 0 or options["price"] < 0:
            self.stderr.write("quantity and price must not be negative")
            raise SystemExit(2)
        stock, _ = Stock.objects.update_or_create(
            sku=options["sku"],
            defaults={"quantity": options["quantity"], "price": options["price"]},
        )
        self.stdout.write(f"{stock.sku}: {stock.quantity} on the shelf at {stock.price} cents")

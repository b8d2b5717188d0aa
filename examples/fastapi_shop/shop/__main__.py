"""``python -m shop setup``: the tables, the outbox, the exchange and queues.
``python -m shop set-stock SKU QUANTITY PRICE``: put a product on the shelf."""

from __future__ import annotations

import asyncio
import sys

from sqlalchemy.dialects.postgresql import insert

from shop.tables import stock
from shop.wiring import create_tables, declare_broker, engine

USAGE = "usage: python -m shop setup | set-stock SKU QUANTITY PRICE"


def main(argv: list[str]) -> int:
    if argv == ["setup"]:
        create_tables()
        asyncio.run(declare_broker())
        print("tables, outbox, exchange and queues are in place")
        return 0
    if len(argv) == 4 and argv[0] == "set-stock" and argv[2].isdigit() and argv[3].isdigit():
        sku, quantity, price = argv[1], int(argv[2]), int(argv[3])
        row = {"sku": sku, "quantity": quantity, "price": price}
        with engine.begin() as conn:
            conn.execute(
                insert(stock).values(**row).on_conflict_do_update(index_elements=["sku"], set_=row)
            )
        print(f"{sku}: {quantity} on the shelf at {price} cents")
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

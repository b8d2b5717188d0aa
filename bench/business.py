"""The business tables the state cases run the primitives on, and the state tests too: orders
(a surrogate id, the business order number, status, amount, version) and stock."""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table


def tables(suffix: str) -> dict[str, Table]:
    """``orders_<suffix>`` and ``stock_<suffix>``, on a MetaData of their own."""
    return business_tables(MetaData(), suffix)


def business_tables(metadata: MetaData, suffix: str) -> dict[str, Table]:
    """``orders_<suffix>`` and ``stock_<suffix>`` on ``metadata``."""
    orders = Table(
        f"orders_{suffix}",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("order_no", String(40), nullable=False, unique=True),
        Column("status", String(20), nullable=False, server_default="NEW"),
        Column("amount", Integer, nullable=False),
        Column("version", Integer, nullable=False, server_default="0"),
        Column("note", String(40)),
    )
    stock = Table(
        f"stock_{suffix}",
        metadata,
        Column("sku", String(40), primary_key=True),
        Column("qty", Integer, nullable=False),
    )
    return {"orders": orders, "stock": stock}

"""``mideng dashboard``: the operators' web pages over a store (and the outbox's database),
served by uvicorn on loopback unless given a token."""

from __future__ import annotations

import os

import click

from mideng.errors import ConfigurationError


@click.command()
@click.option("--store", "store_url", required=True, help="The store's URL.")
@click.option("--db", "db_url", default=None, help="The outbox's database URL (outbox pages).")
@click.option("--outbox-table", default="mideng_outbox", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--actions", is_flag=True, help="Enable operator actions (off: read-only).")
@click.option(
    "--token",
    default=None,
    envvar="MIDENG_DASHBOARD_TOKEN",
    help="Require this token (16+ characters; or MIDENG_DASHBOARD_TOKEN). Needed to listen "
    "beyond loopback.",
)
@click.option(
    "--allow-host",
    "allowed_hosts",
    multiple=True,
    help="A Host header name to answer besides the loopback names (repeatable).",
)
def dashboard(
    store_url: str,
    db_url: str | None,
    outbox_table: str,
    host: str,
    port: int,
    actions: bool,
    token: str | None,
    allowed_hosts: tuple[str, ...],
) -> None:
    """Serve the dashboard (http://127.0.0.1:8765/ by default)."""
    try:
        import uvicorn
    except ImportError as exc:
        raise ConfigurationError("pip install 'mideng[dashboard]'") from exc
    from mideng.dashboard import app
    from mideng.dashboard.settings import LOOPBACK_NAMES

    names = (*LOOPBACK_NAMES, *allowed_hosts)
    served = app(
        store_url,
        db_url,
        outbox_table=outbox_table,
        actions=actions,
        token=token,
        allowed_hosts=names,
    )
    served.settings.check_bind(host)
    click.echo(
        f"mideng dashboard on http://{host}:{port}/ ({'actions on' if actions else 'read-only'})"
    )
    os.environ.setdefault("UVICORN_NO_COLOR", "1")
    uvicorn.run(served, host=host, port=port, log_level="warning", lifespan="on")

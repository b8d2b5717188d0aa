"""What a dashboard opens once from its settings: the Guard over the store and the outbox's
reads, and their closing."""

from __future__ import annotations

from mideng.dashboard.pages import Dashboard
from mideng.dashboard.settings import Settings
from mideng.guard.guard import Guard
from mideng.outbox.survey import OutboxSurvey


class Wired:
    def __init__(self, settings: Settings) -> None:
        store = settings.store
        #: A Guard made here from a URL or a store is closed here; one handed in is its owner's.
        self.owned = not isinstance(store, Guard)
        guard = Guard(store) if not isinstance(store, Guard) else store
        outbox = None if settings.db is None else OutboxSurvey(settings.db, settings.outbox_table)
        self.dashboard = Dashboard(guard, outbox, settings.page_size)

    def close(self) -> None:
        if self.dashboard.outbox is not None:
            self.dashboard.outbox.close()
        if self.owned:
            self.dashboard.guard.close()

    async def aclose(self) -> None:
        if self.dashboard.outbox is not None:
            await self.dashboard.outbox.aclose()
        if self.owned:
            await self.dashboard.guard.aclose()

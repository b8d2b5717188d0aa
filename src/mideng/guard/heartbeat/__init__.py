"""Heartbeats: a claim's lease renewed while its body runs, so a live holder is never taken
over. ``schedule`` says when each renewal is due (the same for both sides) and counts them
(``stats()``); ``threads`` renews for sync bodies (a timer thread and renewal workers per
Guard), ``tasks`` for async bodies (one loop timer per event loop, a task per renewal).

A body shorter than a third of its lease never touches the store for a heartbeat: the sync
side only adds itself to a table the timer thread looks at, the async side only arms a loop
timer. A holder that is killed or stopped stops renewing, so its lease runs out and a take-over
becomes possible.

What a failed renewal means decides whether a live holder stays protected:

- ``LeaseLostError`` (fenced: the record was forgotten, taken over or settled) ends that beat
  only; every other beat goes on.
- Anything else (``StoreUnavailableError`` from a failover, a proxy reset, a timeout; or an
  error nobody expected) is transient: logged, counted, and retried sooner and sooner as the
  lease's end nears, so one lost connection never lets the lease run out. Past the end the beat
  keeps trying: while nobody has taken over, the record is unchanged and a renewal restores it.
- A renewal in flight never delays another beat: the sync side hands due beats to worker
  threads (a hung store call holds one worker), the async side renews each in its own task,
  cancelled when the lease it was protecting has run out.
"""

from mideng.guard.heartbeat.schedule import stats

__all__ = ["stats"]

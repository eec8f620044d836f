"""The Celery worker's broker consumer, surviving a lost Redis (docs/reliability.md).

Celery 5.7.0 with kombu 5.7.0: when the broker connection drops while acks-late tasks are
unacknowledged, `Consumer.on_connection_error_after_connected` first `collect()`s the
connection (which clears its transport's client) and then closes it, and closing restores
the unacked messages through that cleared client: `AttributeError: 'NoneType' object has no
attribute 'hostname'` escapes `ignore_errors` (it only ignores connection errors), and the
worker stops with "Unrecoverable error" instead of reconnecting. Seen in
tests/e2e/test_redis_away.py and the soak. This consumer treats that one failure as the
connection being gone (it is: the reference was already dropped) and carries on, so the
worker reconnects when Redis returns. The unacked messages were in the Redis that went
away; every task is idempotent and the beat passes redo their work.
"""

from __future__ import annotations

import logging

from celery.worker.consumer.consumer import Consumer as CeleryConsumer

log = logging.getLogger(__name__)


class Consumer(CeleryConsumer):
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as error:  # the kombu 5.7.0 close-after-collect failure
            log.warning("broker connection lost; its cleanup failed (%s); reconnecting", error)
            self.connection = None

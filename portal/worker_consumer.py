"""Celery on Redis, surviving a lost Redis (docs/reliability.md).

Celery 5.7.0 with kombu 5.7.0: when the broker connection drops while acks-late tasks are
unacknowledged, the consumer first `collect()`s the connection (which clears its transport's
client) and then closes it; closing restores the unacked messages through that cleared
client, and so does every later ack of a task that was running when the connection
dropped. Each time kombu's `Channel._connparams` reads `None.hostname`: an AttributeError,
which escapes `ignore_errors` and `ack_log_error` (they only catch connection errors), and
the worker stops with "Unrecoverable error" instead of reconnecting. Seen in
tests/e2e/test_redis_away.py and in bench/soak.py's Redis restarts.

Two guards, both narrow:
- `_connparams` on a channel whose connection was already collected raises redis's
  `ConnectionError` (what it is: the connection is gone), which kombu and Celery handle as
  such ("Couldn't ack", the consumer reconnects);
- the worker's consumer (`CELERY_WORKER_CONSUMER`) treats that same AttributeError during its
  own cleanup as the connection being gone, should another path reach it.

The unacked messages were in the Redis that went away; every task is idempotent and the beat
passes redo their work. Drop this module once kombu handles a collected channel itself.
"""

from __future__ import annotations

import logging
from typing import Any

import redis.exceptions
from celery.worker.consumer.consumer import Consumer as CeleryConsumer
from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

# kombu's redis Channel is untyped where mypy looks: reach its private method dynamically.
_connparams = getattr(kombu_redis.Channel, "_connparams")  # noqa: B009


def _connparams_or_gone(self: Any, asynchronous: bool = False) -> Any:
    if getattr(self.connection, "client", None) is None:
        raise redis.exceptions.ConnectionError("the broker connection was already closed")
    return _connparams(self, asynchronous=asynchronous)


setattr(kombu_redis.Channel, "_connparams", _connparams_or_gone)  # noqa: B010


class Consumer(CeleryConsumer):
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except AttributeError as error:  # the kombu 5.7.0 close-after-collect failure
            log.warning("broker connection lost; its cleanup failed (%s); reconnecting", error)
            self.connection = None

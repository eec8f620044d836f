from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "portal.realtime"
    label = "portal_realtime"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing the receivers connects them. Not at the top of this module: they load
        # models, which may load only once the app registry is ready (that is `ready()`).
        from portal.realtime import (
            agent,  # noqa: F401 - connects the agents' nudge receiver
            receivers,  # noqa: F401 - connects the browsers' live updates
        )

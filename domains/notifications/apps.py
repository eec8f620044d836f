from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "domains.notifications"
    label = "notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing the receivers connects them. Not at the top of this module: they load
        # models, which may load only once the app registry is ready (that is `ready()`).
        from domains.notifications import receivers  # noqa: F401

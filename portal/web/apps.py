from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "portal.web"
    label = "portal_web"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal import signin  # noqa: F401 - connects the failed-sign-in counter
        from portal.web import checks  # noqa: F401 - registers the static manifest check

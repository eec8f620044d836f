from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "domains.agents"
    label = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Importing the receivers connects them. Not at the top of this module: they load
        # models, which may load only once the app registry is ready (that is `ready()`).
        from domains.agents import checks, receivers  # noqa: F401

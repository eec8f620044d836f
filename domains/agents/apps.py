from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "domains.agents"
    label = "agents"
    default_auto_field = "django.db.models.BigAutoField"

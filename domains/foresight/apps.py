from django.apps import AppConfig


class ForesightConfig(AppConfig):
    name = "domains.foresight"
    label = "foresight"
    default_auto_field = "django.db.models.BigAutoField"

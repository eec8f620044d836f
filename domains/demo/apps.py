from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "domains.demo"
    label = "demo"
    default_auto_field = "django.db.models.BigAutoField"

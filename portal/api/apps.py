from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "portal.api"
    label = "portal_api"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "portal.web"
    label = "portal_web"
    default_auto_field = "django.db.models.BigAutoField"

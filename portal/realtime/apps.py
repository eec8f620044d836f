from django.apps import AppConfig


class RealtimeConfig(AppConfig):
    name = "portal.realtime"
    label = "portal_realtime"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class ComputedomainsConfig(AppConfig):
    name = "domains.computedomains"
    label = "computedomains"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "portal.receipts"
    label = "portal_receipts"
    default_auto_field = "django.db.models.BigAutoField"

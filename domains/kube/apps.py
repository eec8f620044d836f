from django.apps import AppConfig


class KubeConfig(AppConfig):
    name = "domains.kube"
    label = "kube"
    default_auto_field = "django.db.models.BigAutoField"

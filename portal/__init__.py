"""Domain Portal: the Django project and every interface to the business."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]

"""An operator's replacement of a placed domain's tray (`computedomains/{name}/replace/`)."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.serializers.common import StrictSerializer


class ReplaceInput(StrictSerializer):
    tray = serializers.CharField(help_text="The domain's tray to let go of (its hostname).")
    # `with` is a Python keyword: the field is declared below under its API name.


ReplaceInput._declared_fields["with"] = serializers.CharField(
    help_text="The free tray of the same clique that takes its place (its hostname)."
)

"""Validators shared by models, services, forms and serializers."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MAX = 63


def validate_dns1123_label(value: str) -> None:
    """Kubernetes' rule for names like namespaces and ComputeDomains."""
    if not value or len(value) > DNS1123_LABEL_MAX or not DNS1123_LABEL.match(value):
        raise ValidationError(
            "must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit",
            code="invalid_name",
        )

# SPDX-License-Identifier: Apache-2.0
"""A claim's opaque config for the driver, as the domain's ResourceClaimTemplate writes it:
`{apiVersion: portal.domains/v1, kind: ComputeDomainChannelConfig, domainID,
allocationMode}`, decoded strictly."""

from __future__ import annotations

from nodeagent.dra import CONFIG_API_VERSION, CONFIG_KIND, DRIVER_NAME


class BadConfig(ValueError):
    """The config is not one this driver takes; the message names what is wrong."""


# What a ComputeDomainChannelConfig holds (the domain's ResourceClaimTemplate writes it).
CONFIG_FIELDS = ("apiVersion", "kind", "domainID", "allocationMode")
ALLOCATION_MODES = ("Single", "All")


def channel_config(parameters: object) -> str:
    """The domain uid of one opaque config of our driver, decoded strictly as NVIDIA's
    driver decodes its own: the user may have written it by hand, and a field this driver
    does not know (a typo, a setting of another driver) is refused, naming it, rather than
    ignored. BadConfig is permanent: the claim must be made again."""
    why = _config_error(parameters)
    if why:
        raise BadConfig(
            f"its opaque config for driver {DRIVER_NAME} is not a {CONFIG_API_VERSION} "
            f"{CONFIG_KIND}: {why}"
        )
    assert isinstance(parameters, dict)  # _config_error said so
    return str(parameters["domainID"])


def _config_error(parameters: object) -> str:
    if not isinstance(parameters, dict):
        return "its parameters are not an object"
    unknown = sorted(set(parameters) - set(CONFIG_FIELDS))
    if unknown:
        return (
            f'strict decoding error: unknown field "{unknown[0]}" (a {CONFIG_KIND} has '
            f"{', '.join(CONFIG_FIELDS)})"
        )
    if parameters.get("apiVersion") != CONFIG_API_VERSION or parameters.get("kind") != CONFIG_KIND:
        return f"apiVersion {parameters.get('apiVersion')!r}, kind {parameters.get('kind')!r}"
    if not isinstance(parameters.get("domainID"), str) or not parameters["domainID"]:
        return "domainID must name the ComputeDomain (its uid)"
    if parameters.get("allocationMode", "Single") not in ALLOCATION_MODES:
        return f"allocationMode must be one of {', '.join(ALLOCATION_MODES)}"
    return ""

"""The form a tenant requests a domain with: one size (trays, GPUs or follow the workload),
its placement and how many racks or cliques it spans. It only parses input; the services
validate it for real (`apply_error` puts their errors back on the field they name)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from domains.computedomains.models import AllocationMode, PlacementConstraint, ReplacePolicy
from domains.computedomains.specs import DomainSpec

# A GB200 compute tray has 4 GPUs; a GPU count asked for is rounded up to whole trays.
GPUS_PER_TRAY = 4
SIZE_CHOICES = [("trays", "Trays"), ("gpus", "GPUs"), ("workload", "Follow the workload")]


class DomainRequestForm(forms.Form):
    name = forms.CharField(
        label="Name",
        max_length=63,
        help_text="Lowercase letters, digits and '-' (a Kubernetes name).",
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    size = forms.ChoiceField(
        label="Size",
        choices=SIZE_CHOICES,
        initial="trays",
        required=False,
        widget=forms.RadioSelect(attrs={"data-size-choice": ""}),
        help_text="Follow the workload: nothing is reserved up front; a tray joins with the "
        "first pod holding the domain's claim and leaves with its last (numNodes 0).",
    )
    num_nodes = forms.IntegerField(
        label="Trays",
        min_value=0,
        max_value=1000,
        required=False,
        initial=2,
        help_text=f"{GPUS_PER_TRAY} GPUs per tray; 0 follows the workload.",
        widget=forms.NumberInput(attrs={"data-size": "trays"}),
    )
    gpus = forms.IntegerField(
        label="GPUs",
        min_value=1,
        max_value=1000 * GPUS_PER_TRAY,
        required=False,
        help_text="Rounded up to whole trays.",
        widget=forms.NumberInput(attrs={"data-size": "gpus"}),
    )
    span_racks = forms.IntegerField(
        label="Span racks",
        min_value=0,
        max_value=1000,
        required=False,
        help_text="Empty: one rack when it fits, else the fewest racks that hold it. "
        "2 or more: that many racks, one NVLink clique in each, the trays split evenly "
        "(one IMEX ensemble and channel per clique).",
        widget=forms.NumberInput(attrs={"data-placed": ""}),
    )
    span_cliques = forms.IntegerField(
        label="Span cliques",
        min_value=0,
        max_value=1000,
        required=False,
        help_text="Or a number of NVLink cliques (a rack may hold more than one); "
        "not both. Pods talk over NVLink only inside their own clique.",
        widget=forms.NumberInput(attrs={"data-placed": ""}),
    )
    allocation_mode = forms.ChoiceField(
        choices=AllocationMode.choices,
        initial=AllocationMode.SINGLE,
        help_text="Single: one IMEX channel. All: every channel on the trays.",
    )
    placement_constraint = forms.ChoiceField(
        label="Placement", choices=PlacementConstraint.choices, initial=PlacementConstraint.ANY
    )
    placement_target = forms.CharField(
        label="Clique or rack",
        required=False,
        max_length=120,
        widget=forms.TextInput(attrs={"list": "targets", "autocomplete": "off"}),
        help_text="The clique label/name or rack name, when placement is not 'any'.",
    )
    lifetime_hours = forms.IntegerField(
        label="Lifetime (hours)",
        required=False,
        min_value=1,
        max_value=24 * 365,
        help_text="Empty: the portal's default.",
    )
    replace_policy = forms.ChoiceField(
        label="A tray lost",
        choices=ReplacePolicy.choices,
        initial=ReplacePolicy.AUTO,
        required=False,
        help_text="When a tray of the domain is down, or its agent silent, for the failover "
        "grace: a free tray of its clique takes its place, or an operator picks one.",
    )

    def clean(self) -> dict[str, Any]:
        """One size, as chosen: a value in a field the choice leaves out is an error on
        that field, never silently dropped (the page disables those fields)."""
        super().clean()
        data = self.cleaned_data
        trays, gpus = data.get("num_nodes"), data.get("gpus")
        size = data.get("size") or ("gpus" if gpus is not None and trays is None else "trays")
        if size == "trays" and trays == 0:
            # 0 trays follows the workload: the form shown again must say so, radio included.
            size = "workload"
            shown = dict(self.data.items())
            shown["size"], shown["num_nodes"] = "workload", ""
            self.data = shown
        data["size"] = size
        if size == "workload":
            if trays:
                self.add_error("num_nodes", "Leave empty (or 0): the size follows the workload.")
            if gpus is not None:
                self.add_error("gpus", "Leave empty: the size follows the workload.")
            data["num_nodes"] = 0
        elif size == "gpus":
            if trays is not None:
                self.add_error("num_nodes", "Leave empty when the size is in GPUs.")
            elif gpus is not None:
                data["num_nodes"] = -(-gpus // GPUS_PER_TRAY)
            elif "gpus" not in self.errors:
                self.add_error("gpus", ValidationError("Say how many GPUs.", code="required"))
        else:
            if gpus is not None:
                self.add_error("gpus", "Leave empty when the size is in trays.")
            if trays is None and "num_nodes" not in self.errors:
                self.add_error(
                    "num_nodes",
                    ValidationError(
                        "Say how many trays (or GPUs); 0 follows the workload.", code="required"
                    ),
                )
        return data

    def incomplete_only(self) -> bool:
        """Not named yet and every error a field still to fill in: the form has just
        opened, nothing typed is wrong yet."""
        if str(self.data.get("name", "")).strip():
            return False
        return all(
            e.code == "required" for errors in self.errors.as_data().values() for e in errors
        )

    def to_spec(self) -> DomainSpec:
        data = self.cleaned_data
        hours = data.get("lifetime_hours")
        return DomainSpec(
            name=data["name"].strip(),
            num_nodes=data["num_nodes"],
            allocation_mode=data["allocation_mode"],
            placement_constraint=data["placement_constraint"],
            placement_target=(data.get("placement_target") or "").strip(),
            lifetime=timedelta(hours=hours) if hours else None,
            replace_policy=data.get("replace_policy") or ReplacePolicy.AUTO,
            span_cliques=data.get("span_cliques") or 0,
            span_racks=data.get("span_racks") or 0,
        )

"""`manage.py openapi [--check]`: write the API's OpenAPI schema to docs/openapi.yaml, or
fail with a diff while the committed copy differs from what the code generates."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.api.openapi import (
    SchemaWarnings,
    description_coverage,
    drift,
    generate,
    render,
    schema_file,
)


class Command(BaseCommand):
    help = "Write docs/openapi.yaml from the code (--check: only compare, and show the diff)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help="Change nothing; exit 1 with a diff when docs/openapi.yaml is out of date.",
        )

    def handle(self, *args: Any, check: bool = False, **options: Any) -> None:
        try:
            schema = generate()
        except SchemaWarnings as exc:
            raise CommandError(f"the schema generator warned:\n{exc}") from exc
        text, path = render(schema), schema_file()
        described, total = description_coverage(schema)
        figure = f"fields described: {described} of {total} ({100 * described / total:.1f} %)"
        committed = path.read_text() if path.exists() else ""
        if check:
            if committed != text:
                raise CommandError(
                    f"{path.name} is out of date; run `manage.py openapi`:\n"
                    + drift(committed, text)
                )
            self.stdout.write(f"{path.name} is up to date; {figure}")
            return
        path.write_text(text)
        self.stdout.write(f"wrote {path.name}; {figure}")

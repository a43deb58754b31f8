"""``linectl lines credentials ID [--rotate]``: the URL a line's processes log in
with (PRODUCT.md, "Line credentials"), on the database ``linectl up`` uses
(migrated first, the line registered and its login's password set). ``--rotate``
gives the line a new password: stored, and set on its role at once.

A line's running processes keep the sessions they have, and open no new one with
the old password: restart them with the new URL (``linectl up`` reads it at its
start; a line host given the URL needs it in its ``LINECTL_DATABASE_URL`` or
secrets file)."""

from __future__ import annotations

import sys

from services.stack.commands.database import database_url, stop_if_started
from services.stack.line_credentials import ensure_logins, password_file
from services.stack.migrate import register_plant, upgrade
from shared.config import Settings
from shared.plant import PlantError, plant_of


def run(settings: Settings, args) -> int:
    plant = plant_of(settings)
    if args.line not in plant.line_ids:
        raise PlantError(f"{args.line}: the plant has no such line (its lines: {', '.join(plant.line_ids)})")
    if not settings.db_roles:
        print("linectl lines: LINECTL_DB_ROLES is off: the lines log in as LINECTL_DATABASE_URL's user",
              file=sys.stderr)
        return 1
    url, server = database_url(settings)
    try:
        upgrade(url)
        register_plant(url, plant)
        line_url = ensure_logins(url, settings, plant, [args.line], rotate=args.rotate)[args.line]
    finally:
        stop_if_started(server)
    print(line_url)
    if args.rotate:
        print(f"line {args.line}: new password, kept in {password_file(settings, args.line)} and set on its role."
              " Its running processes keep their open sessions but can open no new one: restart them"
              " (linectl up; on a line host, with this URL)", file=sys.stderr)
    return 0

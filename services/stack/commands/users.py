"""``linectl users add|passwd|disable|enable|list``: local users, on the
database ``linectl up`` uses (migrated first). Passwords come from a prompt
(twice) or, with ``--password-stdin``, from the first line of stdin; they are
never echoed, logged or accepted on the command line."""

from __future__ import annotations

import getpass
import sys

from services.identity.passwords import PasswordRefused, Passwords, check_new_password
from services.identity.users import Actor, UserError, UserStore
from services.stack.commands.database import database_url, stop_if_started
from services.stack.migrate import upgrade
from shared.config import Settings
from shared.db.engine import make_engine
from shared.plant import PlantError, plant_of


def _password(args) -> str:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("password: ")
    check_new_password(first)  # say so before asking again
    if getpass.getpass("again: ") != first:
        raise PasswordRefused("the two passwords differ")
    return first


def _print_list(store: UserStore) -> None:
    print(f"{'name':<24} {'role':<9} {'state':<9} {'lines':<20} display name")
    for user in store.list():
        state = "disabled" if user["disabled"] else "enabled"
        lines = ",".join(user["lines"]) or "(all)"
        print(f"{user['name']:<24} {user['role']:<9} {state:<9} {lines:<20} {user['displayName']}")


def _lines(settings: Settings, given: str) -> list[str]:
    """``--lines``' ids, each a line of the plant (a typo would leave the user no line at all)."""
    wanted = [part.strip() for part in given.split(",") if part.strip()]
    if not wanted:
        return []
    known = plant_of(settings).line_ids
    unknown = [line_id for line_id in wanted if line_id not in known]
    if unknown:
        raise UserError(f"--lines {','.join(unknown)}: no such line (the lines: {', '.join(known)})")
    return wanted


def _apply(store: UserStore, settings: Settings, args, actor: Actor) -> str | None:
    verb = args.users_command
    if verb == "add":
        lines = _lines(settings, args.lines)  # before the password prompt
        store.add(args.name, args.role, _password(args), actor, lines=lines, display_name=args.display_name)
        return f"user {args.name} added ({args.role})"
    if verb == "passwd":
        store.set_password(args.name, _password(args), actor)
        return f"password of {args.name} changed; their sessions have ended"
    if verb in ("disable", "enable"):
        store.set_disabled(args.name, verb == "disable", actor)
        return f"user {args.name} {verb}d" + ("; their sessions have ended" if verb == "disable" else "")
    _print_list(store)
    return None


def run(settings: Settings, args) -> int:
    url, server = database_url(settings)
    engine = None
    try:
        upgrade(url)
        engine = make_engine(url, pool_size=1)
        store = UserStore(engine, Passwords.from_settings(settings))
        said = _apply(store, settings, args, Actor(f"linectl users ({getpass.getuser()})", "admin", "console"))
    except (UserError, PasswordRefused, PlantError) as exc:
        print(f"linectl users: {exc}", file=sys.stderr)
        return 1
    finally:
        if engine is not None:
            engine.dispose()
        stop_if_started(server)
    if said:
        print(said)
    return 0

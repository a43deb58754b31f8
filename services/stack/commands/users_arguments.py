"""``linectl users``' arguments, apart from the command (``users``), so that
building the CLI's parser, which every ``linectl`` process does, imports no
database code: the command's own imports (SQLAlchemy, Alembic, the people's
models) were a third of a second of every ``linectl sim`` start."""

from __future__ import annotations

from shared.config import ROLES


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="users_command", required=True)
    add = sub.add_parser("add", help="add a user")
    add.add_argument("name")
    add.add_argument("--role", required=True, choices=ROLES)
    add.add_argument("--lines", default="",
                     help="comma-separated line ids the user is limited to (default: every line)")
    add.add_argument("--display-name", default="", help="the name the page shows")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    passwd = sub.add_parser("passwd", help="set a user's password (ends their sessions)")
    passwd.add_argument("name")
    passwd.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line")
    for verb, text in (("disable", "disable a user (ends their sessions)"), ("enable", "enable a user again")):
        sub.add_parser(verb, help=text).add_argument("name")
    sub.add_parser("list", help="list users")

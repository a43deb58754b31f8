"""Local users: add, change password, disable, enable, list. Every change is
audited, and a disable or a new password ends the user's sessions at once
(their websockets close: ``gateway.session_watch``)."""

from __future__ import annotations

import dataclasses
import re

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError

from services.identity import audit
from services.identity.passwords import Passwords
from services.identity.sessions import SessionStore
from shared.db.models import USER_ROLES, PeopleUser

TABLE = PeopleUser.__table__
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
LINE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class UserError(ValueError):
    """A user change that cannot be made (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Actor:
    """Who makes a change, as the audit records it."""

    name: str
    role: str | None = None
    source: str | None = None


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name or ""):
        raise UserError("a user name is 1..64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit")
    return name


def check_lines(lines) -> tuple[str, ...]:
    lines = tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))
    bad = [line for line in lines if not LINE_PATTERN.match(line)]
    if bad:
        raise UserError(f"not a line id: {bad[0]!r}")
    return lines


class UserStore:
    def __init__(self, engine, passwords: Passwords):
        self.engine = engine
        self.passwords = passwords

    def find(self, conn, name: str):
        return conn.execute(select(TABLE).where(TABLE.c.name == name)).first()

    def count(self) -> int:
        with self.engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(TABLE))

    def add(self, name: str, role: str, password: str, actor: Actor, *, lines=(), display_name: str = "") -> None:
        check_name(name)
        if role not in USER_ROLES:
            raise UserError(f"unknown role {role!r} (roles: {', '.join(USER_ROLES)})")
        if len(display_name) > 200:
            raise UserError("a display name has at most 200 characters")
        lines = check_lines(lines)
        password_hash = self.passwords.hash(password)
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(TABLE).values(name=name, role=role, lines=list(lines),
                                                  display_name=display_name, password_hash=password_hash))
                self._audit(conn, actor, "UserAdded", name, {"role": role, "lines": list(lines)})
        except IntegrityError:
            raise UserError(f"user {name!r} exists already") from None

    def set_password(self, name: str, password: str, actor: Actor) -> None:
        password_hash = self.passwords.hash(password)
        self._change(name, actor, "PasswordChanged", password_hash=password_hash)

    def set_disabled(self, name: str, disabled: bool, actor: Actor) -> None:
        self._change(name, actor, "UserDisabled" if disabled else "UserEnabled", disabled=disabled)

    def _change(self, name: str, actor: Actor, action: str, **values) -> None:
        with self.engine.begin() as conn:
            changed = conn.execute(update(TABLE).where(TABLE.c.name == name)
                                   .values(changed_at=func.now(), **values)).rowcount
            if not changed:
                raise UserError(f"no user {name!r}")
            ended = SessionStore.end_for_user(conn, name) if action != "UserEnabled" else 0
            self._audit(conn, actor, action, name, {"sessionsEnded": ended})

    def list(self) -> list[dict]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(TABLE).order_by(TABLE.c.name)).all()
        return [{"name": r.name, "displayName": r.display_name, "role": r.role, "lines": list(r.lines),
                 "disabled": r.disabled} for r in rows]

    @staticmethod
    def _audit(conn, actor: Actor, action: str, name: str, detail: dict) -> None:
        audit.record(conn, audit.AuditEntry(actor.name, actor.role, action, "DONE", "user", name,
                                            source=actor.source, detail=detail))

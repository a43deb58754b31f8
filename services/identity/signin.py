"""One sign-in attempt: the throttle first, then the local user, then LDAP
(when configured, for names that are not local users), then a new session.

A wrong name, a wrong password and a disabled user fail alike
(:class:`InvalidCredentials`), after the same argon2 work. Each attempt is
audited: a sign-in, a failed sign-in, or a throttled one. The password is
never logged, stored or put in an exception."""

from __future__ import annotations

from services.identity import audit
from services.identity.passwords import MAX_PASSWORD_LENGTH, Passwords
from services.identity.sessions import Person, Session, SessionStore
from services.identity.throttle import Throttle
from services.identity.users import UserStore
from shared.errors import CodedError

MAX_USER_NAME = 200


class InvalidCredentials(CodedError):
    """Wrong user name or password, or a disabled user (which one is not said)."""

    def __init__(self):
        super().__init__("INVALID_CREDENTIALS", "wrong user name or password")


class TooManyAttempts(CodedError):
    """Too many failed sign-ins for this user name: none is tried for ``retry_after`` s."""

    def __init__(self, retry_after: int):
        super().__init__("TOO_MANY_ATTEMPTS", f"too many failed sign-ins; retry after {retry_after} s")
        self.retry_after = retry_after


class SignIn:
    def __init__(self, engine, passwords: Passwords, sessions: SessionStore, *, directory=None,
                 throttle: Throttle | None = None):
        self.engine = engine
        self.passwords = passwords
        self.users = UserStore(engine, passwords)
        self.sessions = sessions
        self.directory = directory  # services.identity.ldap.Directory, or None
        self.throttle = throttle or Throttle()

    def attempt(self, user_name: str, password: str, source: str | None) -> tuple[str, Session]:
        """The cookie's secret and the new session; raises InvalidCredentials or TooManyAttempts."""
        name = user_name[:MAX_USER_NAME]
        with self.engine.begin() as conn:
            # Counted as a failure before the check, under a lock per name: attempts
            # made at once (any worker) each see the ones before; a success clears them.
            self.throttle.lock(conn, name)
            retry_after = self.throttle.retry_after(conn, name)
            if retry_after is not None:
                self._audit(conn, name, None, "SignIn", "THROTTLED", source)
            else:
                self.throttle.failed(conn, name)
        if retry_after is not None:
            raise TooManyAttempts(retry_after)
        person = self._check(name, password[:MAX_PASSWORD_LENGTH + 1])
        with self.engine.begin() as conn:
            if person is None:
                self.throttle.forget_old(conn)
                self._audit(conn, name, None, "SignIn", "INVALID_CREDENTIALS", source)
            else:
                self.throttle.cleared(conn, name)
                secret, session = self.sessions.begin(conn, person)
                self._audit(conn, person.name, person.role, "SignIn", "DONE", source, person.source)
        if person is None:
            raise InvalidCredentials()
        return secret, session

    def _check(self, name: str, password: str) -> Person | None:
        with self.engine.connect() as conn:
            row = self.users.find(conn, name)
        matches = self.passwords.verify(row.password_hash if row is not None else None, password)
        if row is not None:
            if matches and not row.disabled:
                return Person(row.name, row.display_name, row.role, tuple(row.lines), "local")
            return None
        if self.directory is not None and password:
            return self.directory.authenticate(name, password)
        return None

    def sign_out(self, session: Session, source: str | None) -> None:
        if self.sessions.end(session.key):
            audit.record_now(self.engine, audit.AuditEntry(
                session.person.name, session.person.role, "SignOut", "DONE", source=source))

    @staticmethod
    def _audit(conn, actor, role, action, outcome, source, how: str | None = None) -> None:
        detail = {"via": how} if how else {}
        audit.record(conn, audit.AuditEntry(actor or "(empty)", role, action, outcome, source=source,
                                            detail=detail))

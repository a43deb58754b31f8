"""``Identity``: what a gateway process holds of people: password checks,
sessions, sign-in (with LDAP when configured) and the ended-session watch."""

from __future__ import annotations

from services.identity.ldap import Directory
from services.identity.passwords import Passwords
from services.identity.sessions import SessionStore
from services.identity.signin import SignIn
from services.identity.watch import SessionWatch


class Identity:
    def __init__(self, engine, settings):
        self.engine = engine
        self.passwords = Passwords.from_settings(settings)
        self.sessions = SessionStore.from_settings(engine, settings)
        directory = Directory.from_settings(settings) if settings.ldap_url else None
        self.sign_in = SignIn(engine, self.passwords, self.sessions, directory=directory)
        self._watch = None

    def watch(self, on_ended) -> SessionWatch:
        """Start calling ``on_ended`` with the credentials of sessions that end."""
        if self._watch is None:
            self._watch = SessionWatch(self.sessions, on_ended).start()
        return self._watch

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()

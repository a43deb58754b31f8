"""LDAP / Active Directory sign-in (ldap3): search the user with the service
account, bind as the user with their password (never stored), take the role
from the first listed group they belong to. A user in none cannot sign in.

The user name goes into the search filter escaped (RFC 4515), so ``*)(uid=*``
matches nobody. ``ldaps://`` or StartTLS (``LINECTL_LDAP_STARTTLS``) with the
server's certificate checked; the directory's answers are never logged with
a password."""

from __future__ import annotations

import ipaddress
import logging
import ssl

import ldap3.core.tls
from ldap3 import BASE, NONE, SUBTREE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars

from services.identity.sessions import Person

log = logging.getLogger(__name__)
TIMEOUT_SECONDS = 5

_match_name = ldap3.core.tls.match_hostname


def _match_hostname(certificate: dict, host: str) -> None:
    """ldap3 checks the server's name itself. Python 3.12 removed ssl.match_hostname,
    and ldap3's stand-in knows no IP Address entry, so a directory reached by its
    address (``ldaps://10.0.0.5``) would always fail its check there. An address is
    matched against the certificate's IP Address entries, a name as ldap3 does."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return _match_name(certificate, host)
    for kind, value in certificate.get("subjectAltName", ()):
        if kind == "IP Address" and ipaddress.ip_address(value.strip()) == address:
            return None
    raise ldap3.core.tls.CertificateError(f"the certificate does not name {host}")  # the class ldap3 catches


ldap3.core.tls.match_hostname = _match_hostname


class Directory:
    def __init__(self, url: str, *, starttls: bool, bind_dn: str | None, bind_password: str | None,
                 user_base: str, user_filter: str, role_groups, ca_file=None):
        tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=str(ca_file) if ca_file else None)
        self.server = Server(url, use_ssl=url.lower().startswith("ldaps://"), tls=tls, get_info=NONE,
                             connect_timeout=TIMEOUT_SECONDS)
        self.starttls = starttls
        self.bind_dn, self.bind_password = bind_dn, bind_password
        self.user_base, self.user_filter = user_base, user_filter
        self.role_groups = tuple(role_groups)

    @classmethod
    def from_settings(cls, s) -> Directory:
        return cls(s.ldap_url, starttls=s.ldap_starttls, bind_dn=s.ldap_bind_dn, bind_password=s.ldap_bind_password,
                   user_base=s.ldap_user_base, user_filter=s.ldap_user_filter, role_groups=s.ldap_role_groups,
                   ca_file=s.ldap_ca_file)

    def _connect(self, user: str | None, password: str | None) -> Connection | None:
        conn = Connection(self.server, user=user, password=password, raise_exceptions=False,
                          receive_timeout=TIMEOUT_SECONDS, read_only=True)
        try:
            conn.open()
            if self.starttls and not conn.start_tls():
                log.warning("LDAP: StartTLS refused by %s", self.server.host)
                return None
            if conn.bind():
                return conn
        except LDAPException as exc:
            log.warning("LDAP: %s at %s", type(exc).__name__, self.server.host)
        try:
            conn.unbind()
        except LDAPException:  # a connection that failed half-way may have no socket left to say goodbye on
            pass
        return None

    def authenticate(self, user_name: str, password: str) -> Person | None:
        """The person, if the directory knows the name, the password binds, and a role group has them."""
        if not user_name or not password:
            return None  # an empty password would be an unauthenticated (anonymous) bind
        search = self._connect(self.bind_dn, self.bind_password)
        if search is None:
            log.warning("LDAP: the search account could not bind")
            return None
        try:
            found = self._find(search, user_name)
            if found is None:
                return None
            dn, display_name = found
            as_user = self._connect(dn, password)
            if as_user is None:
                return None
            as_user.unbind()
            role = self._role(search, dn, user_name)
        finally:
            search.unbind()
        return None if role is None else Person(user_name, display_name, role, (), "ldap")

    def _find(self, conn: Connection, user_name: str) -> tuple[str, str] | None:
        query = self.user_filter.replace("{username}", escape_filter_chars(user_name))
        conn.search(self.user_base, query, SUBTREE, attributes=["displayName", "cn"], size_limit=2)
        if len(conn.entries) != 1:
            return None  # nobody, or a filter that matches more than one person
        entry = conn.entries[0]
        display = entry.displayName.value if "displayName" in entry else None
        display = display or (entry.cn.value if "cn" in entry else None) or user_name
        return entry.entry_dn, str(display if not isinstance(display, list) else display[0])

    def _role(self, conn: Connection, dn: str, user_name: str) -> str | None:
        member = (f"(|(member={escape_filter_chars(dn)})(uniqueMember={escape_filter_chars(dn)})"
                  f"(memberUid={escape_filter_chars(user_name)}))")
        for role, group_dn in self.role_groups:
            if conn.search(group_dn, member, BASE, attributes=[]) and conn.entries:
                return role
        return None

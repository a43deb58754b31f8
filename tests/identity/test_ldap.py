"""LDAP sign-in against a real slapd: search with the service account, bind as
the user, role from the group; StartTLS and ldaps://; nobody outside the role
groups, and no filter injection."""

from __future__ import annotations

import ldap3.core.tls
import pytest

from services.identity.ldap import Directory, _match_hostname
from shared.config import load_settings
from tests.identity.slapd import PEOPLE, slapd  # noqa: F401 - the fixture


def directory(server, **how) -> Directory:
    return Directory.from_settings(load_settings(server.settings(**how)))


def test_an_ldap_user_signs_in_over_starttls_and_ldaps_with_the_role_of_their_group(slapd):  # noqa: F811
    for ldap in (directory(slapd, starttls=True), directory(slapd, url=f"ldaps://127.0.0.1:{slapd.tls_port}")):
        person = ldap.authenticate("ann", PEOPLE["ann"])
        assert (person.name, person.role, person.display_name, person.source) == \
            ("ann", "operator", "Ann Example", "ldap")
        assert ldap.authenticate("ann", "not ann's password") is None


def test_an_ldap_user_outside_every_role_group_cannot_sign_in(slapd):  # noqa: F811
    assert directory(slapd).authenticate("ben", PEOPLE["ben"]) is None


def test_a_filter_injection_in_the_user_name_finds_nobody(slapd):  # noqa: F811
    ldap = directory(slapd)
    assert ldap.authenticate("*)(uid=*", PEOPLE["ann"]) is None
    # A wildcard would find exactly ann, and her password would then bind: escaped, it is a name.
    assert ldap.authenticate("a*", PEOPLE["ann"]) is None
    assert ldap.authenticate("ann", "") is None  # an empty password is an anonymous bind, not a sign-in


def test_a_directory_reached_by_its_address_is_checked_against_the_certificates_addresses():
    """Python 3.12+ has no ssl.match_hostname and ldap3's stand-in knows no IP Address
    entry: an ldaps:// or StartTLS directory named by its address failed there."""
    certificate = {"subjectAltName": (("IP Address", "127.0.0.1"), ("DNS", "ldap.example.org"))}
    assert _match_hostname(certificate, "127.0.0.1") is None
    assert _match_hostname(certificate, "ldap.example.org") is None
    for other in ("127.0.0.2", "other.example.org"):
        with pytest.raises(ldap3.core.tls.CertificateError):
            _match_hostname(certificate, other)

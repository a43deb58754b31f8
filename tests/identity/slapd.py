"""A real OpenLDAP server (Debian's ``slapd``) for the LDAP tests: its own
config and database under the test's directory, ``ldap://`` and ``ldaps://``
on free ports, a self-signed certificate (StartTLS and ldaps), a search
account, two people and two role groups. Skips without slapd, unless
``LINECTL_REQUIRE_SLAPD`` (set by .ci/run) says it must be there."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from tests.identity.certs import self_signed
from tests.support.ports import free_port
from tests.support.processes import kill_group
from tests.support.waiting import wait_for

SLAPD = shutil.which("slapd") or ("/usr/sbin/slapd" if Path("/usr/sbin/slapd").exists() else None)
BASE = "dc=example,dc=org"
ROOT_DN, ROOT_PASSWORD = f"cn=admin,{BASE}", "root-secret-0123"
SEARCH_DN, SEARCH_PASSWORD = f"cn=search,{BASE}", "search-secret-0123"
GROUPS = f"ou=groups,{BASE}"
ROLE_GROUPS = f"operator=cn=operators,{GROUPS};admin=cn=admins,{GROUPS}"
PEOPLE = {"ann": "ann's long password", "ben": "ben's long password"}  # ben is in no role group

CONFIG = """
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
include /etc/ldap/schema/nis.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {dir}/slapd.pid
TLSCertificateFile {cert}
TLSCertificateKeyFile {key}
database mdb
maxsize 10485760
suffix "{base}"
rootdn "{root_dn}"
rootpw {root_password}
directory {dir}/db
access to attrs=userPassword by self read by anonymous auth by * none
access to * by dn.exact="{search_dn}" read by self read by * none
"""


def _ldif() -> str:
    entries = [f"dn: {BASE}\nobjectClass: dcObject\nobjectClass: organization\no: example\ndc: example",
               f"dn: ou=people,{BASE}\nobjectClass: organizationalUnit\nou: people",
               f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups",
               f"dn: {SEARCH_DN}\nobjectClass: person\ncn: search\nsn: search\nuserPassword: {SEARCH_PASSWORD}"]
    for uid, password in PEOPLE.items():
        entries.append(f"dn: uid={uid},ou=people,{BASE}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()}"
                       f"\nsn: {uid}\ndisplayName: {uid.title()} Example\nuserPassword: {password}")
    entries.append(f"dn: cn=operators,{GROUPS}\nobjectClass: groupOfNames\ncn: operators\n"
                   f"member: uid=ann,ou=people,{BASE}")
    entries.append(f"dn: cn=admins,{GROUPS}\nobjectClass: groupOfNames\ncn: admins\nmember: {ROOT_DN}")
    return "\n\n".join(entries) + "\n"


class Slapd:
    def __init__(self, tmp_path: Path):
        self.dir = tmp_path / "slapd"
        (self.dir / "db").mkdir(parents=True)
        self.cert, key = self_signed(self.dir)
        config = self.dir / "slapd.conf"
        config.write_text(CONFIG.format(dir=self.dir, cert=self.cert, key=key, base=BASE, root_dn=ROOT_DN,
                                        root_password=ROOT_PASSWORD, search_dn=SEARCH_DN))
        (self.dir / "data.ldif").write_text(_ldif())
        subprocess.run([SLAPD.replace("slapd", "slapadd"), "-f", str(config), "-l", str(self.dir / "data.ldif")],
                       check=True, capture_output=True)
        self.port, self.tls_port = free_port(), free_port()
        urls = f"ldap://127.0.0.1:{self.port}/ ldaps://127.0.0.1:{self.tls_port}/"
        self.log = open(self.dir / "slapd.log", "wb")
        self.proc = subprocess.Popen([SLAPD, "-f", str(config), "-h", urls, "-d", "0"], stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._answers, timeout=20, message="slapd to listen")

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError((self.dir / "slapd.log").read_text())
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def settings(self, *, url: str | None = None, starttls: bool = False) -> dict:
        return {"LINECTL_LDAP_URL": url or f"ldap://127.0.0.1:{self.port}",
                "LINECTL_LDAP_STARTTLS": "true" if starttls else "false",
                "LINECTL_LDAP_BIND_DN": SEARCH_DN, "LINECTL_LDAP_BIND_PASSWORD": SEARCH_PASSWORD,
                "LINECTL_LDAP_USER_BASE": f"ou=people,{BASE}", "LINECTL_LDAP_ROLE_GROUPS": ROLE_GROUPS,
                "LINECTL_LDAP_CA_FILE": self.cert}

    def stop(self) -> None:
        kill_group(self.proc)
        self.log.close()


@pytest.fixture
def slapd(tmp_path):
    if SLAPD is None or not Path("/etc/ldap/schema/core.schema").exists():
        if os.environ.get("LINECTL_REQUIRE_SLAPD"):
            pytest.fail("slapd is required here (LINECTL_REQUIRE_SLAPD) but is not installed")
        pytest.skip("slapd (Debian's slapd package) is not installed; the LDAP tests are skipped")
    server = Slapd(tmp_path)
    yield server
    server.stop()

"""A real MQTT broker for the tests: Debian's mosquitto, started on a free port
with its own config in a temp directory (plain, TLS with a CA made here, a
password file). Without mosquitto the tests that need it skip, except in CI
(``CI=true``), where they fail: ``.ci/run`` installs it."""

from __future__ import annotations

import datetime
import getpass
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.ports import answers, free_port
from tests.support.waiting import wait_for

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)


def require_mosquitto() -> str:
    if MOSQUITTO is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mosquitto is not installed (CI installs it: .ci/run)")
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    return MOSQUITTO


def make_ca(directory: Path) -> dict[str, Path]:
    """A CA, and a server certificate for 127.0.0.1/localhost signed by it (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "linectl test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          # Python 3.13 verifies strictly (VERIFY_X509_STRICT): a CA names its key use and identifier
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    import ipaddress
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    files = {"ca": directory / "ca.pem", "cert": directory / "server.pem", "key": directory / "server.key"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["cert"].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    return files


class Broker:
    """One mosquitto on 127.0.0.1:``port``; ``kill()`` and ``start()`` again on the same port."""

    def __init__(self, directory: Path, *, tls: bool = False, users: dict[str, str] | None = None,
                 persistent: bool = False):
        self.binary = require_mosquitto()
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = make_ca(directory) if tls else None
        # persistent: a host's session (its subscription, and what is queued for it) outlives a
        # broker restart, as a plant's broker keeps them; written every second or two (``saved_after``).
        self.store = directory / "mosquitto.db"
        persistence = ["persistence true", f"persistence_location {directory}/", "autosave_interval 1"]
        # LINECTL_MOSQUITTO_VERBOSE=1: every packet in mosquitto.log (who published what, to whom,
        # with which message id and DUP flag): how a host's odd message is traced to its sender.
        # As root mosquitto drops to the user "mosquitto", who may not write the temp directory.
        lines = [f"user {getpass.getuser()}", f"listener {self.port} 127.0.0.1",
                 *(persistence if persistent else ["persistence false"]),
                 "log_dest stderr",
                 *(["log_type all", "log_timestamp_format %H:%M:%S"] if os.environ.get("LINECTL_MOSQUITTO_VERBOSE")
                   else ["log_type error", "log_type warning", "log_type notice"]),
                 "max_inflight_messages 0", "max_queued_messages 100000"]
        if users:
            passwords = directory / "passwords"
            passwords.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
            subprocess.run(["mosquitto_passwd", "-U", str(passwords)], check=True, capture_output=True)
            lines += ["allow_anonymous false", f"password_file {passwords}"]
        else:
            lines.append("allow_anonymous true")
        if self.tls:
            lines += [f"cafile {self.tls['ca']}", f"certfile {self.tls['cert']}", f"keyfile {self.tls['key']}"]
        self.config = directory / "mosquitto.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen | None = None
        self.log = directory / "mosquitto.log"

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://127.0.0.1:{self.port}"

    def saved_after(self, moment: float) -> bool:
        """The broker wrote its store after ``moment`` (``time.time()``): a session it had
        then survives a kill."""
        return self.store.exists() and self.store.stat().st_mtime > moment

    def start(self) -> Broker:
        self.proc = subprocess.Popen([self.binary, "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "ab"), start_new_session=True)  # noqa: SIM115
        wait_for(lambda: answers(self.port) or self.proc.poll() is not None, 10, 0.02, "mosquitto listening")
        if self.proc.poll() is not None:
            raise AssertionError(f"mosquitto exited: {self.log.read_text()[-2000:]}")
        return self

    def kill(self) -> None:
        """``kill -9``: no goodbye to anyone, as a crashed broker."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "mosquitto").start()
    yield b
    b.stop()

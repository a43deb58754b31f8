"""Self-signed OPC UA application certificates (OPC 10000-6 6.2.2), generated
once into a directory and reused: the hardware service's client certificate
and the simulator's server certificate. Plain files, no event loop: callable
from a green thread or the OPC UA driver's thread alike."""

from __future__ import annotations

import socket
from pathlib import Path

from asyncua.crypto import cert_gen
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID


def ensure_certificate(directory: Path, name: str, app_uri: str, server: bool) -> tuple[bytes, bytes]:
    """(certificate DER, private key PEM) from ``directory/<name>.der`` and
    ``<name>.key.pem``, generated there (key readable by the owner only) when missing."""
    directory = Path(directory)
    cert_file, key_file = directory / f"{name}.der", directory / f"{name}.key.pem"
    if cert_file.is_file() and key_file.is_file():
        return cert_file.read_bytes(), key_file.read_bytes()
    directory.mkdir(parents=True, exist_ok=True)
    key = cert_gen.generate_private_key()
    host = socket.gethostname()
    cert = cert_gen.generate_self_signed_app_certificate(
        key, name, {"organizationName": "linectl"},
        [x509.UniformResourceIdentifier(app_uri), x509.DNSName(host), x509.DNSName("localhost")],
        extended=[ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH], days=3650)
    key_pem = cert_gen.dump_private_key_as_pem(key)
    key_file.touch(mode=0o600)
    key_file.write_bytes(key_pem)
    cert_der = cert.public_bytes(encoding=Encoding.DER)
    cert_file.write_bytes(cert_der)
    return cert_der, key_pem


def certificate_directory(options: dict) -> Path:
    """Where the client's generated certificate is: ``cert_dir``
    (``LINECTL_OPCUA_CERT_DIR``; ``linectl up`` names ``<data dir>/opcua`` to a
    line's processes), else ``<data_dir>/opcua``."""
    return Path(options.get("cert_dir") or Path(options.get("data_dir") or "var") / "opcua")


def read_certificate(path: Path) -> tuple[bytes, str]:
    """A certificate file's bytes and its format ("pem" or "der", from the content)."""
    data = Path(path).read_bytes()
    return data, ("pem" if data.lstrip().startswith(b"-----BEGIN") else "der")

"""The dev cluster's own PKI: one CA, a loopback serving cert, client certs, a service-account key.

Generated once per state folder and reused by later `up`s (the SANs do not depend on ports), so a
warm start spends no time on keys. ECDSA P-256 keys: fast to make, accepted by every component.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650
#: The API server's address on the real nodes' bridge (realnode_config.HOST_IP), in its serving certificate.
NODE_HOST_IP = "10.201.0.1"

#: Client identities: file stem → (common name, organisation). `system:masters` is cluster-admin.
CLIENTS = {
    "admin": ("gpuhub-dev-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    # the API server's identity towards kubelets (logs, exec, port-forward), as kubeadm and AKS give it one
    "kube-apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}


@dataclass(frozen=True)
class PKI:
    """Paths of everything the components and clients need."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.dir / "serving.crt"

    @property
    def serving_key(self) -> Path:
        return self.dir / "serving.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_cert(self, who: str) -> Path:
        return self.dir / f"{who}.crt"

    def client_key(self, who: str) -> Path:
        return self.dir / f"{who}.key"

    def files(self) -> list[Path]:
        out = [self.ca_cert, self.ca_key, self.serving_cert, self.serving_key, self.sa_key, self.sa_pub]
        return out + [p for who in CLIENTS for p in (self.client_cert(who), self.client_key(who))]


def _serves(cert_file: Path, ip: str) -> bool:
    """The serving certificate names `ip` (a PKI made before real nodes existed does not: it is made anew)."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return ipaddress.ip_address(ip) in sans.get_values_for_type(x509.IPAddress)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS)))


def _issue(ca_key, ca_cert: x509.Certificate, subject: x509.Name, usage, sans=None):
    key = _key()
    b = _builder(subject, ca_cert.subject, key.public_key())
    b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    b = b.add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                      crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
    b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def ensure_pki(directory: Path) -> PKI:
    """Create the PKI in `directory` unless every file is already there."""
    pki = PKI(Path(directory))
    if all(p.is_file() for p in pki.files()) and _serves(pki.serving_cert, NODE_HOST_IP):
        return pki
    pki.dir.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("gpuhub-dev-cluster-ca")
    ca = (_builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, content_commitment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    _write_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))

    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default.svc"),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")), x509.IPAddress(ipaddress.ip_address(NODE_HOST_IP))]
    key, cert = _issue(ca_key, ca, _name("gpuhub-dev-cluster"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    _write_key(pki.serving_key, key)
    pki.serving_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    for who, (cn, org) in CLIENTS.items():
        key, cert = _issue(ca_key, ca, _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_key(pki.client_key(who), key)
        pki.client_cert(who).write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    sa = _key()
    _write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki

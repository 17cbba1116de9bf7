"""Certificates and keys of one local control plane, generated per run (EC P-256: fast to make, accepted by Kubernetes).

A CA of our own (rather than kube-apiserver's self-signed fallback) lets the kubeconfigs be written, and verified
TLS be used, before the apiserver has even started. The same CA signs the front-proxy client certificate, so the
request-header authentication that kube-scheduler and kube-controller-manager look up is configured as in kubeadm
clusters (and aggregated APIs would work).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The in-cluster names and the first service IP of the range kube-apiserver is given (kube.SERVICE_CIDR).
APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")
FRONT_PROXY_CLIENT = "front-proxy-client"


@dataclass(frozen=True)
class ControlPlanePki:
    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    front_proxy_client_cert: Path
    front_proxy_client_key: Path
    service_account_key: Path
    service_account_pub: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.write_bytes(pem)
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


class _Signer:
    def __init__(self, valid_days: int) -> None:
        self.not_before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # clock skew
        self.not_after = self.not_before + datetime.timedelta(days=valid_days)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, f"grove-temporal-ca-{secrets.token_hex(4)}")]
        )
        usage = x509.KeyUsage(
            digital_signature=True,
            key_cert_sign=True,
            crl_sign=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
        )
        self.cert = (
            self._builder(self.name, self.key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def _builder(self, subject: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.not_before)
            .not_valid_after(self.not_after)
        )

    def leaf(
        self, common_name: str, usage: x509.ObjectIdentifier, alt_names: list[x509.GeneralName] | None = None
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = self._builder(subject, key).add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


def generate(directory: Path, valid_days: int = 365) -> ControlPlanePki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Signer(valid_days)
    alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in APISERVER_DNS_NAMES]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
    server_cert, server_key = ca.leaf("kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH, alt_names)
    proxy_cert, proxy_key = ca.leaf(FRONT_PROXY_CLIENT, ExtendedKeyUsageOID.CLIENT_AUTH)
    sa_key = ec.generate_private_key(ec.SECP256R1())

    pki = ControlPlanePki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        apiserver_cert=directory / "apiserver.crt",
        apiserver_key=directory / "apiserver.key",
        front_proxy_client_cert=directory / "front-proxy-client.crt",
        front_proxy_client_key=directory / "front-proxy-client.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    _write_cert(ca.cert, pki.ca_cert)
    _write_key(ca.key, pki.ca_key)
    _write_cert(server_cert, pki.apiserver_cert)
    _write_key(server_key, pki.apiserver_key)
    _write_cert(proxy_cert, pki.front_proxy_client_cert)
    _write_key(proxy_key, pki.front_proxy_client_key)
    _write_key(sa_key, pki.service_account_key)
    public = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pki.service_account_pub.write_bytes(public)
    return pki

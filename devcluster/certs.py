"""Makes the local cluster's PKI with ``cryptography``: a CA, the API server's
serving certificate, client certificates, and the service-account key pair.

Called by :mod:`devcluster.cluster` when a cluster starts (and :func:`write_kubeconfig` by it and by
:mod:`devcluster.realnode`, for each client that authenticates with a certificate). Certificates carry
the extensions that a strict TLS client (urllib3 2.x with
``VERIFY_X509_STRICT``) insists on: a critical CA basic constraint, key usages,
subject/authority key identifiers, and SANs for 127.0.0.1 and localhost.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, common_name: str = "kubetune-devcluster-ca", *, key=None, cert: x509.Certificate | None = None):
        if key is not None and cert is not None:  # an existing CA (see load)
            self.key, self.cert = key, cert
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(_name(common_name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> "CertificateAuthority":
        """The CA whose PEM certificate and key :func:`write_pki` wrote."""
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        return cls(key=key, cert=x509.load_pem_x509_certificate(Path(cert_path).read_bytes()))

    def issue(
        self,
        common_name: str,
        *,
        org: str | None = None,
        server: bool = False,
        ips: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
    ) -> tuple[bytes, bytes]:
        """Issue a leaf certificate.

        Args:
            common_name: the subject CN (the user name for client certificates).
            org: the subject O (the group for client certificates, e.g. ``system:masters``).
            server: a serving certificate with SANs 127.0.0.1, localhost and kubernetes.default names.
            ips: more IP address SANs of a serving certificate (the real node's bridge address).
            dns: more DNS name SANs of a serving certificate.

        Returns:
            ``(certificate PEM, private key PEM)``.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=True,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if server:
            names = [
                x509.DNSName(n)
                for n in (
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                    *dns,
                )
            ]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", "10.0.0.1", *ips)]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    @property
    def cert_pem(self) -> bytes:
        """The CA certificate, PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)


def write_pki(directory: Path, server_ips: tuple[str, ...] = ()) -> dict[str, Path]:
    """Write every file the control plane needs into ``directory``.

    Args:
        directory: created if missing; files are mode 0600.
        server_ips: more IP addresses the API server's certificate names (the real node's gateway).

    Returns:
        Paths keyed ``ca.crt``, ``ca.key``, ``apiserver.crt``, ``apiserver.key``, ``admin.crt``,
        ``admin.key``, ``sa.key`` (RSA private, signs service-account tokens), ``sa.pub``,
        ``kubelet.crt``/``kubelet.key`` (the process kubelet's log endpoint) and
        ``apiserver-kubelet-client.crt``/``.key`` (the API server's client certificate there).
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority()
    files: dict[str, bytes] = {"ca.crt": ca.cert_pem, "ca.key": _pem_key(ca.key)}
    files["apiserver.crt"], files["apiserver.key"] = ca.issue("kube-apiserver", server=True, ips=server_ips)
    files["admin.crt"], files["admin.key"] = ca.issue("kubetune-admin", org="system:masters")
    files["kubelet.crt"], files["kubelet.key"] = ca.issue("devcluster-kubelet", server=True)
    files["apiserver-kubelet-client.crt"], files["apiserver-kubelet-client.key"] = ca.issue(
        "kube-apiserver-kubelet-client", org="system:masters"
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    files["sa.key"] = _pem_key(sa)
    files["sa.pub"] = sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    paths = {}
    for name, data in files.items():
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        paths[name] = path
    return paths


def write_kubeconfig(
    path: Path, server: str, ca: Path, cert: Path, key: Path, user: str, namespace: str | None = None
) -> Path:
    """Write a kubeconfig (mode 0600) whose one context ``devcluster`` reaches ``server``, trusting ``ca``, as
    ``user`` with the client certificate ``cert`` and its ``key``; return ``path``."""
    context = {"cluster": "devcluster", "user": user, **({"namespace": namespace} if namespace else {})}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "devcluster",
        "clusters": [{"name": "devcluster", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "devcluster", "context": context}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path

"""A certificate authority made for one test (cryptography): a CA and
certificates it signs, written as PEM files."""

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class TestCA:
    """A CA in directory d: ca.pem; issue(name) writes name.pem and name.key,
    a certificate for DNS name (and 127.0.0.1) signed by this CA."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, d, cn="edgebus test CA"):
        self.d = d
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(cn)
        self.cert = self._sign(
            self.name,
            self.key.public_key(),
            [(x509.BasicConstraints(ca=True, path_length=None), True)],
        )
        self.ca = self._write("ca.pem", self.cert.public_bytes(serialization.Encoding.PEM))

    def _sign(self, subject, public_key, extensions):
        now = datetime.datetime.now(datetime.timezone.utc)
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        for ext, critical in extensions:
            b = b.add_extension(ext, critical=critical)
        return b.sign(self.key, hashes.SHA256())

    def _write(self, name, data):
        path = str(self.d / name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def issue(self, name):
        """(cert path, key path) for DNS name and 127.0.0.1."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._sign(
            _name(name),
            key.public_key(),
            [
                (
                    x509.SubjectAlternativeName(
                        [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    ),
                    False,
                )
            ],
        )
        return (
            self._write(name + ".pem", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(
                name + ".key",
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.TraditionalOpenSSL,
                    serialization.NoEncryption(),
                ),
            ),
        )

"""Kafka credentials in Strimzi's formats, as client settings: one mapping for the two clients.

Strimzi's User Operator writes a KafkaUser's credentials into a Secret of the user's name (tls:
`ca.crt`, `user.crt`, `user.key`, `user.p12`, `user.password`; scram-sha-512: `password`,
`sasl.jaas.config`), and its Cluster Operator the cluster CA into `<cluster>-cluster-ca-cert`
(`ca.crt`). The job's driver finds them mounted (`KafkaCredentialFiles`), the operator reads them
through the API; both turn them into `Credentials` and so into the same librdkafka settings. Spark's
Kafka connector (the Java client, in the driver and in every executor) gets settings that point at
the mounted files instead (`java_properties`): a secret value never enters Spark's options, its
configuration or the job's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scorestream.config import KafkaCredentialFiles

# The Java client reads a `${dir:<directory>:<file>}` reference through this provider when it
# builds a client: the value comes from the mounted Secret's file, where the client runs. A JVM
# started with the system property org.apache.kafka.automatic.config.providers restricts the
# providers a client may use: it must then name this one (tests/test_strimzi.py runs a real job).
JAVA_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class Credentials:
    """Credentials as values, held in memory by the client that uses them."""

    tls: bool = False
    ca_pem: str | None = None  # one or more PEM certificates
    mechanism: str | None = None  # "tls", "scram-sha-512" or None
    certificate_pem: str | None = None
    key_pem: str | None = None
    keystore_location: str | None = None  # a PKCS#12 file: librdkafka reads keystores from files only
    keystore_password: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:  # never a value in a log line or a traceback
        return f"Credentials(tls={self.tls}, mechanism={self.mechanism!r}, username={self.username!r})"

    def security_protocol(self) -> str:
        sasl = self.mechanism == "scram-sha-512"
        return {(True, True): "SASL_SSL", (True, False): "SSL", (False, True): "SASL_PLAINTEXT",
                (False, False): "PLAINTEXT"}[(self.tls, sasl)]

    def librdkafka(self) -> dict[str, str]:
        """librdkafka's settings (the operator's clients, the driver's own)."""
        out = {"security.protocol": self.security_protocol()}
        if self.ca_pem:
            out["ssl.ca.pem"] = self.ca_pem
        if self.mechanism == "tls":
            if self.keystore_location:
                out["ssl.keystore.location"] = self.keystore_location
                out["ssl.keystore.password"] = self.keystore_password or ""
            else:
                out["ssl.certificate.pem"] = self.certificate_pem or ""
                out["ssl.key.pem"] = self.key_pem or ""
        elif self.mechanism == "scram-sha-512":
            out.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": self.username or "",
                        "sasl.password": self.password or ""})
        return out


def _read(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text()
    except OSError as e:
        # The path and why, never the content: it is a Secret's.
        raise ValueError(f"kafka credentials: cannot read the {what} at {path}: {e.strerror}") from None


def credentials_from_files(files: KafkaCredentialFiles) -> Credentials:
    """The mounted credentials, read now."""
    cas = [_read(p, "trusted certificate") for p in files.ca_files]
    return Credentials(
        tls=files.tls, ca_pem="".join(c if c.endswith("\n") else c + "\n" for c in cas if c) or None,
        mechanism=files.mechanism, certificate_pem=_read(files.certificate_file, "client certificate"),
        key_pem=_read(files.key_file, "client key"), keystore_location=files.keystore_file,
        keystore_password=_read(files.keystore_password_file, "keystore password"),
        username=files.username, password=_read(files.password_file, "SCRAM password"))


def _ref(path: str) -> str:
    """A reference the Java client resolves from the file when it builds a client."""
    p = Path(path)
    return f"${{dir:{p.parent}:{p.name}}}"


def java_properties(files: KafkaCredentialFiles) -> dict[str, str]:
    """The Java client's settings for the mounted credentials: file locations and references to
    files, which the driver and every executor have at the same paths."""
    protocol = Credentials(tls=files.tls, mechanism=files.mechanism).security_protocol()
    out = {"security.protocol": protocol}
    refs = False
    if len(files.ca_files) == 1:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": files.ca_files[0]})
    elif files.ca_files:
        # Several files, one truststore: inline (certificates are public), read at the job's start.
        out.update({"ssl.truststore.type": "PEM",
                    "ssl.truststore.certificates": credentials_from_files(
                        KafkaCredentialFiles(caFiles=files.ca_files)).ca_pem or ""})
    if files.mechanism == "tls" and files.keystore_file:
        out.update({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": files.keystore_file,
                    "ssl.keystore.password": _ref(files.keystore_password_file or "")})
        refs = True
    elif files.mechanism == "tls":
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": _ref(files.certificate_file or ""),
                    "ssl.keystore.key": _ref(files.key_file or "")})
        refs = True
    elif files.mechanism == "scram-sha-512":
        # The reference is replaced before the JAAS line is parsed: a password with a double quote
        # would break it. Strimzi's User Operator generates letters and digits.
        out.update({"sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.jaas.config": f"{_SCRAM_MODULE} required username={json.dumps(files.username or '')}"
                                        f" password=\"{_ref(files.password_file or '')}\";"})
        refs = True
    if refs:
        out.update({"config.providers": "dir", "config.providers.dir.class": JAVA_CONFIG_PROVIDER})
    return out

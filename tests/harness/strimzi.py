"""Strimzi's parts for the tests: a broker secured as a Strimzi cluster is, credentials in Strimzi's
Secret formats, and Strimzi's own CRDs.

- `SecureBroker`: the tests' Apache Kafka broker (scorestream.tools.local.broker) with two more listeners on
  loopback, as a Strimzi cluster's internal ones: `tls` (TLS, client certificates required: mTLS)
  and `scram` (SASL_SSL, SCRAM-SHA-512). Its PLAINTEXT listener stays for the test's own set-up.
- `Pki`: a cluster CA, the broker's certificate and users' certificates, made here with `openssl`,
  and the Secrets of Strimzi's formats: the cluster CA Secret (`ca.crt`), a tls KafkaUser's
  (`ca.crt`, `user.crt`, `user.key`, `user.p12`, `user.password`) and a scram-sha-512 KafkaUser's
  (`password`, `sasl.jaas.config`).
- `strimzi_crds()`: the KafkaTopic and KafkaUser CRDs as Strimzi's published API builds them
  (`io.strimzi.api.kafka.Crds` in `io.strimzi:api`, the pinned `strimzi-api` jar set of
  scorestream/jars.lock), printed by a few lines of Java (`StrimziCrds.java` beside this file).
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path

from scorestream.tools.local.broker import EmbeddedBroker, free_port, java

HERE = Path(__file__).parent


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Pki:
    """A CA and certificates in `directory` (all valid for a day)."""

    def __init__(self, directory: Path, cluster: str = "my-cluster"):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
                 "-subj", f"/O=io.strimzi/CN=cluster-ca v0", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)
        self.ca = self.dir / "ca.crt"
        self.broker_key, self.broker_cert = self._signed("broker", "DNS:localhost,IP:127.0.0.1")
        # The broker's PEM keystore: its key and certificate in one file.
        self.broker_keystore = self.dir / "broker.pem"
        self.broker_keystore.write_text(self.broker_key.read_text() + self.broker_cert.read_text())

    def _signed(self, name: str, san: str | None = None) -> tuple[Path, Path]:
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=self.dir)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "1", "-extfile", ext.name, cwd=self.dir)
        return self.dir / f"{name}.key", self.dir / f"{name}.crt"

    def cluster_ca_secret(self) -> dict[str, bytes]:
        """`<cluster>-cluster-ca-cert`, as Strimzi's Cluster Operator writes it."""
        return {"ca.crt": self.ca.read_bytes()}

    def tls_user_secret(self, user: str) -> dict[str, bytes]:
        """A tls KafkaUser's Secret, as Strimzi's User Operator writes it (CN=<user>)."""
        key, cert = self._signed(user)
        password = secrets.token_urlsafe(12)
        _openssl("pkcs12", "-export", "-in", cert.name, "-inkey", key.name, "-certfile", "ca.crt", "-name", user,
                 "-out", f"{user}.p12", "-passout", f"pass:{password}", cwd=self.dir)
        return {"ca.crt": self.ca.read_bytes(), "user.crt": cert.read_bytes(), "user.key": key.read_bytes(),
                "user.p12": (self.dir / f"{user}.p12").read_bytes(), "user.password": password.encode()}

    @staticmethod
    def scram_user_secret(user: str) -> dict[str, bytes]:
        """A scram-sha-512 KafkaUser's Secret, as Strimzi's User Operator writes it."""
        password = secrets.token_hex(16)  # letters and digits, as Strimzi's
        jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'
        return {"password": password.encode(), "sasl.jaas.config": jaas.encode()}


def write_secret(data: dict[str, bytes], directory: Path) -> Path:
    """A Secret as Kubernetes mounts it: one file per key."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        (directory / key).write_bytes(value)
    return directory


def secret_object(name: str, namespace: str, data: dict[str, bytes]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque", "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


class SecureBroker(EmbeddedBroker):
    """The broker with a `tls` (mTLS) and a `scram` (SASL_SSL, SCRAM-SHA-512) listener."""

    def __init__(self, pki: Pki, **kw):
        super().__init__(**kw)
        self.pki = pki
        self.tls_port, self.scram_port = free_port(self.host), free_port(self.host)
        # The name the brokers' certificate carries (Strimzi's: the bootstrap Service's).
        self.tls_bootstrap = f"localhost:{self.tls_port}"
        self.scram_bootstrap = f"localhost:{self.scram_port}"

    def _write_config(self, log: Path) -> Path:
        props = super()._write_config(log)
        settings = dict(line.split("=", 1) for line in props.read_text().splitlines() if "=" in line)
        extra = f",TLS://{self.host}:{self.tls_port},SCRAM://{self.host}:{self.scram_port}"
        settings["listeners"] += extra
        settings["advertised.listeners"] += f",TLS://localhost:{self.tls_port},SCRAM://localhost:{self.scram_port}"
        settings.update({
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,TLS:SSL,SCRAM:SASL_SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca),
            "listener.name.tls.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.scram.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.scram.scram-sha-512.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        })
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return props

    def add_scram_user(self, user: str, password: str) -> None:
        """What Strimzi's User Operator does for a scram-sha-512 KafkaUser: the credential, through
        the admin API (AlterUserScramCredentials)."""
        from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())]).values():
            future.result(30)


def strimzi_crds(workdir: Path) -> list[dict]:
    """Strimzi's KafkaTopic and KafkaUser CRDs, from `io.strimzi.api.kafka.Crds` of the pinned jar."""
    from scorestream.jars import resolve

    classpath = ":".join(str(j) for j in resolve("strimzi-api"))
    out = subprocess.run([java(), "-Xmx128m", "-cp", classpath, str(HERE / "StrimziCrds.java")], cwd=workdir,
                         capture_output=True, text=True, timeout=180, check=True)
    return json.loads(out.stdout)

"""An Apache Kafka broker that authenticates and authorizes: KRaft's StandardAuthorizer, and a
SASL/PLAIN listener on loopback for the principals the tests name (the same pinned jars as
tools/local/broker.py, whose broker this extends).

The broker keeps its PLAINTEXT listener for its own inter-broker and controller traffic and for the
tests' administration: it authenticates as ANONYMOUS, a super user. Clients under test use the SASL
listener only, where every principal is held to its ACLs (no ACL, no access).
"""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path

from scorestream.tools.local.broker import EmbeddedBroker, free_port

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class AclBroker(EmbeddedBroker):
    def __init__(self, users: list[str], log: Path | None = None):
        super().__init__(log=log)
        self.sasl_port = free_port(self.host)
        while self.sasl_port == self.port:
            self.sasl_port = free_port(self.host)
        self.sasl_bootstrap = f"{self.host}:{self.sasl_port}"
        self.passwords = {u: secrets.token_urlsafe(16) for u in users}

    def _write_config(self, log: Path) -> Path:
        props = super()._write_config(log)
        settings = dict(line.split("=", 1) for line in props.read_text().splitlines() if "=" in line)
        controller = settings["controller.quorum.bootstrap.servers"]
        sasl = f"SASL_PLAINTEXT://{self.sasl_bootstrap}"
        users = " ".join(f'user_{u}="{p}"' for u, p in self.passwords.items())
        settings.update({
            "listeners": f"{settings['listeners'].split(',CONTROLLER')[0]},{sasl},CONTROLLER://{controller}",
            "advertised.listeners": f"{settings['advertised.listeners'].split(',CONTROLLER')[0]},{sasl},"
                                    f"CONTROLLER://{controller}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return props

    def client(self, user: str) -> dict[str, str]:
        """librdkafka settings of one principal, on the SASL listener."""
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": self.passwords[user]}

    def properties_text(self, user: str) -> str:
        """The same settings as a properties file (what a Secret would hold), without the brokers."""
        return "".join(f"{k}={v}\n" for k, v in self.client(user).items() if k != "bootstrap.servers")

    def add_acls(self, commands: list[str], variables: dict[str, str]) -> int:
        """Apply `kafka-acls.sh --add` command lines, as a cluster admin would run them, through the
        admin API (kafka-acls.sh's own class is not among the broker's jars). Returns the bindings."""
        from confluent_kafka.admin import AdminClient

        bindings = [b for c in commands for b in acl_bindings(c, variables)]
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_acls(bindings, request_timeout=30).values():
            future.result()
        return len(bindings)


def acl_bindings(command: str, variables: dict[str, str]) -> list:
    """The AclBindings of one `kafka-acls.sh ... --add` command line (the options docs/security.md
    uses: --allow-principal, --operation, --topic, --group, --resource-pattern-type)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    words = shlex.split(command)
    words = [_expand(w, variables) for w in words]
    assert words[0] == "kafka-acls.sh" and "--add" in words, command
    principals, operations, resources, pattern = [], [], [], ResourcePatternType.LITERAL
    it = iter(words[1:])
    for word in it:
        if word == "--allow-principal":
            principals.append(next(it))
        elif word == "--operation":
            operations.append(AclOperation[_snake(next(it))])
        elif word == "--topic":
            resources.append((ResourceType.TOPIC, next(it)))
        elif word == "--group":
            resources.append((ResourceType.GROUP, next(it)))
        elif word == "--resource-pattern-type":
            pattern = ResourcePatternType[next(it).upper()]
        elif word in ("--bootstrap-server", "--command-config"):
            next(it)
        elif word != "--add":
            raise AssertionError(f"an option the tests do not read: {word} in {command}")
    return [AclBinding(kind, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
            for principal in principals for op in operations for kind, name in resources]


def _snake(operation: str) -> str:
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(operation)).upper()


def _expand(word: str, variables: dict[str, str]) -> str:
    for name, value in variables.items():
        word = word.replace(f"${name}", value)
    assert "$" not in word, f"a variable the test does not set: {word}"
    return word


def documented_acls(text: str, heading: str) -> list[str]:
    """The kafka-acls.sh command lines of the first ```sh block after a line starting with
    `heading` (continuation lines joined, comments dropped)."""
    after = text[text.index("\n" + heading):]
    block = after[after.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("kafka-acls.sh")]

"""What a principal must be allowed to do, and the one line that says what is missing.

A broker with an ACL authorizer answers a refused request with ``*_AUTHORIZATION_FAILED`` and
nothing else: not which principal asked, not which ACL would have let it. The clients know both
(their own credentials, and what they were doing to which resource), so every refusal the kit meets
becomes a :class:`KafkaAuthorizationError` whose message is one line, for example::

    principal User:app needs WRITE on topic 'orders-out' (TOPIC_AUTHORIZATION_FAILED while the
    sink produced to orders-out); grant it: kafka-acls.sh --bootstrap-server <brokers>
    --command-config <admin.properties> --add --allow-principal User:app --operation WRITE
    --topic orders-out

(printed on one line). :func:`source_acls` and :func:`sink_acls` list exactly the ACLs the README's
table documents; the integration tests grant an application user exactly these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from connectors.kafka.kafka_errors import KafkaAuthorizationError

# Kafka's resource types (org.apache.kafka.common.resource.ResourceType) and pattern types.
TOPIC = "TOPIC"
GROUP = "GROUP"
TRANSACTIONAL_ID = "TRANSACTIONAL_ID"
CLUSTER = "CLUSTER"
LITERAL = "LITERAL"
PREFIXED = "PREFIXED"
#: The name of the one cluster resource.
CLUSTER_NAME = "kafka-cluster"

# Kafka error codes of refused requests (org.apache.kafka.common.protocol.Errors).
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
AUTHORIZATION_ERROR_NAMES = {TOPIC_AUTHORIZATION_FAILED: "TOPIC_AUTHORIZATION_FAILED",
                             GROUP_AUTHORIZATION_FAILED: "GROUP_AUTHORIZATION_FAILED",
                             CLUSTER_AUTHORIZATION_FAILED: "CLUSTER_AUTHORIZATION_FAILED",
                             TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}

#: What a client passes to its error mapping where it knows what a refused request needed: builds
#: the error from Kafka's error name.
Denied = Callable[[str], KafkaAuthorizationError]

# The sink's transactional ids are {prefix}-{slot}-{index} (transactional_ids.py); an ACL is
# granted on the prefix, so a refusal names the prefix rather than one id of it.
_POOL_ID = re.compile(r"^(?P<prefix>.+)-\d+-\d+$")

_KAFKA_ACLS_FLAG = {TOPIC: "--topic", GROUP: "--group", TRANSACTIONAL_ID: "--transactional-id", CLUSTER: "--cluster"}


@dataclass(frozen=True)
class AclRequirement:
    """One ACL a principal needs: ``operation`` on the resource ``resource_type`` named ``name``
    (matched as ``pattern``: LITERAL, or PREFIXED for every name starting with ``name``)."""

    operation: str
    resource_type: str
    name: str
    pattern: str = LITERAL

    def __str__(self) -> str:
        return f"{self.operation} on {resource_text(self.resource_type, self.name, self.pattern)}"


def source_acls(topics: Iterable[str], commit_offsets_to_group: str | None = None) -> list[AclRequirement]:
    """What the ``kafka-eos`` source needs: READ and DESCRIBE on every topic it reads (DESCRIBE
    plans the offsets on the driver, READ fetches on executors). It never joins a consumer group;
    READ on a group only for ``eos.commitOffsetsToGroup``."""
    acls = [AclRequirement(operation, TOPIC, topic) for topic in topics for operation in ("READ", "DESCRIBE")]
    if commit_offsets_to_group:
        acls.append(AclRequirement("READ", GROUP, commit_offsets_to_group))
    return acls


def sink_acls(topic: str, transactional_id_prefix: str | None) -> list[AclRequirement]:
    """What the ``kafka-eos`` sink needs: WRITE and DESCRIBE on its topic, and for exactly-once
    (``transactional_id_prefix`` given) WRITE and DESCRIBE on every transactional id starting with
    the prefix: InitProducerId, AddPartitionsToTxn and EndTxn need WRITE; FindCoordinator,
    ListTransactions and DescribeTransactions need DESCRIBE."""
    acls = [AclRequirement("WRITE", TOPIC, topic), AclRequirement("DESCRIBE", TOPIC, topic)]
    if transactional_id_prefix:
        acls += [AclRequirement(operation, TRANSACTIONAL_ID, transactional_id_prefix, PREFIXED)
                 for operation in ("WRITE", "DESCRIBE")]
    return acls


#: Optional: lets the sink read the brokers' transaction.max.timeout.ms (DescribeConfigs). Without
#: it the sink starts with a warning and checks the timeout with InitProducerId instead.
DESCRIBE_CONFIGS_ACL = AclRequirement("DESCRIBE_CONFIGS", CLUSTER, CLUSTER_NAME)


def _value(config: Mapping[str, Any], *names: str) -> str | None:
    for name in names:
        value = config.get(name)
        if value is not None and str(value).strip():
            return str(value).strip()
    return None


def principal_of(config: Mapping[str, Any]) -> str | None:
    """The principal the brokers see for librdkafka-style client settings, where the settings say
    it: ``User:<sasl.username>`` for PLAIN and SCRAM (Kafka's default principal builder),
    ``User:ANONYMOUS`` without authentication. None where only the broker knows (certificates,
    OAuth tokens, Kerberos, custom principal builders)."""
    protocol = (_value(config, "security.protocol") or "PLAINTEXT").upper()
    if protocol in ("SASL_SSL", "SASL_PLAINTEXT"):
        mechanism = (_value(config, "sasl.mechanism", "sasl.mechanisms") or "GSSAPI").upper()
        username = _value(config, "sasl.username")
        if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") and username:
            return f"User:{username}"
        unsecured = _value(config, "sasl.oauthbearer.config") or ""
        match = re.search(r"(?:^|\s)principal=(\S+)", unsecured)
        if mechanism == "OAUTHBEARER" and match and _value(config, "enable.sasl.oauthbearer.unsecure.jwt") == "true":
            return f"User:{match.group(1)}"
        return None
    if protocol == "SSL" and _value(config, "ssl.certificate.location", "ssl.certificate.pem", "ssl.keystore.location"):
        return None
    return "User:ANONYMOUS"


def principal_text(config: Mapping[str, Any]) -> str:
    """``principal User:app``, or what the client's principal is where the settings do not say."""
    principal = principal_of(config)
    if principal is not None:
        return f"principal {principal}"
    protocol = (_value(config, "security.protocol") or "PLAINTEXT").upper()
    mechanism = (_value(config, "sasl.mechanism", "sasl.mechanisms") or "GSSAPI").upper()
    if protocol == "SSL":
        return "the client's principal (its TLS certificate's subject, User:CN=...,... unless the brokers map it)"
    if mechanism == "OAUTHBEARER":
        return "the client's principal (its OAuth token's subject, unless the brokers map it)"
    if mechanism == "GSSAPI":
        return "the client's principal (its Kerberos principal, as the brokers map it)"
    return "the client's principal"


def resource_text(resource_type: str, name: str, pattern: str = LITERAL) -> str:
    if resource_type == CLUSTER:
        return "the cluster (resource kafka-cluster)"
    kind = {TOPIC: "topic", GROUP: "consumer group", TRANSACTIONAL_ID: "transactional id"}[resource_type]
    if pattern == PREFIXED:
        return f"every {kind} starting with '{name}' (a PREFIXED ACL)"
    return f"{kind} '{name}'"


def kafka_acls_command(principal: str | None, operations: Sequence[str], resource_type: str, name: str,
                       pattern: str = LITERAL) -> str:
    """The ``kafka-acls.sh`` command that grants ``operations`` on the resource."""
    parts = ["kafka-acls.sh --bootstrap-server <brokers> --command-config <admin.properties> --add",
             f"--allow-principal {principal or '<principal>'}"]
    parts += [f"--operation {operation}" for operation in operations]
    parts.append(_KAFKA_ACLS_FLAG[resource_type] if resource_type == CLUSTER
                 else f"{_KAFKA_ACLS_FLAG[resource_type]} {name}")
    if pattern == PREFIXED:
        parts.append("--resource-pattern-type prefixed")
    return " ".join(parts)


def authorization_error(config: Mapping[str, Any], operations: Sequence[str], resource_type: str, name: str,
                        *, error_name: str, doing: str, pattern: str = LITERAL) -> KafkaAuthorizationError:
    """The error for a refused request, whose message is the one line that says what to grant.

    ``config`` are the client's librdkafka-style settings (for the principal); ``doing`` says what
    the kit was doing, e.g. ``the source read orders-0``."""
    principal = principal_of(config)
    line = (f"{principal_text(config)} needs {' and '.join(operations)} on "
            f"{resource_text(resource_type, name, pattern)} ({error_name} while {doing}); grant it: "
            f"{kafka_acls_command(principal, operations, resource_type, name, pattern)}")
    return KafkaAuthorizationError(line, principal=principal, operations=tuple(operations),
                                   resource_type=resource_type, resource_name=name, pattern=pattern,
                                   code=error_name)


def transactional_id_error(config: Mapping[str, Any], transactional_id: str, *, error_name: str, doing: str,
                           operations: Sequence[str] = ("WRITE", "DESCRIBE")) -> KafkaAuthorizationError:
    """A refusal concerning one of the sink's transactional ids, named by its prefix
    (``eos.transactionalIdPrefix``, on which the README grants a PREFIXED ACL) where the id is one
    of the sink's pool. Most requests cannot tell WRITE from DESCRIBE apart (a producer's
    FindCoordinator needs DESCRIBE, its InitProducerId WRITE), so both are named unless the caller
    knows the refused request needed DESCRIBE only."""
    match = _POOL_ID.match(transactional_id)
    if match is None:
        return authorization_error(config, operations, TRANSACTIONAL_ID, transactional_id,
                                   error_name=error_name, doing=doing)
    return authorization_error(config, operations, TRANSACTIONAL_ID, match.group("prefix"),
                               error_name=error_name, doing=doing, pattern=PREFIXED)

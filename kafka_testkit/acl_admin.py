"""Users and ACLs of a secured cluster, managed as its administrator (a super user).

Works against any secured cluster: one started by ``secured_broker.SecuredKafkaBroker``, or an
external one whose administrator settings the tests were given. Users are SCRAM users
(AlterUserScramCredentials); ACLs are ALLOW or DENY bindings (CreateAcls, DeleteAcls), written from
the kit's own list of what a source or sink needs (``connectors.kafka.authorization``).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Iterable, Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from connectors.kafka.authorization import CLUSTER, CLUSTER_NAME, AclRequirement

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
# Kafka's name of the cluster resource type is librdkafka's BROKER.
_RESOURCE_TYPES = {"TOPIC": ResourceType.TOPIC, "GROUP": ResourceType.GROUP,
                   "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID, CLUSTER: ResourceType.BROKER}


class AclAdmin:
    """Creates SCRAM users and grants or denies them ACLs. ``admin_config`` holds the librdkafka
    settings of a super user (security protocol, SASL mechanism and credentials, CA)."""

    def __init__(self, bootstrap_servers: str, admin_config: Mapping[str, str],
                 mechanism: str = "SCRAM-SHA-512") -> None:
        self.bootstrap_servers = bootstrap_servers
        self.admin_config = dict(admin_config)
        self.mechanism = mechanism
        self._admin = AdminClient({**self.admin_config, "bootstrap.servers": bootstrap_servers})

    def user_config(self, user: str, password: str) -> dict[str, str]:
        """The administrator's connection settings with another SCRAM user's credentials."""
        return {**self.admin_config, "sasl.mechanism": self.mechanism, "sasl.username": user,
                "sasl.password": password}

    def create_user(self, user: str, password: str | None = None) -> dict[str, str]:
        """Create (or reset) a SCRAM user; return its client settings. The user holds no ACL."""
        password = password or secrets.token_urlsafe(16)
        mechanism = ScramMechanism[self.mechanism.replace("-", "_")]
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), password.encode())
        for future in self._admin.alter_user_scram_credentials([upsert], request_timeout=_TIMEOUT_S).values():
            future.result()
        self._wait_until_authenticates(user, password)
        return self.user_config(user, password)

    def _wait_until_authenticates(self, user: str, password: str) -> None:
        # The credential reaches the brokers through the metadata log, a moment after the answer.
        client = AdminClient({**self.user_config(user, password), "bootstrap.servers": self.bootstrap_servers,
                              "log_level": 0})
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                client.list_topics(timeout=5)
                return
            except KafkaException:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    @staticmethod
    def _binding(principal: str, acl: AclRequirement, permission: AclPermissionType) -> AclBinding:
        return AclBinding(_RESOURCE_TYPES[acl.resource_type],
                          CLUSTER_NAME if acl.resource_type == CLUSTER else acl.name,
                          ResourcePatternType[acl.pattern], principal, "*", AclOperation[acl.operation],
                          permission)

    def grant(self, principal: str, acls: Iterable[AclRequirement]) -> None:
        self._create([self._binding(principal, acl, AclPermissionType.ALLOW) for acl in acls])

    def deny(self, principal: str, acls: Iterable[AclRequirement]) -> None:
        self._create([self._binding(principal, acl, AclPermissionType.DENY) for acl in acls])

    def _create(self, bindings: list[AclBinding]) -> None:
        if not bindings:
            return
        for future in self._admin.create_acls(bindings, request_timeout=_TIMEOUT_S).values():
            future.result()
        log.info("ACLs created: %s", "; ".join(str(b) for b in bindings))
        self._wait_until_listed(bindings)

    def _wait_until_listed(self, bindings: list[AclBinding]) -> None:
        # CreateAcls returns once the controller accepted them; the broker's authorizer applies
        # them when it has read them from the metadata log, which DescribeAcls on it reflects.
        deadline = time.monotonic() + _TIMEOUT_S
        for binding in bindings:
            wanted = AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type,
                                      binding.principal, binding.host, binding.operation,
                                      binding.permission_type)
            while not self._admin.describe_acls(wanted, request_timeout=_TIMEOUT_S).result():
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"ACL {binding} not visible after {_TIMEOUT_S:.0f} s")
                time.sleep(0.1)

    def revoke_all(self, principal: str) -> None:
        """Delete every ACL (allow or deny) of ``principal``."""
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        for future in self._admin.delete_acls([everything], request_timeout=_TIMEOUT_S).values():
            future.result()

    def close(self) -> None:
        self._admin = None  # type: ignore[assignment]

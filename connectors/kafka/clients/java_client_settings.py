"""Kafka's Java client settings, translated to librdkafka's.

Spark jobs carry the settings of Kafka's Java client as ``kafka.*`` options (Spark's own connector
hands them to the Java client), while the kit's clients are librdkafka (and kafka-python, which
takes librdkafka's names through ``_kafka_python/settings.py``). ``JAVA_SETTINGS`` has one row per
key of Java's ProducerConfig, ConsumerConfig and AdminClientConfig (Kafka 4.x, with the SSL and
SASL settings they include), saying what the kit does with it:

- ``SAME``: librdkafka has the setting under the same name and meaning;
- ``RENAMED``: librdkafka has it under another name (the value converted where units differ);
- ``TRANSLATED``: the kit reads it into other librdkafka settings (``sasl.jaas.config``, the trust
  and key stores, ``partitioner.class``, ...);
- ``IGNORED``: accepted, with no meaning for the kit (e.g. consumer-group settings: the kit never
  joins a group), the reason said;
- ``REFUSED``: refused, with what to use instead.

librdkafka's own names (what the kit's documentation shows) pass through unchanged; a name in
neither client is refused. Errors are ``UnsupportedClientSettingError``, one line naming the
``kafka.<option>``.

``translate`` is pure but for one question to the installed librdkafka, asked only of a
configuration that wants Kerberos: whether it was built with GSSAPI. The trust and key stores come out as descriptions (``keystores.TrustStore``,
``KeyStore``), turned into PEM files by ``librdkafka_config``, the one function here that touches
files, run where the clients are built (a store's path is local to each node).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

from connectors.kafka.clients import jaas, keystores
from connectors.kafka.clients.keystores import KeyStore, TrustStore
from connectors.kafka.kafka_errors import UnsupportedClientSettingError

log = logging.getLogger(__name__)


class Kind(Enum):
    SAME = "same name in librdkafka"
    RENAMED = "renamed"
    TRANSLATED = "translated"
    IGNORED = "accepted, no effect"
    REFUSED = "refused"


@dataclass(frozen=True)
class JavaSetting:
    """One Java client setting: what the kit does with it (``kind``), the librdkafka setting it
    becomes (``librdkafka``), and why or how (``note``)."""

    name: str
    kind: Kind
    librdkafka: str = ""
    note: str = ""


#: librdkafka's names (its CONFIGURATION.md, global and topic properties), and confluent-kafka's
#: Python-only ones: they pass through unchanged.
LIBRDKAFKA_NAMES = frozenset("""
acks allow.auto.create.topics api.version.fallback.ms api.version.request api.version.request.timeout.ms
auto.commit.enable auto.commit.interval.ms auto.offset.reset background_event_cb batch.num.messages batch.size
bootstrap.servers broker.address.family broker.address.ttl broker.version.fallback builtin.features check.crcs
client.dns.lookup client.id client.rack closesocket_cb compression.codec compression.level compression.type
connect_cb connections.max.idle.ms consume.callback.max.messages consume_cb coordinator.query.interval.ms debug
default_topic_conf delivery.report.only.error delivery.timeout.ms dr_cb dr_msg_cb enable.auto.commit
enable.auto.offset.store enable.gapless.guarantee enable.idempotence enable.metrics.push enable.partition.eof
enable.random.seed enable.sasl.oauthbearer.unsecure.jwt enable.ssl.certificate.verification enabled_events
error_cb fetch.error.backoff.ms fetch.max.bytes fetch.message.max.bytes fetch.min.bytes fetch.queue.backoff.ms
fetch.wait.max.ms group.id group.instance.id group.protocol group.protocol.type group.remote.assignor
heartbeat.interval.ms https.ca.location https.ca.pem interceptors internal.termination.signal isolation.level
linger.ms log.connection.close log.queue log.thread.name log_cb log_level max.in.flight
max.in.flight.requests.per.connection max.partition.fetch.bytes max.poll.interval.ms max.poll.records
message.copy.max.bytes message.max.bytes message.send.max.retries message.timeout.ms metadata.broker.list
metadata.max.age.ms metadata.recovery.rebootstrap.trigger.ms metadata.recovery.strategy msg_order_cmp
oauthbearer_token_refresh_cb offset.store.method offset.store.path offset.store.sync.interval.ms
offset_commit_cb opaque open_cb partition.assignment.strategy partitioner partitioner_cb plugin.library.paths
produce.offset.report queue.buffering.backpressure.threshold queue.buffering.max.kbytes
queue.buffering.max.messages queue.buffering.max.ms queued.max.messages.kbytes queued.min.messages
queuing.strategy rebalance_cb receive.message.max.bytes reconnect.backoff.jitter.ms reconnect.backoff.max.ms
reconnect.backoff.ms request.required.acks request.timeout.ms resolve_cb retries retry.backoff.max.ms
retry.backoff.ms sasl.kerberos.keytab sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin
sasl.kerberos.principal sasl.kerberos.service.name sasl.mechanism sasl.mechanisms
sasl.oauthbearer.client.id sasl.oauthbearer.client.secret sasl.oauthbearer.config sasl.oauthbearer.extensions
sasl.oauthbearer.grant.type sasl.oauthbearer.method sasl.oauthbearer.scope sasl.oauthbearer.token.endpoint.url
sasl.oauthbearer.metadata.authentication.type
sasl.password sasl.username security.protocol session.timeout.ms share.acknowledgement.mode
socket.blocking.max.ms socket.connection.setup.timeout.ms socket.keepalive.enable socket.max.fails
socket.nagle.disable socket.receive.buffer.bytes socket.send.buffer.bytes socket.timeout.ms socket_cb
ssl.ca.certificate.stores ssl.ca.location ssl.ca.pem ssl.certificate.location ssl.certificate.pem
ssl.certificate.verify_cb ssl.cipher.suites ssl.crl.location ssl.curves.list ssl.endpoint.identification.algorithm
ssl.engine.id ssl.engine.location ssl.key.location ssl.key.password ssl.key.pem ssl.keystore.location
ssl.keystore.password ssl.providers ssl.sigalgs.list ssl_ca ssl_certificate ssl_engine_callback_data ssl_key
statistics.interval.ms stats_cb sticky.partitioning.linger.ms throttle_cb topic.blacklist
topic.metadata.propagation.max.ms topic.metadata.refresh.fast.cnt topic.metadata.refresh.fast.interval.ms
topic.metadata.refresh.interval.ms topic.metadata.refresh.sparse transaction.timeout.ms transactional.id
logger oauth_cb on_delivery on_commit
""".split())

_NO_GROUP = "the kit never joins a consumer group: Spark's checkpoint keeps the offsets"
_JAVA_CLASS = "a Java class cannot run in librdkafka"
_JAVA_METRICS = "Java's client metrics; librdkafka reports statistics (the kit's metrics: connectors.monitoring)"
_TOKEN_VALIDATION = "the brokers validate OAuth tokens; a client only fetches them"
_LOGIN_REFRESH = "librdkafka refreshes OAuth tokens at 80% of their lifetime"
_STORE = "with the other ssl.truststore.* settings: the store becomes a PEM file of its certificates"
_KEYSTORE = "with the other ssl.keystore.* settings: the store becomes PEM files of its key and chain"

_SAME = Kind.SAME
_RENAMED = Kind.RENAMED
_TRANSLATED = Kind.TRANSLATED
_IGNORED = Kind.IGNORED
_REFUSED = Kind.REFUSED

_ROWS: tuple[JavaSetting, ...] = (
    # CommonClientConfigs: producer, consumer and admin.
    JavaSetting("bootstrap.servers", _SAME, "bootstrap.servers", "the option kafka.bootstrap.servers"),
    JavaSetting("client.dns.lookup", _SAME, "client.dns.lookup"),
    JavaSetting("client.id", _SAME, "client.id"),
    JavaSetting("client.rack", _SAME, "client.rack"),
    JavaSetting("connections.max.idle.ms", _SAME, "connections.max.idle.ms"),
    JavaSetting("default.api.timeout.ms", _IGNORED, "",
                "the kit bounds its requests itself (eos.brokerRetryTimeoutMs)"),
    JavaSetting("enable.metrics.push", _SAME, "enable.metrics.push"),
    JavaSetting("group.id", _SAME, "group.id", "Spark's meaning: the group id of the source's consumers, which "
                                              "never join the group nor commit to it"),
    JavaSetting("group.instance.id", _IGNORED, "", _NO_GROUP),
    JavaSetting("heartbeat.interval.ms", _IGNORED, "", _NO_GROUP),
    JavaSetting("max.poll.interval.ms", _IGNORED, "", _NO_GROUP),
    JavaSetting("metadata.max.age.ms", _SAME, "metadata.max.age.ms"),
    JavaSetting("metadata.recovery.rebootstrap.trigger.ms", _SAME, "metadata.recovery.rebootstrap.trigger.ms"),
    JavaSetting("metadata.recovery.strategy", _SAME, "metadata.recovery.strategy"),
    JavaSetting("metric.reporters", _REFUSED, "", f"{_JAVA_CLASS}: librdkafka reports statistics "
                                                  "(statistics.interval.ms), the kit exports its metrics "
                                                  "(connectors.monitoring)"),
    JavaSetting("metrics.num.samples", _IGNORED, "", _JAVA_METRICS),
    JavaSetting("metrics.recording.level", _IGNORED, "", _JAVA_METRICS),
    JavaSetting("metrics.sample.window.ms", _IGNORED, "", _JAVA_METRICS),
    JavaSetting("rebalance.timeout.ms", _IGNORED, "", _NO_GROUP),
    JavaSetting("receive.buffer.bytes", _RENAMED, "socket.receive.buffer.bytes", "-1 (the OS default) becomes 0"),
    JavaSetting("reconnect.backoff.max.ms", _SAME, "reconnect.backoff.max.ms"),
    JavaSetting("reconnect.backoff.ms", _SAME, "reconnect.backoff.ms"),
    JavaSetting("request.timeout.ms", _SAME, "request.timeout.ms", "librdkafka: the producer's request timeout; "
                                                                  "its other requests use socket.timeout.ms"),
    JavaSetting("retries", _SAME, "retries"),
    JavaSetting("retry.backoff.max.ms", _SAME, "retry.backoff.max.ms"),
    JavaSetting("retry.backoff.ms", _SAME, "retry.backoff.ms"),
    JavaSetting("security.protocol", _SAME, "security.protocol"),
    JavaSetting("security.providers", _REFUSED, "", f"{_JAVA_CLASS}: librdkafka takes OpenSSL providers "
                                                    "(ssl.providers) and engines (ssl.engine.location)"),
    JavaSetting("config.providers", _REFUSED, "", f"{_JAVA_CLASS}: give the values themselves"),
    JavaSetting("send.buffer.bytes", _RENAMED, "socket.send.buffer.bytes", "-1 (the OS default) becomes 0"),
    JavaSetting("session.timeout.ms", _IGNORED, "", _NO_GROUP),
    JavaSetting("socket.connection.setup.timeout.max.ms", _IGNORED, "",
                "librdkafka has one connection set-up timeout, socket.connection.setup.timeout.ms"),
    JavaSetting("socket.connection.setup.timeout.ms", _SAME, "socket.connection.setup.timeout.ms"),
    # ProducerConfig.
    JavaSetting("acks", _SAME, "acks"),
    JavaSetting("batch.size", _SAME, "batch.size"),
    JavaSetting("buffer.memory", _RENAMED, "queue.buffering.max.kbytes", "bytes become KiB, rounded up"),
    JavaSetting("compression.gzip.level", _TRANSLATED, "compression.level", "when compression.type is gzip"),
    JavaSetting("compression.lz4.level", _TRANSLATED, "compression.level", "when compression.type is lz4"),
    JavaSetting("compression.type", _SAME, "compression.type"),
    JavaSetting("compression.zstd.level", _TRANSLATED, "compression.level", "when compression.type is zstd"),
    JavaSetting("delivery.timeout.ms", _SAME, "delivery.timeout.ms"),
    JavaSetting("enable.idempotence", _SAME, "enable.idempotence"),
    JavaSetting("interceptor.classes", _REFUSED, "", f"{_JAVA_CLASS} (Spark's connector refuses it too)"),
    JavaSetting("key.serializer", _REFUSED, "", "keys are written as bytes (Spark's connector refuses it too)"),
    JavaSetting("linger.ms", _SAME, "linger.ms"),
    JavaSetting("max.block.ms", _IGNORED, "", "the kit bounds its own waits for room in the producer's queue"),
    JavaSetting("max.in.flight.requests.per.connection", _SAME, "max.in.flight.requests.per.connection"),
    JavaSetting("max.request.size", _RENAMED, "message.max.bytes"),
    JavaSetting("metadata.max.idle.ms", _IGNORED, "", "librdkafka keeps the metadata of the topics in use"),
    JavaSetting("partitioner.adaptive.partitioning.enable", _IGNORED, "",
                "Java's adaptive choice of a partition for records without a key; librdkafka spreads them evenly"),
    JavaSetting("partitioner.availability.timeout.ms", _IGNORED, "",
                "Java's adaptive choice of a partition for records without a key; librdkafka spreads them evenly"),
    JavaSetting("partitioner.class", _TRANSLATED, "partitioner",
                "Java's built-in partitioners: unset or DefaultPartitioner -> murmur2_random (the same partition "
                "for a key); RoundRobinPartitioner, UniformStickyPartitioner -> random (keys ignored, records "
                f"spread evenly); any other class is refused: {_JAVA_CLASS}"),
    JavaSetting("partitioner.ignore.keys", _TRANSLATED, "partitioner", "true -> random"),
    JavaSetting("transaction.timeout.ms", _SAME, "transaction.timeout.ms",
                "the sink's transaction timeout, as eos.transactionTimeoutMs"),
    JavaSetting("transactional.id", _REFUSED, "", "the sink names its transactions itself: set "
                                                  "eos.transactionalIdPrefix"),
    JavaSetting("value.serializer", _REFUSED, "", "values are written as bytes (Spark's connector refuses it too)"),
    # ConsumerConfig.
    JavaSetting("allow.auto.create.topics", _IGNORED, "", "the source reads partitions of existing topics only"),
    JavaSetting("auto.commit.interval.ms", _IGNORED, "", _NO_GROUP),
    JavaSetting("auto.offset.reset", _REFUSED, "", "use the option startingOffsets (Spark's connector refuses it "
                                                   "too)"),
    JavaSetting("check.crcs", _SAME, "check.crcs"),
    JavaSetting("enable.auto.commit", _REFUSED, "", "offsets live in Spark's checkpoint (Spark's connector refuses "
                                                    "it too; eos.commitOffsetsToGroup mirrors them to a group)"),
    JavaSetting("exclude.internal.topics", _IGNORED, "", "subscribePattern never matches Kafka's internal topics"),
    JavaSetting("fetch.max.bytes", _SAME, "fetch.max.bytes"),
    JavaSetting("fetch.max.wait.ms", _RENAMED, "fetch.wait.max.ms"),
    JavaSetting("fetch.min.bytes", _SAME, "fetch.min.bytes"),
    JavaSetting("group.protocol", _IGNORED, "", _NO_GROUP),
    JavaSetting("group.remote.assignor", _IGNORED, "", _NO_GROUP),
    JavaSetting("internal.leave.group.on.close", _IGNORED, "", _NO_GROUP),
    JavaSetting("isolation.level", _TRANSLATED, "isolation.level",
                "read_committed: the source always reads it; read_uncommitted is refused, it would pass the "
                "records of aborted transactions on"),
    JavaSetting("key.deserializer", _REFUSED, "", "keys are read as bytes (Spark's connector refuses it too)"),
    JavaSetting("max.partition.fetch.bytes", _SAME, "max.partition.fetch.bytes"),
    JavaSetting("max.poll.records", _IGNORED, "", "the source reads offset ranges, with maxOffsetsPerTrigger"),
    JavaSetting("partition.assignment.strategy", _IGNORED, "", _NO_GROUP),
    JavaSetting("share.acknowledgement.mode", _IGNORED, "", "share groups: the kit never joins a group"),
    JavaSetting("value.deserializer", _REFUSED, "", "values are read as bytes (Spark's connector refuses it too)"),
    # AdminClientConfig.
    JavaSetting("bootstrap.controllers", _REFUSED, "", "the kit talks to brokers: kafka.bootstrap.servers"),
    # SslConfigs.
    JavaSetting("ssl.cipher.suites", _SAME, "ssl.cipher.suites",
                "OpenSSL's names (ECDHE-RSA-AES128-GCM-SHA256); Java's (TLS_ECDHE_...) are refused"),
    JavaSetting("ssl.enabled.protocols", _IGNORED, "", "OpenSSL negotiates the highest TLS version both sides take"),
    JavaSetting("ssl.endpoint.identification.algorithm", _SAME, "ssl.endpoint.identification.algorithm",
                "Java's empty value (no host name check) becomes none"),
    JavaSetting("ssl.engine.factory.class", _REFUSED, "", f"{_JAVA_CLASS}: librdkafka takes OpenSSL engines "
                                                          "(ssl.engine.location) and providers (ssl.providers)"),
    JavaSetting("ssl.key.password", _TRANSLATED, "ssl.key.password", "with a keystore, its key's password; "
                                                                     "else librdkafka's, of ssl.key.location"),
    JavaSetting("ssl.keymanager.algorithm", _IGNORED, "", "Java's TLS implementation; librdkafka uses OpenSSL"),
    JavaSetting("ssl.keystore.certificate.chain", _TRANSLATED, "ssl.certificate.location", _KEYSTORE),
    JavaSetting("ssl.keystore.key", _TRANSLATED, "ssl.key.location", _KEYSTORE),
    JavaSetting("ssl.keystore.location", _TRANSLATED, "ssl.certificate.location, ssl.key.location",
                f"JKS, PKCS12 or PEM; {_KEYSTORE}"),
    JavaSetting("ssl.keystore.password", _TRANSLATED, "", _KEYSTORE),
    JavaSetting("ssl.keystore.type", _TRANSLATED, "", "JKS (Java's default), PKCS12 or PEM"),
    JavaSetting("ssl.protocol", _IGNORED, "", "OpenSSL negotiates the highest TLS version both sides take"),
    JavaSetting("ssl.provider", _IGNORED, "", "Java's TLS implementation; librdkafka uses OpenSSL"),
    JavaSetting("ssl.secure.random.implementation", _IGNORED, "", "Java's TLS implementation; librdkafka uses OpenSSL"),
    JavaSetting("ssl.trustmanager.algorithm", _IGNORED, "", "Java's TLS implementation; librdkafka uses OpenSSL"),
    JavaSetting("ssl.truststore.certificates", _TRANSLATED, "ssl.ca.location", _STORE),
    JavaSetting("ssl.truststore.location", _TRANSLATED, "ssl.ca.location", f"JKS, PKCS12 or PEM; {_STORE}"),
    JavaSetting("ssl.truststore.password", _TRANSLATED, "", _STORE),
    JavaSetting("ssl.truststore.type", _TRANSLATED, "", "JKS (Java's default), PKCS12 or PEM"),
    # SaslConfigs.
    JavaSetting("sasl.client.callback.handler.class", _REFUSED, "",
                f"{_JAVA_CLASS}: give the credentials as sasl.jaas.config or sasl.username and sasl.password"),
    JavaSetting("sasl.jaas.config", _TRANSLATED, "sasl.username, sasl.password, sasl.oauthbearer.*, "
                                                 "sasl.kerberos.*",
                "PlainLoginModule, ScramLoginModule, OAuthBearerLoginModule (unsecured JWTs, or OIDC with "
                "sasl.oauthbearer.token.endpoint.url), Krb5LoginModule; any other module is refused"),
    JavaSetting("sasl.kerberos.kinit.cmd", _TRANSLATED, "sasl.kerberos.kinit.cmd",
                "Java's path of kinit becomes librdkafka's kinit command line with it"),
    JavaSetting("sasl.kerberos.min.time.before.relogin", _SAME, "sasl.kerberos.min.time.before.relogin"),
    JavaSetting("sasl.kerberos.service.name", _SAME, "sasl.kerberos.service.name"),
    JavaSetting("sasl.kerberos.ticket.renew.jitter", _IGNORED, "",
                "librdkafka renews the ticket every sasl.kerberos.min.time.before.relogin"),
    JavaSetting("sasl.kerberos.ticket.renew.window.factor", _IGNORED, "",
                "librdkafka renews the ticket every sasl.kerberos.min.time.before.relogin"),
    JavaSetting("sasl.login.callback.handler.class", _TRANSLATED, "sasl.oauthbearer.method",
                "Kafka's OAuthBearerLoginCallbackHandler: OIDC, chosen by sasl.oauthbearer.token.endpoint.url; "
                f"any other class is refused: {_JAVA_CLASS} (librdkafka: sasl.oauthbearer.method=oidc)"),
    JavaSetting("sasl.login.class", _REFUSED, "", f"{_JAVA_CLASS}: give the credentials as sasl.jaas.config"),
    JavaSetting("sasl.login.connect.timeout.ms", _IGNORED, "", "librdkafka's own timeouts for the token endpoint"),
    JavaSetting("sasl.login.read.timeout.ms", _IGNORED, "", "librdkafka's own timeouts for the token endpoint"),
    JavaSetting("sasl.login.refresh.buffer.seconds", _IGNORED, "", _LOGIN_REFRESH),
    JavaSetting("sasl.login.refresh.min.period.seconds", _IGNORED, "", _LOGIN_REFRESH),
    JavaSetting("sasl.login.refresh.window.factor", _IGNORED, "", _LOGIN_REFRESH),
    JavaSetting("sasl.login.refresh.window.jitter", _IGNORED, "", _LOGIN_REFRESH),
    JavaSetting("sasl.login.retry.backoff.max.ms", _IGNORED, "", "librdkafka retries the token endpoint itself"),
    JavaSetting("sasl.login.retry.backoff.ms", _IGNORED, "", "librdkafka retries the token endpoint itself"),
    JavaSetting("sasl.mechanism", _SAME, "sasl.mechanism"),
    JavaSetting("sasl.oauthbearer.assertion.algorithm", _REFUSED, "", "JWT bearer assertions: the kit's clients "
                                                                      "take OIDC client credentials only"),
    JavaSetting("sasl.oauthbearer.assertion.claim.aud", _REFUSED, "", "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.claim.exp.seconds", _REFUSED, "",
                "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.claim.iss", _REFUSED, "", "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.claim.jti.include", _REFUSED, "",
                "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.claim.nbf.seconds", _REFUSED, "",
                "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.claim.sub", _REFUSED, "", "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.file", _REFUSED, "", "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.private.key.file", _REFUSED, "",
                "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.private.key.passphrase", _REFUSED, "",
                "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.assertion.template.file", _REFUSED, "", "see sasl.oauthbearer.assertion.algorithm"),
    JavaSetting("sasl.oauthbearer.client.credentials.client.id", _RENAMED, "sasl.oauthbearer.client.id"),
    JavaSetting("sasl.oauthbearer.client.credentials.client.secret", _RENAMED, "sasl.oauthbearer.client.secret"),
    JavaSetting("sasl.oauthbearer.clock.skew.seconds", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.expected.audience", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.expected.issuer", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.header.urlencode", _IGNORED, "",
                "librdkafka sends the client id and secret as they are"),
    JavaSetting("sasl.oauthbearer.jwks.endpoint.refresh.ms", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.jwks.endpoint.url", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.jwt.retriever.class", _TRANSLATED, "sasl.oauthbearer.method",
                "Kafka's DefaultJwtRetriever, ClientCredentialsJwtRetriever: OIDC client credentials; any other "
                f"class is refused: {_JAVA_CLASS}"),
    JavaSetting("sasl.oauthbearer.jwt.validator.class", _TRANSLATED, "",
                f"Kafka's own validators: {_TOKEN_VALIDATION}; any other class is refused: {_JAVA_CLASS}"),
    JavaSetting("sasl.oauthbearer.scope", _SAME, "sasl.oauthbearer.scope"),
    JavaSetting("sasl.oauthbearer.scope.claim.name", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.sub.claim.name", _IGNORED, "", _TOKEN_VALIDATION),
    JavaSetting("sasl.oauthbearer.token.endpoint.url", _SAME, "sasl.oauthbearer.token.endpoint.url",
                "an https URL; Java's file: URLs (a token in a file) are refused"),
)

#: Java's setting name -> its row.
JAVA_SETTINGS: Mapping[str, JavaSetting] = {row.name: row for row in _ROWS}

_JAVA_PACKAGE = "org.apache.kafka.clients.producer."
_PARTITIONERS = {
    # Java's default: murmur2 of the key; records without a key stick to a partition for a while,
    # spread evenly over time. librdkafka's murmur2_random is the same hash (its documentation:
    # "functionally equivalent to the default partitioner in the Java Producer"), and with its
    # sticky partitioning (sticky.partitioning.linger.ms) records without a key too.
    _JAVA_PACKAGE + "internals.DefaultPartitioner": "murmur2_random",
    # Both ignore keys and spread records evenly; librdkafka has no round robin, and random is
    # uniform. The exact sequence differs, which no reader can rely on anyway (Java's own round
    # robin skips partitions when batches are created: KAFKA-9965).
    _JAVA_PACKAGE + "RoundRobinPartitioner": "random",
    _JAVA_PACKAGE + "UniformStickyPartitioner": "random",
}
#: The kit producer's partitioner where none is set: Java's default partitioning.
DEFAULT_PARTITIONER = "murmur2_random"

_OIDC_HANDLERS = frozenset({
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
})
_OAUTH_PACKAGE = "org.apache.kafka.common.security.oauthbearer."
_JWT_RETRIEVERS = frozenset({_OAUTH_PACKAGE + "DefaultJwtRetriever", _OAUTH_PACKAGE + "ClientCredentialsJwtRetriever"})
_JWT_VALIDATORS = frozenset({_OAUTH_PACKAGE + n for n in ("DefaultJwtValidator", "ClientJwtValidator",
                                                          "BrokerJwtValidator")})
_TRUSTSTORE_KEYS = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                    "ssl.truststore.certificates")
_KEYSTORE_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password",
                  "ssl.keystore.certificate.chain", "ssl.keystore.key")
#: Settings given as they are to the clients' hosts, where the stores are converted.
STORE_KEYS = frozenset((*_TRUSTSTORE_KEYS, *_KEYSTORE_KEYS, "ssl.key.password"))
_KINIT_DEFAULT = ('{kinit} -R -t "%{{sasl.kerberos.keytab}}" -k %{{sasl.kerberos.principal}} || '
                  '{kinit} -t "%{{sasl.kerberos.keytab}}" -k %{{sasl.kerberos.principal}}')


@dataclass(frozen=True)
class Translation:
    """A client configuration in librdkafka's names (``settings``), and its trust and key stores
    still to be turned into PEM files."""

    settings: dict[str, Any] = field(default_factory=dict)
    truststore: TrustStore | None = None
    keystore: KeyStore | None = None
    #: The ``IGNORED`` Java settings given: accepted for a drop-in job, used for nothing.
    unused: tuple[str, ...] = ()


def _refuse(option: str, reason: str) -> UnsupportedClientSettingError:
    return UnsupportedClientSettingError(f"option kafka.{option} is not supported: {reason}")


def _int(option: str, value: Any) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise UnsupportedClientSettingError(f"option kafka.{option} must be an integer, got {value!r}") from None


class _Settings:
    """The librdkafka settings being built, refusing two options that set one differently."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._origin: dict[str, str] = {}

    def set(self, name: str, value: Any, origin: str) -> None:
        if name in self.values and str(self.values[name]) != str(value):
            raise UnsupportedClientSettingError(
                f"options kafka.{self._origin[name]} and kafka.{origin} both set librdkafka's {name}, "
                f"to {self._shown(name, self.values[name])} and {self._shown(name, value)}; set one")
        self.values[name] = value
        self._origin.setdefault(name, origin)

    @staticmethod
    def _shown(name: str, value: Any) -> str:
        return "<secret>" if "password" in name or "secret" in name else repr(value)


def translate(config: Mapping[str, Any]) -> Translation:
    """``config`` (Java or librdkafka names) in librdkafka's names, the stores aside. Pure: reads
    no file. Raises UnsupportedClientSettingError, one line naming the ``kafka.<option>``."""
    out = _Settings()
    special: dict[str, Any] = {}
    unused: list[str] = []
    for key, value in config.items():
        row = JAVA_SETTINGS.get(key)
        if row is None:
            if key not in LIBRDKAFKA_NAMES:
                raise UnsupportedClientSettingError(
                    f"option kafka.{key} is a setting of neither Kafka's Java client nor librdkafka (see "
                    "docs/options.md, Java client settings)")
            if key == "partitioner":  # weighed against partitioner.class below
                special[key] = value
            else:
                out.set(key, _librdkafka_value(key, value), key)
        elif row.kind is Kind.REFUSED:
            raise _refuse(key, row.note)
        elif row.kind is Kind.IGNORED:
            log.debug("kafka.%s has no effect in the kit: %s", key, row.note)
            unused.append(key)
        elif row.kind is Kind.RENAMED:
            out.set(row.librdkafka, _renamed_value(key, value), key)
        elif row.kind is Kind.SAME:
            out.set(key, _librdkafka_value(key, value), key)
        else:
            special[key] = value
    _translate_special(special, config, out)
    truststore, keystore = _stores(special, out)
    _refuse_kerberos_without_gssapi(config, out.values)
    return Translation(out.values, truststore, keystore, tuple(unused))


#: What the installed client does instead of Kerberos, and what does Kerberos (docs/security.md).
_WITHOUT_KERBEROS = ("the installed confluent-kafka's librdkafka was built without GSSAPI (its Linux wheels are: "
                     "no cyrus-sasl), so it cannot do Kerberos. It does PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and "
                     "OAUTHBEARER (OIDC); for Kerberos, install a confluent-kafka built against a librdkafka with "
                     "libsasl2, e.g. conda-forge's python-confluent-kafka (docs/security.md, Kerberos)")


def _refuse_kerberos_without_gssapi(config: Mapping[str, Any], settings: Mapping[str, Any]) -> None:
    """Refuse, before any client is made, a configuration that asks for Kerberos (a
    Krb5LoginModule JAAS line, ``sasl.mechanism=GSSAPI``, or a SASL protocol without a mechanism,
    which is GSSAPI in Java and in librdkafka) where the installed librdkafka has no GSSAPI."""
    if not str(settings.get("security.protocol", "plaintext")).strip().lower().startswith("sasl"):
        return
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms"))
    if "krb5loginmodule" in str(config.get("sasl.jaas.config", "")).lower():
        option = f"sasl.jaas.config ({jaas.KERBEROS})"
    elif mechanism is not None and str(mechanism).strip().upper() == "GSSAPI":
        option = "sasl.mechanism=GSSAPI"
    elif mechanism is None:
        option = (f"security.protocol={settings['security.protocol']} without kafka.sasl.mechanism (GSSAPI, "
                  "Kerberos, by default in Java's client and in librdkafka)")
    else:
        return
    # Imported here: translate() is pure, and this asks the installed library what it was built with.
    from connectors.kafka.clients._confluent.librdkafka import has_builtin_feature

    if not has_builtin_feature("sasl_gssapi"):
        raise UnsupportedClientSettingError(f"option kafka.{option}: {_WITHOUT_KERBEROS}")


def _librdkafka_value(key: str, value: Any) -> Any:
    if key == "ssl.endpoint.identification.algorithm":
        text = str(value).strip().lower()
        return text or "none"  # Java's empty value: no host name check
    if key == "ssl.cipher.suites" and re.search(r"(^|[,:\s])(TLS|SSL)_", str(value)):
        raise _refuse(key, "Java's cipher suite names (TLS_...); librdkafka takes OpenSSL's, e.g. "
                           "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384")
    if key == "sasl.oauthbearer.token.endpoint.url" and str(value).strip().lower().startswith("file:"):
        raise _refuse(key, "a token read from a file (Java's file: URL) has no librdkafka equivalent; give the "
                           "token endpoint's https URL")
    return value


def _renamed_value(key: str, value: Any) -> Any:
    if key in ("send.buffer.bytes", "receive.buffer.bytes"):
        size = _int(key, value)
        return 0 if size < 0 else size  # Java's -1 and librdkafka's 0: the OS default
    if key == "buffer.memory":
        return max(1, math.ceil(_int(key, value) / 1024))
    return value


def _translate_special(special: dict[str, Any], config: Mapping[str, Any], out: _Settings) -> None:
    if "sasl.jaas.config" in special:
        for name, value in jaas.librdkafka_sasl_settings(str(special.pop("sasl.jaas.config")), config).items():
            out.set(name, value, "sasl.jaas.config")
    handler = special.pop("sasl.login.callback.handler.class", None)
    if handler is not None and str(handler).strip() not in _OIDC_HANDLERS:
        raise _refuse("sasl.login.callback.handler.class",
                      f"{handler}: {_JAVA_CLASS}; librdkafka's OAuth tokens come from sasl.oauthbearer.method=oidc "
                      "(client credentials) or unsecured JWTs")
    retriever = special.pop("sasl.oauthbearer.jwt.retriever.class", None)
    if retriever is not None and str(retriever).strip() not in _JWT_RETRIEVERS:
        raise _refuse("sasl.oauthbearer.jwt.retriever.class",
                      f"{retriever}: the kit's clients fetch OAuth tokens with OIDC client credentials only "
                      "(DefaultJwtRetriever, ClientCredentialsJwtRetriever)")
    validator = special.pop("sasl.oauthbearer.jwt.validator.class", None)
    if validator is not None and str(validator).strip() not in _JWT_VALIDATORS:
        raise _refuse("sasl.oauthbearer.jwt.validator.class", f"{validator}: {_JAVA_CLASS}; {_TOKEN_VALIDATION}")
    if "isolation.level" in special:
        level = str(special.pop("isolation.level")).strip().lower()
        if level != "read_committed":
            raise _refuse("isolation.level", f"{level}: the source always reads read_committed, the only level "
                                             "that keeps the records of aborted transactions out")
    if "sasl.kerberos.kinit.cmd" in special:
        command = str(special.pop("sasl.kerberos.kinit.cmd")).strip()
        # Java's value is the path of kinit, librdkafka's the whole command line.
        out.set("sasl.kerberos.kinit.cmd",
                command if re.search(r"\s", command) else _KINIT_DEFAULT.format(kinit=command),
                "sasl.kerberos.kinit.cmd")
    _partitioner(special, out)
    codec = str(config.get("compression.type", config.get("compression.codec", ""))).strip().lower()
    for algorithm in ("gzip", "lz4", "zstd"):
        level = special.pop(f"compression.{algorithm}.level", None)
        if level is not None and codec == algorithm:
            out.set("compression.level", _int(f"compression.{algorithm}.level", level),
                    f"compression.{algorithm}.level")


def _partitioner(special: dict[str, Any], out: _Settings) -> None:
    chosen = special.pop("partitioner", None)
    if chosen is not None:
        out.set("partitioner", chosen, "partitioner")
    java_class = special.pop("partitioner.class", None)
    if java_class is not None:
        name = str(java_class).strip()
        if name not in _PARTITIONERS:
            raise _refuse("partitioner.class",
                          f"{name}: {_JAVA_CLASS}; Java's built-in DefaultPartitioner, RoundRobinPartitioner and "
                          "UniformStickyPartitioner are taken, or librdkafka's kafka.partitioner (murmur2_random, "
                          "random, consistent_random, ...)")
        out.set("partitioner", _PARTITIONERS[name], "partitioner.class")
    ignore_keys = special.pop("partitioner.ignore.keys", None)
    if ignore_keys is not None and str(ignore_keys).strip().lower() == "true":
        out.set("partitioner", "random", "partitioner.ignore.keys")


def _stores(special: dict[str, Any], out: _Settings) -> tuple[TrustStore | None, KeyStore | None]:
    def text(key: str) -> str | None:
        value = special.get(key)
        return None if value is None or str(value) == "" else str(value)

    def store_type(key: str) -> str:
        kind = (text(key) or keystores.JKS).upper()
        if kind not in keystores.STORE_TYPES:
            raise _refuse(key, f"{kind}: the kit reads {', '.join(keystores.STORE_TYPES)} stores")
        return kind

    truststore = None
    if text("ssl.truststore.location") or text("ssl.truststore.certificates"):
        for other in ("ssl.ca.location", "ssl.ca.pem"):
            if other in out.values:
                raise UnsupportedClientSettingError(
                    f"options kafka.ssl.truststore.* and kafka.{other} both name the trusted CAs; set one")
        truststore = TrustStore(store_type("ssl.truststore.type"), text("ssl.truststore.location"),
                                text("ssl.truststore.password"), text("ssl.truststore.certificates"))
    keystore = None
    if text("ssl.keystore.location") or text("ssl.keystore.certificate.chain") or text("ssl.keystore.key"):
        for other in ("ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem"):
            if other in out.values:
                raise UnsupportedClientSettingError(
                    f"options kafka.ssl.keystore.* and kafka.{other} both name the client's certificate; set one")
        inline = bool(text("ssl.keystore.certificate.chain") or text("ssl.keystore.key"))
        keystore = KeyStore(keystores.PEM if inline and not text("ssl.keystore.location")
                            else store_type("ssl.keystore.type"),
                            text("ssl.keystore.location"), text("ssl.keystore.password"), text("ssl.key.password"),
                            text("ssl.keystore.certificate.chain"), text("ssl.keystore.key"))
    elif text("ssl.key.password"):
        out.set("ssl.key.password", special["ssl.key.password"], "ssl.key.password")
    return truststore, keystore


#: The accepted-but-unused settings already told about in this process: a query's options are
#: checked again for each batch, and one INFO line per setting is enough.
_told_unused: set[str] = set()


def check_client_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's early check of a query's ``kafka.*`` options: refuses what the clients would
    refuse, reading no file, and returns the configuration in librdkafka's names, the store
    settings left as given (converted where the clients are built, on each node). A Java setting
    the kit accepts without using it (``IGNORED``: a drop-in job carries it) is said at INFO, once,
    with the reason, so that nobody believes it applied."""
    translation = translate(config)
    for key in translation.unused:
        if key not in _told_unused:
            _told_unused.add(key)
            log.info("option kafka.%s is accepted for jobs written for Spark's connector, and not used by the kit: %s",
                     key, JAVA_SETTINGS[key].note)
    settings = dict(translation.settings)
    settings.update({key: value for key, value in config.items() if key in STORE_KEYS})
    return settings


def librdkafka_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as librdkafka (and, through ``_kafka_python/settings.py``, kafka-python) take it,
    the trust and key stores converted to PEM files (once per process and store file)."""
    translation = translate(config)
    settings = dict(translation.settings)
    if translation.truststore is not None:
        settings["ssl.ca.location"] = keystores.ca_file(translation.truststore)
    if translation.keystore is not None:
        pem = keystores.client_pem(translation.keystore)
        settings["ssl.certificate.location"] = pem.certificate_location
        settings["ssl.key.location"] = pem.key_location
        if pem.key_password:
            settings["ssl.key.password"] = pem.key_password
        else:
            settings.pop("ssl.key.password", None)
    return settings


def markdown_table() -> str:
    """The table of docs/options.md's "Java client settings" section."""
    lines = ["| Java setting | what the kit does | librdkafka setting / why |", "|---|---|---|"]
    for row in sorted(_ROWS, key=lambda r: r.name):
        target = f"`{row.librdkafka}`" if row.librdkafka and ", " not in row.librdkafka else \
            ", ".join(f"`{name}`" for name in row.librdkafka.split(", ")) if row.librdkafka else ""
        why = "; ".join(part for part in (target, row.note) if part)
        lines.append(f"| `{row.name}` | {row.kind.value} | {why} |")
    return "\n".join(lines) + "\n"


__all__ = ["DEFAULT_PARTITIONER", "JAVA_SETTINGS", "JavaSetting", "Kind", "LIBRDKAFKA_NAMES", "STORE_KEYS",
           "Translation", "check_client_config", "librdkafka_config", "markdown_table", "translate"]

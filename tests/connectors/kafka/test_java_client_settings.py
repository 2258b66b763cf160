"""Kafka's Java client settings translated to librdkafka's (no broker needed): the table, its
documentation, the refusals, the partitioners, Java's murmur2, and where the translation applies
(every client RealKafkaClients builds; the Spark options' early check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from connectors.kafka.clients import java_client_settings as jcs
from connectors.kafka.clients._confluent import producer as producer_module
from connectors.kafka.clients._confluent import reader as reader_module
from connectors.kafka.clients._confluent.backend import RealKafkaClients
from connectors.kafka.clients.java_client_settings import (
    JAVA_SETTINGS,
    LIBRDKAFKA_NAMES,
    Kind,
    check_client_config,
    librdkafka_config,
    markdown_table,
    translate,
)
from connectors.kafka.clients.murmur2 import java_partition, murmur2, to_positive
from connectors.kafka.kafka_errors import UnsupportedClientSettingError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "options.md"
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="pw";'

# Every key of Java's ProducerConfig, ConsumerConfig and AdminClientConfig (apache/kafka, clients/,
# with CommonClientConfigs, SslConfigs and SaslConfigs' client settings), Kafka 4.x.
JAVA_KEYS = """
bootstrap.servers client.dns.lookup metadata.max.age.ms send.buffer.bytes receive.buffer.bytes client.id
client.rack reconnect.backoff.ms reconnect.backoff.max.ms retries retry.backoff.ms retry.backoff.max.ms
enable.metrics.push metrics.sample.window.ms metrics.num.samples metrics.recording.level metric.reporters
security.protocol socket.connection.setup.timeout.ms socket.connection.setup.timeout.max.ms
connections.max.idle.ms request.timeout.ms group.id group.instance.id max.poll.interval.ms session.timeout.ms
heartbeat.interval.ms default.api.timeout.ms metadata.recovery.strategy metadata.recovery.rebootstrap.trigger.ms
security.providers
metadata.max.idle.ms batch.size partitioner.adaptive.partitioning.enable partitioner.availability.timeout.ms
partitioner.ignore.keys acks linger.ms delivery.timeout.ms max.request.size max.block.ms buffer.memory
compression.type compression.gzip.level compression.lz4.level compression.zstd.level key.serializer
value.serializer partitioner.class interceptor.classes enable.idempotence transaction.timeout.ms
transactional.id max.in.flight.requests.per.connection
max.poll.records group.protocol group.remote.assignor enable.auto.commit auto.commit.interval.ms
partition.assignment.strategy auto.offset.reset fetch.min.bytes fetch.max.bytes fetch.max.wait.ms
max.partition.fetch.bytes check.crcs key.deserializer value.deserializer exclude.internal.topics
internal.leave.group.on.close isolation.level allow.auto.create.topics share.acknowledgement.mode
bootstrap.controllers
ssl.protocol ssl.provider ssl.cipher.suites ssl.enabled.protocols ssl.keystore.type ssl.keystore.key
ssl.keystore.certificate.chain ssl.truststore.certificates ssl.keystore.location ssl.keystore.password
ssl.key.password ssl.truststore.type ssl.truststore.location ssl.truststore.password ssl.keymanager.algorithm
ssl.trustmanager.algorithm ssl.endpoint.identification.algorithm ssl.secure.random.implementation
ssl.engine.factory.class
sasl.mechanism sasl.jaas.config sasl.client.callback.handler.class sasl.login.callback.handler.class
sasl.login.class sasl.kerberos.service.name sasl.kerberos.kinit.cmd sasl.kerberos.ticket.renew.window.factor
sasl.kerberos.ticket.renew.jitter sasl.kerberos.min.time.before.relogin sasl.login.refresh.window.factor
sasl.login.refresh.window.jitter sasl.login.refresh.min.period.seconds sasl.login.refresh.buffer.seconds
sasl.login.connect.timeout.ms sasl.login.read.timeout.ms sasl.login.retry.backoff.max.ms
sasl.login.retry.backoff.ms sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
sasl.oauthbearer.token.endpoint.url sasl.oauthbearer.jwks.endpoint.url sasl.oauthbearer.jwks.endpoint.refresh.ms
sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.ms
sasl.oauthbearer.clock.skew.seconds sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer
sasl.oauthbearer.header.urlencode sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class
sasl.oauthbearer.scope sasl.oauthbearer.client.credentials.client.id
sasl.oauthbearer.client.credentials.client.secret sasl.oauthbearer.assertion.algorithm
sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub sasl.oauthbearer.assertion.file
sasl.oauthbearer.assertion.private.key.file sasl.oauthbearer.assertion.private.key.passphrase
sasl.oauthbearer.assertion.template.file
""".split()


# -- the table ----------------------------------------------------------------------------------


def test_every_java_client_key_has_one_row():
    assert set(JAVA_KEYS) - set(JAVA_SETTINGS) == set()
    # config.providers (AbstractConfig) and rebalance.timeout.ms (CommonClientConfigs) too.
    assert set(JAVA_SETTINGS) - set(JAVA_KEYS) == {"config.providers", "rebalance.timeout.ms"}


def test_ignored_and_refused_rows_say_why_and_mapped_rows_name_librdkafkas_setting():
    for row in JAVA_SETTINGS.values():
        if row.kind in (Kind.IGNORED, Kind.REFUSED):
            assert row.note, row.name
        if row.kind in (Kind.SAME, Kind.RENAMED):
            assert row.librdkafka in LIBRDKAFKA_NAMES, row.name
        if row.kind is Kind.SAME:
            assert row.librdkafka == row.name


def _librdkafka_knows(name: str) -> bool:
    """Whether the installed librdkafka has a configuration property of this name: a wrong value
    is refused as invalid, an unknown name as "No such configuration property"."""
    for client in (Producer, Consumer):
        try:
            handle = client({name: "x", "group.id": "g"} if client is Consumer else {name: "x"})
        except (KafkaException, ValueError, TypeError) as exc:
            if "No such configuration property" not in str(exc):
                return True
            continue
        if client is Consumer:
            handle.close()
        return True
    return False


def test_every_librdkafka_name_exists_in_the_installed_librdkafka():
    python_only = {"logger", "oauth_cb", "on_delivery", "on_commit", "error_cb", "stats_cb", "throttle_cb"}
    names = sorted(name for name in LIBRDKAFKA_NAMES if name not in python_only and not name.endswith("_cb")
                   and name not in {"opaque", "default_topic_conf", "log.queue", "background_event_cb",
                                    "ssl_engine_callback_data", "ssl_ca", "ssl_certificate", "ssl_key",
                                    "interceptors", "builtin.features", "enabled_events",
                                    "internal.termination.signal", "plugin.library.paths"})
    unknown = [name for name in names if not _librdkafka_knows(name)]
    assert unknown == []


def test_the_docs_table_is_the_modules_table():
    text = DOCS.read_text()
    match = re.search(r"<!-- java-client-settings:begin[^>]*-->\n(.*?)<!-- java-client-settings:end -->", text, re.S)
    assert match, "docs/options.md lacks the generated Java client settings table"
    assert match.group(1) == markdown_table(), (
        "docs/options.md's Java client settings table is stale: paste markdown_table() of "
        "connectors/kafka/clients/java_client_settings.py between its markers")


# -- translation --------------------------------------------------------------------------------


def test_renamed_settings_get_librdkafkas_names_and_units():
    settings = translate({"max.request.size": "2000000", "buffer.memory": "33554433", "send.buffer.bytes": "-1",
                          "receive.buffer.bytes": "65536", "fetch.max.wait.ms": "100", "linger.ms": "7",
                          "sasl.oauthbearer.client.credentials.client.id": "cid"}).settings
    assert settings == {"message.max.bytes": "2000000", "queue.buffering.max.kbytes": 32769,
                        "socket.send.buffer.bytes": 0, "socket.receive.buffer.bytes": 65536,
                        "fetch.wait.max.ms": "100", "linger.ms": "7", "sasl.oauthbearer.client.id": "cid"}


def test_librdkafka_names_pass_through_unchanged():
    config = {"sasl.username": "u", "sasl.password": "p", "ssl.ca.location": "/ca.pem", "queue.buffering.max.ms": "3",
              "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    assert translate(config).settings == config
    assert librdkafka_config(config) == config


def test_ignored_settings_have_no_effect():
    assert translate({"session.timeout.ms": "1", "max.poll.records": "5", "ssl.protocol": "TLSv1.2",
                      "metrics.num.samples": "2", "max.block.ms": "1"}).settings == {}


def test_an_accepted_unused_setting_is_said_once_at_info_with_its_reason(caplog, monkeypatch):
    monkeypatch.setattr(jcs, "_told_unused", set())
    with caplog.at_level("INFO", logger=jcs.__name__):
        for _ in range(3):  # the options are checked again for each batch
            jcs.check_client_config({"session.timeout.ms": "1", "linger.ms": "5"})
    told = [record.getMessage() for record in caplog.records]
    assert told == ["option kafka.session.timeout.ms is accepted for jobs written for Spark's connector, and not "
                    f"used by the kit: {jcs.JAVA_SETTINGS['session.timeout.ms'].note}"]


@pytest.mark.parametrize(("option", "value", "message"), [
    ("key.serializer", "org.apache.kafka.common.serialization.StringSerializer", "written as bytes"),
    ("value.deserializer", "x", "read as bytes"),
    ("interceptor.classes", "x", "Java class"),
    ("enable.auto.commit", "true", "Spark's checkpoint"),
    ("auto.offset.reset", "earliest", "use the option startingOffsets"),
    ("transactional.id", "t", "eos.transactionalIdPrefix"),
    ("metric.reporters", "x", "statistics.interval.ms"),
    ("sasl.login.callback.handler.class", "com.example.MyHandler", "sasl.oauthbearer.method=oidc"),
    ("isolation.level", "read_uncommitted", "aborted transactions"),
    ("partitioner.class", "com.example.MyPartitioner", "Java class cannot run in librdkafka"),
    ("ssl.cipher.suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "OpenSSL's"),
    ("ssl.truststore.type", "BCFKS", "JKS, PKCS12, PEM"),
    ("sasl.oauthbearer.token.endpoint.url", "file:///tmp/token", "https URL"),
])
def test_refusals_are_one_line_naming_the_option_and_what_to_do(option, value, message):
    config = {option: value}
    if option == "ssl.truststore.type":
        config["ssl.truststore.location"] = "/x"
    with pytest.raises(UnsupportedClientSettingError) as raised:
        translate(config)
    text = str(raised.value)
    assert "\n" not in text and f"kafka.{option}" in text and message in text, text


def test_a_name_of_neither_client_is_refused_naming_it():
    with pytest.raises(UnsupportedClientSettingError, match=r"^option kafka.fetch.max.bites is a setting of neither"):
        translate({"fetch.max.bites": "1"})


def test_two_options_setting_one_librdkafka_setting_differently_are_refused():
    with pytest.raises(UnsupportedClientSettingError, match="kafka.message.max.bytes and kafka.max.request.size"):
        translate({"message.max.bytes": "1000", "max.request.size": "2000"})
    with pytest.raises(UnsupportedClientSettingError, match="<secret>"):
        translate({"sasl.password": "a", "sasl.jaas.config": SCRAM})
    same = translate({"message.max.bytes": "2000", "max.request.size": "2000"})
    assert same.settings == {"message.max.bytes": "2000"}


def test_isolation_level_read_committed_and_group_id_are_accepted():
    assert translate({"isolation.level": "read_committed", "group.id": "spark-kafka-source-x"}).settings == {
        "group.id": "spark-kafka-source-x"}


def test_value_conversions():
    settings = translate({"ssl.endpoint.identification.algorithm": "", "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
                          "compression.type": "zstd", "compression.zstd.level": "5",
                          "compression.gzip.level": "9"}).settings
    assert settings["ssl.endpoint.identification.algorithm"] == "none"
    assert settings["sasl.kerberos.kinit.cmd"].startswith('/usr/bin/kinit -R -t "%{sasl.kerberos.keytab}"')
    assert settings["compression.level"] == 5  # the gzip level has no meaning with zstd
    assert translate(settings).settings == settings  # idempotent: librdkafka's values stay


def test_sasl_jaas_config_becomes_librdkafkas_settings():
    settings = translate({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                          "sasl.jaas.config": SCRAM}).settings
    assert settings == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                        "sasl.username": "app", "sasl.password": "pw"}


def test_kafkas_oidc_login_callback_handler_is_accepted():
    settings = translate({
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                            'clientId="app" clientSecret="s";'}).settings
    assert settings["sasl.oauthbearer.method"] == "oidc" and settings["sasl.oauthbearer.client.id"] == "app"


# -- partitioning -------------------------------------------------------------------------------


@pytest.mark.parametrize(("java_class", "librdkafka"), [
    ("org.apache.kafka.clients.producer.internals.DefaultPartitioner", "murmur2_random"),
    ("org.apache.kafka.clients.producer.RoundRobinPartitioner", "random"),
    ("org.apache.kafka.clients.producer.UniformStickyPartitioner", "random"),
])
def test_javas_built_in_partitioners_map_to_librdkafkas(java_class, librdkafka):
    assert translate({"partitioner.class": java_class}).settings == {"partitioner": librdkafka}


def test_partitioner_ignore_keys_spreads_keyed_records_too():
    assert translate({"partitioner.ignore.keys": "true"}).settings == {"partitioner": "random"}
    assert translate({"partitioner.ignore.keys": "false"}).settings == {}


# Kafka's own vectors: clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
@pytest.mark.parametrize(("data", "expected"), [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971), (b"abc", 479470107),
])
def test_murmur2_is_kafkas(data, expected):
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_as_kafka_does():
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(2 ** 31)) == 0 and to_positive(5) == 5
    assert java_partition(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


def test_the_fake_cluster_puts_keyed_records_where_java_does(tmp_path):
    from connectors.simulated_kafka import FakeKafkaClients

    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("t", 6)
    producer = clients.producer(None)
    keys = [f"key-{i}".encode() for i in range(40)]
    for key in keys:
        producer.produce("t", b"v", key)
    producer.flush(5)
    from connectors.kafka.clients import TopicPartition

    partitions = [TopicPartition("t", p) for p in range(6)]
    ends = clients.admin().list_offsets(partitions, "latest")
    placed = {}
    for tp in partitions:
        for record in clients.reader(read_committed=False).read({tp: (0, ends[tp])}):
            placed[record.key] = tp.partition
    assert placed == {key: java_partition(key, 6) for key in keys}


# -- where the translation applies ---------------------------------------------------------------


class _Captured:
    def __init__(self) -> None:
        self.configs: list[dict] = []

    def factory(self, conf):  # stands for librdkafka's Producer/Consumer
        self.configs.append(dict(conf))
        raise _Stop()


class _Stop(Exception):
    pass


def test_the_producer_partitions_as_java_by_default_and_a_users_partitioner_wins(monkeypatch):
    captured = _Captured()
    monkeypatch.setattr(producer_module, "_Producer", captured.factory)
    clients = RealKafkaClients("127.0.0.1:1", {"max.request.size": "2000000", "group.id": "g"})
    with pytest.raises(_Stop):
        clients.producer(None)
    assert captured.configs[-1]["partitioner"] == "murmur2_random"
    assert captured.configs[-1]["message.max.bytes"] == "2000000"
    assert "group.id" not in captured.configs[-1]  # a consumer setting, which a producer only warns about
    with pytest.raises(_Stop):
        RealKafkaClients("127.0.0.1:1", {
            "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"}).producer("t")
    assert captured.configs[-1]["partitioner"] == "random"
    with pytest.raises(_Stop):
        RealKafkaClients("127.0.0.1:1", {"partitioner": "consistent"}).producer(None)
    assert captured.configs[-1]["partitioner"] == "consistent"


def test_the_reader_takes_group_id_from_its_config_else_a_random_one(monkeypatch):
    captured = _Captured()
    monkeypatch.setattr(reader_module, "_Consumer", captured.factory)
    with pytest.raises(_Stop):
        RealKafkaClients("127.0.0.1:1", {"group.id": "spark-kafka-source-q-executor",
                                         "isolation.level": "read_committed"}).reader()
    assert captured.configs[-1]["group.id"] == "spark-kafka-source-q-executor"
    assert captured.configs[-1]["isolation.level"] == "read_committed"
    assert captured.configs[-1]["enable.auto.commit"] is False
    with pytest.raises(_Stop):
        RealKafkaClients("127.0.0.1:1", {}).reader()
    assert captured.configs[-1]["group.id"].startswith("eos-reader-")


def test_every_client_gets_the_translation_the_transaction_control_too():
    clients = RealKafkaClients("127.0.0.1:1", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                               "sasl.jaas.config": SCRAM.replace("scram.ScramLoginModule",
                                                                                 "plain.PlainLoginModule")})
    assert clients.config["sasl.username"] == "app"
    from connectors.kafka.clients._kafka_python.settings import kafka_python_config

    assert kafka_python_config(clients.config)["sasl_plain_username"] == "app"


def test_unsupported_settings_fail_where_clients_are_built():
    with pytest.raises(UnsupportedClientSettingError, match="kafka.key.serializer"):
        RealKafkaClients("127.0.0.1:1", {"key.serializer": "x"})


def test_the_spark_options_check_the_settings_early():
    from connectors.spark.spark_errors import KafkaEosOptionError
    from connectors.spark.options import parse_source_options

    parsed = parse_source_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                                   "kafka.group.id": "mine", "kafka.isolation.level": "read_committed",
                                   "kafka.max.partition.fetch.bytes": "1000",
                                   "kafka.ssl.truststore.location": "/only/on/executors.jks",
                                   "kafka.ssl.truststore.password": "pw",
                                   "kafka.sasl.jaas.config": SCRAM}, streaming=True)
    config = parsed.config.client_config
    assert config["group.id"] == "mine" and config["sasl.username"] == "app"
    assert config["ssl.truststore.location"] == "/only/on/executors.jks"  # converted where clients are built
    assert "isolation.level" not in config
    with pytest.raises(KafkaEosOptionError, match="kafka.auto.offset.reset is not supported: use the option "
                                                  "startingOffsets"):
        parse_source_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                              "kafka.auto.offset.reset": "earliest"}, streaming=True)


def test_check_client_config_keeps_store_settings_for_the_nodes():
    assert check_client_config({"ssl.keystore.location": "/k.jks", "ssl.keystore.password": "p",
                                "ssl.key.password": "kp", "fetch.max.wait.ms": "9"}) == {
        "ssl.keystore.location": "/k.jks", "ssl.keystore.password": "p", "ssl.key.password": "kp",
        "fetch.wait.max.ms": "9"}


def test_clients_pickled_to_another_process_translate_again():
    import pickle

    clients = RealKafkaClients("127.0.0.1:1", {"max.request.size": "2000000"})
    again = pickle.loads(pickle.dumps(clients))
    assert again.config == clients.config == {"message.max.bytes": "2000000"}


def test_kinds_all_documented():
    assert {row.kind for row in jcs.JAVA_SETTINGS.values()} == set(Kind)


_KERBEROS_LINE = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/etc/k.keytab" '
                  'principal="spark@EXAMPLE.COM";')


@pytest.mark.parametrize(("config", "option"), [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism=GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": _KERBEROS_LINE},
     "kafka.sasl.jaas.config (com.sun.security.auth.module.Krb5LoginModule)"),
    ({"security.protocol": "SASL_SSL"}, "kafka.security.protocol=SASL_SSL without kafka.sasl.mechanism"),
])
def test_kerberos_is_refused_in_one_line_where_librdkafka_has_no_gssapi(config, option):
    """The confluent-kafka Linux wheels (the ones installed here) lack GSSAPI: the check before the
    first batch says so, naming the option and what the client can do instead."""
    from connectors.kafka.clients._confluent.librdkafka import has_builtin_feature
    from connectors.kafka.clients.java_client_settings import check_client_config

    assert not has_builtin_feature("sasl_gssapi"), "this test is about a librdkafka built without GSSAPI"
    with pytest.raises(UnsupportedClientSettingError) as refused:
        check_client_config(config)
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"option {option}")
    assert "cannot do Kerberos" in line and "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER" in line
    assert "docs/security.md" in line


def test_kerberos_translates_where_librdkafka_has_gssapi(monkeypatch):
    from connectors.kafka.clients._confluent import librdkafka
    from connectors.kafka.clients.java_client_settings import check_client_config

    monkeypatch.setattr(librdkafka, "has_builtin_feature", lambda feature: feature == "sasl_gssapi")
    settings = check_client_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI",
                                    "sasl.jaas.config": _KERBEROS_LINE})
    assert settings["sasl.kerberos.keytab"] == "/etc/k.keytab"
    assert settings["sasl.kerberos.principal"] == "spark@EXAMPLE.COM"


def test_other_mechanisms_never_ask_librdkafka_about_gssapi(monkeypatch):
    from connectors.kafka.clients._confluent import librdkafka
    from connectors.kafka.clients.java_client_settings import check_client_config

    monkeypatch.setattr(librdkafka, "has_builtin_feature", lambda feature: pytest.fail("asked"))
    check_client_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "u", "sasl.password": "p"})
    check_client_config({"security.protocol": "SSL"})

"""Java's ``sasl.jaas.config`` lines read into librdkafka's SASL settings (no broker needed)."""

from __future__ import annotations

import pytest

from connectors.kafka.clients.jaas import librdkafka_sasl_settings, parse_jaas
from connectors.kafka.kafka_errors import UnsupportedClientSettingError

OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def test_plain_and_scram_give_username_and_password():
    for module in ("org.apache.kafka.common.security.plain.PlainLoginModule",
                   "org.apache.kafka.common.security.scram.ScramLoginModule"):
        line = f'{module} required username="orders-enricher" password="p=w;\\"x";'
        assert librdkafka_sasl_settings(line, {}) == {"sasl.username": "orders-enricher", "sasl.password": 'p=w;"x'}


def test_a_line_spread_over_lines_with_bare_values_is_read():
    login = parse_jaas("org.apache.kafka.common.security.scram.ScramLoginModule required\n"
                       "    username=app\n    password=\"pw\" ;")
    assert login.flag == "required" and dict(login.options) == {"username": "app", "password": "pw"}


def test_scram_delegation_tokens_are_refused():
    with pytest.raises(UnsupportedClientSettingError, match="tokenauth"):
        librdkafka_sasl_settings('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                 'username="a" password="b" tokenauth="true";', {})


def test_oauthbearer_unsecured_jwts():
    line = (f'{OAUTH} required unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",read,write" '
            'unsecuredLoginLifetimeSeconds="600";')
    assert librdkafka_sasl_settings(line, {}) == {
        "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=alice scope=read,write lifeSeconds=600"}


def test_oauthbearer_oidc_client_credentials():
    line = f'{OAUTH} required clientId="app" clientSecret="s3cret" scope="kafka" extension_logicalCluster="lkc-1";'
    assert librdkafka_sasl_settings(line, {"sasl.oauthbearer.token.endpoint.url": "https://idp/token"}) == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app",
        "sasl.oauthbearer.client.secret": "s3cret", "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1"}


def test_oauthbearer_without_a_token_source_is_refused():
    with pytest.raises(UnsupportedClientSettingError, match="unsecuredLoginStringClaim_sub .*token.endpoint.url"):
        librdkafka_sasl_settings(f'{OAUTH} required clientId="app" clientSecret="s";', {})


def test_kerberos_keytab_and_principal():
    line = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            'keyTab="/etc/security/keytabs/app.keytab" principal="app@EXAMPLE.COM";')
    assert librdkafka_sasl_settings(line, {}) == {"sasl.kerberos.keytab": "/etc/security/keytabs/app.keytab",
                                                  "sasl.kerberos.principal": "app@EXAMPLE.COM"}
    ticket_cache = librdkafka_sasl_settings(
        "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;", {})
    assert ticket_cache == {"sasl.kerberos.min.time.before.relogin": "0"}


def test_any_other_module_is_refused_in_one_line_naming_it_and_the_supported_ones():
    with pytest.raises(UnsupportedClientSettingError) as raised:
        librdkafka_sasl_settings('io.strimzi.kafka.oauth.client.JaasClientOauthLoginCallbackHandler required;', {})
    text = str(raised.value)
    assert "\n" not in text and text.startswith("option kafka.sasl.jaas.config:")
    assert "io.strimzi.kafka.oauth.client.JaasClientOauthLoginCallbackHandler" in text
    assert "PlainLoginModule" in text and "Krb5LoginModule" in text


@pytest.mark.parametrize("line", [
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b"',  # no ;
    'org.apache.kafka.common.security.plain.PlainLoginModule username="a";',  # no flag
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password;',
    'a.B required; c.D required;',
])
def test_malformed_lines_are_refused(line):
    with pytest.raises(UnsupportedClientSettingError, match="^option kafka.sasl.jaas.config: "):
        librdkafka_sasl_settings(line, {})

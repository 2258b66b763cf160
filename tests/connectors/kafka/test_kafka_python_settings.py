"""librdkafka-style ``kafka.*`` options translated for kafka-python, the transaction control plane
(no broker needed; the OIDC token endpoint is a local HTTP server)."""

from __future__ import annotations

import base64
import json

import pytest

from connectors.kafka.clients._kafka_python.settings import (
    OidcClientCredentialsTokenProvider,
    UnsecuredJwtTokenProvider,
    kafka_python_config,
)
from connectors.kafka.kafka_errors import UnsupportedClientSettingError
from connectors.kafka.clients._kafka_python.transaction_control import KafkaPythonTransactionControl
from kafka_testkit.token_endpoint import TokenEndpoint


def test_sasl_and_tls_settings_are_translated():
    mapped = kafka_python_config({
        "security.protocol": "sasl_ssl", "sasl.mechanism": "scram-sha-512", "sasl.username": "app",
        "sasl.password": "pw", "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem", "ssl.key.password": "kp", "ssl.endpoint.identification.algorithm": "none",
        "ssl.crl.location": "/crl.pem", "linger.ms": "5"})
    assert mapped == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "app",
        "sasl_plain_password": "pw", "ssl_cafile": "/ca.pem", "ssl_certfile": "/c.pem", "ssl_keyfile": "/k.pem",
        "ssl_password": "kp", "ssl_check_hostname": False, "ssl_crlfile": "/crl.pem"}


def test_librdkafkas_probe_of_the_system_ca_store_is_kafka_pythons_default():
    assert "ssl_cafile" not in kafka_python_config({"ssl.ca.location": "probe"})


@pytest.mark.parametrize("option", ["ssl.keystore.location", "ssl.ca.pem", "ssl.key.pem", "ssl.engine.id",
                                    "sasl.oauthbearer.grant.type"])
def test_settings_kafka_python_cannot_honour_are_refused_naming_the_option(option):
    with pytest.raises(UnsupportedClientSettingError, match=f"option kafka.{option} is not supported"):
        kafka_python_config({option: "x"})


def test_the_refusal_happens_when_the_control_plane_is_made():
    with pytest.raises(UnsupportedClientSettingError, match="kafka.ssl.keystore.location"):
        KafkaPythonTransactionControl("localhost:9092", {"ssl.keystore.location": "/ks.p12"})


def test_oauthbearer_needs_a_token_source_that_options_can_describe():
    with pytest.raises(UnsupportedClientSettingError, match="sasl.oauthbearer.method=oidc"):
        kafka_python_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"})
    with pytest.raises(UnsupportedClientSettingError, match="needs kafka.sasl.oauthbearer.client.secret"):
        kafka_python_config({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                             "sasl.oauthbearer.client.id": "c", "sasl.oauthbearer.token.endpoint.url": "http://x"})


def _claims(token: str) -> dict:
    header, payload, signature = token.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"} and signature == ""
    return json.loads(base64.urlsafe_b64decode(payload + "=="))


def test_unsecured_jwts_like_librdkafkas():
    provider = kafka_python_config({
        "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": "true",
        "sasl.oauthbearer.config": "principal=svc scope=a,b lifeSeconds=60",
        "sasl.oauthbearer.extensions": "traceId=1"})["sasl_oauth_token_provider"]
    assert isinstance(provider, UnsecuredJwtTokenProvider)
    claims = _claims(provider.token())
    assert (claims["sub"], claims["scope"], claims["exp"] - claims["iat"]) == ("svc", ["a", "b"], 60)
    assert provider.extensions() == {"traceId": "1"}


def test_oidc_client_credentials_from_the_token_endpoint():
    with TokenEndpoint() as endpoint:
        provider = kafka_python_config({
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "c",
            "sasl.oauthbearer.client.secret": "s", "sasl.oauthbearer.scope": "kafka",
            "sasl.oauthbearer.token.endpoint.url": endpoint.url,
        })["sasl_oauth_token_provider"]
        assert isinstance(provider, OidcClientCredentialsTokenProvider)
        token = provider.token()
        assert provider.token() == token  # reused until near expiry
    assert _claims(token)["sub"] == "c"
    assert endpoint.requests == [("c", {"grant_type": "client_credentials", "scope": "kafka"})]

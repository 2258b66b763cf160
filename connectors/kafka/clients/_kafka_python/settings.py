"""The transaction control plane's connection settings: librdkafka-style ``kafka.*`` options
translated for kafka-python.

Users give one set of client options, in librdkafka's names (Java's client's are translated to them
first, by ``clients/java_client_settings.py``, trust and key stores into PEM files), and the kit
runs two client libraries on them: librdkafka (confluent-kafka) for the data path, kafka-python for the transaction control
plane (EndTxn, ListTransactions, DescribeTransactions; ``clients/_kafka_python/transaction_control.py``). This module is where
the two meet. A setting is either

- translated (``_TRANSLATED`` and the few special cases below): both libraries do the same with it;
- librdkafka's business only (``_LIBRDKAFKA_ONLY``): kafka-python reaches the same end its own way,
  e.g. Kerberos tickets from the ticket cache that librdkafka's ``kinit`` refreshes;
- or unsupported by kafka-python (``_UNSUPPORTED``): an exactly-once sink refuses to start with an
  error naming the option and what to use instead, rather than connecting without it and failing
  later with a less helpful error.

SASL/OAUTHBEARER needs a token provider object in kafka-python, which string options cannot carry;
the two token sources librdkafka takes from options are provided here: OIDC client credentials
(``sasl.oauthbearer.method=oidc``) and unsecured JWTs (``enable.sasl.oauthbearer.unsecure.jwt``,
for development brokers only).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import ssl
import threading
import time
import urllib.parse
import urllib.request
from importlib.util import find_spec
from typing import Any, Mapping

from kafka.net.sasl.oauth import AbstractTokenProvider

from connectors.kafka.kafka_errors import KafkaConnectorError, UnsupportedClientSettingError

log = logging.getLogger(__name__)

# librdkafka key -> kafka-python keyword, where the meaning is the same.
_TRANSLATED = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "client.id": "client_id",
    "socket.timeout.ms": "request_timeout_ms",
}
_UPPERCASE_VALUES = frozenset({"security_protocol", "sasl_mechanism"})
_INT_VALUES = frozenset({"request_timeout_ms"})

# librdkafka settings whose purpose kafka-python meets without them.
_LIBRDKAFKA_ONLY = {
    "sasl.kerberos.keytab": "kafka-python authenticates from the Kerberos ticket cache (kinit)",
    "sasl.kerberos.kinit.cmd": "kafka-python authenticates from the Kerberos ticket cache (kinit)",
    "sasl.kerberos.min.time.before.relogin": "kafka-python authenticates from the Kerberos ticket cache (kinit)",
    "sasl.kerberos.principal": "kafka-python authenticates from the Kerberos ticket cache (kinit)",
    "ssl.cipher.suites": "kafka-python uses Python's default TLS ciphers",
    "ssl.curves.list": "kafka-python uses Python's default TLS curves",
    "ssl.sigalgs.list": "kafka-python uses Python's default TLS signature algorithms",
    "sasl.oauthbearer.method": "used to choose the token provider below",
    "sasl.oauthbearer.client.id": "passed to the OIDC token provider",
    "sasl.oauthbearer.client.secret": "passed to the OIDC token provider",
    "sasl.oauthbearer.token.endpoint.url": "passed to the OIDC token provider",
    "sasl.oauthbearer.scope": "passed to the OIDC token provider",
    "sasl.oauthbearer.extensions": "passed to the token provider",
    "sasl.oauthbearer.config": "passed to the unsecured JWT token provider",
    "enable.sasl.oauthbearer.unsecure.jwt": "used to choose the token provider below",
    "https.ca.location": "trusted by the OIDC token provider",
}

# librdkafka settings kafka-python has no equivalent for, and what to use instead.
_UNSUPPORTED = {
    # The kit's clients (RealKafkaClients) turn every keystore into PEM files before they get here
    # (java_client_settings.librdkafka_config); one reaching this module was not converted.
    "ssl.keystore.location": "kafka-python reads PEM files only: build the clients with "
                             "connectors.kafka.clients.factory.clients_for, which converts keystores to PEM files",
    "ssl.keystore.password": "see kafka.ssl.keystore.location",
    "ssl.ca.pem": "write the CA certificates to a file and set kafka.ssl.ca.location, or give them as Java's "
                  "kafka.ssl.truststore.type=PEM with kafka.ssl.truststore.certificates",
    "ssl.certificate.pem": "write the certificate to a file and set kafka.ssl.certificate.location, or give it as "
                           "Java's kafka.ssl.keystore.certificate.chain (kafka.ssl.keystore.type=PEM)",
    "ssl.key.pem": "write the key to a file and set kafka.ssl.key.location, or give it as Java's "
                   "kafka.ssl.keystore.key (kafka.ssl.keystore.type=PEM)",
    "ssl.ca.certificate.stores": "set kafka.ssl.ca.location to a PEM file of the CA certificates",
    "ssl.engine.location": "kafka-python has no OpenSSL engines",
    "ssl.engine.id": "kafka-python has no OpenSSL engines",
    "ssl.providers": "kafka-python has no OpenSSL providers",
}

_OAUTHBEARER = "OAUTHBEARER"


def kafka_python_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python client keywords for librdkafka-style settings.

    Raises UnsupportedClientSettingError, naming the option, for a setting kafka-python has no
    equivalent for (an exactly-once sink then refuses to start)."""
    mapped: dict[str, Any] = {}
    for key, value in config.items():
        target = _TRANSLATED.get(key)
        if target is not None:
            if target in _UPPERCASE_VALUES:
                value = str(value).upper()
            elif target in _INT_VALUES:
                value = int(value)
            mapped[target] = value
        elif key == "ssl.endpoint.identification.algorithm":
            mapped["ssl_check_hostname"] = str(value).lower() == "https"
        elif key in _UNSUPPORTED:
            raise UnsupportedClientSettingError(
                f"option kafka.{key} is not supported by the exactly-once sink's transaction control plane "
                f"(kafka-python, for EndTxn, ListTransactions and DescribeTransactions): {_UNSUPPORTED[key]}")
        elif key in _LIBRDKAFKA_ONLY:
            log.debug("transaction control: kafka.%s is for librdkafka: %s", key, _LIBRDKAFKA_ONLY[key])
        elif key.startswith("sasl.oauthbearer."):
            raise UnsupportedClientSettingError(
                f"option kafka.{key} is not supported by the exactly-once sink's transaction control plane "
                "(kafka-python): its OAuth tokens come from the OIDC client credentials grant "
                "(kafka.sasl.oauthbearer.method=oidc) or unsecured JWTs only")
        elif key.startswith(("sasl.", "ssl.")):
            log.warning("transaction control: client setting kafka.%s has no kafka-python equivalent here and is "
                        "ignored", key)
    if mapped.get("ssl_cafile") == "probe":
        del mapped["ssl_cafile"]  # librdkafka's "probe": the system's CA store, kafka-python's default
    mechanism = mapped.get("sasl_mechanism")
    if mechanism == _OAUTHBEARER:
        mapped["sasl_oauth_token_provider"] = oauth_token_provider(config)
    elif mechanism == "GSSAPI" and find_spec("gssapi") is None:
        raise UnsupportedClientSettingError(
            "option kafka.sasl.mechanism=GSSAPI: the exactly-once sink's transaction control plane (kafka-python) "
            "needs the Python package 'gssapi' on the driver (pip install gssapi) and a Kerberos ticket (kinit)")
    return mapped


def oauth_token_provider(config: Mapping[str, Any]) -> AbstractTokenProvider:
    """The kafka-python token provider for librdkafka's OAUTHBEARER options."""
    method = str(config.get("sasl.oauthbearer.method", "default")).lower()
    extensions = _extensions(config.get("sasl.oauthbearer.extensions"))
    if method == "oidc":
        missing = [name for name in ("sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
                                     "sasl.oauthbearer.token.endpoint.url") if not config.get(name)]
        if missing:
            raise UnsupportedClientSettingError(
                f"option kafka.sasl.oauthbearer.method=oidc needs {', '.join('kafka.' + m for m in missing)}")
        return OidcClientCredentialsTokenProvider(
            str(config["sasl.oauthbearer.token.endpoint.url"]), str(config["sasl.oauthbearer.client.id"]),
            str(config["sasl.oauthbearer.client.secret"]), config.get("sasl.oauthbearer.scope"), extensions,
            ca_file=config.get("https.ca.location"))
    if str(config.get("enable.sasl.oauthbearer.unsecure.jwt", "false")).lower() == "true":
        return UnsecuredJwtTokenProvider(str(config.get("sasl.oauthbearer.config", "")), extensions)
    raise UnsupportedClientSettingError(
        "option kafka.sasl.mechanism=OAUTHBEARER: string options can configure OAuth tokens in two ways, which both "
        "client libraries of the kit take: kafka.sasl.oauthbearer.method=oidc (with kafka.sasl.oauthbearer.client.id, "
        ".client.secret, .token.endpoint.url and optionally .scope), or unsecured JWTs for development brokers "
        "(kafka.enable.sasl.oauthbearer.unsecure.jwt=true, kafka.sasl.oauthbearer.config=principal=<name>)")


def _extensions(raw: Any) -> dict[str, str]:
    # librdkafka's form: "key1=value1,key2=value2".
    if not raw:
        return {}
    pairs = [item.split("=", 1) for item in str(raw).split(",") if item.strip()]
    return {key.strip(): value.strip() for key, value in pairs}


class OidcClientCredentialsTokenProvider(AbstractTokenProvider):
    """Tokens from an OIDC provider's token endpoint, client credentials grant, as librdkafka's
    ``sasl.oauthbearer.method=oidc`` fetches them (client id and secret in HTTP Basic
    authentication). A token is reused until a minute before it expires."""

    def __init__(self, endpoint: str, client_id: str, client_secret: str, scope: Any = None,
                 extensions: Mapping[str, str] | None = None, ca_file: Any = None) -> None:
        super().__init__()
        self.endpoint = endpoint
        self._tls = ssl.create_default_context(cafile=str(ca_file) if ca_file and ca_file != "probe" else None)
        self._credentials = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self.scope = str(scope) if scope else None
        self._extensions = dict(extensions or {})
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        with self._lock:
            if self._token is None or time.time() >= self._expires_at - 60:
                self._token, lifetime_s = self._fetch()
                self._expires_at = time.time() + lifetime_s
            return self._token

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        request = urllib.request.Request(
            self.endpoint, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {self._credentials}", "Accept": "application/json",
                     "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=30, context=self._tls) as response:
                body = json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise KafkaConnectorError(f"OAUTHBEARER: no token from {self.endpoint}: {exc}") from exc
        if "access_token" not in body:
            raise KafkaConnectorError(f"OAUTHBEARER: the answer of {self.endpoint} holds no access_token")
        return str(body["access_token"]), float(body.get("expires_in", 300))

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)


class UnsecuredJwtTokenProvider(AbstractTokenProvider):
    """Unsigned tokens (``alg: none``) made from librdkafka's ``sasl.oauthbearer.config``
    (``principal=<name> [scope=<a,b>] [lifeSeconds=<s>]``), which only brokers with Kafka's
    unsecured validator accept: for development and tests, never production."""

    def __init__(self, unsecured_config: str, extensions: Mapping[str, str] | None = None) -> None:
        super().__init__()
        settings = dict(re.findall(r"(\w+)=(\S+)", unsecured_config))
        if "principal" not in settings:
            raise UnsupportedClientSettingError(
                "option kafka.sasl.oauthbearer.config must name the token's principal: principal=<name>")
        self.principal = settings["principal"]
        self.scope = [s for s in settings.get("scope", "").split(",") if s]
        self.lifetime_s = int(settings.get("lifeSeconds", "3600"))
        self._extensions = dict(extensions or {})

    def token(self) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {"sub": self.principal, "iat": now, "exp": now + self.lifetime_s}
        if self.scope:
            claims["scope"] = self.scope

        def part(value: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

        return f"{part({'alg': 'none'})}.{part(claims)}."

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

"""Java's ``sasl.jaas.config`` line, read into librdkafka's SASL settings.

A Java client takes its SASL credentials from one JAAS login module line, e.g.
``org.apache.kafka.common.security.scram.ScramLoginModule required username="app" password="s";``.
librdkafka has plain settings for the same things; this module reads the line (the grammar of
Java's ``JaasConfig``: a class name, a control flag, ``key=value`` options, values quoted with
``"`` or bare words, a closing ``;``) and says which settings it stands for. The mechanism stays
``sasl.mechanism``'s, as in Java, where the login module only supplies the credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from connectors.kafka.kafka_errors import UnsupportedClientSettingError

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
KERBEROS = "com.sun.security.auth.module.Krb5LoginModule"
SUPPORTED_MODULES = (PLAIN, SCRAM, OAUTHBEARER, KERBEROS)

_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
# A quoted value (Java's StreamTokenizer: backslash escapes), a bare word, '=' or ';'.
_TOKEN = re.compile(r'\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<punct>[=;])|(?P<word>[^\s=;"]+))')


@dataclass(frozen=True)
class JaasLogin:
    """One login module line: its class, control flag and options."""

    module: str
    flag: str
    options: Mapping[str, str]


def _fail(reason: str) -> UnsupportedClientSettingError:
    return UnsupportedClientSettingError(f"option kafka.sasl.jaas.config: {reason}")


def parse_jaas(line: str) -> JaasLogin:
    """The login module of a ``sasl.jaas.config`` value. Kafka's clients take exactly one."""
    tokens: list[tuple[str, str]] = []
    position = 0
    text = line.strip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise _fail(f"cannot read it at character {position + 1}: {text[position:position + 20]!r}")
        position = match.end()
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"])))
        elif match["punct"] is not None:
            tokens.append((match["punct"], match["punct"]))
        elif match["word"] is not None:
            tokens.append(("value", match["word"]))
        else:  # trailing blanks
            break
    if len(tokens) < 3 or tokens[0][0] != "value" or tokens[1][0] != "value" or tokens[-1][0] != ";":
        raise _fail("expected '<LoginModule class> required <key>=<value> ... ;'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise _fail(f"expected a control flag (required, requisite, sufficient, optional) after {module}, "
                    f"got {tokens[1][1]!r}")
    body = tokens[2:-1]
    if any(kind == ";" for kind, _ in body):
        raise _fail("Kafka's clients take one login module; this line has several")
    if len(body) % 3:
        raise _fail("expected options as <key>=<value>")
    options: dict[str, str] = {}
    for i in range(0, len(body), 3):
        (k_kind, key), (eq, _), (v_kind, value) = body[i:i + 3]
        if k_kind != "value" or eq != "=" or v_kind != "value":
            raise _fail("expected options as <key>=<value>")
        options[key] = value
    return JaasLogin(module, flag, options)


def librdkafka_sasl_settings(line: str, config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings for a ``sasl.jaas.config`` line. ``config`` is the client's other
    settings (Java or librdkafka names), which decide between the ways of some modules (an
    OAuth token endpoint given, or not). Raises UnsupportedClientSettingError, one line naming
    the module and the supported ones, for any other login module."""
    login = parse_jaas(line)
    options = login.options
    if login.module in (PLAIN, SCRAM):
        if str(options.get("tokenauth", "false")).lower() == "true":
            raise _fail(f"{login.module} with tokenauth=true (delegation tokens) has no librdkafka equivalent")
        missing = [name for name in ("username", "password") if name not in options]
        if missing:
            raise _fail(f"{login.module} needs {' and '.join(missing)}")
        return {"sasl.username": options["username"], "sasl.password": options["password"]}
    if login.module == OAUTHBEARER:
        return _oauthbearer(options, config)
    if login.module == KERBEROS:
        return _kerberos(options)
    raise _fail(f"login module {login.module} has no librdkafka equivalent; supported: {', '.join(SUPPORTED_MODULES)}")


def _oauthbearer(options: Mapping[str, str], config: Mapping[str, str]) -> dict[str, str]:
    extensions = {key[len("extension_"):]: value for key, value in options.items() if key.startswith("extension_")}
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    unsecured_principal = options.get(f"unsecuredLoginStringClaim_{principal_claim}")
    if unsecured_principal is not None:
        # Java's unsecured JWTs (OAuthBearerUnsecuredLoginCallbackHandler, its default handler);
        # librdkafka's sasl.oauthbearer.config takes the same claims in its own syntax.
        parts = [f"principal={unsecured_principal}"]
        if principal_claim != "sub":
            parts.append(f"principalClaimName={principal_claim}")
        scope_claim = options.get("unsecuredLoginScopeClaimName", "scope")
        if scope_claim != "scope":
            parts.append(f"scopeClaimName={scope_claim}")
        scope = options.get(f"unsecuredLoginListClaim_{scope_claim}")
        if scope:
            # Java's list claims start with their separator: ",a,b".
            separator, items = scope[0], scope[1:]
            parts.append("scope=" + ",".join(item for item in items.split(separator) if item))
        if "unsecuredLoginLifetimeSeconds" in options:
            parts.append(f"lifeSeconds={options['unsecuredLoginLifetimeSeconds']}")
        for key in (k[len("unsecuredLoginExtension_"):] for k in options if k.startswith("unsecuredLoginExtension_")):
            parts.append(f"extension_{key}={options['unsecuredLoginExtension_' + key]}")
        return {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": " ".join(parts)}
    if config.get("sasl.oauthbearer.token.endpoint.url"):
        # Java's OIDC client credentials (OAuthBearerLoginCallbackHandler): clientId and
        # clientSecret in the JAAS line, or (Kafka 4.1) in sasl.oauthbearer.client.credentials.*.
        settings = {"sasl.oauthbearer.method": "oidc"}
        for option, setting in (("clientId", "sasl.oauthbearer.client.id"),
                                ("clientSecret", "sasl.oauthbearer.client.secret"),
                                ("scope", "sasl.oauthbearer.scope")):
            if option in options:
                settings[setting] = options[option]
        if extensions:
            settings["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in extensions.items())
        return settings
    raise _fail(f"{OAUTHBEARER} needs either unsecuredLoginStringClaim_sub (unsecured JWTs, development brokers) "
                "or clientId and clientSecret with kafka.sasl.oauthbearer.token.endpoint.url (OIDC)")


def _kerberos(options: Mapping[str, str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    if "principal" in options:
        settings["sasl.kerberos.principal"] = options["principal"]
    if str(options.get("useKeyTab", "false")).lower() == "true":
        if "keyTab" not in options:
            raise _fail(f"{KERBEROS} with useKeyTab=true needs keyTab")
        settings["sasl.kerberos.keytab"] = options["keyTab"]
    elif str(options.get("useTicketCache", "false")).lower() == "true":
        # The ticket comes from the cache someone else keeps fresh: librdkafka must not run its
        # keytab kinit (0 turns its refresh off).
        settings["sasl.kerberos.min.time.before.relogin"] = "0"
    else:
        raise _fail(f"{KERBEROS} needs useKeyTab=true with keyTab, or useTicketCache=true")
    if "serviceName" in options:
        settings["sasl.kerberos.service.name"] = options["serviceName"]
    return settings

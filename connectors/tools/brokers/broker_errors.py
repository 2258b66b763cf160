"""Errors of the kit's launchers (a broker, a 3-node cluster, Kafka's jars from Maven
Central). The ``kafka-eos`` tools load the launchers as plugins (entry points) and treat any kit
error from one as "this source of a broker failed", so nothing here is the CLI's."""

from __future__ import annotations

from twophase.errors import KafkaEosError


class LauncherError(KafkaEosError, RuntimeError):
    """The root of the launchers' errors."""


class BrokerStartError(LauncherError):
    """A broker (or its distribution) the kit was to start did not come up; the message says why."""


class NoClusterError(LauncherError):
    """No 3-node cluster can be found or started; the message says what to set."""


class MavenUnavailableError(BrokerStartError):
    """``mvn`` is missing, or could not resolve the artifacts; the message is one line."""


class KafkaDistributionError(MavenUnavailableError):
    """A distribution that cannot run a broker here; the message is one line."""


class LocalBrokerError(BrokerStartError):
    """The local broker could not be started (the message carries the tail of its log)."""

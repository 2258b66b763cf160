"""Errors of the servers: choosing a broker (none found, a launcher not installed, nothing answers
at the address) and the kit's launchers (a broker, a 3-node cluster, Kafka's jars from Maven
Central). ``broker_discovery`` loads the launchers as plugins (entry points) and treats any kit
error from one as "this source of a broker failed"."""

from __future__ import annotations

from twophase.errors import KafkaEosError


class NoBrokerError(KafkaEosError, RuntimeError):
    """No broker could be found or started; the message says what to provide."""


class LauncherUnavailableError(KafkaEosError, RuntimeError):
    """No launcher of that name is installed (an entry point of ``pyspark_kafka_eos.kafka_launchers``)."""


class BrokerUnreachableError(KafkaEosError, RuntimeError):
    """Nothing accepts connections at the bootstrap address (after bounded retries)."""


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

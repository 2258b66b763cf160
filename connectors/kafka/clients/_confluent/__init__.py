"""The confluent-kafka (librdkafka) backend of the client seam: the data path (producer, reader,
admin). Private: reach it through ``connectors.kafka.clients.factory.clients_for``."""

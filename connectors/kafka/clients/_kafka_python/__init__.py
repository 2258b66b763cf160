"""The kafka-python backend of the client seam: the transaction control plane librdkafka lacks
(EndTxn for another process's transaction, ListTransactions, DescribeTransactions), and the
client settings translated for it. Private: reach it through the seam."""

"""Tools that let users prove exactly-once delivery on their own cluster (console script
``kafka-eos``): ``verify`` checks an output topic against its input, ``replay`` runs a job under a
matrix of injected faults and verifies each run, ``demo`` does both against a broker it finds or
starts.
"""

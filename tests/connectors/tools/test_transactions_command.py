"""``kafka-eos transactions``: a sink's transactional ids (any state) and open transactions."""

import json

from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import cli


def test_lists_ids_in_every_state_and_the_open_ones(tmp_path, capsys):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("out", 1)
    control = fake.txn_control()
    for tid, end in (("job-0-0", True), ("job-0-1", False), ("job-1-0", None), ("job-10-0", True)):
        producer = fake.producer(tid, {})
        identity = producer.init_transactions(5)
        producer.begin_transaction()
        producer.produce("out", b"x")
        producer.flush(5)
        producer.close()
        if end is not None:
            control.end_txn(tid, identity, commit=end)
    fake.producer("job-1-1", {}).init_transactions(5)  # initialised, never used

    assert cli.main(["transactions", "--bootstrap", fake.bootstrap_servers, "--prefix", "job", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prefix"] == "job-"
    assert {row["transactional_id"]: row["state"] for row in report["listings"]} == {
        "job-0-0": "CompleteCommit", "job-0-1": "CompleteAbort", "job-1-0": "Ongoing", "job-1-1": "Empty",
        "job-10-0": "CompleteCommit"}
    assert [t["transactional_id"] for t in report["open"]] == ["job-1-0"]
    assert report["open"][0]["partitions"] == ["out-0"]

    assert cli.main(["transactions", "--bootstrap", fake.bootstrap_servers, "--prefix", "job-1-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 transactional ids with prefix 'job-1-' (1 Empty, 1 Ongoing); 1 open"
    assert lines[1].startswith("open: job-1-0 (producer id ")

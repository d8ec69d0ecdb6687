"""A stand-in Grid that answers as SuperNodes would, for the server's tests."""

from __future__ import annotations

from flwr.app import ConfigRecord, Error, Message, MetricRecord, RecordDict


class FakeGrid:
    """Answers like SuperNodes would: `query` with the node's partition, `train.personalize`
    with an accuracy; nodes in `failing` reply with an error (a ClientApp that raised), nodes
    in `no_data` answer `query` with the reason their data cannot be loaded, nodes in
    `malformed` with a query reply whose sizes are not numbers."""

    def __init__(
        self, partitions: dict[int, tuple[int, int]], failing=(), no_data=(), malformed=()
    ):
        self.partitions, self.failing, self.no_data = partitions, set(failing), set(no_data)
        self.malformed = set(malformed)
        self.sent = []

    def get_node_ids(self):
        return list(self.partitions)

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.sent.append((node, msg.metadata.message_type))
            if node in self.failing:
                replies.append(Message(Error(code=1, reason="boom"), reply_to=msg))
                continue
            if node in self.no_data and msg.metadata.message_type == "query":
                why = ConfigRecord({"reason": "data-path '/x' does not exist on this device"})
                replies.append(Message(RecordDict({"unavailable": why}), reply_to=msg))
                continue
            pid, num = self.partitions[node]
            metrics = {"partition-id": pid, "num-partitions": num, "num-examples": 50,
                       "num-test": 10 + pid, "accuracy": 0.5 + 0.1 * pid}  # fmt: skip
            if msg.metadata.message_type == "query":  # what the model is built from
                metrics |= {"num-classes": 10, "image-shape": [3, 32, 32]}
                if node in self.malformed:
                    metrics["num-examples"] = -1
            replies.append(Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg))
        return replies

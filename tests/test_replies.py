"""A ClientApp's replies (`pfedgm_app.protocol.replies`): what they carry, and the clear errors
that stop a reply the strategies could not use before it leaves the client."""

from __future__ import annotations

import math

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from pfedgm_app.protocol import wire
from pfedgm_app.protocol.replies import personalize_reply, received, train_reply

pytestmark = pytest.mark.usefixtures("task_identity")  # Messages need a run identity


def _msg(**records) -> Message:
    return Message(RecordDict(records), dst_node_id=1, message_type=MessageType.TRAIN)


def test_received_gives_the_arrays_and_the_config():
    arrays = ArrayRecord({"w": torch.ones(2)})
    got, config = received(_msg(arrays=arrays, config=ConfigRecord({"server-round": 3})))
    assert torch.equal(got.to_torch_state_dict()["w"], torch.ones(2))
    assert config["server-round"] == 3
    assert received(_msg(arrays=arrays))[1] == ConfigRecord()
    with pytest.raises(ValueError, match="carries no 'arrays'"):
        received(_msg())


def test_train_reply_carries_arrays_and_weighted_metrics():
    reply = train_reply(_msg(), {"w": torch.ones(2, requires_grad=True)}, {"num-examples": 5})
    assert reply.content[wire.METRICS][wire.NUM_EXAMPLES] == 5
    assert torch.equal(reply.content[wire.ARRAYS].to_torch_state_dict()["w"], torch.ones(2))
    with pytest.raises(ValueError, match=r"needs metrics \['num-examples'\]"):
        train_reply(_msg(), {"w": torch.ones(2)}, {"loss": 1.0})
    with pytest.raises(ValueError, match=r"non-finite metrics \['loss'\]"):
        train_reply(_msg(), {"w": torch.ones(2)}, {"num-examples": 5, "loss": math.nan})


def test_personalize_reply_needs_a_fraction_and_the_test_size():
    reply = personalize_reply(_msg(), {"accuracy": 0.8, "num-test": 10, "acc-global": 0.5})
    assert dict(reply.content[wire.METRICS]) == {"accuracy": 0.8, "num-test": 10, "acc-global": 0.5}
    with pytest.raises(ValueError, match=r"'accuracy' must be a fraction in \[0, 1\], got 80"):
        personalize_reply(_msg(), {"accuracy": 80.0, "num-test": 10})
    with pytest.raises(ValueError, match=r"needs metrics \['num-test'\]"):
        personalize_reply(_msg(), {"accuracy": 0.8})

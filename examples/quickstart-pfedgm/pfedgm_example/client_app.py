"""ClientApp: pFedGM's two phases on this project's own model and data."""

import torch
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from pfedgm_app.learning.phases import personalize, train_round
from pfedgm_app.protocol.replies import personalize_reply, received, train_reply
from pfedgm_example.task import Net, load_data

app = ClientApp()


def setup(msg: Message, context: Context):
    """The global model from the message, and this client's data."""
    torch.set_num_threads(1)  # one core per simulated client
    cfg, node = context.run_config, context.node_config
    arrays, config = received(msg)
    torch.manual_seed(1000 * node["partition-id"] + config.get("server-round", 0))  # shuffling
    train, test = load_data(node["partition-id"], node["num-partitions"],
                            cfg["data-dir"], cfg["samples-per-client"])  # fmt: skip
    net = Net()
    net.load_state_dict(arrays.to_torch_state_dict())
    return net, train, test


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Phase 1: one round (prototypes, H + lambda R_c, nu co-update); all of phi, psi, nu sent."""
    net, train, _ = setup(msg, context)
    metrics = train_round(net.backbone, net.head, train, epochs=context.run_config["local-epochs"])
    return train_reply(msg, net.state_dict(), {**metrics, "num-examples": len(train.dataset)})


@app.train("personalize")
def personalize_and_evaluate(msg: Message, context: Context) -> Message:
    """Phase 2: the personalized head and L-BFGS biases on local features; test accuracies."""
    net, train, test = setup(msg, context)
    return personalize_reply(msg, personalize(net.backbone, net.head, train, test))

"""Whether the clients' ClientApp has a handler for a message type, asked before round 1: a
project whose ClientApp lacks the final round's handler learns it in one line at once, not
after every training round (hours in a real run)."""

from __future__ import annotations

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid


def missing_handler(grid: Grid, node: int, message_type: str, timeout: float) -> str | None:
    """Send `node` an empty `message_type` message. Flower answers "No ... function
    registered" for a ClientApp without that handler: the line saying which decorator to add.
    Any other answer (the handler failing on the empty message) is None."""
    category, _, action = message_type.partition(".")
    probe = Message(RecordDict(), message_type=message_type, dst_node_id=node)
    missing = f"No {category} function registered with name '{action}'"
    for reply in grid.send_and_receive([probe], timeout=timeout):
        if reply.has_error() and missing in str(reply.error.reason):
            return (
                f"the ClientApp of node {node} has no handler for '{message_type}', which the "
                f'final personalize round sends: add `@app.{category}("{action}")` returning '
                "`pfedgm_app.protocol.replies.personalize_reply(msg, "
                "{'accuracy': a, 'num-test': n})` "
                "(examples/quickstart-pfedgm/README.md)"
            )
    return None

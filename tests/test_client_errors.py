"""A failed ClientApp's cause as the server reports it: its exception's name and message on one
line, from the error replies Flower makes in the simulation (Ray) and in a deployment."""

from __future__ import annotations

from flwr.app import Error, Message, RecordDict

from pfedgm_app.server.rounds import first_failure
from pfedgm_app.strategies.client_errors import error_cause

CAUSE = "training diverged: the loss became non-finite in round 1 at learning-rate=0.05"
# The reason of a simulated ClientApp's error reply, as a diverged MNIST run logged it (paths
# shortened): Ray's traceback, colours included, around Flower's ClientAppException.
SIMULATED = (
    "<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'"
    "\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=2441, ip=192.0.2.2, actor_id=1fa39e4f, "
    "repr=<flwr.simulation.ray_transport.ray_actor.ClientAppActor object at 0x7fb9>)\n"
    '  File "SITE/flwr/clientapp/client_app.py", line 161, in __call__\n'
    "    return self._registered_funcs[full_name](message, context)\n"
    '  File "APP/pfedgm_app/methods/base.py", line 186, in send\n'
    "    raise Diverged(\n"
    f"pfedgm_app.methods.base.Diverged: {CAUSE}\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "\x1b[36mray::ClientAppActor.run()\x1b[39m (pid=2441, ip=192.0.2.2)\n"
    '  File "SITE/flwr/simulation/ray_transport/ray_actor.py", line 65, in run\n'
    "    raise ClientAppException(str(ex)) from ex\n"
    "flwr.clientapp.client_app.ClientAppException: \n"
    f"Exception ClientAppException occurred. Message: {CAUSE}'>"
)


def test_a_simulated_clientapps_cause_is_its_exception_not_rays_traceback():
    assert error_cause(SIMULATED) == f"Diverged: {CAUSE}"


def test_a_deployed_clientapps_cause_is_its_exception():
    """A SuperNode's ClientApp process writes `<class 'T'>:<'message'>`."""
    reason = "<class 'ZeroDivisionError'>:<'division by zero'>"
    assert error_cause(reason) == "ZeroDivisionError: division by zero"
    wrapped = (
        "<class 'flwr.clientapp.client_app.ClientAppException'>:<'\nException "
        "ValueError occurred. Message: No train function registered with name 'x''>"
    )
    assert error_cause(wrapped) == "No train function registered with name 'x'"


def test_another_reason_is_one_line_and_a_long_one_is_shortened():
    assert error_cause("  the node\n went   away ") == "the node went away"
    long = error_cause("<class 'ValueError'>:<'" + "x" * 2000 + "'>", limit=100)
    assert len(long) == 100 and long.startswith("ValueError: xxx") and long.endswith("...")


def test_a_round_with_nothing_to_aggregate_names_the_first_cause(task_identity):
    """Error replies first (their cause), then the replies the strategy dropped this round,
    then replies missing."""
    dropped = ["round 1: node 5: an old one", "round 2: node 7: non-finite metrics ['loss']"]
    assert first_failure([], 2, dropped, 2) == "node 7: non-finite metrics ['loss']"
    assert first_failure([], 2, dropped, 3) == "2 of 2 client(s) did not answer in time"
    sent = Message(RecordDict(), dst_node_id=9, message_type="train")
    error = Message(Error(code=2, reason=SIMULATED), reply_to=sent)
    assert first_failure([error], 2, dropped, 2) == f"node 9: Diverged: {CAUSE}"

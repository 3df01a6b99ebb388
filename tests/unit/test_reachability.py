"""stream.sources.reachability: what is said of an API server that does not answer, and when; the words
of the causes that need no server to make (a refused connection, a name, a certificate: tests/faults)."""

from __future__ import annotations

import errno

import anyio
import anyio.lowlevel
import pytest

from stream.model.messages import logger
from stream.sources.reachability import Reachability, no_answer

SERVER = "https://k8s.example:6443"


def test_an_outage_is_said_when_it_starts_once_a_minute_while_it_lasts_and_when_it_ends() -> None:
    now = [0.0]
    logged: list[str] = []
    reach = Reachability(SERVER, clock=lambda: now[0])
    reach.log = logger(logged.append)
    reach.failed("connection refused")  # before any answer: the command says it, in its one line
    assert logged == [] and reach.unreachable == f"cannot reach the API server at {SERVER}: connection refused"
    reach.reached()  # the first answer: nothing to say
    assert logged == [] and reach.unreachable is None and reach.answered
    for at, cause in ((10, "connection refused"), (40, "connection refused"), (71, "no answer within 30s")):
        now[0] = at
        reach.failed(cause)
    now[0] = 100
    reach.reached()
    assert logged == [
        f"cannot reach the API server at {SERVER}: connection refused; retrying until it answers",
        f"cannot reach the API server at {SERVER}: no answer within 30s (for 1m1s); still retrying",
        f"the API server at {SERVER} answers again (after 1m30s)",
    ]


@pytest.mark.anyio
async def test_down_for_waits_for_an_outage_that_lasts_not_for_a_blip() -> None:
    reach = Reachability(SERVER)
    reach.reached()
    said: list[str] = []

    async def give_up() -> None:
        said.append(await reach.down_for(1.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(give_up)
        await anyio.lowlevel.checkpoint()
        reach.failed("connection refused")
        await anyio.lowlevel.checkpoint()
        reach.reached()  # a blip, over at once: not one to give up on
        await anyio.sleep(0.2)
        assert said == []
        reach.failed("connection refused")  # an outage that lasts
        with anyio.fail_after(30):
            while not said:
                await anyio.sleep(0.01)
    assert said == [f"cannot reach the API server at {SERVER}: connection refused, for 1.0s"]


@pytest.mark.parametrize(
    "error,words",
    [
        (TimeoutError(), "no answer within 2s"),
        (OSError(errno.EHOSTUNREACH, "asyncio's own text of it"), "no route to host"),
        (ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"), "connection reset by peer"),
    ],
)
def test_what_kept_the_server_from_answering_is_said_in_the_users_words(error: BaseException, words: str) -> None:
    assert no_answer(error, 2.0)[0] == words

"""How a decision runs a script: the lean path's own connections, against a real Redis."""

from __future__ import annotations

import threading

import pytest
import redis

from sluice.bucket import connect
from sluice.scripts import Script, pack_evalsha
from tests.client.factories import REDIS_TIMEOUT

#: Answers with what it was given: a reply names the call it belongs to.
ECHO = b"return {KEYS[1], ARGV[1]}"


def test_pack_evalsha__keys_and_args__the_bytes_redis_py_sends(redis_server):
    # Given a script and the bytes redis-py would pack for the same EVALSHA
    client = connect(redis_server.url, timeout=REDIS_TIMEOUT)
    script = Script(client, ECHO)
    keys, args = ["rl:{tenant:acme}:a", "rl:{tenant:acme}:b"], [b"1", b"20000"]
    connection = client.connection_pool.make_connection()  # packs; never connects
    packed = b"".join(
        connection.pack_command("EVALSHA", script._script.sha, 2, *keys, *args)
    )
    # When the lean path packs it, then it sends exactly those bytes
    assert pack_evalsha(script.head, keys, args) == packed


def test_script__call_timed_out__its_late_reply_is_never_read_as_the_next_one(
    redis_server,
):
    # Given a script on a client (with a timeout no healthy call reaches), and a
    # call answered in time
    script = Script(connect(redis_server.url, timeout=REDIS_TIMEOUT), ECHO)
    assert script(["first"], [b"1"]) == [b"first", b"1"]
    admin = redis.Redis.from_url(redis_server.url)
    # When Redis holds a call past the timeout (scripts are paused until UNPAUSE,
    # however slow the machine), then answers again: the late reply is sent now
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        with pytest.raises(redis.TimeoutError):
            script(["lost"], [b"2"])
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    # Then the next call gets its own reply, not the late one of the call that timed out
    assert script(["next"], [b"3"]) == [b"next", b"3"]


def test_script__flushed__reloaded_and_run(redis_server):
    # Given a script that ran once
    script = Script(connect(redis_server.url, timeout=REDIS_TIMEOUT), ECHO)
    assert script(["a"], [b"1"]) == [b"a", b"1"]
    # When Redis forgets every script
    redis.Redis.from_url(redis_server.url).script_flush()
    # Then the next call loads it again and runs
    assert script(["b"], [b"2"]) == [b"b", b"2"]


def test_script__many_threads__each_gets_its_own_replies(redis_server):
    # Given one script shared by 8 threads, each with its own connection
    script = Script(connect(redis_server.url, timeout=REDIS_TIMEOUT), ECHO)
    wrong: list[tuple[str, object]] = []

    def work(name: str) -> None:
        for number in range(200):
            arg = str(number).encode()
            try:
                reply = script([name], [arg])
            except redis.RedisError as error:  # a thread's error must fail the test
                wrong.append((name, error))
                return
            if reply != [name.encode(), arg]:
                wrong.append((name, reply))

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(8)]
    # When they all call at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then every reply belongs to the call that asked for it
    assert wrong == []
    script.close()

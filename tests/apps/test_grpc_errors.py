"""A gRPC call cut by its server's death (a Spark Connect server killed mid-task) fails the task
retryably with the call's gRPC status and details in its Cause, not the first line of the call's text
(``<_MultiThreadedRendezvous of RPC that terminated with:``).

The error is a real one: a gRPC server in a child process streams one message and is killed (kill -9)
while the client waits for the next."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

grpc = pytest.importorskip("grpc")

SERVER = """
import sys, time
from concurrent import futures
import grpc

def run(request, context):
    yield b"started"
    time.sleep(120)

server = grpc.server(futures.ThreadPoolExecutor(2))
handler = grpc.unary_stream_rpc_method_handler(run)
server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.Spark", {"Run": handler}),))
print(server.add_insecure_port("127.0.0.1:0"), flush=True)
server.start()
server.wait_for_termination()
"""


@pytest.fixture(scope="module")
def cut_call() -> grpc.RpcError:
    """The error of a streaming call whose server was killed after its first message."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = channel.unary_stream("/t.Spark/Run")(b"", timeout=60)
            assert next(stream) == b"started"
            server.kill()
            with pytest.raises(grpc.RpcError) as e:
                next(stream)
        return e.value
    finally:
        server.kill()
        server.wait()


def test_the_cut_call_is_what_the_task_saw(cut_call):
    assert str(cut_call).splitlines()[0].startswith("<_MultiThreadedRendezvous of RPC that terminated with:")
    assert cut_call.code() == grpc.StatusCode.UNAVAILABLE and cut_call.details()


def _as_pyspark_raises(rpc_error):
    """What pyspark's Connect client raises for an error without Spark's status details."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    try:
        return SparkConnectGrpcException(message=str(rpc_error), grpc_status_code=rpc_error.code())
    except TypeError:  # pyspark 4.0: no status code argument (the message carries the status)
        return SparkConnectGrpcException(message=str(rpc_error))


@pytest.mark.parametrize("wrapped", [False, True], ids=["raw", "as-pyspark-raises-it"])
def test_the_task_error_carries_the_grpc_status_and_details_and_is_retryable(cut_call, wrapped):
    from airflow_delta_provider.exceptions import DeltaRetryableError
    from airflow_delta_provider.hooks.transport import app_run
    from airflow_delta_provider_apps.cli import as_delta_error

    seen = _as_pyspark_raises(cut_call) if wrapped else cut_call
    err = as_delta_error(seen)
    assert err.retryable and "Spark Connect server" in err.problem
    assert err.cause == f"gRPC status UNAVAILABLE: {cut_call.details()}"

    def run():  # the app's run as the Connect transport calls it: its error raised from the gRPC one
        raise err from seen

    with pytest.raises(DeltaRetryableError) as task_error:
        app_run(run, logging.getLogger("test"))
    text = str(task_error.value)
    assert f"Cause: gRPC status UNAVAILABLE: {cut_call.details()}." in text and "Fix: " in text
    assert "_MultiThreadedRendezvous" not in text


def test_other_errors_keep_their_first_line():
    from airflow_delta_provider_apps.cli import as_delta_error

    err = as_delta_error(RuntimeError("boom: the details\nsecond line"))
    assert err.cause == "boom: the details" and not err.retryable

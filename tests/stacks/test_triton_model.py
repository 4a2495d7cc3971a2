"""layerbench's Triton model (scripts/triton_vllm_model.py) without Triton or vLLM: responses leave from a
response thread, so a slow sender does not stall the engine's loop; cancellation, errors and the response
tensors.

The stand-in for `triton_python_backend_utils` follows the real interface: TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
and get_input_tensor_by_name (the triton_python_backend_utils.py that tritonserver 2.51's Python backend ships in
the nvidia-pytriton 0.7.0 wheel); a request's sender with `send(response=None, flags=0)` and `is_cancelled()`
(InferenceResponseSender in triton-inference-server/python_backend, src/pb_stub.cc)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import types
from dataclasses import dataclass, field

import numpy as np
import pytest

from stacks.triton import MODEL_PY

GUARD_S = 30.0  # bounds a wait that only a stalled loop lets run out; a passing run never waits this long


def stub_pb_utils() -> types.ModuleType:
    pb = types.ModuleType("triton_python_backend_utils")
    pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class Tensor:
        def __init__(self, name: str, array: np.ndarray):
            self.name, self.array = name, array

        def as_numpy(self) -> np.ndarray:
            return self.array

    class TritonError:
        def __init__(self, message: str):
            self.message = message

    class InferenceResponse:
        def __init__(self, output_tensors: list | None = None, error: TritonError | None = None):
            self.tensors = {t.name: t.array for t in output_tensors or ()}
            self.error = error

    pb.Tensor, pb.TritonError, pb.InferenceResponse = Tensor, TritonError, InferenceResponse
    pb.get_input_tensor_by_name = lambda request, name: request.inputs.get(name)
    return pb


@pytest.fixture
def model(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stub_pb_utils())
    spec = importlib.util.spec_from_file_location("layerbench_triton_model", MODEL_PY)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # as Python's import does, for the dataclasses
    spec.loader.exec_module(module)
    return module


@dataclass
class Completion:
    text: str
    token_ids: list[int]


@dataclass
class Out:
    outputs: list[Completion]
    prompt_token_ids: list[int]
    finished: bool


def out(i: int, finished: bool = False) -> Out:
    return Out([Completion(f"t{i}", [i, i])], [7, 8, 9], finished)


@dataclass
class Sender:
    """A request's sender: records what it was given; `gate` (if any) runs inside send(), as a slow send."""
    gate: object = None
    cancelled_after: int | None = None  # is_cancelled() says True once this many responses were sent
    sent: list = field(default_factory=list)
    threads: set = field(default_factory=set)

    def send(self, response=None, flags=0) -> None:
        self.threads.add(threading.current_thread().name)
        if self.gate is not None:
            self.gate(len(self.sent))
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return self.cancelled_after is not None and len(self.sent) >= self.cancelled_after


class Loop:
    """An asyncio loop in a thread, as the model's engine loop runs, with a heartbeat task counting its turns."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.ticks = 0
        self.thread = threading.Thread(target=self.loop.run_forever, name="engine-loop", daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._heartbeat(), self.loop)

    async def _heartbeat(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=GUARD_S * 3)

    def close(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture
def loop():
    lp = Loop()
    yield lp
    lp.close()


def request(model, stream: bool = True):
    return model.Parsed(prompt="hello", stream=stream, exclude_input=True, params={})


def relay(model, loop: Loop, engine, sender: Sender, responses=None, stream: bool = True):
    inflight = model.InFlight()
    responses = responses or model.ResponseThread(inflight.end)
    state = model.RequestState(sender)
    inflight.start()
    loop.run(model.relay(engine, request(model, stream), None, "r1", state, responses))
    responses.close()  # every queued response is sent before this returns
    return state, inflight


class SlowSendCheck:
    """The engine yields its first output, then goes on only while that output's send() is in progress (it needs
    its loop to run for that); the send waits for the engine to have produced every output."""

    def __init__(self, loop: Loop, n: int, wait_s: float = GUARD_S):
        self.loop, self.n, self.wait_s = loop, n, wait_s
        self.in_send, self.produced_all = threading.Event(), threading.Event()
        self.seen: dict = {}

    def gate(self, index: int) -> None:
        if index:
            return
        self.seen["ticks_before"] = self.loop.ticks
        self.in_send.set()
        self.seen["produced_while_sending"] = self.produced_all.wait(self.wait_s)
        self.seen["ticks_after"] = self.loop.ticks

    async def generate(self, prompt, sampling, request_id):
        yield out(0)
        while not self.in_send.is_set():
            await asyncio.sleep(0)
        for i in range(1, self.n):
            await asyncio.sleep(0)
            yield out(i, finished=i == self.n - 1)
        self.produced_all.set()


def test_a_slow_sender_does_not_stall_the_engines_loop(model, loop):
    check = SlowSendCheck(loop, n=6)
    sender = Sender(gate=check.gate)
    state, inflight = relay(model, loop, check, sender)
    # every output was produced and queued while the first response was still being sent, and the loop's
    # heartbeat kept ticking meanwhile
    assert check.seen["produced_while_sending"] is True
    assert check.seen["ticks_after"] > check.seen["ticks_before"]
    assert sender.threads == {"triton-responses"}  # the loop never called the sender
    # the responses left in order, one final flag on the last, the prompt's tokens on the first
    texts = [r.tensors["text_output"][0] for r, _ in sender.sent]
    assert texts == [f"t{i}".encode() for i in range(6)]
    assert [f for _, f in sender.sent] == [0] * 5 + [1]
    assert [int(r.tensors["num_output_tokens"][0]) for r, _ in sender.sent] == [2] * 6
    assert ["num_input_tokens" in r.tensors for r, _ in sender.sent] == [True] + [False] * 5
    assert int(sender.sent[0][0].tensors["num_input_tokens"][0]) == 3
    assert state.final_queued and inflight.count() == 0


class SendOnTheLoop:
    """The earlier design, for the check above: each response sent from the engine's loop as it is produced."""

    def put(self, state, response, flags: int = 0) -> None:
        state.final_queued = state.final_queued or bool(flags & 1)
        state.sender.send(response, flags=flags)

    def close(self) -> None:
        pass


def test_the_check_catches_a_sender_on_the_loop(model, loop):
    # on the loop, a send in progress holds the loop: the engine cannot produce while it lasts, however long
    # the send waits (a short wait suffices to see that)
    check = SlowSendCheck(loop, n=3, wait_s=0.2)
    sender = Sender(gate=check.gate)
    relay(model, loop, check, sender, responses=SendOnTheLoop())
    assert check.seen["produced_while_sending"] is False
    assert sender.threads == {"engine-loop"}


class Engine:
    def __init__(self, outputs: list, fail: Exception | None = None, before: object = None):
        self.outputs, self.fail, self.before, self.aborted = outputs, fail, before, []

    async def generate(self, prompt, sampling, request_id):
        for i, o in enumerate(self.outputs):
            if self.before is not None:
                await self.before(i)
            yield o
        if self.fail is not None:
            raise self.fail

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


def test_a_client_that_went_away_is_aborted_and_its_stream_ended(model, loop):
    sender = Sender(cancelled_after=1)  # the response thread learns it after the first response
    states: list = []

    async def after_the_first_is_sent(i: int) -> None:
        while i and not (states and states[0].cancelled):
            await asyncio.sleep(0)

    engine = Engine([out(0), out(1), out(2, finished=True)], before=after_the_first_is_sent)
    inflight = model.InFlight()
    responses = model.ResponseThread(inflight.end)
    states.append(model.RequestState(sender))
    inflight.start()
    loop.run(model.relay(engine, request(model), None, "r1", states[0], responses))
    responses.close()
    assert engine.aborted == ["r1"]
    assert [(r is None, f) for r, f in sender.sent] == [(False, 0), (True, 1)]  # the stream ends, empty
    assert inflight.count() == 0


def test_an_engine_error_ends_the_request_with_it(model, loop):
    engine = Engine([out(0)], fail=RuntimeError("engine died"))
    sender = Sender()
    state, inflight = relay(model, loop, engine, sender)
    assert engine.aborted == ["r1"]
    (first, f0), (last, f1) = sender.sent
    assert f0 == 0 and f1 == 1 and last.error.message == "RuntimeError: engine died"
    assert inflight.count() == 0


def test_not_streaming_gives_the_whole_text_once(model, loop):
    engine = Engine([Out([Completion(" world", [1, 2])], [5], finished=True)])
    sender = Sender()
    inflight = model.InFlight()
    responses = model.ResponseThread(inflight.end)
    state = model.RequestState(sender)
    whole = model.Parsed(prompt="hello", stream=False, exclude_input=False, params={})
    loop.run(model.relay(engine, whole, None, "r1", state, responses))
    responses.close()
    [(r, flags)] = sender.sent
    assert flags == 1 and r.tensors["text_output"][0] == b"hello world"


@dataclass
class Tensor:
    array: np.ndarray

    def as_numpy(self) -> np.ndarray:
        return self.array


@dataclass
class Request:
    inputs: dict


def test_request_inputs_as_nvidias_backend_names_them(model):
    r = Request({"text_input": Tensor(np.array([b"hi"], dtype=np.object_)), "stream": Tensor(np.array([True])),
                 "sampling_parameters": Tensor(np.array([b'{"max_tokens": 3}'], dtype=np.object_)),
                 "return_num_output_tokens": Tensor(np.array([True]))})
    p = model.parse(r)
    assert (p.prompt, p.stream, p.exclude_input, p.params) == ("hi", True, False, {"max_tokens": 3})
    with pytest.raises(ValueError, match="JSON object"):
        model.parse(Request({**r.inputs, "sampling_parameters": Tensor(np.array([b"[1]"], dtype=np.object_))}))


def test_metric_updates_are_applied_off_the_loop(model):
    applied: list = []

    class Metric:
        def increment(self, v):
            applied.append(("increment", v, threading.current_thread().name))

        def observe(self, v):
            applied.append(("observe", v, threading.current_thread().name))

    updates = model.MetricsThread()
    m = Metric()
    updates.put(m, "increment", 3)
    updates.put(m, "observe", 0.5)
    updates.close()
    assert applied == [("increment", 3, "triton-metrics"), ("observe", 0.5, "triton-metrics")]

"""Streaming client for Triton's generate extension: `POST /v2/models/<model>/generate_stream` (SSE).

Same hot path as the OpenAI client (harness/load/client.py); only the request and the events differ. The request
carries the inputs of NVIDIA's vLLM backend (`text_input`, `stream`, `exclude_input_in_output`,
`return_num_input_tokens` and `return_num_output_tokens`, and `sampling_parameters` as a JSON string: Triton
answers an object with HTTP 500). Each event is one model
response, `{"model_name":..,"model_version":..,"text_output":..,"num_output_tokens":..}`; token counts are the
server's `num_output_tokens` summed over the stream (and `num_input_tokens` from the first response), never
events counted. The stream ends with the model's final response: there is no `[DONE]` and no usage block."""

from __future__ import annotations

import json

from harness.errors import LayerbenchError
from harness.load.client import RequestRecord, StreamClient, StreamProtocolError
from harness.load.fastjson import loads


class TritonStreamClient(StreamClient):
    protocol = "triton"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.api == "chat":
            raise LayerbenchError("Triton's generate_stream takes a text prompt: use a profile with api: completions")

    def path(self) -> str:
        return f"{self.prefix}/v2/models/{self.model}/generate_stream"

    def body(self, prompt: str, max_tokens: int | None = None) -> dict:
        sampling = {"max_tokens": max_tokens or self.max_tokens, "temperature": self.temperature,
                    "ignore_eos": self.ignore_eos}
        # NVIDIA's vLLM backend sends the counts only when asked (its docs/additional_outputs.md)
        return {"text_input": prompt, "stream": True, "exclude_input_in_output": True,
                "return_num_input_tokens": True, "return_num_output_tokens": True,
                "sampling_parameters": json.dumps(sampling, separators=(",", ":"))}

    def on_event(self, rec: RequestRecord, data: bytes) -> tuple[bool, bool]:
        try:
            obj = loads(data)
        except ValueError:
            raise StreamProtocolError("malformed", f"event is not JSON: {data[:80]!r}") from None
        if not isinstance(obj, dict):
            raise StreamProtocolError("malformed", f"event is not an object: {data[:80]!r}")
        if "error" in obj:
            raise StreamProtocolError("server_error", f"error event: {str(obj['error'])[:200]}")
        n_out = _count(obj.get("num_output_tokens"))
        if n_out is not None:
            rec.output_tokens = (rec.output_tokens or 0) + n_out
        n_in = _count(obj.get("num_input_tokens"))
        if n_in is not None and rec.prompt_tokens is None:
            rec.prompt_tokens = n_in
        text = obj.get("text_output")
        if isinstance(text, list):  # a tensor of several elements
            text = "".join(str(t) for t in text)
        text = text or ""
        rec.output_chars += len(text)
        if self.keep_text:
            rec.answer += text
        return bool(text), False

    def finish(self, rec: RequestRecord) -> None:
        if rec.output_tokens is None:
            raise StreamProtocolError("malformed", "stream carried no num_output_tokens (the model must report "
                                      "the tokens of each response)")


def _count(value: object) -> int | None:
    """A count as Triton's JSON gives a one-element tensor: a number, or a list holding one."""
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value < 0:
        raise StreamProtocolError("malformed", f"negative token count {value}")
    return int(value)

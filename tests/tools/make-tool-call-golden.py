#!/usr/bin/python3
"""Writes tests/data/chat/tool_call_cases.json: conversations with tools, tool calls and tool
results rendered by Jinja2 (Debian python3-jinja2) through the chat templates of
../shared/golden/chat/templates that has a tool syntax of its own (qwen3; the llama3_1 there is a
header-only template without Llama 3.1's tool blocks), with the
variables Hugging Face's apply_chat_template passes (`tools` as [{"type": "function", "function":
{...}}], assistant `tool_calls` with `arguments` as a mapping, role "tool" messages with
`tool_call_id`), so that tests/genai/tools/test_tool_calls.cpp can check that genai/tools hands the
templates the same messages and variables and that npullm's Jinja engine renders them byte for byte.

The environment is the one ../shared/golden/chat/cases.json was made with: ImmutableSandboxedEnvironment(
trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]), globals raise_exception(msg) and
strftime_now(fmt) at the fixed date 2026-11-29, filter tojson = json.dumps(ensure_ascii=False).

    /usr/bin/python3 tests/tools/make-tool-call-golden.py
"""
import datetime
import hashlib
import json
import os

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "chat", "tool_call_cases.json")
TEMPLATES = os.path.join(HERE, "..", "..", "..", "shared", "golden", "chat", "templates")
DATE = datetime.datetime(2026, 11, 29)


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: DATE.strftime(fmt)
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}


def call(id_, name, args):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = {
    # Tools offered, nothing called yet.
    "offer": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ],
    # One call and its result, then the next question.
    "one_call": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "unit": "c"})]},
        {"role": "tool", "content": "{\"temperature\": 21}", "tool_call_id": "call_1"},
    ],
    # Two calls in one turn and both results (templates that allow it).
    "two_calls": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather and time in Tokyo?"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_a", "get_weather", {"city": "Tokyo"}),
                                                           call("call_b", "get_time", {"zone": "Asia/Tokyo"})]},
        {"role": "tool", "content": "sunny, 25 C", "tool_call_id": "call_a"},
        {"role": "tool", "content": "14:05", "tool_call_id": "call_b"},
        {"role": "assistant", "content": "Sunny, 25 C, and it is 14:05."},
        {"role": "user", "content": "Thanks!"},
    ],
}

# template -> the conversations it renders.
PLAN = {"qwen3": ["offer", "one_call", "two_calls"]}


def main():
    env = environment()
    cases = []
    for name, convs in PLAN.items():
        with open(os.path.join(TEMPLATES, name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        with open(os.path.join(TEMPLATES, name + ".tokens.json"), encoding="utf-8") as f:
            tokens = json.load(f)
        t = env.from_string(source)
        for conv in convs:
            messages = CONVERSATIONS[conv]
            text = t.render(messages=messages, tools=[WEATHER, TIME], add_generation_prompt=True, documents=None,
                            bos_token=tokens["bos_token"] or "", eos_token=tokens["eos_token"] or "")
            cases.append({"template": name, "template_sha256": hashlib.sha256(source.encode()).hexdigest(),
                          "conversation": conv, "messages": messages, "tools": [WEATHER, TIME],
                          "bos_token": tokens["bos_token"] or "", "eos_token": tokens["eos_token"] or "", "expected": text})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"renderer": "Jinja2 (HF apply_chat_template settings), made by tests/tools/make-tool-call-golden.py",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

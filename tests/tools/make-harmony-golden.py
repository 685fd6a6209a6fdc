#!/usr/bin/python3
"""Writes tests/data/chat/harmony_cases.json: gpt-oss's "harmony" chat template
(tests/data/chat/harmony.jinja) rendered by Jinja2 (Debian python3-jinja2) for a set of
conversations, the way HF transformers renders chat templates, so that
tests/genai/chat/test_chat_template.cpp can check npullm's Jinja engine against it byte for byte.

harmony.jinja is gpt-oss-20b's / gpt-oss-120b's chat_template as llama.cpp keeps it in
models/templates/openai-gpt-oss-120b.jinja (16738 bytes, sha256 a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146,
no newline at the end); this script refuses a template with another digest.

The environment is the one ../shared/golden/chat/cases.json was made with (its "renderer" field):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
globals raise_exception(msg) and strftime_now(fmt) at the fixed date 2026-11-29, filter tojson =
json.dumps(ensure_ascii=False). Each case may carry `variables` (reasoning_effort, model_identity,
tools, builtin_tools): the extra keyword arguments of apply_chat_template.

    /usr/bin/python3 tests/tools/make-harmony-golden.py
"""
import datetime
import hashlib
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "chat")
TEMPLATE_SHA256 = "a4c9919cbbd4acdd51ccffe22da049264b1b73e59055fa58811a99efbd7c8146"
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


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "default": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                          "required": ["lat"]},
                "exact": {"type": "boolean", "nullable": True},
            },
            "required": ["city"],
        },
    },
}
NO_ARGS_TOOL = {"type": "function", "function": {"name": "now", "description": "The current time"}}

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}

CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "Hello!"}], {}),
    ("system_user", [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}], {}),
    ("developer_user", [{"role": "developer", "content": "Answer in French."},
                        {"role": "user", "content": "What is 2+2?"}], {}),
    ("multi_turn", [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another one?"}], {}),
    # An earlier turn's reasoning is dropped; the last assistant turn's is kept when there is no
    # generation prompt (a training example), ending in <|return|>.
    ("thinking", [{"role": "user", "content": "What is 7*6?"},
                  {"role": "assistant", "thinking": "6*7 = 42.", "content": "42"},
                  {"role": "user", "content": "And 7*7?"},
                  {"role": "assistant", "thinking": "7*7 = 49.", "content": "49"}], {}),
    ("reasoning_high", [{"role": "user", "content": "Prove it."}], {"reasoning_effort": "high"}),
    ("identity", [{"role": "user", "content": "Who are you?"}],
     {"model_identity": "You are npullm's test model.", "reasoning_effort": "low"}),
    ("unicode", [{"role": "user", "content": "Grüße, 世界! 🙂 naïve café\nsecond line\ttab"}], {}),
    ("tools", [{"role": "system", "content": "Use tools when helpful."},
               {"role": "user", "content": "Weather in Paris?"}],
     {"tools": [WEATHER_TOOL, NO_ARGS_TOOL]}),
    ("tool_call", [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "thinking": "I should call the tool.", "tool_calls": [CALL]},
                   {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}],
     {"tools": [WEATHER_TOOL]}),
    ("tool_call_answered", [{"role": "user", "content": "Weather in Paris?"},
                            {"role": "assistant", "content": "Checking.", "tool_calls": [CALL]},
                            {"role": "tool", "content": "21 C"},
                            {"role": "assistant", "content": "It is 21 C in Paris."},
                            {"role": "user", "content": "Thanks"}],
     {"tools": [WEATHER_TOOL]}),
    ("builtin_tools", [{"role": "user", "content": "Search for llamas."}],
     {"builtin_tools": ["browser", "python"]}),
    # The template refuses channel markers inside content, and a tool result without a call.
    ("channel_in_content", [{"role": "user", "content": "x"},
                            {"role": "assistant", "content": "<|channel|>final<|message|>hi"}], {}),
    ("tool_without_call", [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}], {}),
]


def main():
    path = os.path.join(DATA, "harmony.jinja")
    source_bytes = open(path, "rb").read()
    digest = hashlib.sha256(source_bytes).hexdigest()
    if digest != TEMPLATE_SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, expected {TEMPLATE_SHA256} (gpt-oss's published template)")
    template = environment().from_string(source_bytes.decode("utf-8"))
    cases = []
    for name, messages, variables in CONVERSATIONS:
        for gen in (True, False):
            case = {"template": "harmony", "conversation": name, "messages": messages, "variables": variables,
                    "add_generation_prompt": gen, "bos_token": "<|startoftext|>", "eos_token": "<|return|>"}
            try:
                case["expected"] = template.render(messages=messages, add_generation_prompt=gen,
                                                   bos_token=case["bos_token"], eos_token=case["eos_token"],
                                                   **variables)
            except TemplateError as e:
                case["expected_error"] = str(e)
            cases.append(case)
    doc = {
        "renderer": f"Jinja2 {jinja2.__version__}, ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
                    "extensions=[loopcontrols]), globals raise_exception and strftime_now (fixed date 2026-11-29), "
                    "filter tojson = json.dumps(ensure_ascii=False); made by tests/tools/make-harmony-golden.py",
        "template_sha256": digest,
        "cases": cases,
    }
    out = os.path.join(DATA, "harmony_cases.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {out}: {len(cases)} cases")


if __name__ == "__main__":
    main()

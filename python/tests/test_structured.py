"""Structured output from Python: json_schema= / grammar= / regex= / json_object= / grammar_trigger= on
stories260K (greedy and sampled); the replies parse and validate (jsonschema, Debian's
python3-jsonschema, where installed; the same checks by hand always); refusals raise
StructuredOutputError naming the keyword, at the call, before anything is generated."""
import json
import re

import pytest

import npullm

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def check_person(text):
    doc = json.loads(text)  # raises when it does not parse
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.validate(doc, PERSON)
    assert isinstance(doc, dict) and set(doc) <= {"name", "age", "tags"}
    assert isinstance(doc["name"], str) and 1 <= len(doc["name"]) <= 8
    assert isinstance(doc["age"], int) and not isinstance(doc["age"], bool) and 0 <= doc["age"] <= 120
    assert all(t in ("red", "green") for t in doc.get("tags", []))
    assert len(doc.get("tags", [])) <= 3
    return doc


def test_a_json_schema_reply_parses_and_validates(llm):
    stream = llm.generate("Once upon a time", json_schema=PERSON, max_new_tokens=700)
    text = "".join(stream)
    check_person(text)
    assert stream.result.finish_reason == "eos"  # ended as soon as the object closed
    # JSON text works as well as a dict, and sampled replies stay inside the schema too.
    check_person(llm.generate("Lily", json_schema=json.dumps(PERSON), max_new_tokens=700).text())
    for seed in (1, 2, 3):
        check_person(llm.generate("Tom", json_schema=PERSON, temperature=1.0, seed=seed, max_new_tokens=700).text())


def test_grammar_regex_and_json_object(llm):
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}", llm.generate("Tom", grammar='root ::= [0-9]{4} "-" [0-9]{2}\n').text())
    assert re.fullmatch(r"(yes|no), [a-z ]{3,12}\.", llm.generate("Tom", regex=r"(yes|no), [a-z ]{3,12}\.").text())
    assert isinstance(json.loads(llm.generate("Tom", json_object=True, max_new_tokens=700).text()), dict)


def test_the_constraint_applies_to_that_call_only(llm):
    free = llm.generate("Once upon a time", max_new_tokens=20).text()
    llm.generate("Once upon a time", regex="[0-9]+", max_new_tokens=5).text()
    assert llm.generate("Once upon a time", max_new_tokens=20).text() == free


def test_a_trigger_leaves_the_text_before_it_free(llm):
    # stories260K's greedy story up to the trigger (its first 12 characters), the expression after it.
    free = llm.generate("Once upon a time", max_new_tokens=30).text()
    trigger = free[:12]
    text = llm.generate("Once upon a time", regex=" [0-9]{2}!", grammar_trigger=trigger, max_new_tokens=40).text()
    assert text.startswith(trigger)
    assert re.fullmatch(" [0-9]{2}!", text[len(trigger):]), text


def test_chat_send_takes_a_schema(chat_llm):
    chat = chat_llm.chat(system="You tell stories.")
    check_person(chat.send("A person, please.", json_schema=PERSON, max_new_tokens=700).text())


def test_a_refused_keyword_raises_naming_it(llm):
    with pytest.raises(npullm.StructuredOutputError) as e:
        llm.generate("x", json_schema={"type": "object", "properties": {"a": {"not": {"type": "string"}}}})
    assert e.value.keyword == "not"
    assert "keyword 'not'" in str(e.value) and "json_schema" in str(e.value)
    assert e.value.status == "invalid_argument"
    assert isinstance(e.value, ValueError) and isinstance(e.value, npullm.NpullmError)
    with pytest.raises(npullm.StructuredOutputError) as e:
        llm.generate("x", json_schema={"type": "integer", "multipleOf": 3})
    assert e.value.keyword == "multipleOf"
    with pytest.raises(npullm.StructuredOutputError, match="grammar"):
        llm.generate("x", grammar="root ::= missing\n")
    with pytest.raises(npullm.StructuredOutputError, match="regex") as e:
        llm.generate("x", regex="(a")
    assert e.value.keyword is None
    with pytest.raises(npullm.StructuredOutputError):
        llm.generate("x", json_schema="{not json")
    # The session is unharmed.
    assert llm.generate("Once upon a time", max_new_tokens=5).text()


def test_bad_combinations_are_type_errors(llm):
    with pytest.raises(TypeError, match="at most one"):
        llm.generate("x", json_schema=PERSON, regex="a")
    with pytest.raises(TypeError, match="grammar_trigger"):
        llm.generate("x", grammar_trigger="<tool_call>")

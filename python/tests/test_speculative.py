"""Speculative decoding from Python: LLM(spec_max_k=, draft_model=) and generate() / send() with spec=,
spec_k=, spec_adaptive=, prediction= on stories260K. Greedy ids are those without speculation for
prompt lookup at every K, with the model as its own draft model (every guess right) and with a
prediction of the reply (accepted); the counters land in the result's metrics; settings the model
cannot run raise SpeculationError at the call, with the library's message."""
import pytest

import npullm

PROMPT = "Once upon a time"
N = 120  # EOS ignored: every reply this long, more text for lookup to find


@pytest.fixture(scope="module")
def spec_llm(model_path, cache_dir):
    # The model as its own draft model: the same vocabulary, and its greedy guesses are always right.
    with npullm.LLM(model_path, cache_dir=cache_dir, threads=2, spec_max_k=15, draft_model=model_path) as model:
        yield model


@pytest.fixture(scope="module")
def off(llm):
    stream = llm.generate(PROMPT, max_new_tokens=N, ignore_eos=True)
    stream.text()
    assert len(stream.result.ids) == N
    assert stream.result.metrics["spec_verify_steps"] == 0
    return stream.result


def run(model, **options):
    stream = model.generate(PROMPT, max_new_tokens=N, ignore_eos=True, **options)
    pieces = list(stream)
    assert "".join(pieces) == stream.result.text  # streamed as without speculation
    return stream.result


def expect_same(off, on, what):
    assert on.ids == off.ids, what
    assert on.text == off.text, what
    assert on.finish_reason == off.finish_reason, what
    assert on.metrics["spec_verify_steps"] > 0, f"{what}: it did speculate"
    assert on.metrics["spec_accepted"] <= on.metrics["spec_drafted"], what


@pytest.mark.parametrize("k", [1, 3, 7, 15])
def test_greedy_ids_are_those_without_for_every_k_and_source(spec_llm, off, k):
    expect_same(off, run(spec_llm, spec="lookup", spec_k=k), f"lookup, K {k}")
    expect_same(off, run(spec_llm, spec="lookup", spec_k=k, spec_adaptive=False), f"lookup, fixed K {k}")
    d = run(spec_llm, spec="draft", spec_k=k)
    expect_same(off, d, f"draft model, K {k}")
    assert d.metrics["spec_accepted"] == d.metrics["spec_drafted"] > 0


def test_each_call_speculates_only_when_asked(spec_llm, off):
    run(spec_llm, spec="lookup")
    plain = run(spec_llm)
    assert plain.ids == off.ids
    assert plain.metrics["spec_verify_steps"] == 0 and plain.metrics["spec_drafted"] == 0
    assert run(spec_llm, spec="off").metrics["spec_verify_steps"] == 0
    # A structured call after a speculating one is not refused for the earlier call's setting.
    run(spec_llm, spec="lookup")
    assert spec_llm.generate(PROMPT, regex="[0-9]{3}").text().isdigit()


def test_a_prediction_of_the_reply_is_accepted(spec_llm, off):
    for spec in (None, "lookup"):
        p = run(spec_llm, spec=spec, prediction=off.text)
        expect_same(off, p, f"prediction, spec {spec}")
        assert p.metrics["prediction_accepted"] > 0
        assert p.metrics["prediction_accepted"] >= 4 * p.metrics["prediction_rejected"], "the exact reply predicted"
    wrong = run(spec_llm, prediction="Zebras zoomed zig zag.", spec_k=3)
    assert wrong.ids == off.ids


def test_chat_turns_speculate_to_the_same_replies(chat_llm, model_path, cache_dir):
    with npullm.LLM(model_path, cache_dir=cache_dir, threads=2, chat_template="chatml", spec_max_k=7) as spec_chat_llm:
        a, b = chat_llm.chat(system="Tell a story."), spec_chat_llm.chat(system="Tell a story.")
        verify_steps = 0
        for user in ("Once upon a time there was a cat.", "The cat saw a dog.", "Then they played."):
            x = a.send(user, max_new_tokens=N, ignore_eos=True)
            y = b.send(user, max_new_tokens=N, ignore_eos=True, spec="lookup")
            assert y.text() == x.text(), user
            assert y.result.ids == x.result.ids
            verify_steps += y.result.metrics["spec_verify_steps"]
        assert verify_steps > 0
        assert b.conversation_ids() == a.conversation_ids()


def test_settings_the_model_cannot_run_raise_at_the_call(llm, spec_llm, model_path, cache_dir):
    # No verify blobs (the LLM opened without spec_max_k), a prediction alone included.
    for options in ({"spec": "lookup"}, {"prediction": "Once"}):
        with pytest.raises(npullm.SpeculationError, match="spec_max_k") as e:
            llm.generate(PROMPT, **options)
        assert e.value.status == "invalid_argument"
        assert isinstance(e.value, ValueError) and isinstance(e.value, npullm.NpullmError)
    with pytest.raises(npullm.SpeculationError, match="max_k must be at least 1"):
        spec_llm.generate(PROMPT, spec="lookup", spec_k=0)
    with pytest.raises(npullm.SpeculationError, match="structured output"):
        spec_llm.generate(PROMPT, spec="lookup", json_object=True)
    with pytest.raises(ValueError, match="'lookup'"):
        spec_llm.generate(PROMPT, spec="medusa")
    with pytest.raises(TypeError, match="spec_k"):
        spec_llm.generate(PROMPT, spec_k=3)
    with npullm.LLM(model_path, cache_dir=cache_dir, threads=2, spec_max_k=3) as no_draft:
        with pytest.raises(npullm.SpeculationError, match="draft model"):
            no_draft.generate(PROMPT, spec="draft")
        assert no_draft.generate(PROMPT, spec="lookup", max_new_tokens=5).text()
    # Opening: a draft model needs verify blobs; spec_max_k is 0..63; a missing draft is an I/O error.
    with pytest.raises(npullm.NpullmError, match="verify blobs") as e:
        npullm.LLM(model_path, cache_dir=cache_dir, draft_model=model_path)
    assert e.value.status == "invalid_argument"
    with pytest.raises(npullm.NpullmError, match="between 0 and 63"):
        npullm.LLM(model_path, cache_dir=cache_dir, spec_max_k=64)
    with pytest.raises(npullm.NpullmError, match="no-such-draft") as e:
        npullm.LLM(model_path, cache_dir=cache_dir, spec_max_k=3, draft_model="/nonexistent/no-such-draft.gguf")
    assert e.value.status == "io"
    # The sessions are unharmed.
    assert llm.generate(PROMPT, max_new_tokens=5).text()
    assert spec_llm.generate(PROMPT, max_new_tokens=5, spec="lookup").text()

"""The npullm Python module over libnpullm: greedy text equal to `npullm run --temp 0`, streaming,
cancellation, errors as exceptions with the library's message, chat sessions, tokenize."""
import json
import subprocess

import pytest

import npullm

PROMPT = "Once upon a time"


def test_version():
    assert npullm.__version__ == "0.1.0"


def test_greedy_text_equals_npullm_run(llm, model_path, cache_dir, npullm_binary):
    out = subprocess.run([npullm_binary, "run", "-m", model_path, "-p", PROMPT, "-n", "40", "--temp", "0", "--json",
                          "--cache-dir", cache_dir], check=True, capture_output=True, text=True).stdout
    want = json.loads(out)
    stream = llm.generate(PROMPT, max_new_tokens=40)
    pieces = list(stream)
    assert len(pieces) > 5  # streamed, not delivered at once
    assert "".join(pieces) == want["text"]
    assert stream.result.text == want["text"]
    assert stream.result.ids == want["ids"]
    assert stream.result.finish_reason == want["finish_reason"]
    assert stream.result.metrics["generated_tokens"] == len(want["ids"])


def test_generate_from_token_ids(llm):
    ids = llm.tokenize(PROMPT, add_bos=True)
    assert ids[0] == llm.info["bos_id"]
    assert llm.generate(ids, max_new_tokens=20).text() == llm.generate(PROMPT, max_new_tokens=20).text()


def test_a_cancelled_generation_ends_within_one_token(llm):
    stream = llm.generate(PROMPT, max_new_tokens=200)
    got = []
    for piece in stream:
        got.append(piece)
        if len(got) == 3:
            break
    stream.close()
    # Nothing was sampled after the token whose piece came last.
    assert stream.result.finish_reason == "cancelled"
    assert len(stream.result.ids) <= 3
    assert stream.result.text == "".join(got)
    # The session is free for the next generation.
    assert llm.generate(PROMPT, max_new_tokens=5).text()


def test_a_new_generation_cancels_an_unfinished_one(llm):
    first = llm.generate(PROMPT, max_new_tokens=200)
    next(first)
    second = llm.generate(PROMPT, max_new_tokens=10).text()
    assert first.result.finish_reason == "cancelled"
    assert second


def test_sampling_and_stops(llm):
    a = llm.generate(PROMPT, max_new_tokens=30, temperature=0.9, top_k=40, top_p=0.95, seed=3).text()
    b = llm.generate(PROMPT, max_new_tokens=30, temperature=0.9, top_k=40, top_p=0.95, seed=3).text()
    assert a == b
    full = llm.generate(PROMPT, max_new_tokens=40).text()
    stop = full[full.index(" ", 8):][:3]
    stream = llm.generate(PROMPT, max_new_tokens=40, stop=[stop])
    assert stream.text() == full[:full.index(stop)]
    assert stream.result.finish_reason == "stop_string"
    with pytest.raises(npullm.NpullmError, match="top_p") as e:
        llm.generate(PROMPT, top_p=2.0).text()
    assert e.value.status == "invalid_argument"


def test_bad_model_path_raises_with_the_message(tmp_path):
    missing = tmp_path / "missing.gguf"
    with pytest.raises(npullm.NpullmError, match="missing.gguf") as e:
        npullm.LLM(missing)
    assert e.value.status == "io"
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(npullm.NpullmError) as e:
        npullm.LLM(bad)
    assert e.value.status == "model"
    with pytest.raises(TypeError):
        npullm.LLM(bad, no_such_option=1)


def test_a_prompt_that_cannot_fit_raises(llm):
    long_prompt = "Once upon a time there was a cat. " * 200
    with pytest.raises(npullm.ContextLengthError, match=r"the prompt has \d+ tokens") as e:
        llm.generate(long_prompt, max_new_tokens=8).text()
    assert e.value.status == "context"
    assert str(llm.info["capacity"]) in str(e.value)
    assert llm.generate(PROMPT, max_new_tokens=4).text()


def test_info_tokenize_and_kv_state(llm):
    info = llm.info
    assert info["n_vocab"] == 512
    assert info["variants"] == sorted(info["variants"]) and info["capacity"] == info["variants"][-1]
    assert info["slots"] == 1
    ids = llm.tokenize("Once upon a time")
    assert "Once upon a time" in llm.detokenize(ids)
    llm.generate(PROMPT, max_new_tokens=10).text()
    kv = llm.kv_state()
    assert kv["rows_used"] == len(llm.tokenize(PROMPT, add_bos=True)) + 10 - 1
    assert kv["capacity"] == info["capacity"]
    assert kv["last_variant"] in info["variants"]


def test_chat_sessions(chat_llm, tmp_path):
    text = chat_llm.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    chat = chat_llm.chat(system="You tell short stories.")
    first = chat.send("Tell me about a cat.", max_new_tokens=20)
    reply1 = first.text()
    rows = chat.kv_state()["rows_used"]
    second = chat.send("What did it eat?", max_new_tokens=20)
    second.text()
    assert second.result.metrics["prefill_tokens"] < rows  # only the new turn was prefilled
    history = chat.history
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert history[2]["content"] == reply1
    assert len(chat.conversation_ids()) == chat.kv_state()["rows_used"] + 1

    path = tmp_path / "chat.json"
    chat.save(path)
    other = chat_llm.chat()
    other.load(path)
    assert other.history == history
    assert other.kv_state()["rows_used"] == chat.kv_state()["rows_used"]  # the K/V rows came with it
    assert other.send("Where did it sleep?", max_new_tokens=12).text() == chat.send("Where did it sleep?", max_new_tokens=12).text()
    other.history = history[:3]
    assert len(other.history) == 3
    other.reset()
    assert other.history == [] and other.kv_state()["rows_used"] == 0
    with pytest.raises(npullm.NpullmError, match="npullm-session"):
        path.write_text("[]")
        other.load(path)


def test_chat_without_a_template_raises(llm):
    with pytest.raises(npullm.NpullmError, match="chat template") as e:
        llm.chat()
    assert e.value.status == "model"

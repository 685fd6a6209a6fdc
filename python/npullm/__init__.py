"""npullm from Python: a thin layer over libnpullm's C API (ctypes, no compiled extension).

    import npullm
    llm = npullm.LLM("stories260K.gguf")
    for piece in llm.generate("Once upon a time", max_new_tokens=40):
        print(piece, end="", flush=True)

    chat = llm.chat(system="You are brief.")           # needs a chat template (the model's or chat_template=)
    print("".join(chat.send("Tell me a story")))
    chat.save("chat.json")

Structured output: generate() and send() take json_schema= (a dict or JSON text), grammar= (GBNF),
regex= or json_object=True, and grammar_trigger= (constrain only after that text):

    llm.generate("A person:", json_schema={"type": "object", "properties": {"name": {"type": "string"}}}).text()

Speculative decoding (several tokens per weight read; greedy output unchanged): open the model with
spec_max_k= (verify blobs) and optionally draft_model=, then give generate() and send() spec=
("lookup", "draft"), spec_k=, spec_adaptive= and prediction= (the text the reply is expected to be):

    llm = npullm.LLM("model.gguf", spec_max_k=7)
    llm.generate(prompt, spec="lookup").text()                # .result.metrics["spec_accepted"], ...

Errors from the library raise NpullmError (ContextLengthError for a prompt that cannot fit;
StructuredOutputError, also a ValueError, for a refused schema, grammar or expression;
SpeculationError, also a ValueError, for a speculation setting the model cannot run) with
the library's message. A session runs one generation at a time; starting another cancels the first.
"""
import ctypes
import json
import queue
import re
import threading
from dataclasses import dataclass, field

from . import _capi

_lib = _capi.load()

__version__ = _lib.npullm_version().decode()


class NpullmError(RuntimeError):
    """A failed library call: `status` is the C API's status name ("io", "model", "context", ...)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class ContextLengthError(NpullmError):
    """The prompt cannot fit in the model's K/V capacity (beside the reply's reserve)."""


class StructuredOutputError(NpullmError, ValueError):
    """A schema, grammar or regular expression the library refused: the message names the keyword
    argument and what was refused; `keyword` is the JSON Schema keyword when one was (e.g. "not"),
    else None."""

    def __init__(self, status, message):
        super().__init__(status, message)
        found = re.search(r"keyword '([^']*)'", message)
        self.keyword = found.group(1) if found else None


class SpeculationError(NpullmError, ValueError):
    """A speculative-decoding setting the model cannot run, refused at the call: speculation on a
    model opened without spec_max_k=, spec="draft" without draft_model=, spec_k < 1, or together
    with structured output. The message says which, and what to do."""


def _check(status):
    if status != _capi.OK:
        name = _lib.npullm_status_name(status).decode()
        message = _lib.npullm_last_error().decode("utf-8", "replace")
        raise (ContextLengthError if status == _capi.ERR_CONTEXT else NpullmError)(name, message)


def _take_text(ptr):
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        _lib.npullm_free(ptr)


@dataclass
class Result:
    """What a finished generation produced."""
    text: str = ""
    ids: list = field(default_factory=list)
    finish_reason: str = ""
    metrics: dict = field(default_factory=dict)


def _metrics(m, session_handle):
    """npullm_metrics and the session's speculation counters (npullm_spec_metrics: kept apart in the
    C API because npullm_metrics' layout is fixed), as one dict."""
    spec = _capi.SpecMetrics()
    _check(_lib.npullm_session_last_spec_metrics(session_handle, ctypes.byref(spec)))
    out = {name: getattr(m, name) for name, _ in _capi.Metrics._fields_}
    out.update({name: getattr(spec, name) for name, _ in _capi.SpecMetrics._fields_})
    return out


def _sampling(max_new_tokens=256, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, typical_p=1.0,
              repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, penalty_last_n=64,
              seed=0, stop=(), stop_token_ids=(), ignore_eos=False):
    s = _lib.npullm_sampling_default()
    s.max_new_tokens = max_new_tokens
    s.temperature = temperature
    s.top_k = top_k
    s.top_p = top_p
    s.min_p = min_p
    s.typical_p = typical_p
    s.repetition_penalty = repetition_penalty
    s.presence_penalty = presence_penalty
    s.frequency_penalty = frequency_penalty
    s.penalty_last_n = penalty_last_n
    s.seed = seed
    if isinstance(stop, str):
        stop = [stop]
    stops = (ctypes.c_char_p * len(stop))(*[x.encode() for x in stop])
    ids = (ctypes.c_int32 * len(stop_token_ids))(*stop_token_ids)
    s.stop_strings = ctypes.cast(stops, ctypes.POINTER(ctypes.c_char_p))
    s.n_stop_strings = len(stop)
    s.stop_token_ids = ctypes.cast(ids, _capi.c_int32_p)
    s.n_stop_token_ids = len(stop_token_ids)
    s.ignore_eos = int(bool(ignore_eos))
    return s, (stops, ids)  # the arrays must outlive the call


_STRUCTURED_KINDS = {
    "json_schema": _capi.STRUCTURED_JSON_SCHEMA,
    "grammar": _capi.STRUCTURED_GRAMMAR,
    "regex": _capi.STRUCTURED_REGEX,
}


def _structured(options):
    """Takes the structured-output keywords out of `options`: (kind, source, trigger), each checked
    by the library now so that a refused one raises at the call, not in the middle of the loop."""
    given = {k: options.pop(k) for k in ("json_schema", "grammar", "regex") if options.get(k) is not None}
    for k in ("json_schema", "grammar", "regex"):
        options.pop(k, None)
    json_object = bool(options.pop("json_object", False))
    trigger = options.pop("grammar_trigger", None)
    if json_object:
        given["json_object"] = None
    if len(given) > 1:
        raise TypeError("at most one of json_schema, grammar, regex and json_object may be given, not "
                        + " and ".join(sorted(given)))
    if not given:
        if trigger:
            raise TypeError("grammar_trigger needs json_schema, grammar, regex or json_object")
        return _capi.STRUCTURED_NONE, None, None, None
    (name, source), = given.items()
    if name == "json_object":
        kind = _capi.STRUCTURED_JSON_OBJECT
    else:
        kind = _STRUCTURED_KINDS[name]
        if name == "json_schema" and not isinstance(source, (str, bytes)):
            source = json.dumps(source)  # a dict (or a boolean schema)
        if isinstance(source, str):
            source = source.encode()
    trig = trigger.encode() if trigger else None
    status = _lib.npullm_structured_check(kind, source, trig)
    if status != _capi.OK:
        message = _lib.npullm_last_error().decode("utf-8", "replace")
        raise StructuredOutputError(_lib.npullm_status_name(status).decode(), f"{name}: {message}")
    return kind, source, trig, name


def _speculation(options, model, structured):
    """Takes the speculative-decoding keywords out of `options`: None (off) or the arguments of
    npullm_session_set_speculative after the session (mode, max_k, adaptive, prediction), checked
    by the library against the model now, so that a refused setting raises at the call."""
    spec = options.pop("spec", None)
    spec_k = options.pop("spec_k", None)
    adaptive = options.pop("spec_adaptive", None)
    prediction = options.pop("prediction", None)
    if spec is None and not prediction:
        if spec_k is not None or adaptive is not None:
            raise TypeError("spec_k and spec_adaptive need spec= or prediction=")
        return None
    if spec is None:
        spec = "off"  # a prediction alone
    if spec not in _capi.SPEC_MODES:
        raise ValueError(f"spec must be one of {', '.join(map(repr, _capi.SPEC_MODES))}, not {spec!r}")
    if spec == "off" and not prediction:
        return None
    if structured is not None:
        raise SpeculationError("invalid_argument", f"spec / prediction together with {structured}: speculative decoding "
                               "with structured output is not implemented (a grammar decodes token by token)")
    args = (_capi.SPEC_MODES[spec], 7 if spec_k is None else spec_k, int(adaptive is None or bool(adaptive)),
            prediction.encode() if prediction else None)
    status = _lib.npullm_speculative_check(model, *args)
    if status != _capi.OK:
        raise SpeculationError(_lib.npullm_status_name(status).decode(), _lib.npullm_last_error().decode("utf-8", "replace"))
    return args


class Stream:
    """An iterator over the text pieces of one generation, as they are sampled.

    The generation runs on a worker thread (the C call releases the GIL) in lock-step with the
    loop: the token callback hands a piece over and waits until the next one is asked for, so
    leaving the loop early and close() (or starting another generation on the same session)
    cancel it within one token. After the iteration, `result` holds the Result (text, ids,
    finish_reason, metrics).
    """

    _DONE = object()

    def __init__(self, session, call):
        self._session = session
        self._call = call  # call(callback, result_pointer) -> status
        self._queue = queue.Queue()
        self._cancel = threading.Event()
        self._resume = threading.Semaphore(0)  # released when the consumer wants the next piece
        self._waiting = False                  # the worker waits for _resume after a piece
        self._thread = None
        self._error = None
        self.result = None

        def on_piece(piece, length, _user_data):
            self._queue.put(ctypes.string_at(piece, length).decode("utf-8", "replace"))
            self._resume.acquire()
            return 0 if self._cancel.is_set() else 1

        self._callback = _capi.TOKEN_CALLBACK(on_piece)

    def _run(self):
        res = _capi.Result()
        try:
            status = self._call(self._callback, ctypes.byref(res))
            if status != _capi.OK:
                _check(status)
            self.result = Result(
                text=ctypes.string_at(res.text, res.text_len).decode("utf-8", "replace"),
                ids=[res.ids[i] for i in range(res.n_ids)],
                finish_reason=_capi.FINISH_REASONS[res.finish],
                metrics=_metrics(res.metrics, self._session._handle))
        except BaseException as e:  # raised to the consumer from __next__
            self._error = e
        finally:
            _lib.npullm_result_free(ctypes.byref(res))
            self._queue.put(self._DONE)

    def _start(self):
        if self._thread is None:
            self._session._claim(self)
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def __iter__(self):
        return self

    def _let_go(self):
        if self._waiting:
            self._waiting = False
            self._resume.release()

    def __next__(self):
        self._start()
        self._let_go()
        item = self._queue.get()
        if item is self._DONE:
            self._queue.put(self._DONE)  # later next() calls stop too
            self._thread.join()
            self._session._release(self)
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration
        self._waiting = True
        return item

    def close(self):
        """Cancels the generation (if it is running) and waits for it to end."""
        if self._thread is None:
            return
        self._cancel.set()
        self._let_go()
        self._thread.join()
        self._session._release(self)

    def text(self):
        """Runs the generation to its end and returns the whole text."""
        return "".join(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Session:
    """One npullm_session: its own K/V rows and conversation."""

    def __init__(self, llm):
        self._llm = llm
        handle = ctypes.c_void_p()
        _check(_lib.npullm_session_create(llm._model, ctypes.byref(handle)))
        self._handle = handle
        self._active = None
        self._lock = threading.Lock()

    def _claim(self, stream):
        with self._lock:
            previous, self._active = self._active, stream
        if previous is not None and previous is not stream:
            previous.close()

    def _release(self, stream):
        with self._lock:
            if self._active is stream:
                self._active = None

    def _stream(self, fn, first_arg, sampling):
        return self._stream_call(lambda handle, s, callback, result: fn(handle, first_arg, s, callback, None, result), sampling)

    def _stream_call(self, fn, options):
        """A Stream running fn(handle, sampling, callback, result) with these sampling,
        structured-output and speculation keywords; the session's constraint and speculation are
        set on the worker thread, right before the call (the previous stream on this session has
        ended by then)."""
        options = dict(options)
        kind, source, trigger, name = _structured(options)
        spec = _speculation(options, self._llm._model, name)
        s, keep = _sampling(**options)
        handle = self._handle

        def call(callback, result):
            _keep = keep  # noqa: F841 (the stop arrays live as long as the call)
            # The previous call's speculation off first: a session refuses a constraint while it speculates.
            _check(_lib.npullm_session_set_speculative(handle, _capi.SPEC_OFF, 0, 0, None))
            status = _lib.npullm_session_set_structured(handle, kind, source, trigger)
            if status != _capi.OK:
                message = _lib.npullm_last_error().decode("utf-8", "replace")
                raise StructuredOutputError(_lib.npullm_status_name(status).decode(), f"{name}: {message}")
            if spec is not None:
                status = _lib.npullm_session_set_speculative(handle, *spec)
                if status != _capi.OK:
                    raise SpeculationError(_lib.npullm_status_name(status).decode(), _lib.npullm_last_error().decode("utf-8", "replace"))
            return fn(handle, ctypes.byref(s), callback, result)
        return Stream(self, call)

    def kv_state(self):
        """The K/V rows in use, the capacity, the variant the next step runs in, the last one used."""
        st = _capi.KvState()
        _check(_lib.npullm_session_kv_state(self._handle, ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in _capi.KvState._fields_}

    def last_metrics(self):
        m = _capi.Metrics()
        _check(_lib.npullm_session_last_metrics(self._handle, ctypes.byref(m)))
        return _metrics(m, self._handle)

    def close(self):
        if self._active is not None:
            self._active.close()
        if self._handle:
            _lib.npullm_session_free(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Chat(_Session):
    """A conversation: each send() is a user turn whose reply streams; only the new turn's tokens
    are prefilled on top of the K/V rows the earlier turns left."""

    def __init__(self, llm, system=None):
        super().__init__(llm)
        _check(_lib.npullm_chat_start(self._handle, system.encode() if system else None))

    def send(self, message, **sampling):
        return self._stream(_lib.npullm_chat, message.encode(), sampling)

    @property
    def history(self):
        msgs = ctypes.POINTER(_capi.ChatMessage)()
        n = ctypes.c_size_t()
        _check(_lib.npullm_session_history(self._handle, ctypes.byref(msgs), ctypes.byref(n)))
        try:
            return [{"role": msgs[i].role.decode(), "content": msgs[i].content.decode("utf-8", "replace")} for i in range(n.value)]
        finally:
            _lib.npullm_messages_free(msgs, n)

    @history.setter
    def history(self, messages):
        arr, _keep = _messages(messages)
        _check(_lib.npullm_session_set_history(self._handle, arr, len(messages)))

    def conversation_ids(self):
        ids = _capi.c_int32_p()
        n = ctypes.c_size_t()
        _check(_lib.npullm_session_conversation_ids(self._handle, ctypes.byref(ids), ctypes.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _lib.npullm_free(ids)

    def save(self, path):
        """Writes the history and options as JSON, then the chat's K/V rows (npullm_session_save)."""
        _check(_lib.npullm_session_save(self._handle, str(path).encode()))

    def load(self, path):
        """Restores a saved chat; its next turn prefills only its own tokens (npullm_session_load)."""
        _check(_lib.npullm_session_load(self._handle, str(path).encode()))

    def reset(self, system=None):
        """Starts the conversation again (empty K/V rows)."""
        _check(_lib.npullm_session_reset(self._handle))
        _check(_lib.npullm_chat_start(self._handle, system.encode() if system else None))


def _messages(messages):
    encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
    arr = (_capi.ChatMessage * max(len(encoded), 1))()
    for i, (role, content) in enumerate(encoded):
        arr[i].role = role
        arr[i].content = content
    return arr, encoded


class LLM:
    """A model opened with runtime options, and a session for plain generation.

    Options (all optional): prefill_chunk, variants (K/V capacities, list), max_prompt_len,
    min_response_len, threads, cache_dir, use_cache, kv_type ("f16", "f32", "q8_0"),
    repack_weights, context_policy ("shift", "truncate"), n_keep, chat_template,
    cut_long_prompts (False: a prompt that cannot fit raises ContextLengthError).
    Speculative decoding: spec_max_k (the most guesses a verify step checks, 0-63: compiles the
    verify blobs; 0, the default, allows none) and draft_model (a GGUF sharing the vocabulary, for
    spec="draft"; needs spec_max_k).
    """

    def __init__(self, model, *, spec_max_k=0, draft_model=None, **options):
        p = _lib.npullm_model_default_params()
        self._keep = []
        for key, value in options.items():
            if key == "variants":
                arr = (ctypes.c_int64 * len(value))(*value)
                self._keep.append(arr)
                p.variants = ctypes.cast(arr, _capi.c_int64_p)
                p.n_variants = len(value)
            elif key == "kv_type":
                p.kv_type = _capi.KV_TYPES[value]
            elif key == "context_policy":
                p.context_policy = _capi.CONTEXT_POLICIES[value]
            elif key in ("cache_dir", "chat_template"):
                setattr(p, key, None if value is None else str(value).encode())
            elif key in ("use_cache", "repack_weights", "cut_long_prompts"):
                setattr(p, key, int(bool(value)))
            elif key in dict(_capi.ModelParams._fields_):
                setattr(p, key, value)
            else:
                raise TypeError(f"LLM() got an unknown option {key!r}")
        handle = ctypes.c_void_p()
        draft = None if draft_model is None else str(draft_model).encode()
        _check(_lib.npullm_model_open_speculative(str(model).encode(), ctypes.byref(p), spec_max_k, draft, ctypes.byref(handle)))
        self._model = handle
        self._session = None

    @property
    def info(self):
        """n_vocab, bos_id, eos_id, capacity, variants, prefill_chunk, slots, description."""
        i = _capi.ModelInfo()
        _check(_lib.npullm_model_get_info(self._model, ctypes.byref(i)))
        out = {name: getattr(i, name) for name, _ in _capi.ModelInfo._fields_}
        out["variants"] = [i.variants[k] for k in range(i.n_variants)]
        del out["n_variants"]
        out["description"] = i.description.decode()
        return out

    def tokenize(self, text, add_bos=False, parse_special=False):
        ids = _capi.c_int32_p()
        n = ctypes.c_size_t()
        _check(_lib.npullm_tokenize(self._model, text.encode(), int(add_bos), int(parse_special), ctypes.byref(ids), ctypes.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _lib.npullm_free(ids)

    def detokenize(self, ids):
        arr = (ctypes.c_int32 * len(ids))(*ids)
        out = ctypes.c_void_p()
        _check(_lib.npullm_detokenize(self._model, arr, len(ids), ctypes.byref(out)))
        return _take_text(out)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        arr, _keep = _messages(messages)
        out = ctypes.c_void_p()
        _check(_lib.npullm_apply_chat_template(self._model, arr, len(messages), int(add_generation_prompt), ctypes.byref(out)))
        return _take_text(out)

    def _default_session(self):
        if self._session is None:
            self._session = _Session(self)
        return self._session

    def generate(self, prompt, **sampling):
        """Streams a continuation of `prompt` (a string, or a list of token ids prefilled as they
        are). Sampling: max_new_tokens, temperature (0 = greedy), top_k, top_p, min_p, typical_p,
        repetition_penalty, presence_penalty, frequency_penalty, penalty_last_n, seed, stop
        (strings), stop_token_ids, ignore_eos. Structured output (at most one): json_schema (a dict
        or JSON text), grammar (GBNF text), regex, json_object=True; grammar_trigger: the reply is
        free until this text and constrained after it. A refused one raises StructuredOutputError
        here, before anything is generated. Speculative decoding (the LLM opened with spec_max_k=):
        spec ("lookup", "draft", "off"), spec_k (the most guesses per verify step, 7), spec_adaptive
        (True: K follows the acceptance), prediction (the text the reply is expected to be mostly);
        greedy output is unchanged; a setting the model cannot run raises SpeculationError here.
        Each call's constraint and speculation are its own."""
        session = self._default_session()
        if isinstance(prompt, str):
            return session._stream(_lib.npullm_generate, prompt.encode(), sampling)
        ids = list(prompt)
        arr = (ctypes.c_int32 * len(ids))(*ids)
        return session._stream_call(
            lambda handle, s, callback, result: _lib.npullm_generate_tokens(handle, arr, len(ids), s, callback, None, result),
            sampling)

    def chat(self, system=None):
        """A new conversation with its own K/V rows."""
        return Chat(self, system)

    def kv_state(self):
        """The K/V state of the session generate() uses."""
        return self._default_session().kv_state()

    def close(self):
        if self._session is not None:
            self._session.close()
            self._session = None
        if getattr(self, "_model", None):
            _lib.npullm_model_free(self._model)
            self._model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


__all__ = ["LLM", "Chat", "Stream", "Result", "NpullmError", "ContextLengthError", "StructuredOutputError", "SpeculationError",
           "__version__"]

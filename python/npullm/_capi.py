"""The C API (include/npullm/npullm.h) as ctypes declarations, and where libnpullm is found.

The structs mirror the header field by field; NPULLM_ABI_VERSION below must equal the header's,
and the library's npullm_abi_version() is checked when it is loaded.
"""
import ctypes
import os
from pathlib import Path

NPULLM_ABI_VERSION = 1

OK, ERR_INVALID_ARGUMENT, ERR_IO, ERR_MODEL, ERR_CONTEXT, ERR_OUT_OF_MEMORY, ERR_INTERNAL = range(7)
KV_TYPES = {"f16": 0, "f32": 1, "q8_0": 2}
CONTEXT_POLICIES = {"shift": 0, "truncate": 1}
FINISH_REASONS = ["eos", "stop_token", "stop_string", "length", "cancelled"]
STRUCTURED_NONE, STRUCTURED_JSON_OBJECT, STRUCTURED_JSON_SCHEMA, STRUCTURED_GRAMMAR, STRUCTURED_REGEX = range(5)
SPEC_MODES = {"off": 0, "lookup": 1, "draft": 2}
SPEC_OFF = SPEC_MODES["off"]

c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_int32_p = ctypes.POINTER(ctypes.c_int32)


class ModelParams(ctypes.Structure):
    _fields_ = [
        ("prefill_chunk", ctypes.c_int64),
        ("variants", c_int64_p),
        ("n_variants", ctypes.c_size_t),
        ("max_prompt_len", ctypes.c_int64),
        ("min_response_len", ctypes.c_int64),
        ("threads", ctypes.c_int32),
        ("cache_dir", ctypes.c_char_p),
        ("use_cache", ctypes.c_int),
        ("kv_type", ctypes.c_int),
        ("repack_weights", ctypes.c_int),
        ("context_policy", ctypes.c_int),
        ("n_keep", ctypes.c_int64),
        ("chat_template", ctypes.c_char_p),
        ("cut_long_prompts", ctypes.c_int),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("n_vocab", ctypes.c_int64),
        ("bos_id", ctypes.c_int32),
        ("eos_id", ctypes.c_int32),
        ("capacity", ctypes.c_int64),
        ("variants", c_int64_p),
        ("n_variants", ctypes.c_size_t),
        ("prefill_chunk", ctypes.c_int64),
        ("slots", ctypes.c_int64),
        ("description", ctypes.c_char_p),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class Sampling(ctypes.Structure):
    _fields_ = [
        ("max_new_tokens", ctypes.c_int64),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("typical_p", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("penalty_last_n", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("stop_strings", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop_strings", ctypes.c_size_t),
        ("stop_token_ids", c_int32_p),
        ("n_stop_token_ids", ctypes.c_size_t),
        ("ignore_eos", ctypes.c_int),
    ]


class Metrics(ctypes.Structure):
    _fields_ = [
        ("ttft_ms", ctypes.c_double),
        ("prefill_tokens", ctypes.c_int64),
        ("generated_tokens", ctypes.c_int64),
        ("prefill_tps", ctypes.c_double),
        ("decode_tps", ctypes.c_double),
        ("kv_utilization", ctypes.c_double),
        ("padded_positions", ctypes.c_int64),
        ("kv_bytes_copied", ctypes.c_int64),
        ("context_shifts", ctypes.c_int64),
        ("reprefills", ctypes.c_int64),
        ("prefill_chunks", ctypes.c_int64),
        ("last_variant", ctypes.c_int64),
        ("compiled_blobs", ctypes.c_int64),
        ("cached_blobs", ctypes.c_int64),
        ("load_ms", ctypes.c_double),
        ("prefill_ms", ctypes.c_double),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("text", ctypes.c_void_p),  # char*, read with string_at so the NUL-free length is kept
        ("text_len", ctypes.c_size_t),
        ("ids", c_int32_p),
        ("n_ids", ctypes.c_size_t),
        ("finish", ctypes.c_int),
        ("metrics", Metrics),
    ]


class KvState(ctypes.Structure):
    _fields_ = [
        ("rows_used", ctypes.c_int64),
        ("capacity", ctypes.c_int64),
        ("variant", ctypes.c_int64),
        ("last_variant", ctypes.c_int64),
        ("slot", ctypes.c_int64),
        ("in_chat", ctypes.c_int),
    ]


class SpecMetrics(ctypes.Structure):
    _fields_ = [
        ("spec_drafted", ctypes.c_int64),
        ("spec_accepted", ctypes.c_int64),
        ("spec_verify_steps", ctypes.c_int64),
        ("prediction_accepted", ctypes.c_int64),
        ("prediction_rejected", ctypes.c_int64),
    ]


# int callback(const char* piece, size_t len, void* user_data)
TOKEN_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t, ctypes.c_void_p)

_vp = ctypes.c_void_p
_st = ctypes.c_int
_PROTOTYPES = {
    "npullm_version": (ctypes.c_char_p, []),
    "npullm_abi_version": (ctypes.c_int, []),
    "npullm_last_error": (ctypes.c_char_p, []),
    "npullm_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "npullm_free": (None, [_vp]),
    "npullm_model_default_params": (ModelParams, []),
    "npullm_model_open": (_st, [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(_vp)]),
    "npullm_model_free": (None, [_vp]),
    "npullm_model_get_info": (_st, [_vp, ctypes.POINTER(ModelInfo)]),
    "npullm_tokenize": (_st, [_vp, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(c_int32_p), ctypes.POINTER(ctypes.c_size_t)]),
    "npullm_detokenize": (_st, [_vp, c_int32_p, ctypes.c_size_t, ctypes.POINTER(_vp)]),
    "npullm_apply_chat_template": (_st, [_vp, ctypes.POINTER(ChatMessage), ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_vp)]),
    "npullm_session_create": (_st, [_vp, ctypes.POINTER(_vp)]),
    "npullm_session_free": (None, [_vp]),
    "npullm_sampling_default": (Sampling, []),
    "npullm_finish_reason_name": (ctypes.c_char_p, [ctypes.c_int]),
    "npullm_result_free": (None, [ctypes.POINTER(Result)]),
    "npullm_generate": (_st, [_vp, ctypes.c_char_p, ctypes.POINTER(Sampling), TOKEN_CALLBACK, _vp, ctypes.POINTER(Result)]),
    "npullm_generate_tokens": (_st, [_vp, c_int32_p, ctypes.c_size_t, ctypes.POINTER(Sampling), TOKEN_CALLBACK, _vp, ctypes.POINTER(Result)]),
    "npullm_chat_start": (_st, [_vp, ctypes.c_char_p]),
    "npullm_chat": (_st, [_vp, ctypes.c_char_p, ctypes.POINTER(Sampling), TOKEN_CALLBACK, _vp, ctypes.POINTER(Result)]),
    "npullm_session_reset": (_st, [_vp]),
    "npullm_session_history": (_st, [_vp, ctypes.POINTER(ctypes.POINTER(ChatMessage)), ctypes.POINTER(ctypes.c_size_t)]),
    "npullm_messages_free": (None, [ctypes.POINTER(ChatMessage), ctypes.c_size_t]),
    "npullm_session_set_history": (_st, [_vp, ctypes.POINTER(ChatMessage), ctypes.c_size_t]),
    "npullm_session_conversation_ids": (_st, [_vp, ctypes.POINTER(c_int32_p), ctypes.POINTER(ctypes.c_size_t)]),
    "npullm_session_kv_state": (_st, [_vp, ctypes.POINTER(KvState)]),
    "npullm_session_last_metrics": (_st, [_vp, ctypes.POINTER(Metrics)]),
    "npullm_session_save": (_st, [_vp, ctypes.c_char_p]),
    "npullm_session_load": (_st, [_vp, ctypes.c_char_p]),
    "npullm_session_set_structured": (_st, [_vp, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
    "npullm_structured_check": (_st, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
    "npullm_model_open_speculative": (_st, [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.c_int64, ctypes.c_char_p, ctypes.POINTER(_vp)]),
    "npullm_session_set_speculative": (_st, [_vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p]),
    "npullm_speculative_check": (_st, [_vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p]),
    "npullm_session_last_spec_metrics": (_st, [_vp, ctypes.POINTER(SpecMetrics)]),
}


def _candidates():
    """Where libnpullm may be: $NPULLM_LIBRARY, the lib folder this package was installed under
    (<libdir>/python3/dist-packages/npullm), then the dynamic linker's search path."""
    env = os.environ.get("NPULLM_LIBRARY")
    if env:
        return [env]
    here = Path(__file__).resolve().parent
    out = []
    if len(here.parents) > 2:
        out.append(str(here.parents[2] / f"libnpullm.so.{NPULLM_ABI_VERSION}"))
    out.append(f"libnpullm.so.{NPULLM_ABI_VERSION}")
    return out


def load():
    errors = []
    for path in _candidates():
        if "/" in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        abi = lib.npullm_abi_version()
        if abi != NPULLM_ABI_VERSION:
            raise ImportError(f"{path} has ABI {abi}, this npullm module needs ABI {NPULLM_ABI_VERSION}")
        return lib
    raise ImportError("cannot load libnpullm (set NPULLM_LIBRARY to its path): " + "; ".join(errors))

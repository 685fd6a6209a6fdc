// The server's request layer: a JSON body -> a validated /v1/chat/completions or /v1/completions
// request (parse_request), or an ApiError. Byte 0 picks chat or completions; the rest is the body.
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz_util.h"
#include "server/openai_request.h"

using namespace npullm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1u;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  server::RequestLimits limits;
  limits.n_vocab = 32000;
  fuzz::expect_ok_or_error([&] {
    const auto r = server::parse_request(body, chat, limits);
    if (const auto* e = std::get_if<server::ApiError>(&r)) {
      // As the server sends it (http_server.cpp): invalid UTF-8 echoed from the body is replaced.
      (void)e->body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (e->status < 400 || e->status > 599 || e->message.empty()) __builtin_trap();
    } else {
      const auto& req = std::get<server::ApiRequest>(r);
      if (const auto* c = std::get_if<server::CompletionRequest>(&req.body))
        for (int32_t id : c->prompt_ids)
          if (id < 0 || id >= limits.n_vocab) __builtin_trap();  // validated ids are in range
    }
  });
  return 0;
}

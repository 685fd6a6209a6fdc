// npullm logits: one prefill of the given token ids; writes float32 logits [n_tokens][n_vocab].
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"

namespace npullm::cli {

namespace {

struct LogitsOptions {
  std::string model, tokens, out;
  RuntimeOptions rt;
};

int run(LogitsOptions& o) {
  const std::vector<int32_t> ids = parse_token_ids(o.tokens);
  npuw::RuntimeConfig cfg = o.rt.resolve();
  // One prefill of all the tokens unless the user chose a chunk size.
  if (!o.rt.chunk_given) cfg.prefill_chunk = static_cast<int64_t>(ids.size());
  cfg.all_logits = true;  // prefill blobs that compute every token's logits, not just the last one's
  npuw::LlmRuntime rt(o.model, cfg);
  std::vector<float> logits;
  rt.prefill(ids, &logits);
  std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!f) fail("cannot write {}", o.out);
  fmt::print(stderr, "npullm: wrote {} x {} float32 logits to {}\n", ids.size(), rt.n_vocab(), o.out);
  return 0;
}

}  // namespace

void add_logits(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "prefill token ids and write the float32 logits after each ([n_tokens][n_vocab])");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--tokens", o->tokens, "comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("--out", o->out, "output file (raw little-endian float32)")->required();
  o->rt.add_to(cmd);
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli

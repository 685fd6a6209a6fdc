// npullm tokenize: print the token ids of a text, with the model's tokenizer or a HF tokenizer.json.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "common/error.h"
#include "formats/gguf.h"
#include "genai/tokenizer/hf_tokenizer_json.h"
#include "genai/tokenizer/tokenizer.h"

namespace npullm::cli {

namespace {

struct TokenizeOptions {
  std::string model, tokenizer_json, text;
  bool no_special = false, add_bos = false, pieces = false;
};

int run(const TokenizeOptions& o) {
  if (o.model.empty() && o.tokenizer_json.empty()) fail("give a model (-m FILE.gguf) or --tokenizer-json FILE");
  genai::Vocab vocab = o.tokenizer_json.empty() ? genai::Vocab::from_gguf(*GgufFile::open(o.model))
                                                : genai::load_hf_tokenizer(o.tokenizer_json);
  const genai::Tokenizer tok(std::move(vocab));
  const std::vector<int32_t> ids = tok.encode(o.text, o.add_bos, /*parse_special=*/!o.no_special);
  if (o.pieces) {
    for (int32_t id : ids) fmt::print("{:>7} {:?}\n", id, tok.token_to_piece(id));
  } else {
    fmt::print("{}\n", fmt::join(ids, " "));
  }
  return 0;
}

}  // namespace

void add_tokenize(CLI::App& app, Actions& actions) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", o->model, "GGUF model (or vocab-only GGUF) whose tokenizer to use")->check(CLI::ExistingFile);
  cmd->add_option("--tokenizer-json", o->tokenizer_json, "HF tokenizer.json (tokenizer_config.json beside it is read too)")->check(CLI::ExistingFile);
  cmd->add_flag("--no-special", o->no_special, "do not turn special-token text (e.g. <|im_start|>) into special tokens");
  cmd->add_flag("--bos", o->add_bos, "add BOS when the tokenizer asks for it");
  cmd->add_flag("--pieces", o->pieces, "print one token per line with its text");
  cmd->add_option("text", o->text, "the text")->required();
  actions.push_back([cmd, o]() -> int { return cmd->parsed() ? run(*o) : -1; });
}

}  // namespace npullm::cli

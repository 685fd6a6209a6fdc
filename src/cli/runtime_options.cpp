#include <sstream>

#include "cli/commands.h"
#include "common/error.h"

namespace npullm::cli {

void RuntimeOptions::add_to(CLI::App* cmd) {
  cmd->add_option("--prefill-chunk", cfg.prefill_chunk, "tokens per prefill blob run (P)")
      ->capture_default_str()
      ->each([this](const std::string&) { chunk_given = true; });
  cmd->add_option("--variants", variants, "generate variant capacities, e.g. 64,128,256 (default: from --max-prompt-len + --min-response-len)");
  cmd->add_option("--max-prompt-len", cfg.max_prompt_len, "MAX_PROMPT_LEN for the default capacities")->capture_default_str();
  cmd->add_option("--min-response-len", cfg.min_response_len, "MIN_RESPONSE_LEN for the default capacities")->capture_default_str();
  cmd->add_option("-t,--threads", cfg.threads, "worker threads (0 = all)")->capture_default_str();
  cmd->add_option("--cache-dir", cfg.cache_dir, "blob cache folder (default $NPULLM_CACHE_DIR, $XDG_CACHE_HOME/npullm or ~/.cache/npullm)");
  cmd->add_flag("--no-cache", no_cache, "compile every blob and do not touch the cache");
}

npuw::RuntimeConfig RuntimeOptions::resolve() const {
  npuw::RuntimeConfig out = cfg;
  out.use_cache = !no_cache;
  if (!variants.empty()) {
    std::stringstream ss(variants);
    std::string item;
    while (std::getline(ss, item, ',')) {
      try {
        size_t used = 0;
        const long long v = std::stoll(item, &used);
        if (used != item.size() || v < 1) throw std::invalid_argument(item);
        out.variants.push_back(v);
      } catch (const std::exception&) {
        fail("--variants: '{}' is not a positive whole number (expected e.g. 64,128,256)", item);
      }
    }
  }
  return out;
}

}  // namespace npullm::cli

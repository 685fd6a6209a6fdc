#include <fmt/format.h>

#include <cctype>
#include <sstream>

#include "cli/commands.h"
#include "common/error.h"
#include "common/trace.h"
#include "npuw/cache_admin.h"

namespace npullm::cli {

std::vector<int32_t> parse_token_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("--tokens: '{}' is not a token id (expected e.g. 1,2,3)", item);
    }
  }
  if (ids.empty()) fail("--tokens: no token ids given");
  return ids;
}


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
  cmd->add_option("--cache-max-size", cache_max_size,
                  "bound on the whole cache, e.g. 10G: other models' entries go first, least recently used (default: a tenth of the "
                  "filesystem, at most 64 GiB)");
  cmd->add_option("--kv-type", kv_type, "K/V cache element type: f16, f32 or q8_0 (q8_0 needs a head size that is a multiple of 32)")
      ->capture_default_str();
  cmd->add_flag("--swa-full", swa_full,
                "sliding-window layers (Gemma 3's local ones) keep full-length K/V like the global layers, instead of "
                "a ring of window + prefill chunk rows (same logits, more memory)");
  cmd->add_flag("--unfused", unfused,
                "compile every op as its own stage (default: norms, gate functions, RoPE and residual adds are folded "
                "into the op that reads them and fused projections split per slice, fewer stages per token, the same "
                "logits)");
  cmd->add_flag("--no-repack", no_repack,
                "keep every weight as the GGUF file stores it (default: int8 matmul weights are repacked into the "
                "layout the CPU reads fastest, once, and kept beside the blob cache)");
  cmd->add_option("--trace", trace_options().file,
                  "write an execution trace (Chrome trace-event JSON, for ui.perfetto.dev) to FILE when the command ends "
                  "(serve: also on SIGUSR1): blob runs, stages per thread, barrier waits, scheduler steps, requests");
  cmd->add_option("--trace-events", trace_options().events, "spans the trace keeps, the newest (about 800 per token of a 22-layer model)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}))  // (about 100 bytes each, held in memory)
      ->each([](const std::string&) { trace_options().events_given = true; });
  cmd->add_flag("--no-huge-pages", no_huge_pages,
                "map weights from the model and packed files (shared page cache, lower RSS) instead of copying them "
                "into memory on 2 MiB transparent huge pages, which decodes faster");
}

TraceOptions& trace_options() {
  static TraceOptions o;
  return o;
}

void write_trace() {
  const std::string& file = trace_options().file;
  if (file.empty()) return;
  try {
    const size_t n = trace::write(file);
    const uint64_t all = trace::recorded();
    fmt::print(stderr, "npullm: trace: {} spans written to {}{} (open it in ui.perfetto.dev)\n", n, file,
               all > n ? fmt::format(", the newest of {} (--trace-events)", all) : "");
  } catch (const std::exception& e) {  // (called from a destructor: nothing may escape)
    fmt::print(stderr, "npullm: warning: {}\n", e.what());
  }
}

GgmlType parse_kv_type(const std::string& text) {
  std::string low = text;
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (low == "f16") return GgmlType::F16;
  if (low == "f32") return GgmlType::F32;
  if (low == "q8_0") return GgmlType::Q8_0;
  fail("--kv-type: '{}' is not a supported K/V cache type (f16, f32 or q8_0)", text);
}

const char* kv_type_option(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "f32";
    case GgmlType::Q8_0: return "q8_0";
    default: return "f16";
  }
}

npuw::RuntimeConfig RuntimeOptions::resolve() const {
  npuw::RuntimeConfig out = cfg;
  out.use_cache = !no_cache;
  if (!cache_max_size.empty()) out.cache_max_bytes = npuw::parse_size(cache_max_size);
  out.repack_weights = !no_repack;
  out.swa_ring = !swa_full;
  out.fuse_stages = !unfused;
  out.huge_pages = !no_huge_pages;
  out.kv_type = parse_kv_type(kv_type);
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

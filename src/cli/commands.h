// Subcommand registration. Each add_* adds its CLI11 subcommand and pushes the action to run when
// that subcommand was chosen (the action returns the exit code, or -1 when not chosen).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <npullm/llm_pipeline.h>
#include <vector>

#include "npuw/llm_runtime.h"

namespace npullm::cli {

using Actions = std::vector<std::function<int()>>;

void add_run(CLI::App& app, Actions& actions);
void add_chat(CLI::App& app, Actions& actions);
void add_compile(CLI::App& app, Actions& actions);
void add_inspect(CLI::App& app, Actions& actions);
void add_logits(CLI::App& app, Actions& actions);
void add_tokenize(CLI::App& app, Actions& actions);
void add_bench(CLI::App& app, Actions& actions);
void add_synth(CLI::App& app, Actions& actions);
void add_chat_template(CLI::App& app, Actions& actions);
void add_serve(CLI::App& app, Actions& actions);
void add_cache(CLI::App& app, Actions& actions);
void add_grammar(CLI::App& app, Actions& actions);

// Options shared by every command that builds a runtime (chunk, variants, threads, cache).
struct RuntimeOptions {
  npuw::RuntimeConfig cfg;
  std::string variants;  // "64,128,256"
  std::string kv_type = "f16";  // --kv-type: f16, f32 or q8_0 (any case)
  bool no_cache = false;
  std::string cache_max_size;  // --cache-max-size: "10G", ...; empty: the default bound
  bool no_repack = false;  // --no-repack: weights stay in GGUF's row layout
  bool swa_full = false;   // --swa-full: sliding-window layers keep C_max rows, not a ring
  bool unfused = false;    // --unfused: no compiler::fuse_stages
  bool no_huge_pages = false;  // --no-huge-pages: weights stay mapped from their files
  bool chunk_given = false;  // --prefill-chunk was on the command line
  void add_to(CLI::App* cmd);
  npuw::RuntimeConfig resolve() const;  // parses `variants` and `kv_type`, applies no_cache
};

// --trace FILE and --trace-events N (RuntimeOptions adds them to every command that builds a
// runtime): main() starts the trace after parsing and writes FILE when the command ends, and
// `serve` also on SIGUSR1 (common/trace.h).
struct TraceOptions {
  std::string file;
  size_t events = 250'000;
  bool events_given = false;  // --trace-events was on the command line
};
TraceOptions& trace_options();
// Writes the trace to --trace's file, if given, saying where on stderr (errors are reported, not thrown).
void write_trace();

// "f16" / "f32" / "q8_0", in any case, to the GGML type; an npullm::Error naming anything else.
GgmlType parse_kv_type(const std::string& text);
const char* kv_type_option(GgmlType t);  // back: "f16", "f32", "q8_0"

// Options of the commands that generate: runtime + sampling + stop rules + context policy.
struct GenerateOptions {
  RuntimeOptions rt;
  GenerationConfig gen;
  std::string policy = "shift";
  int64_t keep = -1;
  std::string chat_template;
  // Speculative decoding: --spec lookup|draft|off, --spec-k K, --draft-model FILE, --prediction FILE.
  std::string spec = "off";
  int64_t spec_k = 7;
  std::string draft_model, prediction_file;
  void add_to(CLI::App* cmd);
  PipelineConfig pipeline_config() const;
  // gen with the speculation settings (and the prediction file's text) filled in.
  GenerationConfig generation_config() const;
};

// Structured output: --json-schema FILE | --grammar FILE | --regex RE | --json-object, and with
// `with_trigger` --grammar-trigger TEXT (cli/structured_options.cpp).
struct StructuredOptions {
  std::string json_schema_file, grammar_file, regex, trigger;
  bool json_object = false;
  void add_to(CLI::App* cmd, bool with_trigger = true);
  StructuredOutput resolve() const;  // reads the files; kind None when no option was given
};

// npullm bench --json-schema FILE (cli/bench_grammar.cpp): structured output's costs.
int bench_grammar(const std::string& model, const std::string& schema_file, int64_t n_gen, const PipelineConfig& cfg, bool json);

// npullm bench --spec lookup|draft (cli/bench_spec.cpp): speculative decoding's costs and gains.
struct SpecBenchOptions {
  std::string mode = "lookup";  // lookup | draft | oracle
  int64_t k = 7;
  bool fixed_k = false;        // --spec-fixed-k: no adaptive K
  std::vector<double> alphas;  // --spec-oracle A,..: oracle drafts of known acceptance
  std::string prompt = "Once upon a time";
  std::string prediction_file;
  double edit = -1;            // --spec-edit F: the prediction is the model's own greedy reply, F of its tokens changed
  std::string draft_model;
  int64_t n_gen = 128, repetitions = 3;
  bool json = false;
};
int bench_spec(const std::string& model, const SpecBenchOptions& so, const npuw::RuntimeConfig& rc, const PipelineConfig& pc);

// "1,2,3" -> {1, 2, 3}; an npullm::Error naming the first item that is not a token id.
std::vector<int32_t> parse_token_ids(const std::string& text);

// The `metrics` object of --json output.
nlohmann::json metrics_json(const GenerationMetrics& m);

}  // namespace npullm::cli

// npuw: runs a dynamic, stateful LLM as fixed-shape blobs.
//
// From one model it compiles (or loads from the blob cache)
//   - a prefill blob: P new tokens at a time (the chunk), attending a state of C_max rows, that
//     computes the logits of the run's last real token only (RuntimeConfig::all_logits: of every token);
//   - generate variants: one token at a time, attending C rows, for each capacity C in the list.
// It owns one K/V allocation of C_max rows per state variable. Every blob's state I/O is bound to
// the front of that allocation (a variant of capacity C sees rows [0, C)), so switching variants
// copies nothing and each token's K/V is written straight into its row by the blob itself.
// All blobs run on one queue, one at a time, so they also share one scratch arena (the driver's
// ScratchArena), as big as the largest blob's.
//
// Per run it fills the inputs the model graph declares (model/llama_graph.h): token ids, positions,
// the cache row each token writes, and the additive attention mask. A prompt longer than P is run
// in chunks; the last chunk is padded, and padded positions write nowhere and attend nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "driver/driver.h"
#include "formats/gguf.h"
#include "model/hparams.h"
#include "npuw/weights_bank.h"

namespace npullm::npuw {

struct RuntimeConfig {
  int64_t prefill_chunk = 64;          // P
  bool prefill_ladder = true;          // also compile prefill blobs of P/4, P/16, ... (>= 8) for short tails
  std::vector<int64_t> variants;       // generate capacities; empty = defaults (see default_variants)
  int64_t max_prompt_len = 1024;       // MAX_PROMPT_LEN
  int64_t min_response_len = 128;      // MIN_RESPONSE_LEN
  // Prefill blobs compute the logits of every token, so prefill(ids, &all_logits) works. Off (the
  // default), they compute the last token's only: [1, n_vocab] instead of [P, n_vocab] per run.
  bool all_logits = false;
  int threads = 0;                     // 0 = all hardware threads
  std::string cache_dir;               // empty = BlobCache::default_dir()
  bool use_cache = true;
  // Element type of the K/V state: F16 (default, as llama.cpp), F32, or Q8_0 (blocks of 32 along
  // each head: the model's head size must be a multiple of 32). Anything else is refused.
  GgmlType kv_type = GgmlType::F16;
  // Store MatMul weights in the layout the device reads fastest (formats/weight_layout.h), packed
  // once and kept beside the blob cache; false keeps every weight as GGUF stores it.
  bool repack_weights = true;
  // Resolved from the device when repack_weights is on: the weight types stored as Panels16.
  std::vector<GgmlType> panels16_types;
};

struct RuntimeStats {
  int64_t compiled_blobs = 0;          // compiled in this process
  int64_t cached_blobs = 0;            // loaded from the blob cache
  int64_t prefill_chunks = 0;
  int64_t prefill_tokens = 0;
  int64_t padded_positions = 0;        // padding tokens computed by prefill chunks
  int64_t decode_tokens = 0;
  std::set<int64_t> variants_used;     // capacities of the generate variants that ran
  int64_t kv_bytes_copied = 0;         // K/V bytes moved by the runtime itself (only context shifts move any)
  int64_t context_shifts = 0;
  int64_t kv_capacity = 0;             // C_max
  int64_t scratch_bytes = 0;           // the one scratch arena every blob shares (the largest blob's need)
  int64_t kv_row_bytes = 0;            // bytes one position takes in all state variables together
  int64_t packed_weights_built = 0;    // weights packed into another layout in this process
  int64_t packed_weights_cached = 0;   // packed weights mapped from the cache
};

// Capacities used when none are given: powers of two from 128 up to, and then exactly,
// min(max_prompt_len + min_response_len, n_ctx_train).
std::vector<int64_t> default_variants(int64_t max_prompt_len, int64_t min_response_len, int64_t n_ctx_train);

// The blobs a configuration needs: "prefill" (seq = P, ctx = C_max) and "generate-<C>" (seq = 1).
struct BlobSpec {
  enum Kind { Forward, Rerotate } kind = Forward;  // the model graph, or the context-shift key rotation
  std::string name;
  int64_t seq = 0, capacity = 0;
  bool last_row_logits = false;      // Forward: logits of one chosen row (input logit_rows), not of all seq
  GgmlType kv_type = GgmlType::F16;
  std::vector<GgmlType> panels16_types;  // MatMul weight types stored as Panels16
  std::string cache_config() const;  // what the blob cache keys on besides the model
};
std::vector<BlobSpec> blob_specs(const RuntimeConfig& cfg);  // cfg.variants must be resolved

// Compiles every blob of `cfg` for the model (the `npullm compile` command); returns name -> ELF bytes.
std::vector<std::pair<std::string, std::vector<uint8_t>>> compile_blobs(const std::string& model_path, RuntimeConfig cfg);

class LlmRuntime {
 public:
  LlmRuntime(const std::string& model_path, RuntimeConfig cfg);
  ~LlmRuntime();

  const GgufFile& gguf() const { return *gguf_; }
  const model::HParams& hparams() const { return hp_; }
  const RuntimeConfig& config() const { return cfg_; }
  const std::vector<int64_t>& variants() const { return cfg_.variants; }
  int64_t n_vocab() const { return hp_.n_vocab; }
  int64_t capacity() const { return cfg_.variants.back(); }  // C_max
  int64_t position() const { return pos_; }                  // rows of the state in use
  const RuntimeStats& stats() const { return stats_; }
  void clear_variants_used() { stats_.variants_used.clear(); }  // start a new window of variants_used
  std::string device_name() const;
  int device_threads() const;

  // Runs `ids` through the prefill blob at the current position (in chunks of P) and returns the
  // logits after the last one (valid until the next call). If `all_logits` is given, it receives
  // the logits after every token, [ids.size()][n_vocab]; that needs config().all_logits, else it
  // throws (before running anything). Throws if the state would overflow.
  std::span<const float> prefill(std::span<const int32_t> ids, std::vector<float>* all_logits = nullptr);
  // Runs one token through the smallest generate variant that holds position()+1 rows.
  std::span<const float> decode(int32_t id);
  // Forgets the state (the K/V rows are simply no longer attended).
  void reset() { pos_ = 0; }
  // Forgets rows [n_keep, n_keep + n_discard): later rows move down by n_discard and their keys are
  // re-rotated to their new positions, so positions stay contiguous and nothing is re-prefilled.
  // The moved bytes are counted in kv_bytes_copied.
  void shift(int64_t n_keep, int64_t n_discard);

  // Variable state access (DESIGN rule 4): the names of the state variables, and a copy of the
  // first position() rows of one of them (row-major, converted to F32 whatever the K/V type).
  std::vector<std::string> state_names() const;
  std::vector<float> get_state(const std::string& name) const;

 private:
  struct Slot;  // one loaded blob with its bound inputs
  void load_blobs();
  Slot& variant_for(int64_t rows);
  void fill_step(Slot& s, std::span<const int32_t> ids, int64_t first_pos);

  RuntimeConfig cfg_;
  std::unique_ptr<GgufFile> gguf_;
  model::HParams hp_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<GgufWeightsBank> bank_;  // before the blobs: they point into its packed weights
  std::unique_ptr<driver::Queue> queue_;
  std::unique_ptr<Slot> prefill_;                     // P tokens
  std::vector<std::unique_ptr<Slot>> prefill_tails_;  // P/4, P/16, ... tokens
  std::unique_ptr<Slot> rerotate_;
  struct StateRegion {
    std::string name;
    GgmlType type = GgmlType::F32;
    int64_t row_elems = 0;        // elements of one row (position)
    size_t offset = 0, bytes = 0;  // of C_max rows in kv_
  };
  std::vector<StateRegion> regions_;  // one per state variable, C_max rows each
  std::vector<std::unique_ptr<Slot>> generate_;
  driver::AlignedBuffer kv_;
  std::shared_ptr<driver::ScratchArena> scratch_;  // shared by every blob (they run one at a time on queue_)
  int64_t pos_ = 0;
  RuntimeStats stats_;
};

}  // namespace npullm::npuw

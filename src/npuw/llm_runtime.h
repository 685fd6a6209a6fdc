// npuw: runs a dynamic, stateful LLM as fixed-shape blobs.
//
// From one model it compiles (or loads from the blob cache)
//   - a prefill blob: P new tokens at a time (the chunk), attending a state of C_max rows, that
//     computes the logits of the run's last real token only (RuntimeConfig::all_logits: of every token);
//   - generate variants: for each batch size B and each capacity C, B tokens (one per sequence)
//     at a time, each attending C rows of its own sequence;
//   - verify blobs (RuntimeConfig::verify_sizes, speculative decoding): S tokens x capacity C, the
//     same graph as a batched generate blob, whose rows may be one slot's next token and the
//     guesses after it (each row attends its slot's rows up to its own position: causal inside
//     the run), every row's logits out. A rejected guess is given up by moving the slot's
//     position back (rollback): no K/V is copied.
// Sequence slots: the runtime holds `parallel` sequences at once. It owns one K/V allocation per
// state variable of parallel x C_max rows, slot s owning rows [s*C_max, (s+1)*C_max). Every blob's
// state I/O is bound to the whole allocation; a token names its slot through its cache row (where
// its K/V is written) and its kv_base (where its attention window starts), so switching variants
// or batch sizes copies nothing and each token's K/V is written straight into its row by the blob.
// A batched step reads the weights once for up to B sequences' next tokens.
// All blobs run on one queue, one at a time, so they also share one scratch arena (the driver's
// ScratchArena), as big as the largest blob's.
//
// Per run it fills the inputs the model graph declares (model/llama_graph.h): token ids, positions,
// the cache row each token writes, its window's first row, and the additive attention mask. A
// prompt longer than P is run in chunks; the last chunk is padded, and padded positions (and the
// padded rows of a batch) write nowhere and attend nothing.
//
// The single-sequence calls (prefill, decode, reset, shift, position without a slot) act on slot 0.
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
  int64_t parallel = 1;                // sequence slots, each with C_max rows of K/V
  // Batch sizes of the generate blobs; empty = 1, 2, 4, ... below `parallel`, and `parallel`.
  std::vector<int64_t> batch_sizes;
  // Rows of the verify blobs (speculative decoding): for each size S and each capacity C, a blob
  // of S tokens that may belong to one slot (a guessed run, causal inside it) or to several, every
  // row's logits out. Empty: none (the default). With sliding-window rings S must be <= P.
  std::vector<int64_t> verify_sizes;
  int64_t max_prompt_len = 1024;       // MAX_PROMPT_LEN
  int64_t min_response_len = 128;      // MIN_RESPONSE_LEN
  // Prefill blobs compute the logits of every token, so prefill(ids, &all_logits) works. Off (the
  // default), they compute the last token's only: [1, n_vocab] instead of [P, n_vocab] per run.
  bool all_logits = false;
  int threads = 0;                     // 0 = all hardware threads
  std::string cache_dir;               // empty = BlobCache::default_dir()
  bool use_cache = true;
  // Bound on the whole cache folder (blobs and packed weights of every model), enforced at each
  // start by removing other models' folders, least recently used first; 0: a tenth of the
  // filesystem, at most 64 GiB (npuw/cache_admin.h).
  uint64_t cache_max_bytes = 0;
  // Element type of the K/V state: F16 (default, as llama.cpp), F32, or Q8_0 (blocks of 32 along
  // each head: the model's head size must be a multiple of 32). Anything else is refused.
  GgmlType kv_type = GgmlType::F16;
  // Store MatMul weights in the layout the device reads fastest (formats/weight_layout.h), packed
  // once and kept beside the blob cache; false keeps every weight as GGUF stores it.
  bool repack_weights = true;
  // Resolved from the device when repack_weights is on: the weight types stored as Panels16.
  std::vector<GgmlType> panels16_types;
  // Sliding-window layers (Gemma 3's local layers) keep a ring of K/V rows per slot: the window,
  // one prefill chunk and an alignment margin (swa_ring_rows), addressed modulo its size, instead
  // of C_max rows. Off: they keep C_max rows like the global layers (the same logits, bit for bit).
  bool swa_ring = true;
  int64_t ring_rows = 0;  // resolved at start: rows of a slot's ring (0: no rings)
  // Compile with fused stages (compiler::fuse_stages: norms, gate functions and RoPE folded into
  // the op that reads them): fewer barriers per token, the same logits bit for bit.
  bool fuse_stages = true;
  // Weights, the K/V cache and the scratch arena on transparent huge pages (common/page_buffer.h):
  // weights are copied into anonymous memory instead of being mapped from the GGUF and packed
  // files, so the process holds them itself (its RSS grows by the model's size) where a mapping
  // shares the page cache. Decode streams every weight per token; 2 MiB pages spare the TLB
  // misses and prefetcher restarts of 4 KiB ones. False keeps the mappings.
  bool huge_pages = true;
  // The memory the model file must fit in, or it is refused before it is mapped (a model larger
  // than memory would read its weights from disk for every token); 0: the machine's physical
  // memory (MemTotal of /proc/meminfo).
  uint64_t memory_bytes = 0;
};

// Rows of one slot's ring for a window of n_swa positions and prefill chunks of up to P tokens:
// a chunk writes P rows while its first token still sees n_swa - 1 earlier ones, and the keys are
// visited from a row that is a multiple of 16 (cpu::attention's lane rule), so up to 15 more.
int64_t swa_ring_rows(int64_t n_swa, int64_t prefill_chunk);

struct RuntimeStats {
  int64_t compiled_blobs = 0;          // compiled in this process
  int64_t cached_blobs = 0;            // loaded from the blob cache
  int64_t prefill_chunks = 0;
  int64_t prefill_tokens = 0;
  int64_t padded_positions = 0;        // padding tokens computed by prefill chunks
  int64_t decode_tokens = 0;
  std::set<int64_t> variants_used;     // capacities of the generate variants that ran
  int64_t kv_bytes_copied = 0;         // K/V bytes moved by the runtime itself (context shifts, copy_rows)
  int64_t context_shifts = 0;
  int64_t kv_capacity = 0;             // C_max
  int64_t scratch_bytes = 0;           // the one scratch arena every blob shares (the largest blob's need)
  int64_t kv_row_bytes = 0;            // bytes one position takes in the full-length state variables together
  int64_t kv_ring_rows = 0;            // rows of each sliding-window layer's ring per slot (0: no rings)
  int64_t kv_ring_bytes = 0;           // bytes of one slot's rings, all such layers together (fixed)
  int64_t kv_bytes = 0;                // the whole K/V allocation: slots x (C_max x kv_row_bytes + kv_ring_bytes)
  int64_t packed_weights_built = 0;    // weights packed into another layout in this process
  int64_t packed_weights_cached = 0;   // packed weights read or mapped from the cache
  int64_t huge_page_weight_bytes = 0;  // weight bytes held on huge pages (RuntimeConfig::huge_pages)
  int64_t slots = 1;                   // sequence slots (RuntimeConfig::parallel)
  int64_t batched_steps = 0;           // decode steps that ran more than one sequence
  int64_t batch_rows = 0;              // sequences' tokens run by decode_batch (real rows)
  int64_t padded_rows = 0;             // rows of batched blobs that held no sequence
  std::set<int64_t> batch_sizes_used;  // B of the generate blobs that ran
  int64_t verify_steps = 0;           // verify() / verify_batch() runs
  int64_t verify_rows = 0;            // tokens they ran (real rows)
  int64_t verify_padded_rows = 0;     // rows of verify blobs that held no token
  int64_t rolled_back_rows = 0;       // rows given up by rollback() (rejected guesses): no byte moved
  // The last decode step: blob batch x capacity and its real rows (for a live view).
  int64_t last_batch = 0, last_capacity = 0, last_active = 0;
};

// Capacities used when none are given: powers of two from 128 up to, and then exactly,
// min(max_prompt_len + min_response_len, n_ctx_train).
std::vector<int64_t> default_variants(int64_t max_prompt_len, int64_t min_response_len, int64_t n_ctx_train);

// Batch sizes used when none are given: 1, 2, 4, ... below `parallel`, then `parallel`.
std::vector<int64_t> default_batch_sizes(int64_t parallel);

// The blobs a configuration needs: "prefill" (seq = P, ctx = C_max), "generate-<C>" (seq = 1) and
// "generate-b<B>-<C>" (seq = B); every one's state holds rows = parallel x C_max.
struct BlobSpec {
  enum Kind { Forward, Rerotate } kind = Forward;  // the model graph, or the context-shift key rotation
  std::string name;
  int64_t seq = 0, capacity = 0;
  int64_t rows = 0;                  // state rows: every slot's region
  int64_t ring = 0, ring_rows = 0;   // sliding-window rings: rows per slot and in all (0: none)
  bool last_row_logits = false;      // Forward: logits of one chosen row (input logit_rows), not of all seq
  GgmlType kv_type = GgmlType::F16;
  std::vector<GgmlType> panels16_types;  // MatMul weight types stored as Panels16
  bool fuse_stages = true;
  std::string cache_config() const;  // what the blob cache keys on besides the model
};
std::vector<BlobSpec> blob_specs(const RuntimeConfig& cfg);  // cfg.variants and batch_sizes must be resolved

// One row of a batched decode step: the slot's next token.
struct SlotToken {
  int64_t slot = 0;
  int32_t id = 0;
};

// The tokens one slot runs in a verify step: its next token and the guesses after it.
struct SlotRun {
  int64_t slot = 0;
  std::span<const int32_t> ids;
};

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
  const std::vector<int64_t>& batch_sizes() const { return cfg_.batch_sizes; }
  int64_t n_vocab() const { return hp_.n_vocab; }
  int64_t capacity() const { return cfg_.variants.back(); }  // C_max, per slot
  int64_t slots() const { return cfg_.parallel; }
  int64_t position(int64_t slot = 0) const { return pos_.at(static_cast<size_t>(slot)); }  // rows of the slot in use
  const RuntimeStats& stats() const { return stats_; }
  void clear_variants_used() { stats_.variants_used.clear(); }  // start a new window of variants_used
  std::string device_name() const;
  device::Device::Counters device_counters() const;
  // Sees every task of op code `op` after it ran (device::Device::set_tap): e.g. a mixture of
  // experts' routing tables, for tests that compare expert choices with a reference.
  void set_task_tap(uint32_t op, device::Device::TaskTap tap);  // stages run, and those that ran on several threads
  int device_threads() const;
  // The capacity of the generate variant that holds `rows` rows (what a slot at that length runs in).
  int64_t variant_capacity(int64_t rows) const;

  // Runs `ids` through the prefill blob at the slot's position (in chunks of P) and returns the
  // logits after the last one (valid until the next call). If `all_logits` is given, it receives
  // the logits after every token, [ids.size()][n_vocab]; that needs config().all_logits, else it
  // throws (before running anything). Throws if the slot's state would overflow.
  std::span<const float> prefill(std::span<const int32_t> ids, std::vector<float>* all_logits = nullptr) {
    return prefill_slot(0, ids, all_logits);
  }
  std::span<const float> prefill_slot(int64_t slot, std::span<const int32_t> ids, std::vector<float>* all_logits = nullptr);
  // Runs one token through the smallest generate variant that holds position()+1 rows (slot 0).
  std::span<const float> decode(int32_t id);
  // Runs the next token of each listed slot (distinct slots) in one step of the smallest batch
  // size >= tokens.size() and the smallest capacity that holds the longest of them. Returns the
  // logits, [tokens.size()][n_vocab] in the order given (valid until the next call).
  std::span<const float> decode_batch(std::span<const SlotToken> tokens);
  // Speculative decoding. verify() runs `ids` (the slot's next token and the guesses that follow
  // it) at the slot's position in one run of the smallest verify blob that holds them: their K/V
  // rows are written and every row's logits come back, [ids.size()][n_vocab], row i attending the
  // slot's rows up to its own (causal inside the run). The position moves past all of them;
  // rollback() then gives up the rows of rejected guesses by moving it back (no K/V is copied).
  // verify_batch() does the same for several slots in one run (distinct slots, each its own run
  // length), the logits of run after run in the order given. Throws when no verify blob holds the
  // rows or the slot's capacity would overflow: max_verify_rows() says what fits.
  std::span<const float> verify(int64_t slot, std::span<const int32_t> ids) {
    const SlotRun one{slot, ids};
    return verify_batch({&one, 1});
  }
  std::span<const float> verify_batch(std::span<const SlotRun> runs);
  // The most tokens one verify step can run for a slot now: the largest verify blob, less what
  // would pass the slot's capacity (0: no verify blobs, or the slot is at its end).
  int64_t max_verify_rows(int64_t slot = 0) const;
  // Keeps the slot's first n rows, n <= position: the same as truncate, counted as rolled back.
  void rollback(int64_t slot, int64_t n);
  // Forgets a slot's state (its K/V rows are simply no longer attended).
  void reset(int64_t slot = 0) { truncate(slot, 0); }
  // Keeps a slot's first n rows and forgets the rest (a shared prefix is reused this way). Throws
  // if the slot's sliding-window rings no longer hold the rows a token at position n would see
  // (can_truncate false: keep 0 rows and prefill again).
  void truncate(int64_t slot, int64_t n);
  bool can_truncate(int64_t slot, int64_t n) const;
  // Forgets rows [n_keep, n_keep + n_discard) of a slot: later rows move down by n_discard and their
  // keys are re-rotated to their new positions, so positions stay contiguous and nothing is
  // re-prefilled. The moved bytes are counted in kv_bytes_copied. Throws, changing nothing, when
  // the sliding-window rings lack rows the shifted sequence would see (can_shift false: the kept
  // rows were overwritten; prefill the kept ids again instead).
  void shift(int64_t n_keep, int64_t n_discard, int64_t slot = 0);
  bool can_shift(int64_t n_keep, int64_t n_discard, int64_t slot = 0) const;

  // Variable state access (DESIGN rule 4): the names of the state variables, and a copy of the
  // first position(slot) rows of one of them in a slot (row-major, converted to F32 whatever the K/V type).
  // A sliding-window ring gives the rows of the last min(position, held) positions, oldest first,
  // where `held` is how many of the most recent positions the ring holds.
  std::vector<std::string> state_names() const;
  std::vector<float> get_state(const std::string& name, int64_t slot = 0) const;

  // A slot's K/V rows as bytes, so that a conversation can be saved and resumed without prefilling
  // it again: rows [0, position) of every state variable, one variable after another in state
  // order, as stored (the K/V type's own bytes). state_key() names what such bytes fit: the model
  // (its GGUF header, as the blob cache keys it), the K/V type and every variable's name and row
  // size. Sliding-window rings are not in position order: with them there is nothing to save
  // (an empty result; the conversation is prefilled again instead).
  std::string state_key() const;
  std::vector<uint8_t> save_rows(int64_t slot = 0) const;
  // Makes `bytes` (save_rows' output for n rows, under the same state_key) the slot's first n rows
  // and its position n. False, changing nothing, when they cannot be: rings, n past the capacity,
  // or not the byte count n rows take here.
  bool restore_rows(int64_t slot, int64_t n, std::span<const uint8_t> bytes);
  // Makes slot `from`'s first n rows slot `to`'s first n rows (its position n): a prefix one
  // sequence has run, handed to another (the server's prefix reuse across slots). The bytes are
  // counted in kv_bytes_copied. False, changing nothing, with rings, from == to, or n past the rows
  // `from` holds.
  bool copy_rows(int64_t from, int64_t to, int64_t n);

 private:
  struct Program;  // one loaded blob with its bound inputs
  void load_blobs();
  Program& generate_for(int64_t batch, int64_t rows);
  int64_t max_verify_ = 0;  // rows of the largest verify blob (0: none)
  void check_slot(int64_t slot) const;
  // Sets row i of a program's inputs: token `id` of `slot` at position `pos` (real), or padding.
  // A real token's ring row is recorded as written (ring_pos_) first.
  void fill_row(Program& p, int64_t i, int64_t slot, int32_t id, int64_t pos, bool real);
  // Whether a slot's rings hold every position in [from, to).
  bool ring_holds(int64_t slot, int64_t from, int64_t to) const;
  // The ring half of shift(): each held row moves to the ring row of its new position, and the
  // moved keys' rotation deltas are set in the rerotate blob's positions_swa.
  void shift_rings(int64_t n_keep, int64_t n_discard, int64_t slot);

  RuntimeConfig cfg_;
  std::unique_ptr<GgufFile> gguf_;
  model::HParams hp_;
  std::unique_ptr<device::Device> device_;
  std::unique_ptr<GgufWeightsBank> bank_;  // before the blobs: they point into its packed weights
  std::unique_ptr<driver::Queue> queue_;
  std::unique_ptr<Program> prefill_;                     // P tokens
  std::vector<std::unique_ptr<Program>> prefill_tails_;  // P/4, P/16, ... tokens
  std::unique_ptr<Program> rerotate_;
  struct StateRegion {
    std::string name;
    GgmlType type = GgmlType::F32;
    int64_t row_elems = 0;        // elements of one row (position)
    size_t row_bytes = 0;
    size_t offset = 0, bytes = 0;  // of slots x C_max rows (or slots x ring rows) in kv_
    bool ring = false;             // a sliding-window layer's ring
  };
  std::vector<StateRegion> regions_;  // one per state variable, slots x C_max rows each
  std::vector<std::unique_ptr<Program>> generate_;  // by rows (batch size or verify size), then capacity
  driver::AlignedBuffer kv_;
  std::shared_ptr<driver::ScratchArena> scratch_;  // shared by every blob (they run one at a time on queue_)
  std::vector<int64_t> pos_;                       // rows in use, per slot
  int64_t ring_ = 0;                               // rows of a slot's ring (0: no rings)
  uint64_t model_hash_ = 0;                        // the GGUF header's hash (the blob cache's key)
  std::vector<int64_t> ring_pos_;                  // position each ring row holds (-1: none), slots x ring_
  RuntimeStats stats_;
};

}  // namespace npullm::npuw

#include "npuw/llm_runtime.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "common/error.h"
#include "common/trace.h"
#include "compiler/compiler.h"
#include "device/cpu/cpu_device.h"
#include "formats/ggml_types.h"
#include "model/llama_graph.h"
#include "npuw/blob_cache.h"
#include "npuw/cache_admin.h"
#include "npuw/weights_bank.h"

namespace npullm::npuw {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

std::vector<int64_t> default_variants(int64_t max_prompt_len, int64_t min_response_len, int64_t n_ctx_train) {
  const int64_t total = std::max<int64_t>(1, std::min(max_prompt_len + min_response_len, n_ctx_train));
  std::vector<int64_t> v;
  for (int64_t c = 128; c < total; c *= 2) v.push_back(c);
  v.push_back(total);
  return v;
}

std::vector<int64_t> default_batch_sizes(int64_t parallel) {
  std::vector<int64_t> b;
  for (int64_t n = 1; n < parallel; n *= 2) b.push_back(n);
  b.push_back(std::max<int64_t>(parallel, 1));
  return b;
}

int64_t swa_ring_rows(int64_t n_swa, int64_t prefill_chunk) {
  const int64_t need = n_swa + prefill_chunk + 14;  // (n_swa - 1) + P + 15
  return (need + 15) / 16 * 16;
}

std::string BlobSpec::cache_config() const {
  std::string panels;
  for (GgmlType t : panels16_types) panels += (panels.empty() ? " panels16=" : ",") + std::string(ggml_type_name(t));
  return std::string(compiler::kCompilerVersion) + " " + name + " seq=" + std::to_string(seq) + " ctx=" + std::to_string(capacity) +
         " rows=" + std::to_string(rows) + (ring ? " ring=" + std::to_string(ring) + "x" + std::to_string(ring_rows / ring) : "") +
         (last_row_logits ? " logits=last" : "") + " kv=" + std::string(ggml_type_name(kv_type)) + panels +
         (fuse_stages ? "" : " unfused");
}

std::vector<BlobSpec> blob_specs(const RuntimeConfig& cfg) {
  // Prefill blobs compute the logits of the last real token of a run only, unless every row's
  // logits are asked for (cfg.all_logits). Generate blobs compute every row's (one per sequence).
  const bool last = !cfg.all_logits;
  const GgmlType kv = cfg.kv_type;
  const int64_t cmax = cfg.variants.back(), rows = cfg.parallel * cmax;
  const int64_t ring = cfg.ring_rows, ring_rows = cfg.parallel * ring;
  std::vector<BlobSpec> out{{BlobSpec::Forward, "prefill", cfg.prefill_chunk, cmax, rows, ring, ring_rows, last, kv}};
  // Smaller prefill blobs for the tail of a prompt (P/4, P/16, ... down to 8 tokens), so a short
  // prompt or the last chunk of a long one computes little padding.
  if (cfg.prefill_ladder)
    for (int64_t p = cfg.prefill_chunk / 4; p >= 8; p /= 4)
      out.push_back({BlobSpec::Forward, "prefill-" + std::to_string(p), p, cmax, rows, ring, ring_rows, last, kv});
  for (int64_t b : cfg.batch_sizes)
    for (int64_t c : cfg.variants) {
      const std::string name = b == 1 ? "generate-" + std::to_string(c) : fmt::format("generate-b{}-{}", b, c);
      out.push_back({BlobSpec::Forward, name, b, c, rows, ring, ring_rows, false, kv});
    }
  // Verify blobs: the same graph as a batched generate blob (each row its own slot, position and
  // mask), so a size that is already a batch size needs no blob of its own.
  for (int64_t v : cfg.verify_sizes) {
    if (std::find(cfg.batch_sizes.begin(), cfg.batch_sizes.end(), v) != cfg.batch_sizes.end()) continue;
    for (int64_t c : cfg.variants)
      if (c >= v) out.push_back({BlobSpec::Forward, fmt::format("verify-{}-{}", v, c), v, c, rows, ring, ring_rows, false, kv});
  }
  out.push_back({BlobSpec::Rerotate, "rerotate", rows, rows, rows, ring, ring_rows, false, kv});
  for (BlobSpec& s : out) {
    s.panels16_types = cfg.panels16_types;
    s.fuse_stages = cfg.fuse_stages;
  }
  return out;
}

namespace {

// Checks and completes a configuration against the model.
void resolve_config(RuntimeConfig& cfg, const model::HParams& hp) {
  if (cfg.prefill_chunk < 1) fail("prefill chunk must be at least 1 token (got {})", cfg.prefill_chunk);
  if (cfg.variants.empty()) cfg.variants = default_variants(cfg.max_prompt_len, cfg.min_response_len, hp.n_ctx_train);
  std::sort(cfg.variants.begin(), cfg.variants.end());
  cfg.variants.erase(std::unique(cfg.variants.begin(), cfg.variants.end()), cfg.variants.end());
  if (cfg.variants.front() < 1) fail("generate variant capacities must be at least 1");
  if (cfg.variants.back() > hp.n_ctx_train)
    fail("generate variant capacity {} exceeds the model's context length {}", cfg.variants.back(), hp.n_ctx_train);
  model::check_kv_type(hp, cfg.kv_type);
  if (cfg.parallel < 1 || cfg.parallel > 256) fail("parallel sequences must be between 1 and 256 (got {})", cfg.parallel);
  if (cfg.batch_sizes.empty()) cfg.batch_sizes = default_batch_sizes(cfg.parallel);
  std::sort(cfg.batch_sizes.begin(), cfg.batch_sizes.end());
  cfg.batch_sizes.erase(std::unique(cfg.batch_sizes.begin(), cfg.batch_sizes.end()), cfg.batch_sizes.end());
  if (cfg.batch_sizes.front() != 1 || cfg.batch_sizes.back() < cfg.parallel)
    fail("generate batch sizes must start at 1 and reach the {} parallel sequences", cfg.parallel);
  std::sort(cfg.verify_sizes.begin(), cfg.verify_sizes.end());
  cfg.verify_sizes.erase(std::unique(cfg.verify_sizes.begin(), cfg.verify_sizes.end()), cfg.verify_sizes.end());
  if (!cfg.verify_sizes.empty() && (cfg.verify_sizes.front() < 2 || cfg.verify_sizes.back() > 256))
    fail("verify blob sizes must be between 2 and 256 rows (got {} to {})", cfg.verify_sizes.front(), cfg.verify_sizes.back());
  // A ring only pays when it is shorter than the full length.
  cfg.ring_rows = 0;
  if (cfg.swa_ring && hp.n_swa > 0 && swa_ring_rows(hp.n_swa, cfg.prefill_chunk) < cfg.variants.back())
    cfg.ring_rows = swa_ring_rows(hp.n_swa, cfg.prefill_chunk);
  // A ring holds one prefill chunk beyond the window; a verify run writes as many rows at once.
  if (cfg.ring_rows > 0 && !cfg.verify_sizes.empty() && cfg.verify_sizes.back() > cfg.prefill_chunk)
    fail("verify blobs of {} rows need a prefill chunk of at least as many tokens with sliding-window rings (it is {})",
         cfg.verify_sizes.back(), cfg.prefill_chunk);
}

// The graphs a model needs (forward with every row's logits or chosen rows', rerotate), built on first use.
struct Graphs {
  const model::HParams& hp;
  const GgufFile& f;
  GgmlType kv_type;
  std::unique_ptr<ir::Graph> forward, forward_rows, rerotate;  // one ring setting per runtime
  const ir::Graph& get(const BlobSpec& spec) {
    const bool ring = spec.ring > 0;
    if (spec.kind == BlobSpec::Rerotate) {
      if (!rerotate) rerotate = std::make_unique<ir::Graph>(model::build_rerotate_graph(hp, f, kv_type, ring));
      return *rerotate;
    }
    auto& g = spec.last_row_logits ? forward_rows : forward;
    if (!g) g = std::make_unique<ir::Graph>(model::build_llama_graph(hp, f, kv_type, {.logit_rows = spec.last_row_logits, .swa_ring = ring}));
    return *g;
  }
};

std::vector<uint8_t> compile_spec(Graphs& graphs, const BlobSpec& spec) {
  compiler::CompileOptions opt{spec.name, {{"seq", spec.seq}, {"ctx", spec.capacity}, {"rows", spec.rows}}, spec.panels16_types};
  opt.fuse_stages = spec.fuse_stages;
  if (spec.last_row_logits) opt.symbols["out"] = 1;
  if (spec.ring > 0) {
    opt.symbols["ring"] = spec.ring;
    opt.symbols["ring_rows"] = spec.ring_rows;
  }
  return blob::write_blob(compiler::compile(graphs.get(spec), opt));
}

// Physical memory, from /proc/meminfo's MemTotal (0 where it cannot be read).
uint64_t physical_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

// Refuses a model file larger than the memory it must fit in, with both figures, before it is
// mapped: a mixture of experts of 30 B parameters is easily downloaded onto a machine that cannot
// hold it, and would then read its experts from disk for every token.
void check_fits_in_memory(const std::string& path, uint64_t limit) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return;  // (GgufFile::open says what is wrong with the file)
  if (limit == 0) limit = physical_memory_bytes();
  auto human = [](uint64_t b) {
    return b >= (uint64_t{1} << 30) ? fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30))
                                    : fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  };
  if (limit > 0 && size > limit)
    fail("{}: the model is {} but this machine has {} of memory; it does not fit (choose a smaller quantisation)", path,
         human(size), human(limit));
}

}  // namespace

std::vector<std::pair<std::string, std::vector<uint8_t>>> compile_blobs(const std::string& model_path, RuntimeConfig cfg) {
  auto f = GgufFile::open(model_path, GgufArrays::kWithoutLarge);
  const model::HParams hp = model::HParams::from_gguf(*f);
  resolve_config(cfg, hp);
  cfg.panels16_types = cfg.repack_weights ? cpu::create_cpu_device(1)->panels16_types() : std::vector<GgmlType>{};
  Graphs graphs{hp, *f, cfg.kv_type, nullptr, nullptr, nullptr};
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (const BlobSpec& spec : blob_specs(cfg)) out.emplace_back(spec.name, compile_spec(graphs, spec));
  return out;
}

// One loaded blob, its command list and the input/output buffers bound to it once at load.
struct LlmRuntime::Program {
  std::string name;
  BlobSpec::Kind kind = BlobSpec::Forward;
  int64_t seq = 0, capacity = 0;
  bool last_row_logits = false;  // logits [1, n_vocab] of the row in logit_rows, else [seq, n_vocab]
  std::unique_ptr<driver::Executable> exe;
  std::unique_ptr<driver::CommandList> cl;
  std::vector<int32_t> ids, positions, rows, kv_base, logit_rows;
  std::vector<float> mask, mask_swa, logits;  // mask_swa: models with sliding-window layers
  std::vector<int32_t> rows_swa, window_swa;  // with rings: ring row written, (ring base, start) per token
  std::vector<int32_t> positions_swa;         // rerotate with rings: delta per ring row
};

LlmRuntime::LlmRuntime(const std::string& model_path, RuntimeConfig cfg) : cfg_(std::move(cfg)) {
  check_fits_in_memory(model_path, cfg_.memory_bytes);
  gguf_ = GgufFile::open(model_path, GgufArrays::kWithoutLarge);  // (the vocabulary is the tokenizer's)
  hp_ = model::HParams::from_gguf(*gguf_);
  resolve_config(cfg_, hp_);
  stats_.kv_capacity = cfg_.variants.back();
  stats_.slots = cfg_.parallel;
  pos_.assign(static_cast<size_t>(cfg_.parallel), 0);
  ring_ = cfg_.ring_rows;
  ring_pos_.assign(static_cast<size_t>(cfg_.parallel * ring_), -1);
  stats_.kv_ring_rows = ring_;

  device_ = cpu::create_cpu_device(cfg_.threads);
  cfg_.panels16_types = cfg_.repack_weights ? device_->panels16_types() : std::vector<GgmlType>{};
  queue_ = std::make_unique<driver::Queue>(*device_);
  load_blobs();
  gguf_->release_header();  // parsed and hashed: nothing reads it again
}

LlmRuntime::~LlmRuntime() = default;

int LlmRuntime::device_threads() const { return device_->threads(); }

device::Device::Counters LlmRuntime::device_counters() const { return device_->counters(); }
void LlmRuntime::set_task_tap(uint32_t op, device::Device::TaskTap tap) { device_->set_tap(op, std::move(tap)); }

std::string LlmRuntime::device_name() const { return device_->name() + ", " + std::to_string(device_->threads()) + " threads"; }

void LlmRuntime::load_blobs() {
  const std::string cache_dir = cfg_.use_cache ? (cfg_.cache_dir.empty() ? BlobCache::default_dir() : cfg_.cache_dir) : "";
  // Blobs depend on the model's structure (metadata, tensor names, types, shapes, offsets), never
  // on weight values, which they reach by name through the weights bank at load: keying the cache
  // on the header alone spares hashing (and faulting in) the whole file at every start.
  const uint64_t header[2] = {hash_bytes(gguf_->file_data(), static_cast<size_t>(gguf_->data_offset())), gguf_->file_size()};
  const uint64_t model_hash = hash_bytes(header, sizeof header);
  model_hash_ = model_hash;
  BlobCache cache(cache_dir, model_hash);
  // Packed weights are kept beside the model's blobs (the same key: the GGUF header and size).
  bank_ = std::make_unique<GgufWeightsBank>(*gguf_, cache.enabled() ? cache.model_dir() + "/panels16" : "", cfg_.huge_pages);
  Graphs graphs{hp_, *gguf_, cfg_.kv_type, nullptr, nullptr, nullptr};  // built only if something must be compiled

  // Every blob runs on the one queue, one at a time, so all of them share one scratch arena, as big
  // as the largest blob needs (driver.h: blobs that share an arena must never be in flight together).
  scratch_ = std::make_shared<driver::ScratchArena>(cfg_.huge_pages);

  // Phase 1: load (or compile) every blob; each reserves its scratch in the shared arena.
  auto load_slot = [&](const BlobSpec& spec) {
    auto s = std::make_unique<Program>();
    const std::string& name = spec.name;
    s->name = name;
    s->kind = spec.kind;
    s->last_row_logits = spec.last_row_logits;
    s->seq = spec.seq;
    s->capacity = spec.capacity;
    const std::string config = spec.cache_config();
    if (auto bytes = cache.load(name, config)) {
      try {
        s->exe = std::make_unique<driver::Executable>(*bytes, cache.path_for(name, config), *bank_, *device_, scratch_);
        stats_.cached_blobs++;
      } catch (const Error& e) {
        fmt::print(stderr, "npullm: warning: ignoring corrupt cache entry ({}); recompiling\n", e.what());
        cache.remove(name, config);
      }
    }
    if (!s->exe) {
      std::vector<uint8_t> bytes = compile_spec(graphs, spec);
      s->exe = std::make_unique<driver::Executable>(bytes, name, *bank_, *device_, scratch_);
      stats_.compiled_blobs++;
      cache.store(name, config, bytes);
    }
    return s;
  };
  const std::vector<BlobSpec> specs = blob_specs(cfg_);
  prefill_ = load_slot(specs.front());
  for (size_t i = 1; i < specs.size(); ++i) {
    if (specs[i].name.rfind("prefill-", 0) == 0) prefill_tails_.push_back(load_slot(specs[i]));
    else if (specs[i].kind == BlobSpec::Rerotate) rerotate_ = load_slot(specs[i]);
    else generate_.push_back(load_slot(specs[i]));
  }
  // One list of row blobs (batch sizes and verify sizes), ordered by rows, then capacity.
  std::stable_sort(generate_.begin(), generate_.end(), [](const std::unique_ptr<Program>& a, const std::unique_ptr<Program>& b) {
    return a->seq != b->seq ? a->seq < b->seq : a->capacity < b->capacity;
  });
  for (int64_t v : cfg_.verify_sizes) max_verify_ = std::max(max_verify_, v);
  if (max_verify_ > 0)
    for (int64_t b : cfg_.batch_sizes) max_verify_ = std::max(max_verify_, b);

  // One K/V allocation sized by the prefill blob's state I/Os (slots x C_max rows); every blob's
  // state of the same name is bound to the same region.
  // Sizes come from the blob, so they follow the K/V type (F32 4, F16 2, Q8_0 34/32 bytes an element).
  // Sliding-window layers' states are rings of slots x ring_ rows.
  const int64_t all_rows = cfg_.parallel * capacity(), ring_rows = cfg_.parallel * ring_;
  size_t total = 0;
  for (const blob::IoDesc& io : prefill_->exe->image().ios) {
    if (io.role != blob::IoRole::State) continue;
    const auto type = static_cast<GgmlType>(io.type);
    if (type != cfg_.kv_type)
      fail("blob 'prefill': state '{}' is {}, but the K/V type is {}", io.name, ggml_type_name(type), ggml_type_name(cfg_.kv_type));
    const bool ring = ring_ > 0 && !io.shape.empty() && io.shape[0] == ring_rows;
    const int64_t n = ring ? ring_rows : all_rows;
    if (io.shape.empty() || io.shape[0] != n || io.bytes % static_cast<uint64_t>(n) != 0)
      fail("blob 'prefill': state '{}' is not {} whole rows", io.name, all_rows);
    int64_t row_elems = 1;
    for (size_t d = 1; d < io.shape.size(); ++d) row_elems *= io.shape[d];
    const size_t row_bytes = io.bytes / static_cast<uint64_t>(n);
    regions_.push_back({io.name, type, row_elems, row_bytes, total, io.bytes, ring});
    total += (io.bytes + 63) / 64 * 64;
    if (ring) stats_.kv_ring_bytes += static_cast<int64_t>(row_bytes) * ring_;
    else stats_.kv_row_bytes += static_cast<int64_t>(row_bytes);
  }
  kv_ = driver::AlignedBuffer(total, cfg_.huge_pages);
  stats_.kv_bytes = static_cast<int64_t>(total);
  if (cache.enabled()) {
    // This model was used now; the cache keeps within its bound (other models go first).
    mark_model_used(cache.model_dir(), gguf_->path());
    const uint64_t bound = cfg_.cache_max_bytes ? cfg_.cache_max_bytes : default_cache_max_bytes(cache_dir);
    const PruneReport pr = prune_cache(cache_dir, bound, -1, fmt::format("{:016x}", model_hash));
    if (pr.removed > 0)
      fmt::print(stderr, "npullm: cache over {}: removed {} least recently used model(s), {} freed\n", format_size(bound), pr.removed,
                 format_size(pr.freed_bytes));
  }
  stats_.packed_weights_built = bank_->packed_built();
  stats_.packed_weights_cached = bank_->packed_loaded();
  stats_.huge_page_weight_bytes = static_cast<int64_t>(bank_->huge_page_bytes());

  // Phase 2: record each blob's command list (the first one allocates the arena) and bind its
  // inputs, outputs and state once.
  auto record = [&](Program& s) {
    const size_t seq = static_cast<size_t>(s.seq);
    s.cl = std::make_unique<driver::CommandList>(*s.exe);
    s.positions.assign(seq, 0);
    s.cl->bind("positions", s.positions.data(), s.positions.size() * 4);
    // The rerotate blob reads only positions: its slot allocates nothing else (a [ctx, n_vocab]
    // logits buffer here would be touched at load for nothing).
    if (s.kind == BlobSpec::Forward) {
      s.ids.assign(seq, 0);
      s.rows.assign(seq, -1);
      s.kv_base.assign(seq, 0);
      s.mask.assign(seq * static_cast<size_t>(s.capacity), kNegInf);
      s.logits.assign((s.last_row_logits ? 1 : seq) * static_cast<size_t>(hp_.n_vocab), 0.0f);
      s.cl->bind("input_ids", s.ids.data(), s.ids.size() * 4);
      s.cl->bind("cache_rows", s.rows.data(), s.rows.size() * 4);
      s.cl->bind("kv_base", s.kv_base.data(), s.kv_base.size() * 4);
      s.cl->bind("attention_mask", s.mask.data(), s.mask.size() * 4);
      if (hp_.n_swa > 0) {
        s.mask_swa.assign(seq * static_cast<size_t>(ring_ > 0 ? ring_ : s.capacity), kNegInf);
        s.cl->bind("attention_mask_swa", s.mask_swa.data(), s.mask_swa.size() * 4);
      }
      if (ring_ > 0) {
        s.rows_swa.assign(seq, -1);
        s.window_swa.assign(2 * seq, 0);
        s.cl->bind("cache_rows_swa", s.rows_swa.data(), s.rows_swa.size() * 4);
        s.cl->bind("kv_window_swa", s.window_swa.data(), s.window_swa.size() * 4);
      }
      s.cl->bind("logits", s.logits.data(), s.logits.size() * 4);
      if (s.last_row_logits) {
        s.logit_rows.assign(1, 0);
        s.cl->bind("logit_rows", s.logit_rows.data(), 4);
      }
    } else if (ring_ > 0) {
      s.positions_swa.assign(static_cast<size_t>(ring_rows), 0);
      s.cl->bind("positions_swa", s.positions_swa.data(), s.positions_swa.size() * 4);
    }
    for (const blob::IoDesc& io : s.exe->image().ios) {
      if (io.role != blob::IoRole::State) continue;
      auto it = std::find_if(regions_.begin(), regions_.end(), [&](const StateRegion& r) { return r.name == io.name; });
      if (it == regions_.end()) fail("blob '{}' has state '{}' that the prefill blob lacks", s.name, io.name);
      if (static_cast<GgmlType>(io.type) != it->type)
        fail("blob '{}': state '{}' is {} but the K/V allocation holds {}", s.name, io.name,
             ggml_type_name(static_cast<GgmlType>(io.type)), ggml_type_name(it->type));
      s.cl->bind(io.name, kv_.data() + it->offset, it->bytes);
    }
  };
  record(*prefill_);
  for (auto& t : prefill_tails_) record(*t);
  for (auto& g : generate_) record(*g);
  record(*rerotate_);
  stats_.scratch_bytes = static_cast<int64_t>(scratch_->size());
}

void LlmRuntime::check_slot(int64_t slot) const {
  if (slot < 0 || slot >= cfg_.parallel) fail("sequence slot {} does not exist (this runtime has {})", slot, cfg_.parallel);
}

void LlmRuntime::fill_row(Program& p, int64_t i, int64_t slot, int32_t id, int64_t pos, bool real) {
  const int64_t C = p.capacity;
  const size_t r = static_cast<size_t>(i);
  const int64_t first = slot * capacity();  // the slot's region
  p.ids[r] = real ? id : 0;
  p.positions[r] = real ? static_cast<int32_t>(pos) : 0;
  p.rows[r] = real ? static_cast<int32_t>(first + pos) : -1;
  p.kv_base[r] = static_cast<int32_t>(first);
  float* m = p.mask.data() + i * C;
  const int64_t visible = real ? pos + 1 : 0;  // token at pos attends its slot's rows [0, pos]
  std::fill(m, m + visible, 0.0f);
  std::fill(m + visible, m + C, kNegInf);
  if (p.mask_swa.empty()) return;
  // Local layers: the token itself and the n_swa - 1 positions before it.
  const int64_t from = real ? std::max<int64_t>(0, pos + 1 - hp_.n_swa) : 0;
  if (ring_ == 0) {
    float* w = p.mask_swa.data() + i * C;
    std::fill(w, w + C, kNegInf);
    std::fill(w + from, w + visible, 0.0f);
    return;
  }
  // A ring: position q lives in row q mod ring_ of the slot's ring. The token's keys are visited
  // from the row of the multiple of 16 at or before its first visible position, so each key sums
  // in the SIMD lane and order it has in a full-length window (cpu::attention): same bits.
  const int64_t R = ring_, ring_first = slot * R;
  int64_t* held = ring_pos_.data() + ring_first;
  float* w = p.mask_swa.data() + i * R;
  std::fill(w, w + R, kNegInf);
  p.rows_swa[r] = -1;
  p.window_swa[2 * r] = static_cast<int32_t>(ring_first);
  p.window_swa[2 * r + 1] = 0;
  if (!real) return;
  p.rows_swa[r] = static_cast<int32_t>(ring_first + pos % R);
  held[pos % R] = pos;
  p.window_swa[2 * r + 1] = static_cast<int32_t>(from / 16 * 16 % R);
  for (int64_t q = from; q <= pos; ++q) {
    if (held[q % R] != q) fail("sliding-window ring of slot {}: position {} is not held (an internal error)", slot, q);
    w[q % R] = 0.0f;
  }
}

bool LlmRuntime::ring_holds(int64_t slot, int64_t from, int64_t to) const {
  if (ring_ == 0) return true;
  const int64_t* held = ring_pos_.data() + slot * ring_;
  for (int64_t q = std::max<int64_t>(from, 0); q < to; ++q)
    if (held[q % ring_] != q) return false;
  return true;
}

std::span<const float> LlmRuntime::prefill_slot(int64_t slot, std::span<const int32_t> ids, std::vector<float>* all_logits) {
  check_slot(slot);
  int64_t& pos = pos_[static_cast<size_t>(slot)];
  if (ids.empty()) fail("prefill needs at least one token");
  if (pos + static_cast<int64_t>(ids.size()) > capacity())
    fail("prompt of {} tokens does not fit: {} of {} K/V rows are in use", ids.size(), pos, capacity());
  for (int32_t id : ids)
    if (id < 0 || id >= hp_.n_vocab) fail("token id {} is outside the vocabulary (0..{})", id, hp_.n_vocab - 1);
  if (all_logits && !cfg_.all_logits)
    fail("prefill: the logits of every token need a runtime made with RuntimeConfig::all_logits "
         "(this one's prefill blobs compute the last token's only)");
  const int64_t V = hp_.n_vocab;
  if (all_logits) all_logits->clear();
  int64_t last_n = 0;
  Program* used = prefill_.get();
  for (size_t off = 0; off < ids.size();) {
    const size_t n = std::min(ids.size() - off, static_cast<size_t>(prefill_->seq));
    // The smallest prefill blob that takes these n tokens (the tails are sorted largest first).
    Program* pick = prefill_.get();
    for (auto& t : prefill_tails_)
      if (t->seq >= static_cast<int64_t>(n)) pick = t.get();
    Program& s = *pick;
    used = pick;
    for (int64_t i = 0; i < s.seq; ++i) {
      const bool real = i < static_cast<int64_t>(n);
      fill_row(s, i, slot, real ? ids[off + static_cast<size_t>(i)] : 0, pos + i, real);
    }
    if (s.last_row_logits) s.logit_rows[0] = static_cast<int32_t>(n) - 1;  // the last real token
    {
      trace::Scope span("npuw", "prefill chunk");
      if (span.active())
        span.set_args(fmt::format(R"({{"slot":{},"tokens":{},"position":{},"blob":"{}","rows":{},"capacity":{}}})", slot, n, pos,
                                  s.name, s.seq, s.capacity));
      queue_->run(*s.cl);
    }
    pos += static_cast<int64_t>(n);
    stats_.prefill_chunks++;
    stats_.prefill_tokens += static_cast<int64_t>(n);
    stats_.padded_positions += s.seq - static_cast<int64_t>(n);
    if (all_logits) all_logits->insert(all_logits->end(), s.logits.begin(), s.logits.begin() + static_cast<int64_t>(n) * V);
    last_n = static_cast<int64_t>(n);
    off += n;
  }
  const int64_t last_row = used->last_row_logits ? 0 : last_n - 1;
  return {used->logits.data() + last_row * V, static_cast<size_t>(V)};
}

bool LlmRuntime::can_truncate(int64_t slot, int64_t n) const {
  check_slot(slot);
  // The next token (at position n) sees the n_swa - 1 positions before it in the rings.
  return n >= 0 && n <= position(slot) && (n == position(slot) || ring_holds(slot, n + 1 - hp_.n_swa, n));
}

void LlmRuntime::truncate(int64_t slot, int64_t n) {
  check_slot(slot);
  int64_t& pos = pos_[static_cast<size_t>(slot)];
  if (n < 0 || n > pos) fail("cannot keep {} rows of slot {}: it holds {}", n, slot, pos);
  if (!can_truncate(slot, n))
    fail("cannot keep {} rows of slot {}: its sliding-window rings no longer hold the {} positions before row {}", n, slot,
         hp_.n_swa - 1, n);
  pos = n;
  if (ring_ > 0)
    for (int64_t j = 0; j < ring_; ++j) {
      int64_t& q = ring_pos_[static_cast<size_t>(slot * ring_ + j)];
      if (q >= n) q = -1;  // forgotten: never attended again
    }
}

bool LlmRuntime::can_shift(int64_t n_keep, int64_t n_discard, int64_t slot) const {
  check_slot(slot);
  const int64_t pos = position(slot);
  if (n_keep < 0 || n_discard < 1 || n_keep + n_discard > pos) return false;
  // After the shift the next token (at pos - n_discard) sees the n_swa - 1 positions before it:
  // kept rows [.., n_keep) where they are, moved rows n_discard further on than they will be.
  const int64_t end = pos - n_discard, from = std::max<int64_t>(0, end + 1 - hp_.n_swa);
  return ring_holds(slot, from, std::min(end, n_keep)) && ring_holds(slot, std::max(from, n_keep) + n_discard, pos);
}

void LlmRuntime::shift(int64_t n_keep, int64_t n_discard, int64_t slot) {
  check_slot(slot);
  int64_t& pos = pos_[static_cast<size_t>(slot)];
  if (n_keep < 0 || n_discard < 1 || n_keep + n_discard > pos)
    fail("context shift: cannot drop rows [{}, {}) of the {} in use", n_keep, n_keep + n_discard, pos);
  if (!can_shift(n_keep, n_discard, slot))
    fail("context shift: the sliding-window rings of slot {} no longer hold the rows the shifted sequence would see", slot);
  const int64_t first = slot * capacity();
  const int64_t moved = pos - n_keep - n_discard;
  if (ring_ > 0) shift_rings(n_keep, n_discard, slot);
  for (const StateRegion& r : regions_) {
    if (r.ring) continue;
    const size_t row = r.row_bytes;
    uint8_t* base = kv_.data() + r.offset + static_cast<size_t>(first) * row;
    std::memmove(base + static_cast<size_t>(n_keep) * row, base + static_cast<size_t>(n_keep + n_discard) * row,
                 static_cast<size_t>(moved) * row);
    stats_.kv_bytes_copied += moved * static_cast<int64_t>(row);
  }
  // The moved keys were rotated for positions n_discard further on: turn them back by n_discard
  // (rows with delta 0, every other slot's among them, are left as they are).
  Program& s = *rerotate_;
  std::fill(s.positions.begin(), s.positions.end(), 0);
  std::fill(s.positions.begin() + first + n_keep, s.positions.begin() + first + n_keep + moved, static_cast<int32_t>(-n_discard));
  {
    trace::Scope span("npuw", "context shift");
    queue_->run(*s.cl);  // positions_swa: set by shift_rings
  }
  pos -= n_discard;
  stats_.context_shifts++;
}

void LlmRuntime::shift_rings(int64_t n_keep, int64_t n_discard, int64_t slot) {
  const int64_t R = ring_;
  int64_t* held = ring_pos_.data() + slot * R;
  // Where each ring row's position goes: -1 dropped (or empty), else its new position; a new row
  // takes the most recent position that lands on it.
  std::vector<int64_t> dest(static_cast<size_t>(R), -1), now(static_cast<size_t>(R), -1);
  for (int64_t j = 0; j < R; ++j) {
    const int64_t q = held[j];
    if (q < 0 || (q >= n_keep && q < n_keep + n_discard)) continue;
    const int64_t q_new = q < n_keep ? q : q - n_discard;
    if (q_new > now[static_cast<size_t>(q_new % R)]) now[static_cast<size_t>(q_new % R)] = q_new;
    dest[static_cast<size_t>(j)] = q_new;
  }
  Program& rr = *rerotate_;
  std::fill(rr.positions_swa.begin(), rr.positions_swa.end(), 0);
  std::vector<uint8_t> old;
  for (const StateRegion& r : regions_) {
    if (!r.ring) continue;
    uint8_t* base = kv_.data() + r.offset + static_cast<size_t>(slot * R) * r.row_bytes;
    old.assign(base, base + static_cast<size_t>(R) * r.row_bytes);
    for (int64_t j = 0; j < R; ++j) {
      const int64_t q_new = dest[static_cast<size_t>(j)];
      if (q_new < 0 || now[static_cast<size_t>(q_new % R)] != q_new || q_new % R == j) continue;  // stays, or loses its row
      std::memcpy(base + static_cast<size_t>(q_new % R) * r.row_bytes, old.data() + static_cast<size_t>(j) * r.row_bytes, r.row_bytes);
      stats_.kv_bytes_copied += static_cast<int64_t>(r.row_bytes);
    }
  }
  for (int64_t j = 0; j < R; ++j) {
    const int64_t q = held[j], q_new = dest[static_cast<size_t>(j)];
    if (q_new >= 0 && now[static_cast<size_t>(q_new % R)] == q_new && q >= n_keep)
      rr.positions_swa[static_cast<size_t>(slot * R + q_new % R)] = static_cast<int32_t>(-n_discard);
  }
  std::copy(now.begin(), now.end(), held);
}

std::vector<std::string> LlmRuntime::state_names() const {
  std::vector<std::string> out;
  for (const StateRegion& r : regions_) out.push_back(r.name);
  return out;
}

std::vector<float> LlmRuntime::get_state(const std::string& name, int64_t slot) const {
  check_slot(slot);
  for (const StateRegion& r : regions_) {
    if (r.name != name) continue;
    if (r.ring) {
      // The most recent positions the ring holds, oldest first.
      const int64_t pos = position(slot);
      int64_t n = 0;
      while (n < pos && ring_holds(slot, pos - n - 1, pos - n)) ++n;
      std::vector<float> out(static_cast<size_t>(n * r.row_elems));
      for (int64_t q = pos - n; q < pos; ++q)
        dequantize_row(r.type, kv_.data() + r.offset + static_cast<size_t>(slot * ring_ + q % ring_) * r.row_bytes,
                       out.data() + (q - pos + n) * r.row_elems, r.row_elems);
      return out;
    }
    // Rows are whole blocks (the compiler checks it), so the slot's first rows convert as one run.
    const int64_t elems = position(slot) * r.row_elems;
    std::vector<float> out(static_cast<size_t>(elems));
    dequantize_row(r.type, kv_.data() + r.offset + static_cast<size_t>(slot * capacity()) * r.row_bytes, out.data(), elems);
    return out;
  }
  fail("no state variable named '{}'", name);
}

std::string LlmRuntime::state_key() const {
  std::string layout;
  for (const StateRegion& r : regions_) layout += fmt::format("{}:{};", r.name, r.row_bytes);
  return fmt::format("{:016x}-{}-{:016x}", model_hash_, ggml_type_name(cfg_.kv_type), hash_bytes(layout.data(), layout.size()));
}

std::vector<uint8_t> LlmRuntime::save_rows(int64_t slot) const {
  check_slot(slot);
  if (ring_ > 0) return {};
  const size_t n = static_cast<size_t>(position(slot)), first = static_cast<size_t>(slot * capacity());
  std::vector<uint8_t> out;
  out.reserve(n * static_cast<size_t>(stats_.kv_row_bytes));
  for (const StateRegion& r : regions_) {
    const uint8_t* base = kv_.data() + r.offset + first * r.row_bytes;
    out.insert(out.end(), base, base + n * r.row_bytes);
  }
  return out;
}

bool LlmRuntime::restore_rows(int64_t slot, int64_t n, std::span<const uint8_t> bytes) {
  check_slot(slot);
  if (ring_ > 0 || n < 0 || n > capacity() || bytes.size() != static_cast<size_t>(n * stats_.kv_row_bytes)) return false;
  const size_t first = static_cast<size_t>(slot * capacity());
  const uint8_t* src = bytes.data();
  for (const StateRegion& r : regions_) {
    const size_t len = static_cast<size_t>(n) * r.row_bytes;
    std::memcpy(kv_.data() + r.offset + first * r.row_bytes, src, len);
    src += len;
  }
  pos_[static_cast<size_t>(slot)] = n;
  return true;
}

bool LlmRuntime::copy_rows(int64_t from, int64_t to, int64_t n) {
  check_slot(from);
  check_slot(to);
  if (ring_ > 0 || from == to || n < 0 || n > position(from)) return false;
  const size_t src = static_cast<size_t>(from * capacity()), dst = static_cast<size_t>(to * capacity());
  for (const StateRegion& r : regions_) {
    uint8_t* base = kv_.data() + r.offset;
    std::memcpy(base + dst * r.row_bytes, base + src * r.row_bytes, static_cast<size_t>(n) * r.row_bytes);
    stats_.kv_bytes_copied += n * static_cast<int64_t>(r.row_bytes);
  }
  pos_[static_cast<size_t>(to)] = n;
  return true;
}

int64_t LlmRuntime::variant_capacity(int64_t rows) const {
  for (int64_t c : cfg_.variants)
    if (c >= rows) return c;
  return 0;
}

LlmRuntime::Program& LlmRuntime::generate_for(int64_t batch, int64_t rows) {
  // generate_ is ordered by batch size, then capacity: the first that fits both is the smallest.
  for (auto& g : generate_)
    if (g->seq >= batch && g->capacity >= rows) return *g;
  if (rows > capacity()) fail("the K/V state is full: {} rows needed, the largest generate variant holds {}", rows, capacity());
  fail("no generate blob runs {} sequences at once (this runtime has {} slots)", batch, cfg_.parallel);
}

std::span<const float> LlmRuntime::decode(int32_t id) {
  const SlotToken one{0, id};
  return decode_batch({&one, 1});
}

std::span<const float> LlmRuntime::decode_batch(std::span<const SlotToken> tokens) {
  if (tokens.empty()) fail("decode_batch needs at least one sequence");
  int64_t longest = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const SlotToken& t = tokens[i];
    check_slot(t.slot);
    // A handful of rows: a pairwise check costs less than a set allocated per step.
    for (size_t j = 0; j < i; ++j)
      if (tokens[j].slot == t.slot) fail("decode_batch: slot {} is listed twice", t.slot);
    if (t.id < 0 || t.id >= hp_.n_vocab) fail("token id {} is outside the vocabulary (0..{})", t.id, hp_.n_vocab - 1);
    longest = std::max(longest, position(t.slot) + 1);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  Program& p = generate_for(n, longest);
  for (int64_t i = 0; i < p.seq; ++i) {
    if (i < n) {
      const SlotToken& t = tokens[static_cast<size_t>(i)];
      fill_row(p, i, t.slot, t.id, position(t.slot), true);
    } else {
      fill_row(p, i, 0, 0, 0, false);  // padding: writes nowhere, attends nothing
    }
  }
  {
    trace::Scope span("npuw", "decode");
    if (span.active()) {
      std::string slots;
      for (const SlotToken& t : tokens) slots += fmt::format("{}{}", slots.empty() ? "" : ",", t.slot);
      span.set_args(fmt::format(R"({{"slots":[{}],"blob":"{}","rows":{},"capacity":{}}})", slots, p.name, p.seq, p.capacity));
    }
    queue_->run(*p.cl);
  }
  for (const SlotToken& t : tokens) pos_[static_cast<size_t>(t.slot)]++;
  stats_.decode_tokens += n;
  stats_.variants_used.insert(p.capacity);
  stats_.batch_sizes_used.insert(p.seq);
  if (p.seq > 1) {
    stats_.batched_steps++;
    stats_.batch_rows += n;
  }
  stats_.padded_rows += p.seq - n;
  stats_.last_batch = p.seq;
  stats_.last_capacity = p.capacity;
  stats_.last_active = n;
  return {p.logits.data(), static_cast<size_t>(n * hp_.n_vocab)};
}

int64_t LlmRuntime::max_verify_rows(int64_t slot) const {
  check_slot(slot);
  return std::max<int64_t>(0, std::min(max_verify_, capacity() - position(slot)));
}

void LlmRuntime::rollback(int64_t slot, int64_t n) {
  const int64_t before = position(slot);
  truncate(slot, n);
  stats_.rolled_back_rows += before - n;
}

std::span<const float> LlmRuntime::verify_batch(std::span<const SlotRun> runs) {
  if (runs.empty()) fail("verify needs at least one sequence");
  if (max_verify_ == 0) fail("verify: this runtime has no verify blobs (RuntimeConfig::verify_sizes is empty)");
  int64_t total = 0, longest = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const SlotRun& r = runs[i];
    check_slot(r.slot);
    for (size_t j = 0; j < i; ++j)
      if (runs[j].slot == r.slot) fail("verify: slot {} is listed twice", r.slot);
    if (r.ids.empty()) fail("verify: slot {} has no tokens to run", r.slot);
    for (int32_t id : r.ids)
      if (id < 0 || id >= hp_.n_vocab) fail("token id {} is outside the vocabulary (0..{})", id, hp_.n_vocab - 1);
    const int64_t end = position(r.slot) + static_cast<int64_t>(r.ids.size());
    if (end > capacity())
      fail("verify: {} tokens do not fit in slot {}: {} of {} K/V rows are in use", r.ids.size(), r.slot, position(r.slot), capacity());
    total += static_cast<int64_t>(r.ids.size());
    longest = std::max(longest, end);
  }
  if (total > max_verify_) fail("verify: {} tokens in one step, the largest verify blob runs {}", total, max_verify_);
  Program& p = generate_for(total, longest);
  // Rows in order: each slot's tokens at its next positions. Row i attends its slot's rows up to
  // its own position, the rows the earlier tokens of its run write in this same run included.
  int64_t i = 0;
  for (const SlotRun& r : runs)
    for (size_t k = 0; k < r.ids.size(); ++k, ++i) fill_row(p, i, r.slot, r.ids[k], position(r.slot) + static_cast<int64_t>(k), true);
  for (; i < p.seq; ++i) fill_row(p, i, 0, 0, 0, false);
  {
    trace::Scope span("npuw", "verify");
    if (span.active()) span.set_args(fmt::format(R"({{"tokens":{},"blob":"{}","rows":{},"capacity":{}}})", total, p.name, p.seq, p.capacity));
    queue_->run(*p.cl);
  }
  for (const SlotRun& r : runs) pos_[static_cast<size_t>(r.slot)] += static_cast<int64_t>(r.ids.size());
  stats_.verify_steps++;
  stats_.verify_rows += total;
  stats_.verify_padded_rows += p.seq - total;
  stats_.variants_used.insert(p.capacity);
  stats_.last_batch = p.seq;
  stats_.last_capacity = p.capacity;
  stats_.last_active = total;
  return {p.logits.data(), static_cast<size_t>(total * hp_.n_vocab)};
}

}  // namespace npullm::npuw

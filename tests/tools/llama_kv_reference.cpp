// An outside reference for npullm's quantised K/V cache: llama.cpp itself run on a golden model with
// a chosen K/V cache type, compared with the golden's ideal (dequantised-F32) logits.
//
// Not part of the npullm build: tests/tools/make-kv-references.sh compiles it against a llama.cpp
// build (public llama.h only) and writes the figures to tests/data/golden-kv/. For one golden model it
// loads the golden JSON (../shared/golden/**/<name>.json: tokens, settings, acceptance.ideal_ref and
// native_ref), runs the 64 tokens as one llama_decode batch with the JSON's settings except
// type_k = type_v = TYPE (and flash attention as asked), and prints one JSON object: mean
// KL(softmax(ideal) || softmax(llama.cpp)), the same against the native logits, and the share of
// positions whose top-1 token equals the ideal's.
//
//   llama_kv_reference MODEL.gguf GOLDEN.json TYPE(f32|f16|q8_0) FLASH_ATTN(0|1)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ggml.h"
#include "llama.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<float> read_f16(const std::string& path, size_t n) {
  const std::string raw = slurp(path);
  if (raw.size() != 2 * n) {
    std::fprintf(stderr, "%s: %zu bytes, expected %zu\n", path.c_str(), raw.size(), 2 * n);
    std::exit(2);
  }
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    ggml_fp16_t h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    out[i] = ggml_fp16_to_fp32(h);
  }
  return out;
}

double log_sum_exp(const float* x, size_t n) {
  double mx = -1e300, s = 0;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, double(x[i]));
  for (size_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - mx);
  return mx + std::log(s);
}

// Mean over rows of KL(softmax(ref) || softmax(q)), in double.
double mean_kl(const std::vector<float>& ref, const std::vector<float>& q, size_t rows, size_t V) {
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = ref.data() + r * V;
    const float* b = q.data() + r * V;
    const double la = log_sum_exp(a, V), lb = log_sum_exp(b, V);
    for (size_t v = 0; v < V; ++v) {
      const double pa = double(a[v]) - la, pb = double(b[v]) - lb;
      total += std::exp(pa) * (pa - pb);
    }
  }
  return total / double(rows);
}

size_t argmax(const float* x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

ggml_type type_of(const std::string& s) {
  if (s == "f32") return GGML_TYPE_F32;
  if (s == "f16") return GGML_TYPE_F16;
  if (s == "q8_0") return GGML_TYPE_Q8_0;
  std::fprintf(stderr, "unknown K/V type %s\n", s.c_str());
  std::exit(2);
}

void quiet_log(ggml_log_level, const char*, void*) {}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.gguf GOLDEN.json f32|f16|q8_0 0|1\n", argv[0]);
    return 2;
  }
  const std::string model_path = argv[1], json_path = argv[2], type_name = argv[3];
  const bool flash = std::string(argv[4]) == "1";
  const auto j = nlohmann::json::parse(slurp(json_path));
  const auto tokens = j["tokens"].get<std::vector<llama_token>>();
  const auto& st = j["settings"];
  const auto& acc = j["acceptance"];
  const std::string dir = json_path.substr(0, json_path.find_last_of('/') + 1);

  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = st.value("n_gpu_layers", 0);
  mp.use_extra_bufts = st.value("cpu_repack", true);
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) return 3;
  const size_t V = static_cast<size_t>(llama_vocab_n_tokens(llama_model_get_vocab(model)));

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = st.value("n_ctx", 128);
  cp.n_batch = st.value("n_batch", 64);
  cp.n_ubatch = st.value("n_ubatch", 64);
  cp.n_seq_max = st.value("n_seq_max", 1);
  cp.n_threads = st.value("n_threads", 1);
  cp.n_threads_batch = st.value("n_threads_batch", 1);
  cp.swa_full = st.value("swa_full", cp.swa_full);
  cp.type_k = cp.type_v = type_of(type_name);
  cp.flash_attn_type = flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 4;

  const size_t n = tokens.size();
  llama_batch batch = llama_batch_init(static_cast<int32_t>(n), 0, 1);
  for (size_t i = 0; i < n; ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = static_cast<llama_pos>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int32_t>(n);
  if (llama_decode(ctx, batch) != 0) return 5;
  std::vector<float> ours(n * V);
  for (size_t i = 0; i < n; ++i) std::memcpy(ours.data() + i * V, llama_get_logits_ith(ctx, int32_t(i)), V * 4);

  const auto ideal = read_f16(dir + acc["ideal_ref"].get<std::string>(), n * V);
  const auto native = read_f16(dir + acc["native_ref"].get<std::string>(), n * V);
  size_t agree = 0;
  for (size_t r = 0; r < n; ++r) agree += argmax(ideal.data() + r * V, V) == argmax(ours.data() + r * V, V);

  nlohmann::ordered_json out;
  out["type_k"] = type_name;
  out["type_v"] = type_name;
  out["flash_attn"] = flash;
  out["kl_ideal"] = mean_kl(ideal, ours, n, V);
  out["kl_native"] = mean_kl(native, ours, n, V);
  out["top1_ideal"] = double(agree) / double(n);
  out["top1_ideal_count"] = agree;
  out["n_tokens"] = n;
  std::printf("%s\n", out.dump(1).c_str());
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

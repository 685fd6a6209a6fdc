// The newer families (qwen3, phi3, gemma3) against llama.cpp's logits of the synthetic golden
// models in ../shared/golden/arch (README there: the math, the files, the acceptance rule): each
// meets its JSON's acceptance (mean KL against the ideal, dequantised-F32 logits and against
// llama.cpp's native ones) with F16 and F32 K/V and prefill chunks 1, 7 and 64 (gemma3's local
// layers see a window of 16, so the small chunks cross it many times within the 64 tokens), and
// the chunk size does not change a bit of the logits.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "formats/ggml_types.h"
#include "genai/sampling/sampler.h"
#include "npuw/llm_runtime.h"
#include "test_util.h"

namespace npullm {
namespace {

struct ArchCase {
  std::string file;
  GgmlType kv;
};
void PrintTo(const ArchCase& c, std::ostream* os) { *os << c.file << " K/V " << ggml_type_name(c.kv); }

class GoldenArch : public ::testing::TestWithParam<ArchCase> {};

TEST_P(GoldenArch, MeetsTheAcceptanceForEveryPrefillChunk) {
  const std::string name = GetParam().file;
  const std::string dir = "golden/arch/";
  NPULLM_REQUIRE_SHARED(dir + name + ".gguf");
  const auto j = nlohmann::json::parse(test::read_file(test::shared_path(dir + name + ".json")));
  const auto tokens = j["tokens"].get<std::vector<int32_t>>();
  const size_t V = j["n_vocab"].get<size_t>(), n = tokens.size();
  const auto& acc = j["acceptance"];
  const auto ideal = test::read_logits(test::shared_path(dir + acc["ideal_ref"].get<std::string>()), n * V);
  const auto native = test::read_logits(test::shared_path(dir + acc["native_ref"].get<std::string>()), n * V);
  std::vector<float> first;
  for (int64_t chunk : {1, 7, 64}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    npuw::RuntimeConfig cfg;
    cfg.prefill_chunk = chunk;
    cfg.variants = {128};
    cfg.all_logits = true;
    cfg.use_cache = false;
    cfg.threads = 2;
    cfg.kv_type = GetParam().kv;
    npuw::LlmRuntime rt(test::shared_path(dir + name + ".gguf"), cfg);
    std::vector<float> ours;
    rt.prefill(tokens, &ours);
    ASSERT_EQ(ours.size(), n * V);
    const double kl_ideal = test::mean_kl(ideal, ours, n, V), kl_native = test::mean_kl(native, ours, n, V);
    EXPECT_LE(kl_ideal, acc["kl_ideal_max"].get<double>());
    EXPECT_LE(kl_native, acc["kl_native_max"].get<double>());
    int agree = 0;
    for (size_t r = 0; r < n; ++r) agree += genai::argmax({native.data() + r * V, V}) == genai::argmax({ours.data() + r * V, V});
    std::printf("[ arch     ] %s K/V %s chunk %lld: KL(ideal||ours) %.3e (max %.3e), KL(native||ours) %.3e (max %.3e), top-1 %d/%zu\n",
                name.c_str(), std::string(ggml_type_name(GetParam().kv)).c_str(), static_cast<long long>(chunk), kl_ideal,
                acc["kl_ideal_max"].get<double>(), kl_native, acc["kl_native_max"].get<double>(), agree, n);
    if (first.empty()) first = ours;
    else EXPECT_EQ(0, std::memcmp(first.data(), ours.data(), ours.size() * 4)) << "the prefill chunk changed the logits";
  }
}

std::vector<ArchCase> arch_cases() {
  std::vector<ArchCase> out;
  for (const char* f : {"qwen3-gpt2.Q4_K_M", "phi3-spm.Q4_K_M", "gemma3-spm.Q4_K_M"})
    for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) out.push_back({f, kv});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenArch, ::testing::ValuesIn(arch_cases()), [](const auto& info) {
  std::string s = info.param.file + "_kv_" + std::string(ggml_type_name(info.param.kv));
  for (char& c : s)
    if (c == '-' || c == '.') c = '_';
  return s;
});

}  // namespace
}  // namespace npullm

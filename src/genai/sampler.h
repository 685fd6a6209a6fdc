// Picks the next token from logits: greedy (temperature <= 0) or sampling with temperature,
// top-k and top-p, driven by a seeded generator so the same seed gives the same text everywhere.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace npullm::genai {

struct SamplerConfig {
  float temperature = 0.0f;  // <= 0: greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig cfg) : cfg_(cfg), rng_(cfg.seed) {}
  int32_t sample(std::span<const float> logits);

 private:
  double uniform();  // [0, 1), from 53 random bits (independent of the standard library's distributions)
  SamplerConfig cfg_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // reused between calls
};

int32_t argmax(std::span<const float> logits);

}  // namespace npullm::genai

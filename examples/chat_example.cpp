// A chat through npullm's public API: three user turns, streamed, with the metrics that show each
// turn prefilled only its own tokens.
//
//   build/npullm_chat_example MODEL.gguf [CHAT_TEMPLATE]
#include <cstdio>
#include <iostream>
#include <npullm/llm_pipeline.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [CHAT_TEMPLATE (name, file or Jinja source)]\n", argv[0]);
    return 1;
  }
  try {
    npullm::PipelineConfig cfg;
    if (argc > 2) cfg.chat_template = argv[2];
    npullm::LLMPipeline pipe(argv[1], cfg);
    npullm::GenerationConfig gen;
    gen.max_new_tokens = 48;
    gen.temperature = 0.7f;
    gen.top_p = 0.9f;
    gen.seed = 42;
    pipe.start_chat("You are a helpful assistant.");
    for (const char* user : {"Tell me a short story about a cat.", "What was the cat's name?", "Thank you!"}) {
      std::cout << "user: " << user << "\nassistant: ";
      const npullm::GenerationResult r = pipe.generate(user, gen, [](std::string_view piece) {
        std::cout << piece << std::flush;
        return true;
      });
      std::cout << "\n  [prefilled " << r.metrics.prefill_tokens << " new tokens, generated " << r.metrics.generated_tokens
                << " at " << r.metrics.decode_tps << " t/s, K/V " << int(r.metrics.kv_utilization * 100) << "% full]\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

// Token masks (one bit per token of a vocabulary: 19 KB for Qwen2's 151,936 tokens) recycled across
// requests. A fresh buffer is fresh pages, and faulting them in was most of what a new mask cost:
// on the 2-vCPU VM these figures come from a page fault takes 10-20 us, so a new 19 KB mask cost
// 100-170 us against 1-3 us to assemble it from the token classes. Matchers give their buffers back
// here when they drop them, and TokenClasses fills the pool ahead of a schema's first request, on
// its background thread, so that request finds memory already touched. The matchers' rows of
// steps come from here too (Matcher::kRowBlockWords at a time), for the same reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace npullm::genai::grammar::mask_pool {

// A buffer of `words` zero words, recycled when one of that capacity is held.
std::vector<uint64_t> take(size_t words);
// Hands `v` back (kept while the pool holds fewer than its bound, else freed). Empty: nothing.
void give(std::vector<uint64_t>&& v);
// Makes the pool hold at least `n` buffers of `words` (touched, so their pages are in).
void fill(size_t words, size_t n);

}  // namespace npullm::genai::grammar::mask_pool

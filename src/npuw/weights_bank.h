// The weights bank backed by the mmap'd GGUF file: blobs name tensors, the bank hands out pointers
// into the mapping. One bank serves the prefill blob and every generate variant (weights live once).
#pragma once
#include "driver/driver.h"
#include "formats/gguf.h"

namespace npullm::npuw {

class GgufWeightsBank final : public driver::WeightsBank {
 public:
  explicit GgufWeightsBank(const GgufFile& f) : f_(f) {}
  const void* resolve(const blob::WeightRef& w) const override;

 private:
  const GgufFile& f_;
};

}  // namespace npullm::npuw

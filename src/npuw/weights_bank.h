// The weights bank backed by the mmap'd GGUF file: blobs name tensors, the bank hands out pointers
// into the mapping. One bank serves the prefill blob and every generate variant (weights live once).
//
// A blob may ask for a tensor in another layout than GGUF's (formats/weight_layout.h: Panels16,
// for a device that reads 16 rows at once). The bank then builds that form from the mapping once,
// keeps it on disk beside the blob cache (<dir>/panels16/<tensor>.w, written to a temporary name
// and renamed into place) and maps it, so a second start reads it as it reads the GGUF file; the
// GGUF pages it was built from are handed back, so the process holds one form of each weight.
// A packed file records the GGUF file's modification time and a hash of samples of the tensor:
// one made from other weight values (the blob cache key is the GGUF header only) is rebuilt; and a
// hash of its header and all its packed bytes, checked before it is trusted: a damaged file (torn,
// truncated, a flipped bit) is reported on stderr once, removed and rebuilt. Files are published
// atomically (blob_cache.h: publish_file); a folder that cannot be written is reported once and the
// packed forms are kept in memory. Without a directory the packed forms live in memory for the
// bank's lifetime.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "driver/driver.h"
#include "formats/gguf.h"

namespace npullm::npuw {

class GgufWeightsBank final : public driver::WeightsBank {
 public:
  // packed_dir: where packed forms are kept; empty keeps them in memory only.
  // huge_pages: every packed form, and every other weight of 2 MiB or more, is held in anonymous
  // memory on transparent huge pages (common/page_buffer.h), read from its file once; the files
  // are still written and verified as below. False: they stay mapped from their files.
  explicit GgufWeightsBank(const GgufFile& f, std::string packed_dir = "", bool huge_pages = false);
  ~GgufWeightsBank() override;
  const void* resolve(const blob::WeightRef& w) const override;

  int packed_built() const { return built_; }    // packed forms made by this bank (not found on disk)
  int packed_loaded() const { return loaded_; }  // packed forms mapped from disk
  int packed_damaged() const { return damaged_; }  // files found damaged (removed and rebuilt)
  uint64_t huge_page_bytes() const;  // weight bytes held in memory of their own (on huge pages)

  // Checks a packed file on its own: its header is well formed, its size is the header's, and the
  // hash of header and bytes matches. "" when it is whole, else what is wrong (for tests and tools;
  // whether it belongs to a given model is checked by the bank at load).
  static std::string verify_file(const std::string& path);

 private:
  struct Packed;
  const void* packed(const GgufTensorInfo& t, const blob::WeightRef& w) const;
  const void* resident(const GgufTensorInfo& t) const;  // a Rows weight copied onto huge pages
  static uint64_t sample_hash(const GgufTensorInfo& t);

  const GgufFile& f_;
  std::string dir_;
  bool huge_ = false;
  int64_t mtime_ns_ = 0;  // of the GGUF file: packed forms made from an older file are rebuilt
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<Packed>> packed_;  // by tensor name (packed or resident)
  mutable int built_ = 0, loaded_ = 0, damaged_ = 0;
  mutable bool store_warned_ = false;
};

}  // namespace npullm::npuw

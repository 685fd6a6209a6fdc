// The driver: loads blobs onto a device and runs them.
//
// Vocabulary (one word per concept, in the manner of Level Zero / IREE HAL):
//   WeightsBank   where weights live (read-only, shared by every blob); blobs name tensors in it.
//   Executable    a validated, loaded blob: its task template with internal relocations applied
//                 (scratch, constants, weights) and its own scratch arena. Owns that memory.
//   CommandList   a recorded run of one executable with its user I/O bound. It holds its own copy
//                 of the task array; bind() patches the user-I/O relocations in that copy, so the
//                 bound pointers can change between runs without re-recording (a mutable command list).
//   Queue         submits command lists to a device on its own thread, in order.
//   Fence         signalled when a submission finishes; wait by polling or by blocking.
//
// Ownership: an Executable must outlive its CommandLists; a CommandList must not be re-bound or
// destroyed while a submission that uses it is in flight. Two command lists of one executable share
// its scratch arena, so they must not be in flight at the same time (the queue runs one at a time).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "blob/blob_image.h"
#include "device/device.h"

namespace npullm::driver {

class WeightsBank {
 public:
  virtual ~WeightsBank() = default;
  // The tensor named `name`, checked against the type, shape and size the blob expects; throws
  // npullm::Error naming the tensor when it is missing or different.
  virtual const void* resolve(const blob::WeightRef& w) const = 0;
};

// Memory aligned for vector loads, freed on destruction.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, size_t align = 64);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Executable {
 public:
  // Validates `bytes` (read_blob) and resolves every weight; throws npullm::Error on any problem.
  Executable(std::span<const uint8_t> bytes, const std::string& label, const WeightsBank& bank,
             device::Device& dev);
  const blob::BlobImage& image() const { return img_; }
  const std::string& label() const { return label_; }
  int io_index(const std::string& name) const;          // -1 when absent
  const blob::IoDesc& io(int index) const { return img_.ios.at(static_cast<size_t>(index)); }
  device::Device& device() const { return dev_; }

 private:
  friend class CommandList;
  std::string label_;
  blob::BlobImage img_;
  device::Device& dev_;
  AlignedBuffer scratch_;
  AlignedBuffer consts_;
  std::vector<blob::TaskDesc> template_;  // internal relocations applied
  std::vector<std::vector<const blob::Reloc*>> io_relocs_;  // per io index
};

class CommandList {
 public:
  explicit CommandList(const Executable& exe);
  // Points I/O `index` at `data` (at least io(index).bytes bytes). Throws if too small or unknown.
  void bind(int index, void* data, size_t bytes);
  void bind(const std::string& name, void* data, size_t bytes);
  bool fully_bound() const;
  const Executable& executable() const { return exe_; }
  device::Program program() const;

 private:
  const Executable& exe_;
  std::vector<blob::TaskDesc> tasks_;
  std::vector<bool> bound_;
};

class Fence {
 public:
  bool signaled() const { return signaled_.load(std::memory_order_acquire); }
  void wait_polling() const;          // spins (with pause) until signalled
  void wait_blocking() const;         // sleeps until signalled
  void reset();                       // only when no submission uses it
  // Rethrows the error of the submission, if it failed.
  void check() const;

 private:
  friend class Queue;
  void signal(std::exception_ptr err);
  std::atomic<bool> signaled_{false};
  std::exception_ptr error_;
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
};

class Queue {
 public:
  explicit Queue(device::Device& dev);
  ~Queue();
  // Enqueues a run of `cl`; `fence` is reset now and signalled when it is done.
  void submit(const CommandList& cl, Fence& fence);
  // submit + wait (blocking or polling) + rethrow any error.
  // Blocking is the default: a caller spinning on a fence takes a core from the device's own
  // workers, which on a 2-core machine halves (or worse) the speed of the run it waits for.
  void run(const CommandList& cl, bool polling = false);

 private:
  void loop();
  device::Device& dev_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<const CommandList*, Fence*>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace npullm::driver

// The driver: loads blobs onto a device and runs them.
//
// Vocabulary (one word per concept, in the manner of Level Zero / IREE HAL):
//   WeightsBank   where weights live (read-only, shared by every blob); blobs name tensors in it.
//   ScratchArena  the memory that holds a blob's intermediate tensors during a run (.npu.scratch).
//                 Several executables may share one; it is sized by the largest of them.
//   Executable    a validated, loaded blob: its task template with the constant and weight
//                 relocations applied, its constants, and a reference to its scratch arena (its own
//                 unless one is given).
//   CommandList   a recorded run of one executable with its user I/O bound. It holds its own copy
//                 of the task array with the scratch relocations applied; bind() patches the user-I/O
//                 relocations in that copy, so the bound pointers can change between runs without
//                 re-recording (a mutable command list).
//   Queue         submits command lists to a device on its own thread, in order.
//   Fence         signalled when a submission finishes; wait by polling or by blocking.
//
// Ownership: an Executable must outlive its CommandLists; a CommandList must not be re-bound or
// destroyed while a submission that uses it is in flight. Executables hold their scratch arena by
// shared_ptr, so it lives as long as the last of them.
// Scratch is shared: two command lists of one executable, or of two executables given the same
// arena, overwrite each other's intermediates, so they must never be in flight at the same time.
// One Queue runs its submissions one at a time, so everything submitted to a single queue is safe;
// two queues must not run command lists that share an arena.
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
#include "common/page_buffer.h"
#include "device/device.h"

namespace npullm::driver {

class WeightsBank {
 public:
  virtual ~WeightsBank() = default;
  // The tensor named `name`, checked against the type, shape and size the blob expects; throws
  // npullm::Error naming the tensor when it is missing or different.
  virtual const void* resolve(const blob::WeightRef& w) const = 0;
};

// Zeroed memory aligned for vector loads (64 bytes), freed on destruction. From 2 MiB up it is a
// PageBuffer (common/page_buffer.h), on transparent huge pages unless `huge` is false: the K/V
// cache and the scratch arena are read every token.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, bool huge = true);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  uint8_t* data() const { return pages_.data() ? pages_.data() : heap_; }
  size_t size() const { return size_; }

 private:
  uint8_t* heap_ = nullptr;  // below 2 MiB
  PageBuffer pages_;
  size_t size_ = 0;
};

// Scratch memory shared by executables that never run at the same time (see Ownership above).
// Two phases, so that it can be sized by blobs loaded one after another:
//   1. every Executable made on the arena reserves its blob's scratch_bytes (the size is the largest);
//   2. the first CommandList recorded on any of them commits it: the memory is allocated (zeroed,
//      as an ELF NOBITS section is) and from then on its size and address are fixed. A later
//      reservation that needs more than the committed size is refused.
// Not thread-safe: load executables and record command lists from one thread.
class ScratchArena {
 public:
  explicit ScratchArena(bool huge_pages = true) : huge_(huge_pages) {}
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;
  // Makes the arena at least `bytes` big; throws npullm::Error naming `label` when it is
  // committed already and smaller.
  void reserve(uint64_t bytes, const std::string& label);
  // The memory, allocated on the first call.
  uint8_t* commit();
  uint64_t size() const { return bytes_; }
  bool committed() const { return committed_; }

 private:
  uint64_t bytes_ = 0;
  bool committed_ = false;
  bool huge_ = true;
  AlignedBuffer mem_;
};

class Executable {
 public:
  // Validates `bytes` (read_blob) and resolves every weight; throws npullm::Error on any problem.
  // The blob's scratch lives in `arena` (reserved now, see ScratchArena), or, when none is given,
  // in an arena of its own.
  Executable(std::span<const uint8_t> bytes, const std::string& label, const WeightsBank& bank,
             device::Device& dev, std::shared_ptr<ScratchArena> arena = nullptr);
  const blob::BlobImage& image() const { return img_; }
  const std::string& label() const { return label_; }
  int io_index(const std::string& name) const;          // -1 when absent
  const blob::IoDesc& io(int index) const { return img_.ios.at(static_cast<size_t>(index)); }
  device::Device& device() const { return dev_; }
  const ScratchArena& scratch() const { return *arena_; }

 private:
  friend class CommandList;
  std::string label_;
  blob::BlobImage img_;
  device::Device& dev_;
  std::shared_ptr<ScratchArena> arena_;
  AlignedBuffer consts_;
  std::vector<blob::TaskDesc> template_;  // constant and weight relocations applied
  std::vector<const blob::Reloc*> scratch_relocs_;          // applied by each CommandList
  std::vector<std::vector<const blob::Reloc*>> io_relocs_;  // per io index
};

class CommandList {
 public:
  // Copies the executable's task template and points its scratch operands into the executable's
  // arena (committing the arena, see ScratchArena).
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

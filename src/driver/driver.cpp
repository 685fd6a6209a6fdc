#include "driver/driver.h"

#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <utility>

#include "common/error.h"
#include "common/trace.h"

namespace npullm::driver {

// ---------------------------------------------------------------- AlignedBuffer

AlignedBuffer::AlignedBuffer(size_t bytes, bool huge) : size_(bytes) {
  constexpr size_t kAlign = 64;
  if (bytes >= (size_t{2} << 20)) {
    try {
      pages_ = PageBuffer(bytes, huge);  // anonymous pages: zero already
    } catch (const Error&) {
      fail("driver: out of memory allocating {} bytes", bytes);
    }
    return;
  }
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  heap_ = static_cast<uint8_t*>(std::aligned_alloc(kAlign, rounded ? rounded : kAlign));
  if (!heap_) fail("driver: out of memory allocating {} bytes", bytes);
  std::memset(heap_, 0, rounded ? rounded : kAlign);
}
AlignedBuffer::~AlignedBuffer() { std::free(heap_); }
AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : heap_(std::exchange(o.heap_, nullptr)), pages_(std::move(o.pages_)), size_(std::exchange(o.size_, 0)) {}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  std::swap(heap_, o.heap_);
  std::swap(pages_, o.pages_);
  std::swap(size_, o.size_);
  return *this;
}

// ---------------------------------------------------------------- ScratchArena

void ScratchArena::reserve(uint64_t bytes, const std::string& label) {
  if (bytes <= bytes_) return;
  if (committed_)
    fail("driver: blob '{}' needs {} bytes of scratch, but the shared arena is in use already with {} "
         "(load every executable that shares it before recording command lists)", label, bytes, bytes_);
  bytes_ = bytes;
}

uint8_t* ScratchArena::commit() {
  if (!committed_) {
    mem_ = AlignedBuffer(static_cast<size_t>(bytes_), huge_);
    committed_ = true;
  }
  return mem_.data();
}

// ---------------------------------------------------------------- Executable

namespace {
void patch(std::vector<blob::TaskDesc>& tasks, const blob::Reloc& r, uint64_t value) {
  std::memcpy(reinterpret_cast<uint8_t*>(tasks.data()) + r.offset, &value, sizeof value);
}
}  // namespace

Executable::Executable(std::span<const uint8_t> bytes, const std::string& label, const WeightsBank& bank,
                       device::Device& dev, std::shared_ptr<ScratchArena> arena)
    : label_(label), img_(blob::read_blob(bytes.data(), bytes.size(), label)), dev_(dev),
      arena_(arena ? std::move(arena) : std::make_shared<ScratchArena>()) {
  // Memory by section kind: the NOBITS scratch section is reserved in the arena (allocated, zeroed,
  // when the first command list is recorded); constants are copied; the task section is copied so
  // it can be patched.
  arena_->reserve(img_.scratch_bytes, label_);
  consts_ = AlignedBuffer(img_.consts.size());
  if (!img_.consts.empty()) std::memcpy(consts_.data(), img_.consts.data(), img_.consts.size());
  template_ = img_.tasks;
  std::vector<const void*> weights;
  for (const blob::WeightRef& w : img_.weights) weights.push_back(bank.resolve(w));

  io_relocs_.resize(img_.ios.size());
  for (const blob::Reloc& r : img_.relocs) {
    switch (r.kind) {
      case blob::RelocKind::Scratch: scratch_relocs_.push_back(&r); break;
      case blob::RelocKind::Const: patch(template_, r, reinterpret_cast<uint64_t>(consts_.data()) + static_cast<uint64_t>(r.addend)); break;
      case blob::RelocKind::Weight: patch(template_, r, reinterpret_cast<uint64_t>(weights.at(r.index)) + static_cast<uint64_t>(r.addend)); break;
      case blob::RelocKind::Io: io_relocs_.at(r.index).push_back(&r); break;
    }
  }
  // The device sizes its own resources from ops and shapes; no operand address is final yet.
  dev_.prepare(device::Program{template_.data(), template_.size(), img_.barriers.data(), img_.barriers.size()});
}

int Executable::io_index(const std::string& name) const {
  for (size_t i = 0; i < img_.ios.size(); ++i)
    if (img_.ios[i].name == name) return static_cast<int>(i);
  return -1;
}

// ---------------------------------------------------------------- CommandList

CommandList::CommandList(const Executable& exe) : exe_(exe), tasks_(exe.template_), bound_(exe.img_.ios.size(), false) {
  const uint64_t base = reinterpret_cast<uint64_t>(exe.arena_->commit());
  for (const blob::Reloc* r : exe.scratch_relocs_) patch(tasks_, *r, base + static_cast<uint64_t>(r->addend));
}

void CommandList::bind(int index, void* data, size_t bytes) {
  if (index < 0 || static_cast<size_t>(index) >= bound_.size())
    fail("driver: blob '{}' has no I/O #{}", exe_.label(), index);
  const blob::IoDesc& io = exe_.io(index);
  if (bytes < io.bytes)
    fail("driver: blob '{}': buffer for '{}' has {} bytes, needs {}", exe_.label(), io.name, bytes, io.bytes);
  if (!data) fail("driver: blob '{}': null buffer for '{}'", exe_.label(), io.name);
  for (const blob::Reloc* r : exe_.io_relocs_[static_cast<size_t>(index)])
    patch(tasks_, *r, reinterpret_cast<uint64_t>(data) + static_cast<uint64_t>(r->addend));
  bound_[static_cast<size_t>(index)] = true;
}

void CommandList::bind(const std::string& name, void* data, size_t bytes) {
  const int i = exe_.io_index(name);
  if (i < 0) fail("driver: blob '{}' has no I/O named '{}'", exe_.label(), name);
  bind(i, data, bytes);
}

bool CommandList::fully_bound() const {
  for (bool b : bound_)
    if (!b) return false;
  return true;
}

device::Program CommandList::program() const {
  const blob::BlobImage& img = exe_.image();
  return device::Program{tasks_.data(), tasks_.size(), img.barriers.data(), img.barriers.size()};
}

// ---------------------------------------------------------------- Fence

void Fence::wait_polling() const {
  while (!signaled()) _mm_pause();
  std::lock_guard lock(m_);  // the signaller is done with this fence once it has released m_
}

void Fence::wait_blocking() const {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return signaled(); });
}

void Fence::reset() {
  std::lock_guard lock(m_);
  signaled_.store(false);
  error_ = nullptr;
}

void Fence::check() const {
  if (error_) std::rethrow_exception(error_);
}

void Fence::signal(std::exception_ptr err) {
  // Notify under the lock: a waiter may destroy the fence as soon as it can take m_.
  std::lock_guard lock(m_);
  error_ = err;
  signaled_.store(true, std::memory_order_release);
  cv_.notify_all();
}

// ---------------------------------------------------------------- Queue

Queue::Queue(device::Device& dev) : dev_(dev), thread_([this] { loop(); }) {}

Queue::~Queue() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Queue::submit(const CommandList& cl, Fence& fence) {
  if (!cl.fully_bound()) fail("driver: blob '{}' submitted with unbound I/O", cl.executable().label());
  fence.reset();
  {
    std::lock_guard lock(m_);
    pending_.emplace_back(&cl, &fence);
  }
  cv_.notify_one();
}

void Queue::run(const CommandList& cl, bool polling) {
  Fence f;
  submit(cl, f);
  if (polling) f.wait_polling(); else f.wait_blocking();
  f.check();
}

namespace {
// A blob's name in the trace: its label, less the folder and the "-<config hash>.blob" of a cached
// blob's path (npuw's BlobCache::path_for), e.g. "generate_b1_c256".
std::string blob_name(const std::string& label) {
  std::string name = label.substr(label.find_last_of('/') + 1);
  if (name.size() > 22 && name.ends_with(".blob") && name[name.size() - 22] == '-') name.resize(name.size() - 22);
  return name;
}
}  // namespace

void Queue::loop() {
  if (trace::on()) trace::name_thread("driver queue (device caller)");
  for (;;) {
    std::pair<const CommandList*, Fence*> job;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;
      job = pending_.front();
      pending_.pop_front();
    }
    std::exception_ptr err;
    const int64_t t0 = trace::on() ? trace::now_ns() : -1;
    try {
      dev_.execute(job.first->program());
    } catch (...) {
      err = std::current_exception();
    }
    if (t0 >= 0) trace::span("driver", "blob " + blob_name(job.first->executable().label()), t0, trace::now_ns());
    job.second->signal(err);
  }
}

}  // namespace npullm::driver

// Counting CPU allocator and RSS readings; see memory.h.
#include "frugal/core/memory.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "frugal/core/compat.h"

namespace frugal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::atomic<int64_t> g_now{0};
std::atomic<int64_t> g_peak{0};
std::atomic<bool> g_installed{false};
std::atomic<int64_t> g_limit{0};

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

#if FRUGAL_TORCH_AT_LEAST(2, 0)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    const int64_t limit = g_limit.load();
    if (limit > 0 && g_now.load() + static_cast<int64_t>(n) > limit)
      compat::throw_out_of_memory(
          fmt::format("CPU out of memory: allocating {:.1f} MiB would take live tensor memory to {:.1f} MiB, "
                      "above [memory] limit_mb = {:.1f} MiB; lower data.micro_batch (frugal tune finds one "
                      "that fits) or raise memory.limit_mb",
                      static_cast<double>(n) / kMiB, static_cast<double>(g_now.load() + static_cast<int64_t>(n)) / kMiB,
                      static_cast<double>(limit) / kMiB));
    c10::DataPtr p = base_->allocate(n);
    void* raw = p.release_context();  // the base allocator's context is its data pointer
    if (raw) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[raw] = n;
    }
    const int64_t now = g_now.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
    int64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
    return {raw, raw, &CountingAllocator::free, p.device()};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::free; }

#if FRUGAL_TORCH_AT_LEAST(2, 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif

  static void free(void* p) {
    if (!p) return;
    auto* self = instance();
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->sizes_.find(p);
      if (it != self->sizes_.end()) {
        n = it->second;
        self->sizes_.erase(it);
      }
    }
    g_now.fetch_sub(static_cast<int64_t>(n));
    self->base_->raw_deleter()(p);
  }

  static CountingAllocator*& instance() {
    static CountingAllocator* inst = nullptr;
    return inst;
  }

 private:
  c10::Allocator* base_;
  mutable std::mutex mu_;
  mutable std::unordered_map<void*, size_t> sizes_;
};

int64_t status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(in, line))
    if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size())) * 1024;
  return 0;
}

}  // namespace

void install_counting_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto* a = new CountingAllocator(c10::GetDefaultCPUAllocator());  // lives for the process
    CountingAllocator::instance() = a;
    c10::SetCPUAllocator(a, /*priority=*/100);
    g_installed = true;
  });
}

bool counting_allocator_installed() { return g_installed; }

bool keep_freed_memory_in_process() {
#if defined(__GLIBC__)
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit systems; setting either value
  // also turns off glibc's own threshold adjustment (which trims the heap again and again).
  static const bool ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1 &&
                         mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
  return ok;
#else
  return false;
#endif
}

int64_t tensor_bytes_now() { return g_now.load(); }
int64_t tensor_bytes_peak() { return g_peak.load(); }
void reset_tensor_bytes_peak() { g_peak.store(g_now.load()); }
void set_tensor_bytes_limit(int64_t bytes) { g_limit.store(bytes > 0 ? bytes : 0); }
int64_t tensor_bytes_limit() { return g_limit.load(); }

int64_t cgroup_memory_limit_bytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string v;
    if (!(in >> v) || v == "max") continue;
    try {
      const long long b = std::stoll(v);
      // cgroup v1 reports "no limit" as a huge page-aligned number.
      if (b > 0 && b < (int64_t{1} << 60)) return b;
    } catch (const std::exception&) {
    }
  }
  return 0;
}

int64_t resolve_tensor_bytes_limit(int64_t limit_mb) {
  if (limit_mb > 0) return limit_mb * 1024 * 1024;
  const int64_t cg = cgroup_memory_limit_bytes();
  if (cg <= 0) return 0;
  const int64_t outside = std::max<int64_t>(0, rss_now_bytes() - tensor_bytes_now());
  return std::max<int64_t>(1, cg - outside);
}

int64_t rss_peak_bytes() { return status_kb("VmHWM"); }
int64_t rss_now_bytes() { return status_kb("VmRSS"); }

}  // namespace frugal

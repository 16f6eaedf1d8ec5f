// Phase spans; see phase_trace.h.
#include "frugal/core/phase_trace.h"

#include <mutex>

namespace frugal {
namespace {
std::mutex g_trace_mu;
std::vector<PhaseSpanRecord> g_spans;
int64_t ns(PhaseTrace::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

std::atomic<bool> PhaseTrace::active_{false};
std::atomic<int64_t> PhaseTrace::step_{0};

void PhaseTrace::start() {
  std::lock_guard<std::mutex> lock(g_trace_mu);
  g_spans.clear();
  active_.store(true);
}

std::vector<PhaseSpanRecord> PhaseTrace::stop() {
  std::lock_guard<std::mutex> lock(g_trace_mu);
  active_.store(false);
  std::vector<PhaseSpanRecord> out;
  out.swap(g_spans);
  return out;
}

void PhaseTrace::record(const char* name, Clock::time_point begin, Clock::time_point end) {
  std::lock_guard<std::mutex> lock(g_trace_mu);
  if (!active_.load()) return;
  g_spans.push_back({name, ns(begin), ns(end), step_.load(std::memory_order_relaxed)});
}

}  // namespace frugal

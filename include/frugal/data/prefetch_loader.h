// A bounded, ordered prefetching loader. `make(k)` builds batch k (it must be a pure function of
// k, which is what makes batches independent of the worker count); worker threads build batches
// ahead of the consumer, at most `prefetch` of them in flight or waiting, and next() hands them
// out strictly in order k, k+1, ... Batch k goes to whichever worker claims it first; ordering
// is restored by index, so the output is identical for 0, 1 or N workers.
//
//   PrefetchLoader<HostBatch> loader([&](int64_t k) { return build(k); }, /*workers=*/2,
//                                    /*prefetch=*/4, /*first=*/0);
//   HostBatch b = loader.next();
//
// workers = 0 builds every batch inline in next() (for debugging and for tests). An exception
// thrown by make(k) in a worker travels as std::exception_ptr and is rethrown by the next() that
// would have returned batch k, with its original type and message. Threads are joined in the
// destructor and in seek(). Not thread-safe: one consumer thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace frugal {

template <class T>
class PrefetchLoader {
 public:
  using Make = std::function<T(int64_t)>;

  PrefetchLoader(Make make, int workers, int prefetch, int64_t first = 0)
      : make_(std::move(make)),
        workers_(workers < 0 ? 0 : workers),
        prefetch_(prefetch < 1 ? 1 : prefetch),
        next_(first),
        claim_(first) {
    start();
  }
  ~PrefetchLoader() { stop(); }
  PrefetchLoader(const PrefetchLoader&) = delete;
  PrefetchLoader& operator=(const PrefetchLoader&) = delete;

  // The index of the batch the next call to next() returns.
  int64_t next_index() const { return next_; }

  T next() {
    if (workers_ == 0) return make_(next_++);
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_.count(next_) > 0; });
    auto node = ready_.extract(next_);
    ++next_;
    lock.unlock();
    space_cv_.notify_all();
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    return std::move(node.mapped().value);
  }

  // Continues from batch `index`: drops everything prefetched and restarts the workers there.
  void seek(int64_t index) {
    if (index == next_) return;
    stop();
    ready_.clear();
    next_ = claim_ = index;
    stopping_ = false;
    start();
  }

 private:
  struct Slot {
    T value{};
    std::exception_ptr error;
  };

  void start() {
    for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { work(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    space_cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  void work() {
    for (;;) {
      int64_t k;
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_cv_.wait(lock, [&] { return stopping_ || claim_ < next_ + prefetch_; });
        if (stopping_) return;
        k = claim_++;
      }
      Slot slot;
      try {
        slot.value = make_(k);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(k, std::move(slot));
      }
      ready_cv_.notify_all();
    }
  }

  Make make_;
  const int workers_, prefetch_;
  int64_t next_;   // the next batch to hand out (consumer side)
  int64_t claim_;  // the next batch a worker will build; claim_ < next_ + prefetch_
  bool stopping_ = false;
  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  std::map<int64_t, Slot> ready_;  // built batches (or their errors) awaiting next()
  std::vector<std::thread> threads_;
};

}  // namespace frugal

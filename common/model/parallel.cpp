#include "common/model/parallel.h"

namespace h3pipe::model {

ThreadPool::ThreadPool(int threads) {
  const int extra = threads > 1 ? threads - 1 : 0;
  workers_.reserve(static_cast<std::size_t>(extra));
  for (int i = 0; i < extra; ++i) workers_.emplace_back([this, i] { worker_loop(i + 1); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(const std::function<void(std::size_t, int)>* fn, std::size_t tasks,
                       int worker) {
  for (;;) {
    const std::size_t t = next_.fetch_add(1, std::memory_order_relaxed);
    if (t >= tasks) return;
    (*fn)(t, worker);
  }
}

void ThreadPool::worker_loop(int id) {
  std::uint64_t seen = 0;
  for (;;) {
    const std::function<void(std::size_t, int)>* fn = nullptr;
    std::size_t tasks = 0;
    {
      std::unique_lock lk(mu_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      // Woken after that run already returned: nothing to do, and next_ must not be touched (a
      // new run may reset it at any moment, and a stray increment would skip one of its tasks).
      if (!fn_) continue;
      fn = fn_;  // consistent snapshot: run() cannot return while busy_ > 0
      tasks = tasks_;
      ++busy_;
    }
    drain(fn, tasks, id);
    {
      std::lock_guard lk(mu_);
      --busy_;
    }
    done_.notify_one();
  }
}

void ThreadPool::run(std::size_t tasks, const std::function<void(std::size_t, int)>& fn) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1) {
    for (std::size_t t = 0; t < tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard lk(mu_);
    fn_ = &fn;
    tasks_ = tasks;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  drain(&fn, tasks, 0);
  std::unique_lock lk(mu_);
  // Workers that woke for this generation finish their current task before busy_ drops; a
  // worker that has not woken yet will find next_ >= tasks_ and do nothing.
  done_.wait(lk, [&] { return busy_ == 0 && next_.load(std::memory_order_relaxed) >= tasks_; });
  fn_ = nullptr;
}

}  // namespace h3pipe::model

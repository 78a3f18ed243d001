#pragma once
// A small fixed-size worker pool for the builtin model.  The model does its own parallelism and
// calls OpenBLAS single-threaded from each worker (openblas_set_num_threads(1) is pinned at
// load): OpenBLAS's own threads busy-wait after each call and would steal the cores our
// softmax/norm/im2col work needs.
//
// Determinism: work is cut into tasks whose boundaries do not depend on the number of threads;
// each task writes its own disjoint output and no reduction crosses tasks.  So results are the
// same bytes whatever the thread count and whichever worker ran a task.
//
// Threading: run() is called by one thread at a time (the model's owner); it blocks until every
// task is done.  Idle workers sleep on a condition variable (no spinning).
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace h3pipe::model {

class ThreadPool final {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, worker) for task in [0, tasks); worker in [0, size()) identifies per-worker
  // scratch.  The calling thread works too.  fn must not throw.
  void run(std::size_t tasks, const std::function<void(std::size_t task, int worker)>& fn);

 private:
  void worker_loop(int id);
  void drain(const std::function<void(std::size_t, int)>* fn, std::size_t tasks, int worker);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(std::size_t, int)>* fn_ = nullptr;
  std::size_t tasks_ = 0;
  std::atomic<std::size_t> next_{0};
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace h3pipe::model

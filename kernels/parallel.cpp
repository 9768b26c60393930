#include "kernels/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace saccade::kernels {
namespace {

// Workers sleep on a condition variable; a job is a task function plus an atomic
// counter from which every participant claims indices.
class WorkerPool {
 public:
  static WorkerPool& instance() {
    static WorkerPool pool(hardware_threads() - 1);
    return pool;
  }

  // Returns false (and runs nothing) when another job holds the pool.
  bool try_run(int num_threads, int num_tasks, const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> job_lock(job_mutex_, std::try_to_lock);
    if (!job_lock.owns_lock()) return false;
    const int helpers = std::min<int>(num_threads - 1, static_cast<int>(workers_.size()));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      num_tasks_ = num_tasks;
      next_.store(0);
      active_helpers_ = helpers;
      pending_helpers_ = helpers;
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_helpers_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  explicit WorkerPool(int num_workers) {
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this, i] { loop(i); });
  }

  void loop(int index) {
    unsigned long seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && index < active_helpers_); });
        if (stop_) return;
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_helpers_ == 0) done_.notify_one();
    }
  }

  void work() {
    for (int i = next_.fetch_add(1); i < num_tasks_; i = next_.fetch_add(1)) {
      try {
        (*task_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;      // guards the fields below
  std::condition_variable wake_, done_;
  const std::function<void(int)>* task_ = nullptr;
  int num_tasks_ = 0;
  std::atomic<int> next_{0};
  int active_helpers_ = 0, pending_helpers_ = 0;
  unsigned long generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace

int hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int num_threads, int num_tasks, const std::function<void(int)>& task) {
  if (num_tasks <= 0) return;
  if (num_threads <= 0) num_threads = hardware_threads();
  num_threads = std::min(num_threads, num_tasks);
  if (num_threads > 1 && WorkerPool::instance().try_run(num_threads, num_tasks, task)) return;
  for (int i = 0; i < num_tasks; ++i) task(i);
}

}  // namespace saccade::kernels

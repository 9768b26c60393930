// The learners of one generation as a c10d process group: rendezvous through
// the job's store (the coordinator's, over the authenticated control link), then
// gradient all-reduce over Gloo (CPU) or NCCL (CUDA), chosen by device. This file is the thin
// adapter between saccade and LibTorch's c10d, whose classes differ between 1.13 and 2.x (Backend
// vs ProcessGroup, Work): the rest of the learner sees only this interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "control/rendezvous_store.h"

namespace at {
class Tensor;
}

namespace saccade::learner {

struct LearnerGroupOptions {
  // The job's rendezvous store: the coordinator's, reached over the learner's
  // authenticated control link (keys of this generation only). Unset: a plain
  // TCPStore at store_host:store_port served by rank 0 (saccade bench allreduce
  // only; it listens on every interface and admits anyone: never a job's).
  control::StoreTransport store;
  std::string store_host;
  uint16_t store_port = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t generation = 0;            // keys of each generation live under their own prefix
  std::chrono::milliseconds timeout;  // rendezvous and every collective (never c10d's 30 min)
  std::string device = "cpu";         // "cpu": Gloo; "cuda:N": NCCL
  std::string local_host;             // this node's address: Gloo and NCCL listen only there
};

// Rank 0's TCPStore server, for `saccade bench allreduce` (a job's learners use
// the coordinator's store). It outlives generations: each meets under a fresh
// key prefix.
class StoreServer {
 public:
  StoreServer(const std::string& host, uint16_t port, int world_size,
              std::chrono::milliseconds timeout);
  ~StoreServer();
  bool serves(const std::string& host, uint16_t port) const {
    return host == host_ && port == port_;
  }

  struct Impl;
  std::unique_ptr<Impl> impl_;  // owns the c10d store

 private:
  std::string host_;
  uint16_t port_ = 0;
};

class LearnerGroup {
 public:
  // Joins generation `options.generation`: blocks until all world_size ranks
  // joined. Without options.store, rank 0 passes its store server. Throws
  // std::runtime_error naming the store on timeout or failure.
  static std::unique_ptr<LearnerGroup> join(const LearnerGroupOptions& options,
                                            StoreServer* server);
  ~LearnerGroup();

  // Sums `t` in place over the group. Throws (c10::Error or std::runtime_error)
  // when a peer is gone or the collective times out.
  void all_reduce_sum(at::Tensor& t);
  void all_reduce_max(at::Tensor& t);
  // Begins summing `t` in place and returns the wait that completes it (within the
  // group's timeout; it throws as all_reduce_sum does). `t` must live until then.
  std::function<void()> start_all_reduce_sum(at::Tensor& t);
  void barrier();
  const char* backend() const;

 private:
  struct Impl;
  explicit LearnerGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;  // owns the store client and the process group
};

}  // namespace saccade::learner

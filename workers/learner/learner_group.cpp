#include "workers/learner/learner_group.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef SACCADE_LEARNER_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <stdexcept>

namespace saccade::workers {

// c10d's group type: ProcessGroup in 1.13; in 2.x the Gloo and NCCL classes
// are Backends, and both still answer allreduce/barrier with a Work to wait on.
#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreServer::StoreServer(const std::string& host, uint16_t port, int world_size,
                         std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>()), host_(host), port_(port) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = true;
  o.numWorkers = world_size;
  o.waitWorkers = false;  // generations meet under their own prefixes, later
  o.timeout = timeout;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "c10d store: cannot serve on {}:{} (cluster.store_port): {}", host, port, e.what()));
  }
}

StoreServer::~StoreServer() = default;

struct LearnerGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> client;  // null on rank 0 (it uses its server)
  c10::intrusive_ptr<c10d::Store> store;      // this generation's prefix
  c10::intrusive_ptr<C10dGroup> group;
  std::string backend;
  std::chrono::milliseconds timeout;

  void all_reduce(at::Tensor& t, c10d::ReduceOp op) {
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = timeout;
    group->allreduce(tensors, o)->wait(timeout);
  }
};

std::unique_ptr<LearnerGroup> LearnerGroup::join(const LearnerGroupOptions& o,
                                                 StoreServer* server) {
  auto impl = std::make_unique<Impl>();
  impl->timeout = o.timeout;
  const std::string where = fmt::format("{}:{}", o.store_host, o.store_port);
  try {
    c10::intrusive_ptr<c10d::Store> base;
    if (server) {
      base = server->impl_->store;
    } else {
      c10d::TCPStoreOptions so;
      so.port = o.store_port;
      so.isServer = false;
      so.timeout = o.timeout;
      impl->client = c10::make_intrusive<c10d::TCPStore>(o.store_host, so);
      base = impl->client;
    }
    base->setTimeout(o.timeout);
    impl->store = c10::make_intrusive<c10d::PrefixStore>(
        fmt::format("saccade/generation/{}", o.generation), base);
    const torch::Device device(o.device);
    if (device.is_cuda()) {
#ifdef SACCADE_LEARNER_NCCL
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = o.timeout;
      impl->group =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(impl->store, o.rank, o.world_size, options);
      impl->backend = "nccl";
#else
      throw std::runtime_error("device " + o.device +
                               " needs NCCL: this build has no CUDA LibTorch with NCCL");
#endif
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(o.local_host));
      impl->group =
          c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, o.rank, o.world_size, options);
      impl->backend = "gloo";
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(
        fmt::format("learner rendezvous (generation {}, rank {} of {}) at {}: {}", o.generation,
                    o.rank, o.world_size, where, e.what()));
  }
  return std::unique_ptr<LearnerGroup>(new LearnerGroup(std::move(impl)));
}

LearnerGroup::LearnerGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LearnerGroup::~LearnerGroup() = default;

void LearnerGroup::all_reduce_sum(at::Tensor& t) {
  impl_->all_reduce(t, c10d::ReduceOp::SUM);
}

void LearnerGroup::all_reduce_max(at::Tensor& t) {
  impl_->all_reduce(t, c10d::ReduceOp::MAX);
}

void LearnerGroup::barrier() {
  c10d::BarrierOptions o;
  o.timeout = impl_->timeout;
  impl_->group->barrier(o)->wait(impl_->timeout);
}

const char* LearnerGroup::backend() const {
  return impl_->backend.c_str();
}

}  // namespace saccade::workers

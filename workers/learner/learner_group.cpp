#include "workers/learner/learner_group.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef SACCADE_LEARNER_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>
#include <stdexcept>

#include "control/control.h"
#include "workers/learner/coordinator_store.h"

namespace saccade::learner {

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

// NCCL picks the interface it listens on (its bootstrap and socket transport)
// by name, not by address: unless the operator chose one, it gets the interface
// that holds the node's configured address, so it does not listen on another
// network of the host. (InfiniBand traffic is not TCP and is not affected.)
[[maybe_unused]] void pin_nccl_interface(const std::string& host) {
  if (std::getenv("NCCL_SOCKET_IFNAME") != nullptr) return;
  const std::string name = control::interface_of(host);
  if (name.empty()) {
    spdlog::warn(
        "no local interface holds {}'s address: NCCL picks its own (set "
        "NCCL_SOCKET_IFNAME)",
        host);
    return;
  }
  setenv("NCCL_SOCKET_IFNAME", ("=" + name).c_str(), 1);  // "=": this name exactly
  spdlog::info("NCCL listens on interface {} (the node's address {})", name, host);
}

struct LearnerGroup::Impl {
  c10::intrusive_ptr<c10d::TCPStore> client;  // bench only; null on rank 0 (it uses its server)
  c10::intrusive_ptr<c10d::Store> store;      // this generation's prefix
  c10::intrusive_ptr<C10dGroup> group;
  std::string backend;
  std::chrono::milliseconds timeout;

  auto start_all_reduce(at::Tensor& t, c10d::ReduceOp op) {
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    o.timeout = timeout;
    return group->allreduce(tensors, o);
  }
  void all_reduce(at::Tensor& t, c10d::ReduceOp op) { start_all_reduce(t, op)->wait(timeout); }
};

std::unique_ptr<LearnerGroup> LearnerGroup::join(const LearnerGroupOptions& o,
                                                 StoreServer* server) {
  auto impl = std::make_unique<Impl>();
  impl->timeout = o.timeout;
  const std::string where = o.store ? std::string("the coordinator's rendezvous store")
                                    : fmt::format("{}:{}", o.store_host, o.store_port);
  try {
    c10::intrusive_ptr<c10d::Store> base;
    if (o.store) {
      // The coordinator keeps one map per generation: no prefix needed.
      impl->store = make_coordinator_store(o.store, o.timeout);
    } else if (server) {
      base = server->impl_->store;
    } else {
      c10d::TCPStoreOptions so;
      so.port = o.store_port;
      so.isServer = false;
      so.timeout = o.timeout;
      impl->client = c10::make_intrusive<c10d::TCPStore>(o.store_host, so);
      base = impl->client;
    }
    if (base) {
      base->setTimeout(o.timeout);
      impl->store = c10::make_intrusive<c10d::PrefixStore>(
          fmt::format("saccade/generation/{}", o.generation), base);
    }
    const torch::Device device(o.device);
    if (device.is_cuda()) {
#ifdef SACCADE_LEARNER_NCCL
      pin_nccl_interface(o.local_host);
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
      // Gloo's pairs listen on the address the node's host resolves to, never on every interface.
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

std::function<void()> LearnerGroup::start_all_reduce_sum(at::Tensor& t) {
  auto work = impl_->start_all_reduce(t, c10d::ReduceOp::SUM);
  return [work, timeout = impl_->timeout] { work->wait(timeout); };
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

}  // namespace saccade::learner

#include "workers/ssl/gradient_buckets.h"

#include <torch/torch.h>

#include <mutex>
#include <stdexcept>
#include <vector>

namespace saccade::ssl {

struct GradientBuckets::Impl {
  struct Slot {
    torch::Tensor compute, master;
    size_t bucket = 0;
    int64_t offset = 0;  // in the bucket's flat buffer
    bool filled = false;
    unsigned hook = 0;
  };
  struct Bucket {
    torch::Tensor flat;  // fp32
    std::vector<size_t> slots;
    size_t missing = 0;  // gradients not yet copied in this step
    AllReduceWait wait;
  };
  Collectives collectives;
  bool overlap = false;
  bool armed = false;
  bool separate = false;  // compute parameters are copies, not the masters
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  size_t next_start = 0;  // buckets start in index order on every learner
  int64_t started_early = 0;
  std::mutex mutex;  // hooks run on autograd's threads

  // The slot's region of its bucket, in the parameter's shape.
  torch::Tensor region(const Slot& slot) {
    return buckets[slot.bucket]
        .flat.narrow(0, slot.offset, slot.master.numel())
        .view_as(slot.master);
  }

  // One parameter's gradient into its bucket.
  void put(Slot& slot, const torch::Tensor& grad) {
    region(slot).copy_(grad);
    slot.filled = true;
    --buckets[slot.bucket].missing;
  }

  // Starts every bucket, in order, whose gradients are all in (or all of them: `force`).
  void start_ready(bool force) {
    while (next_start < buckets.size() && (force || buckets[next_start].missing == 0)) {
      Bucket& b = buckets[next_start++];
      for (const size_t s : b.slots) {
        if (slots[s].filled) continue;
        slots[s].filled = true;
        region(slots[s]).zero_();
      }
      b.missing = 0;
      if (overlap) {
        b.wait = collectives.start_sum(b.flat);
        if (!force) ++started_early;
      } else {
        collectives.sum(b.flat);
      }
    }
  }

  void take(size_t s, const torch::Tensor& grad) {
    std::lock_guard lock(mutex);
    Slot& slot = slots[s];
    if (!armed) return;
    // Autograd hands a parameter its summed gradient once per backward pass; a second one
    // would come after its bucket may have left (DDP refuses this case too).
    if (slot.filled)
      throw std::logic_error("GradientBuckets: a second gradient for one parameter in one pass");
    put(slot, grad);
    start_ready(/*force=*/false);
  }
};

GradientBuckets::GradientBuckets(const NamedParameters& compute, const NamedParameters& masters,
                                 Collectives collectives, bool overlap, int64_t bucket_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (compute.size() != masters.size())
    throw std::invalid_argument("GradientBuckets: compute and master parameters differ in number");
  if (!collectives.sum || (overlap && !collectives.start_sum))
    throw std::invalid_argument("GradientBuckets: needs the learners' all-reduce");
  m.collectives = std::move(collectives);
  m.overlap = overlap;
  // Reverse registration order: backward produces the last layers' gradients first. A
  // bucket closes once it holds bucket_bytes or more.
  int64_t numel = 0;  // of the bucket being filled
  for (size_t i = masters.size(); i-- > 0;) {
    const torch::Tensor& master = masters[i].second;
    if (compute[i].second.sizes() != master.sizes())
      throw std::invalid_argument("GradientBuckets: parameter " + masters[i].first +
                                  " has other shapes in its compute copy");
    m.separate = m.separate || !compute[i].second.is_same(master);
    // A frozen parameter has no gradient on any learner: none to average, none to give
    // (the optimiser skips it, as with one learner).
    if (!compute[i].second.requires_grad()) continue;
    if (m.buckets.empty() || numel * 4 >= bucket_bytes) {
      m.buckets.emplace_back();
      numel = 0;
    }
    m.slots.push_back({compute[i].second, master, m.buckets.size() - 1, numel});
    m.buckets.back().slots.push_back(m.slots.size() - 1);
    numel += master.numel();
  }
  for (Impl::Bucket& b : m.buckets) {
    int64_t total = 0;
    for (const size_t s : b.slots) total += m.slots[s].master.numel();
    b.flat = torch::zeros({total}, m.slots[b.slots[0]].master.options().dtype(torch::kFloat));
  }
  if (!overlap) return;
  for (size_t s = 0; s < m.slots.size(); ++s)
    m.slots[s].hook = m.slots[s].compute.register_hook(
        [impl = impl_.get(), s](const torch::Tensor& grad) { impl->take(s, grad); });
}

GradientBuckets::~GradientBuckets() {
  if (!impl_->overlap) return;
  for (Impl::Slot& slot : impl_->slots) slot.compute.remove_hook(slot.hook);
}

void GradientBuckets::arm() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  for (Impl::Slot& slot : m.slots) slot.filled = false;
  for (Impl::Bucket& b : m.buckets) {
    b.missing = b.slots.size();
    b.wait = nullptr;
  }
  m.next_start = 0;
  m.started_early = 0;
  m.armed = true;
}

void GradientBuckets::finish() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  m.armed = false;
  if (!m.overlap) {  // the gradients autograd accumulated, bucket by bucket
    for (Impl::Slot& slot : m.slots)
      if (slot.compute.grad().defined()) m.put(slot, slot.compute.grad());
  }
  m.start_ready(/*force=*/true);
  for (Impl::Bucket& b : m.buckets)
    if (b.wait) b.wait();
  torch::NoGradGuard no_grad;
  const double world = m.collectives.world_size;
  for (Impl::Bucket& b : m.buckets) b.flat.div_(world);
  for (Impl::Slot& slot : m.slots) {
    const torch::Tensor average = m.region(slot);
    if (slot.master.grad().defined()) {
      slot.master.mutable_grad().copy_(average);
    } else {
      slot.master.mutable_grad() = average.clone();
    }
    if (m.separate) slot.compute.mutable_grad() = torch::Tensor();
  }
}

int64_t GradientBuckets::started_during_backward() const {
  return impl_->started_early;
}

int64_t GradientBuckets::buckets() const {
  return static_cast<int64_t>(impl_->buckets.size());
}

}  // namespace saccade::ssl

#include "workers/ssl/optim.h"

#include <torch/torch.h>

#include "model/torch_compat.h"

#include <array>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

namespace saccade::ssl {
namespace {

bool has_component(const std::string& name, const std::string& component) {
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('.', start), name.size());
    if (name.compare(start, end - start, component) == 0 && end - start == component.size())
      return true;
    start = end + 1;
  }
  return false;
}

bool contains(const std::string& name, const char* part) {
  return name.find(part) != std::string::npos;
}

// Group index: 2 * last_layer + no_decay.
int group_index(bool last_layer, bool decay) {
  return 2 * (last_layer ? 1 : 0) + (decay ? 0 : 1);
}

}  // namespace

NamedParameters named_parameters(const torch::nn::Module& module) {
  NamedParameters out;
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    out.emplace_back(item.key(), item.value());
  return out;
}

bool exempt_from_weight_decay(const std::string& name, const at::Tensor& parameter) {
  if (parameter.dim() <= 1) return true;
  if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) return true;
  if (name == "bias" || contains(name, "norm") || contains(name, "gamma")) return true;
  for (const char* token :
       {"state_embed", "pos_embed", "cls_token", "register_tokens", "mask_token"}) {
    if (contains(name, token)) return true;
  }
  return false;
}

bool is_last_layer(const std::string& name) {
  return has_component(name, "last_layer");
}

namespace {

// libtorch keys an optimiser's per-parameter state by the parameter's TensorImpl:
// as a string up to 1.13, as the pointer from 2.0.
#if TORCH_VERSION_MAJOR >= 2
void* state_key(const at::Tensor& p) {
  return p.unsafeGetTensorImpl();
}
#else
std::string state_key(const at::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}
#endif

}  // namespace

struct StudentOptimizer::Impl {
  bool multi_tensor = true;
  std::vector<std::string> decay, no_decay;
  std::array<int, 4> torch_group{-1, -1, -1, -1};  // our group index -> torch param group
  std::unique_ptr<torch::optim::AdamW> adamw;
  std::vector<at::Tensor> parameters;

  torch::optim::AdamWOptions& options(int group) const {
    return static_cast<torch::optim::AdamWOptions&>(
        adamw->param_groups().at(static_cast<size_t>(torch_group.at(group))).options());
  }

  // libtorch's AdamW::step (no amsgrad) as foreach kernels over the parameters of a
  // group that share a step count, keeping the state in libtorch's AdamW so that
  // save()/load() and the per-parameter path read and write the same state.
  void multi_tensor_step() {
    torch::NoGradGuard no_grad;
    auto& states = adamw->state();
    for (auto& group : adamw->param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      // Parameters without a grad this step (frozen, cancelled) are skipped, as libtorch does.
      std::map<int64_t, std::vector<size_t>> by_step;  // step after this update -> params
      std::vector<torch::optim::AdamWParamState*> param_states(group.params().size());
      for (size_t i = 0; i < group.params().size(); ++i) {
        const at::Tensor& p = group.params()[i];
        if (!p.grad().defined()) continue;
        auto it = states.find(state_key(p));
        if (it == states.end()) {
          auto state = std::make_unique<torch::optim::AdamWParamState>();
          state->step(0);
          state->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          state->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          it = states.emplace(state_key(p), std::move(state)).first;
        }
        auto* state = static_cast<torch::optim::AdamWParamState*>(it->second.get());
        state->step(state->step() + 1);
        param_states[i] = state;
        by_step[state->step()].push_back(i);
      }
      const auto [beta1, beta2] = o.betas();
      for (const auto& [step, indices] : by_step) {
        std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
        for (const size_t i : indices) {
          params.push_back(group.params()[i]);
          grads.push_back(group.params()[i].grad());
          exp_avgs.push_back(param_states[i]->exp_avg());
          exp_avg_sqs.push_back(param_states[i]->exp_avg_sq());
        }
        if (o.weight_decay() != 0) at::_foreach_mul_(params, 1 - o.lr() * o.weight_decay());
        const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
        const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
        at::_foreach_mul_(exp_avgs, beta1);
        at::_foreach_add_(exp_avgs, grads, 1 - beta1);
        at::_foreach_mul_(exp_avg_sqs, beta2);
        at::_foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2);
        std::vector<at::Tensor> denom = at::_foreach_sqrt(exp_avg_sqs);
        at::_foreach_div_(denom, std::sqrt(bias_correction2));
        at::_foreach_add_(denom, o.eps());
        at::_foreach_addcdiv_(params, exp_avgs, denom, -o.lr() / bias_correction1);
      }
    }
  }
};

StudentOptimizer::StudentOptimizer(const NamedParameters& named, const AdamWSettings& settings)
    : impl_(std::make_unique<Impl>()) {
  impl_->multi_tensor = settings.multi_tensor;
  if (named.empty()) throw std::invalid_argument("StudentOptimizer needs at least one parameter");
  std::array<std::vector<at::Tensor>, 4> groups;
  for (const auto& [name, p] : named) {
    if (!p.defined()) throw std::invalid_argument("parameter '" + name + "' is undefined");
    const bool decay = !exempt_from_weight_decay(name, p);
    (decay ? impl_->decay : impl_->no_decay).push_back(name);
    groups[group_index(is_last_layer(name), decay)].push_back(p);
    impl_->parameters.push_back(p);
  }
  const auto defaults = torch::optim::AdamWOptions(0.0)
                            .betas({settings.beta1, settings.beta2})
                            .eps(settings.eps)
                            .weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  for (int g = 0; g < 4; ++g) {
    if (groups[g].empty()) continue;
    impl_->torch_group[g] = static_cast<int>(torch_groups.size());
    torch_groups.emplace_back(groups[g], std::make_unique<torch::optim::AdamWOptions>(defaults));
  }
  impl_->adamw = std::make_unique<torch::optim::AdamW>(std::move(torch_groups), defaults);
}

StudentOptimizer::~StudentOptimizer() = default;

void StudentOptimizer::apply_schedule(const ScheduleValues& values) {
  for (int g = 0; g < 4; ++g) {
    if (impl_->torch_group[g] < 0) continue;
    const bool last_layer = g >= 2, decay = (g % 2) == 0;
    impl_->options(g).lr(last_layer ? values.last_layer_lr : values.lr);
    impl_->options(g).weight_decay(decay ? values.weight_decay : 0.0);
  }
}

void StudentOptimizer::step() {
  if (impl_->multi_tensor) {
    impl_->multi_tensor_step();
  } else {
    impl_->adamw->step();
  }
}
void StudentOptimizer::zero_grad() {
  // Undefined, not zero: AdamW must skip a parameter that got no grad this step.
  for (at::Tensor& p : impl_->parameters) p.mutable_grad() = at::Tensor();
}
const std::vector<std::string>& StudentOptimizer::decay_names() const {
  return impl_->decay;
}
const std::vector<std::string>& StudentOptimizer::no_decay_names() const {
  return impl_->no_decay;
}

double StudentOptimizer::group_lr(bool last_layer, bool decay) const {
  const int g = group_index(last_layer, decay);
  if (impl_->torch_group[g] < 0) throw std::out_of_range("no such parameter group");
  return impl_->options(g).lr();
}

double StudentOptimizer::group_weight_decay(bool last_layer, bool decay) const {
  const int g = group_index(last_layer, decay);
  if (impl_->torch_group[g] < 0) throw std::out_of_range("no such parameter group");
  return impl_->options(g).weight_decay();
}

std::string StudentOptimizer::save() const {
  torch::serialize::OutputArchive archive;
  impl_->adamw->save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void StudentOptimizer::load(const std::string& bytes) {
  try {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    impl_->adamw->load(archive);
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string("optimizer state does not load: ") +
                             e.what_without_backtrace());
  }
}

at::Tensor clip_grad_norm(const NamedParameters& parameters, double max_norm, bool multi_tensor) {
  std::vector<at::Tensor> grads;
  for (const auto& [name, p] : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  }
  if (grads.empty())
    return parameters.empty()
               ? torch::zeros({})
               : torch::zeros({}, parameters.front().second.options().dtype(torch::kFloat));
  std::vector<at::Tensor> norms;
  if (multi_tensor) {
    norms = at::_foreach_norm(grads, 2);
  } else {
    for (const at::Tensor& g : grads) norms.push_back(g.norm(2));
  }
  // The expressions of libtorch's clip_grad_norm_, without its final read of the norm.
  const at::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  if (max_norm > 0) {
    const at::Tensor scale = torch::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
    if (multi_tensor)
      model::foreach_mul_(grads, scale);
    else
      for (at::Tensor& g : grads) g.mul_(scale);
  }
  return total.to(torch::kFloat);
}

int64_t cancel_last_layer_grads(const NamedParameters& parameters) {
  int64_t dropped = 0;
  for (const auto& [name, p] : parameters) {
    if (!is_last_layer(name) || !p.grad().defined()) continue;
    const_cast<at::Tensor&>(p).mutable_grad() = at::Tensor();
    ++dropped;
  }
  return dropped;
}

void ema_update(const NamedParameters& teacher, const NamedParameters& student, double momentum,
                bool multi_tensor) {
  if (!(momentum >= 0 && momentum <= 1))
    throw std::invalid_argument("ema momentum must be in [0, 1], got " + std::to_string(momentum));
  if (teacher.size() != student.size())
    throw std::invalid_argument("ema_update: teacher has " + std::to_string(teacher.size()) +
                                " parameters, student " + std::to_string(student.size()));
  for (size_t i = 0; i < teacher.size(); ++i) {
    const auto& [t_name, t] = teacher[i];
    const auto& [s_name, s] = student[i];
    if (t_name != s_name)
      throw std::invalid_argument("ema_update: parameter " + std::to_string(i) + " is '" + t_name +
                                  "' in the teacher but '" + s_name + "' in the student");
    if (t.sizes() != s.sizes())
      throw std::invalid_argument("ema_update: '" + t_name + "' has different shapes");
  }
  torch::NoGradGuard no_grad;
  if (multi_tensor) {
    std::vector<at::Tensor> t, s;
    for (size_t i = 0; i < teacher.size(); ++i) {
      t.push_back(teacher[i].second);
      s.push_back(student[i].second.detach());
    }
    at::_foreach_mul_(t, momentum);
    at::_foreach_add_(t, s, 1.0 - momentum);
    return;
  }
  for (size_t i = 0; i < teacher.size(); ++i) {
    at::Tensor t = teacher[i].second;
    t.mul_(momentum).add_(student[i].second.detach(), 1.0 - momentum);
  }
}

}  // namespace saccade::ssl

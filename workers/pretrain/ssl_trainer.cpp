#include "workers/pretrain/ssl_trainer.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "kernels/extract.h"
#include "model/backbone.h"
#include "model/device_stream.h"
#include "model/fused_ops.h"
#include "model/heads.h"
#include "model/torch_compat.h"
#include "model/weights.h"
#include "workers/pretrain/batch_stager.h"
#include "workers/pretrain/captured_pass.h"
#include "workers/ssl/gradient_buckets.h"
#include "workers/ssl/objective.h"
#include "workers/ssl/optim.h"
#include "workers/ssl/step_flops.h"
#include "workers/ssl/view_augment.h"
#include "workers/ssl/view_tensors.h"

#if SACCADE_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace saccade::pretrain {
namespace {

// Backbone + DINO head under one name space: "backbone.*", "head.*".
struct DinoNetImpl : torch::nn::Module {
  DinoNetImpl(const model::BackboneOptions& b, const model::DinoHeadOptions& h)
      : backbone(register_module("backbone", model::FovealBackbone(b))),
        head(register_module("head", model::DinoHead(h))) {}
  model::FovealBackbone backbone;
  model::DinoHead head;
};
TORCH_MODULE(DinoNet);

// DINO's centre [1, K] as a buffer, so that checkpoints save and load it as weights.
struct CenterImpl : torch::nn::Module {
  explicit CenterImpl(int64_t prototypes)
      : center(register_buffer("center", torch::zeros({1, prototypes}))) {}
  torch::Tensor center;
};
TORCH_MODULE(Center);

// The supervised baseline's targets [2, B, K]: each image's one-hot label in
// both target slots, so the sequential-to-global loss becomes the labelled
// cross-entropy of every student view with the same weights.
torch::Tensor label_targets(const data::SslBatch& batch, int64_t classes,
                            const torch::Device& device) {
  for (const int64_t label : batch.labels) {
    if (label < 0 || label >= classes)
      throw std::invalid_argument(fmt::format(
          "ssl.objective = \"supervised\": label {} of a batch image is not in [0, {}) (the "
          "data need labels and ssl.head_prototypes must equal the number of classes)",
          label, classes));
  }
  const torch::Tensor labels = ssl::host_to_device(batch.labels, device);
  return torch::one_hot(labels, classes).to(torch::kFloat32).unsqueeze(0).expand({2, -1, -1});
}

// Waits for the work queued on the device's current stream (not for a batch staged on
// another stream while the step runs).
void sync_current_stream(const torch::Device& device) {
#if SACCADE_TORCH_HAS_CUDA
  if (device.is_cuda()) c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#else
  (void)device;
#endif
}

// The values of 0-dim tensors of one device, read with one copy to the host (one wait for
// the device instead of one per value).
std::vector<double> read_to_host(const std::vector<torch::Tensor>& scalars) {
  std::vector<torch::Tensor> values;
  for (const torch::Tensor& t : scalars)
    values.push_back(t.detach().to(torch::kDouble).reshape({1}));
  const torch::Tensor host = torch::cat(values).to(torch::kCPU);
  const double* first = host.data_ptr<double>();
  return {first, first + host.numel()};
}

}  // namespace

struct SslTrainer::Impl {
  ssl::TrainerOptions options;
  ssl::Collectives collectives;
  torch::Device device;
  DinoNet student{nullptr}, teacher{nullptr};
  Center center{nullptr};  // options.ema_centering only
  ssl::NamedParameters student_params, teacher_params;
  std::unique_ptr<ssl::StudentOptimizer> optimizer;
  // ssl::Precision::kBf16Params only: bf16 copies of student and teacher that run the
  // passes; the fp32 modules above stay the master weights. Null otherwise.
  DinoNet student_bf16{nullptr}, teacher_bf16{nullptr};
  ssl::NamedParameters student_bf16_params, teacher_bf16_params;  // in master order
  std::vector<torch::Tensor> master_grads;        // kBf16Params: the masters' fp32 gradient buffers
  std::unique_ptr<ssl::GradientBuckets> buckets;  // more than one learner only
  // Held while a step updates weights, optimiser state and `step`, and by
  // save()/load(): a save from another thread (bounded drain) sees a whole step.
  std::mutex state_mutex;
  std::atomic<int64_t> step{0};
  std::unique_ptr<kernels::Extractor> extractor;     // tables of the batch's images, cut here
  std::unique_ptr<CapturedPass> teacher_pass;        // ssl.cuda_graphs: the teacher's forward
  std::unique_ptr<CapturedPass> student_carry_pass;  // ssl.cuda_graphs + batched_glimpses
  // ssl.prefetch_to_device on a GPU, or a GPU learner that cuts views (made at its first cut)
  std::unique_ptr<BatchStager> stager;

  Impl(const ssl::TrainerOptions& o, ssl::Collectives c)
      : options(o), collectives(std::move(c)), device(o.device) {
    options.backbone.validate();
    options.head.validate();
    if (collectives.world_size < 1)
      throw std::invalid_argument(
          fmt::format("world_size: expected >= 1, got {}", collectives.world_size));
    if (collectives.world_size > 1 && !collectives.sum)
      throw std::invalid_argument("world_size > 1 needs an all-reduce");
    const auto channels = static_cast<size_t>(options.backbone.channels);
    if (options.pixel_mean.size() != channels || options.pixel_std.size() != channels)
      throw std::invalid_argument(fmt::format(
          "pixel_mean and pixel_std: expected {} values each (one per channel), got {} and {}",
          channels, options.pixel_mean.size(), options.pixel_std.size()));
    torch::manual_seed(options.seed);
    student = DinoNet(options.backbone, options.head);
    teacher = DinoNet(options.backbone, options.head);
    model::load_modules({{"", teacher.get()}}, model::save_modules({{"", student.get()}}));
    student->to(device);
    teacher->to(device);
    if (options.ema_centering) {
      center = Center(options.head.n_prototypes);
      center->to(device);
    }
    for (auto& p : teacher->parameters()) p.set_requires_grad(false);
    teacher->eval();
    student_params = ssl::named_parameters(*student);
    teacher_params = ssl::named_parameters(*teacher);
    ssl::AdamWSettings adamw;
    adamw.multi_tensor = options.multi_tensor_update;
    optimizer = std::make_unique<ssl::StudentOptimizer>(student_params, adamw);
    if (options.precision == ssl::Precision::kBf16Params) {
      student_bf16 = DinoNet(options.backbone, options.head);
      teacher_bf16 = DinoNet(options.backbone, options.head);
      student_bf16->to(device, torch::kBFloat16);
      teacher_bf16->to(device, torch::kBFloat16);
      for (auto& p : teacher_bf16->parameters()) p.set_requires_grad(false);
      teacher_bf16->eval();
      student_bf16_params = ssl::named_parameters(*student_bf16);
      teacher_bf16_params = ssl::named_parameters(*teacher_bf16);
      refresh_bf16_copies();
    }
    if (options.cuda_graphs && !device.is_cuda()) {
      // One config serves a CPU smoke test and a GPU run, as ssl.precision does.
      spdlog::warn("ssl.cuda_graphs: the learner's device is {}; its passes run without graphs",
                   options.device);
    } else if (options.cuda_graphs) {
      if (options.precision == ssl::Precision::kBf16Autocast)
        throw std::invalid_argument(
            "ssl.cuda_graphs: needs ssl.precision = \"fp32\" or \"bf16-params\" (autocast's "
            "cache of cast weights cannot live in a CUDA graph)");
      // A graph folds LayerScale from the weights it reads in place, at every replay.
      if (!options.supervised)
        teacher_pass = std::make_unique<CapturedPass>([this](const std::vector<torch::Tensor>& in) {
          const model::ReuseFoldedLayerScale fold_in_the_graph(false);
          return teacher_logits({in[0], in[1]}, {in[2], in[3]});
        });
      if (options.batched_glimpses)
        student_carry_pass =
            std::make_unique<CapturedPass>([this](const std::vector<torch::Tensor>& in) {
              const model::ReuseFoldedLayerScale fold_in_the_graph(false);
              return std::vector{carry_states(in)};
            });
    }
    if (options.fused_mlp && options.backbone.gelu != model::BackboneOptions::Gelu::kTanh)
      throw std::invalid_argument(
          "ssl.fused_mlp: needs model.gelu = \"tanh\" (the GELU cuBLASLt's epilogues compute)");
    if ((options.fused_mlp || options.fused_bias_grad) && !device.is_cuda())
      spdlog::warn(
          "ssl.fused_mlp, ssl.fused_bias_grad: the learner's device is {}; its linear layers run "
          "LibTorch's operations",
          options.device);
    if (options.prefetch_to_device && device.is_cuda())
      stager = std::make_unique<BatchStager>(device);
    if (collectives.world_size > 1)
      buckets = std::make_unique<ssl::GradientBuckets>(
          student_bf16 ? student_bf16_params : student_params, student_params, collectives,
          options.overlap_all_reduce && static_cast<bool>(collectives.start_sum));
  }

  // The networks the passes run on: the bf16 copies with kBf16Params, else the masters.
  DinoNet& student_net() { return student_bf16 ? student_bf16 : student; }
  DinoNet& teacher_net() { return teacher_bf16 ? teacher_bf16 : teacher; }

  // Master weights -> their bf16 copies: after every update and load (multi-tensor copies:
  // one kernel per parameter would be ~300 launches a step).
  void refresh_bf16_copies() {
    if (!student_bf16) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> copies, masters;
    for (const auto* pairs : {&student_bf16_params, &teacher_bf16_params})
      for (const auto& [name, copy] : *pairs) copies.push_back(copy);
    for (const auto* pairs : {&student_params, &teacher_params})
      for (const auto& [name, master] : *pairs) masters.push_back(master);
    model::foreach_copy_(copies, masters);
  }

  // The bf16 copies' gradients -> the masters' fp32 gradients (a parameter without one
  // keeps none), so that the all-reduce, clipping and AdamW run in fp32 as with fp32 passes.
  // The fp32 gradients live in buffers kept from step to step, filled by multi-tensor copies.
  void gradients_to_masters() {
    if (!student_bf16) return;
    torch::NoGradGuard no_grad;
    master_grads.resize(student_params.size());
    std::vector<torch::Tensor> to, from;
    for (size_t i = 0; i < student_params.size(); ++i) {
      torch::Tensor& copy = student_bf16_params[i].second;
      if (!copy.grad().defined()) continue;
      if (!master_grads[i].defined()) master_grads[i] = torch::empty_like(student_params[i].second);
      to.push_back(master_grads[i]);
      from.push_back(copy.grad());
      student_params[i].second.mutable_grad() = master_grads[i];
    }
    model::foreach_copy_(to, from);
    for (auto& [name, copy] : student_bf16_params) copy.mutable_grad() = torch::Tensor();
  }

  // The five view sets of a batch on the device: uint8 pixels uploaded as they came (staged
  // during the step before with ssl.prefetch_to_device, else copied now) or cut here from
  // the shipped images, then augmented and normalised there.
  std::array<ssl::ViewTensors, 5> upload(const data::SslBatch& batch) {
    const std::array<const data::PixelViews*, 5> sets = view_sets(batch);
    std::optional<StagedBatch> staged;
    if (stager) staged = stager->take(batch);
    if (!staged && batch.cut_on_learner() && device.is_cuda()) {
      // The images through page-locked memory, so that their copy and the cut are queued
      // without the host waiting for the device.
      if (!stager) stager = std::make_unique<BatchStager>(device);
      stager->stage(batch);
      staged = stager->take(batch);
    }
    std::array<torch::Tensor, 5> cut;
    if (batch.cut_on_learner())
      cut = cut_on_device(batch, sets, staged ? &staged->images : nullptr);
    std::array<ssl::ViewTensors, 5> out;
    for (size_t i = 0; i < sets.size(); ++i) {
      const data::PixelViews& set = *sets[i];
      const ssl::ViewTensors raw = staged ? staged->views[i] : ssl::to_tensors(set, device);
      // The bf16 copies take bf16 inputs (augmented in fp32, rounded once on the way out).
      const at::ScalarType type = student_bf16 ? torch::kBFloat16 : torch::kFloat;
      out[i] = {ssl::augment_views(cut[i].defined() ? cut[i] : raw.patches, set.augment.data(),
                                   set.pieces, options.pixel_mean, options.pixel_std, type),
                raw.positions.to(type)};
    }
    return out;
  }

  // Builds the integral tables of the batch's shipped images on the device and cuts
  // every token's box in one extraction call queued on the current stream, rounded to uint8
  // as the data plane rounds (so that both sides give the same views). `images_on_device`:
  // the images already on a GPU (staged), else null and the batch's host images are cut.
  std::array<torch::Tensor, 5> cut_on_device(const data::SslBatch& batch,
                                             const std::array<const data::PixelViews*, 5>& sets,
                                             const std::vector<torch::Tensor>* images_on_device) {
    if (!extractor) {
      kernels::ExtractorOptions eo;
      eo.backend = device.is_cuda() ? kernels::Backend::kCuda : kernels::Backend::kCpu;
      eo.device = model::device_index(device);
      eo.num_threads = 0;
      eo.device_allocator = model::caching_device_allocator();  // one pool with the model's
      extractor = kernels::make_extractor(eo);
    }
    const int64_t channels = sets[0]->channels, p = sets[0]->patch_size;
    if (device.is_cuda() && images_on_device == nullptr)
      throw std::logic_error("cut_on_device: a GPU cuts images staged on it");
    std::vector<kernels::ImageView> images;
    for (size_t i = 0; i < batch.images.size(); ++i) {
      const data::ShippedImage& image = batch.images[i];
      const uint8_t* pixels =
          images_on_device ? (*images_on_device)[i].data_ptr<uint8_t>() : image.pixels.data();
      images.push_back({pixels, image.height, image.width, static_cast<int>(channels), 0});
    }
    std::vector<kernels::CropBox> boxes;
    for (const data::PixelViews* set : sets) {
      for (int64_t row = 0; row < set->views; ++row) {
        const int image = static_cast<int>(row % batch.batch_size);
        for (int64_t t = 0; t < set->tokens; ++t) {
          const float* b = set->boxes.data() + (row * set->tokens + t) * 4;
          boxes.push_back({b[0], b[1], b[2], b[3], image});
        }
      }
    }
    const auto n = static_cast<int64_t>(boxes.size());
    torch::Tensor all = torch::empty({n, channels, p, p}, torch::TensorOptions().device(device));
    extractor->extract_queued(images, boxes, static_cast<int>(p), all.data_ptr<float>(),
                              model::current_stream(device));
    all = (all + 0.5f).floor_().to(torch::kByte);  // box averages lie in [0, 255]
    std::array<torch::Tensor, 5> out;
    int64_t first = 0;
    for (size_t i = 0; i < sets.size(); ++i) {
      const int64_t rows = sets[i]->views * sets[i]->tokens;
      out[i] = all.narrow(0, first, rows).view({sets[i]->views, sets[i]->tokens, channels, p, p});
      first += rows;
    }
    return out;
  }

  // The teacher's head logits [B, K] of its global view and of its sequential view's final
  // step (the targets' inputs), without gradient.
  std::vector<torch::Tensor> teacher_logits(const ssl::ViewTensors& global,
                                            const ssl::ViewTensors& seq) {
    torch::NoGradGuard no_grad;
    DinoNet& net = teacher_net();
    const int64_t batch = global.patches.size(0);
    return {net->head->forward(
                net->backbone->step(global.patches, global.positions).state.select(1, 0)),
            run_sequence(net, seq, batch, /*all_steps=*/false).back()};
  }

  // The head's logits of the first state token, step by step through a sequential view.
  std::vector<torch::Tensor> run_sequence(DinoNet& net, const ssl::ViewTensors& seq, int64_t batch,
                                          bool all_steps) {
    const int64_t steps = seq.patches.size(0) / batch;
    torch::Tensor state;
    std::vector<torch::Tensor> logits;
    for (int64_t k = 0; k < steps; ++k) {
      const ssl::ViewTensors glimpse = seq.rows(k * batch, batch);
      model::StepOutput out =
          net->backbone->step(glimpse.patches, glimpse.positions, state);  // detaches state
      state = out.state;
      if (all_steps || k == steps - 1) logits.push_back(net->head->forward(out.state.select(1, 0)));
    }
    return logits;
  }

  // The states steps 1..S-2 of the student's sequential view hand on, without gradient:
  // in = {the state step 0 handed on [B, ...], those steps' patches and positions
  // [(S-2) B, ...]}; returns their states, [(S-2) B, n_state, width].
  torch::Tensor carry_states(const std::vector<torch::Tensor>& in) {
    torch::NoGradGuard no_grad;
    DinoNet& net = student_net();
    const int64_t batch = in[0].size(0);
    std::vector<torch::Tensor> states;
    torch::Tensor state = in[0];
    for (int64_t first = 0; first < in[1].size(0); first += batch) {
      state =
          net->backbone->step(in[1].narrow(0, first, batch), in[2].narrow(0, first, batch), state)
              .state;
      states.push_back(state);
    }
    return torch::cat(states, 0);
  }

  // The student's sequential view in two passes with gradient instead of one per step
  // (ssl.batched_glimpses). Steps carry DETACHED states, so a step's gradient depends on
  // its own inputs only: once a pass without gradient has computed the carried states,
  // steps 1..S-1 run as one batch of (S-1) x B. Step 0, without an incoming state, runs
  // alone: in every state_input mode its inputs differ in kind (no memory tokens, no
  // projection, no gate). The same losses and gradients for S-2 more step forwards (not
  // model FLOPs: they recompute, docs/model.md) and S-2 fewer passes with autograd.
  torch::Tensor run_student_sequence_batched(const ssl::ViewTensors& seq, int64_t batch) {
    DinoNet& net = student_net();
    const int64_t steps = seq.patches.size(0) / batch;
    const ssl::ViewTensors first = seq.rows(0, batch);
    const model::StepOutput first_out = net->backbone->step(first.patches, first.positions);
    std::vector<torch::Tensor> logits = {net->head->forward(first_out.state.select(1, 0))};
    if (steps > 1) {
      std::vector<torch::Tensor> carried = {first_out.state.detach()};  // into steps 1..S-1
      if (steps > 2) {
        const ssl::ViewTensors middle = seq.rows(batch, (steps - 2) * batch);  // steps 1..S-2
        const std::vector<torch::Tensor> in = {carried[0], middle.patches, middle.positions};
        carried.push_back(student_carry_pass ? (*student_carry_pass)(in)[0] : carry_states(in));
      }
      const ssl::ViewTensors rest = seq.rows(batch, (steps - 1) * batch);
      const model::StepOutput rest_out =
          net->backbone->step(rest.patches, rest.positions, torch::cat(carried, 0));
      logits.push_back(net->head->forward(rest_out.state.select(1, 0)));
    }
    return torch::cat(logits, 0).view({steps, batch, -1});
  }
};

std::vector<std::pair<std::string, double>> step_metrics(const StepStats& s) {
  return {{"loss", s.loss},
          {"dino", s.dino},
          {"koleo", s.koleo},
          {"global", s.global},
          {"local", s.local},
          {"sequential", s.sequential},
          {"lr", s.lr},
          {"wd", s.weight_decay},
          {"momentum", s.teacher_momentum},
          {"teacher_temp", s.teacher_temp},
          {"grad_norm", s.grad_norm},
          {"target_entropy", s.target_entropy},
          {"target_entropy_ratio", s.target_entropy_ratio},
          {"prototypes_used", static_cast<double>(s.prototypes_used)},
          {"cut_host_waits", static_cast<double>(s.cut_host_waits)},
          {"step_seconds", s.seconds},
          {"seconds_teacher", s.phases.teacher},
          {"seconds_student", s.phases.student},
          {"seconds_loss", s.phases.loss},
          {"seconds_backward", s.phases.backward},
          {"seconds_update", s.phases.update},
          {"seconds_other", s.phases.other},
          {"flop_per_image", s.flop_per_image},
          {"step_tflops", s.tflops()}};
}

StepPhases& StepPhases::operator+=(const StepPhases& o) {
  teacher += o.teacher;
  student += o.student;
  loss += o.loss;
  backward += o.backward;
  update += o.update;
  other += o.other;
  return *this;
}

SslTrainer::SslTrainer(const ssl::TrainerOptions& options, ssl::Collectives collectives)
    : impl_(std::make_unique<Impl>(options, std::move(collectives))) {}

SslTrainer::~SslTrainer() = default;

int64_t SslTrainer::step() const {
  return impl_->step;
}

bool SslTrainer::prefetches() const {
  return impl_->options.prefetch_to_device;
}

void SslTrainer::forget_next() {
  if (impl_->stager) impl_->stager->forget();
}

void SslTrainer::set_time_phases(bool enabled) {
  impl_->options.time_phases = enabled;
}

StepStats SslTrainer::train_step(const data::SslBatch& batch, const data::SslBatch* next) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  const int64_t B = batch.batch_size;
  const ssl::ScheduleValues sched = ssl::schedule_at(m.options.schedule, m.step);

  const int64_t cut_waits_before = m.extractor ? m.extractor->host_waits() : 0;
  const std::array<ssl::ViewTensors, 5> views = m.upload(batch);
  StepStats stats;
  stats.cut_host_waits = (m.extractor ? m.extractor->host_waits() : 0) - cut_waits_before;
  // its copy overlaps this step (a stager made for cutting alone stages nothing ahead)
  if (m.stager && next && m.options.prefetch_to_device) m.stager->stage(*next);
  const ssl::ViewTensors &tg = views[0], &sg = views[1], &sl = views[2], &tseq = views[3],
                         &sseq = views[4];

  ssl::ObjectiveOptions objective;
  objective.teacher_temp = sched.teacher_temp;
  objective.student_temp = m.options.student_temp;
  objective.koleo_weight = m.options.koleo_weight;
  objective.global_weight = m.options.global_weight;
  objective.local_weight = 1.0 - m.options.global_weight;
  objective.sequential_weight = m.options.sequential_weight;
  objective.sequential_targets_global = m.options.sequential_targets_global;
  objective.sinkhorn.iterations = m.options.sinkhorn_iterations;
  objective.sinkhorn.all_reduce_sum = m.collectives.sum;
  if (m.center) objective.center = m.center->center;

  // 1. Teacher targets: its global view and the final step of its sequential view.
  // 2. Student: global, local views (one batched step), every step of its sequential view.
  // Forward passes run under autocast (bf16 when configured); the objective casts the
  // logits to fp32, so Sinkhorn-Knopp, the softmaxes and the loss are always fp32.
  // Seconds since the last lap (the device synchronised first on CUDA); the first lap,
  // "other", includes the batch's upload above.
  auto last = start;
  auto lap = [&] {
    if (!m.options.time_phases) return 0.0;
    sync_current_stream(m.device);
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    return seconds;
  };
  stats.phases.other = lap();
  torch::Tensor teacher_global, teacher_final;
  ssl::StudentOutputs student;
  {
    model::AutocastGuard autocast(m.device.type(),
                                  m.options.precision == ssl::Precision::kBf16Autocast);
    // The weights stay as they are until the update: LayerScale folded once per pass kind.
    const model::ReuseFoldedLayerScale fold_once;
    const model::FusedScope fused(
        {m.options.fused_add_norm, m.options.fused_mlp, m.options.fused_bias_grad});
    DinoNet& student_net = m.student_net();
    if (!m.options.supervised) {
      const std::vector<torch::Tensor> teacher =
          m.teacher_pass
              ? (*m.teacher_pass)({tg.patches, tg.positions, tseq.patches, tseq.positions})
              : m.teacher_logits(tg, tseq);
      teacher_global = teacher[0];
      teacher_final = teacher[1];
    }
    stats.phases.teacher = lap();
    const model::StepOutput sg_out = student_net->backbone->step(sg.patches, sg.positions);
    student.global = student_net->head->forward(sg_out.state.select(1, 0));
    student.global_token = sg_out.state.select(1, 0);
    if (sl.patches.size(0) > 0) {
      const model::StepOutput sl_out = student_net->backbone->step(sl.patches, sl.positions);
      student.local = student_net->head->forward(sl_out.state.select(1, 0))
                          .view({-1, B, m.options.head.n_prototypes});
    } else {
      student.local = torch::empty({0, B, m.options.head.n_prototypes}, sg.patches.options());
    }
    student.sequential =
        m.options.batched_glimpses
            ? m.run_student_sequence_batched(sseq, B)
            : torch::stack(m.run_sequence(student_net, sseq, B, /*all_steps=*/true));
  }
  stats.phases.student = lap();
  torch::Tensor targets;
  {
    torch::NoGradGuard no_grad;
    targets = m.options.supervised ? label_targets(batch, m.options.head.n_prototypes, m.device)
                                   : ssl::teacher_targets(teacher_global, teacher_final, objective);
  }
  const ssl::LossParts parts = ssl::sequential_to_global_loss(targets, student, objective);
  stats.phases.loss = lap();

  // 3. Update: backward, average over learners, freeze, clip, AdamW, EMA.
  m.optimizer->zero_grad();
  if (m.buckets) m.buckets->arm();
  parts.loss.backward();
  if (!m.buckets) m.gradients_to_masters();
  stats.phases.backward = lap();
  if (m.buckets) m.buckets->finish();  // the average over learners, into the masters' gradients
  if (sched.last_layer_frozen) ssl::cancel_last_layer_grads(m.student_params);
  const torch::Tensor grad_norm =
      ssl::clip_grad_norm(m.student_params, m.options.clip_grad, m.options.multi_tensor_update);
  {
    std::lock_guard lock(m.state_mutex);
    m.optimizer->apply_schedule(sched);
    m.optimizer->step();
    ssl::ema_update(m.teacher_params, m.student_params, sched.teacher_momentum,
                    m.options.multi_tensor_update);
    m.refresh_bf16_copies();
    if (m.center && !m.options.supervised)  // after the loss, as DINO's update_center
      ssl::update_center(m.center->center,
                         torch::cat({teacher_global.detach(), teacher_final.detach()}, 0),
                         m.options.center_momentum, m.collectives.sum);
    stats.step = m.step++;
  }
  stats.phases.update = lap();
  const ssl::TargetStats target_stats = ssl::target_stats(targets);
  // The step's one wait for the device: its figures, read together.
  const std::vector<double> figures = read_to_host(
      {parts.loss, parts.dino, parts.koleo, parts.global, parts.local, parts.sequential, grad_norm,
       target_stats.mean_entropy, target_stats.prototypes_used});
  stats.loss = figures[0];
  stats.dino = figures[1];
  stats.koleo = figures[2];
  stats.global = figures[3];
  stats.local = figures[4];
  stats.sequential = figures[5];
  stats.grad_norm = figures[6];
  stats.lr = sched.lr;
  stats.weight_decay = sched.weight_decay;
  stats.teacher_momentum = sched.teacher_momentum;
  stats.teacher_temp = sched.teacher_temp;
  stats.target_entropy = figures[7];
  stats.target_entropy_ratio =
      stats.target_entropy / std::log(static_cast<double>(m.options.head.n_prototypes));
  stats.prototypes_used = static_cast<int64_t>(figures[8]);
  stats.phases.other += lap();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ssl::SslViewShapes shapes;
  shapes.global_tokens = batch.student_global.tokens;
  shapes.local_tokens = batch.student_local.tokens;
  shapes.local_views = B > 0 ? batch.student_local.views / B : 0;
  shapes.glimpse_tokens = batch.student_seq.tokens;
  shapes.glimpses = B > 0 ? batch.student_seq.views / B : 0;
  if (shapes.global_tokens > 0 && shapes.glimpses > 0)
    stats.flop_per_image = static_cast<double>(
        ssl::ssl_step_flops(m.options.backbone, m.options.head, shapes, m.options.supervised)
            .total());
  stats.images = B;
  stats.peak_tflops = m.options.peak_tflops;
  return stats;
}

std::vector<float> SslTrainer::teacher_features(const data::PatchBatch& views,
                                                int64_t steps) const {
  Impl& m = *impl_;
  if (views.tokens < 1) throw std::invalid_argument("teacher_features: views without tokens");
  if (steps < 1 || views.views % steps != 0) {
    throw std::invalid_argument(fmt::format(
        "teacher_features: {} views are not {} steps of the same batch", views.views, steps));
  }
  torch::NoGradGuard no_grad;
  const int64_t batch = views.views / steps;
  std::vector<torch::Tensor> features;
  {
    // The fp32 teacher, under autocast in either bf16 mode (the features of either are
    // then computed the same way).
    model::AutocastGuard autocast(m.device.type(), m.options.precision != ssl::Precision::kFp32);
    const ssl::ViewTensors v = ssl::to_tensors(views, m.device);
    torch::Tensor state;
    for (int64_t k = 0; k < steps; ++k) {
      const ssl::ViewTensors step = v.rows(k * batch, batch);
      state = m.teacher->backbone->step(step.patches, step.positions, state).state;
      features.push_back(state.select(1, 0));
    }
  }
  const torch::Tensor all = torch::cat(features).to(torch::kCPU, torch::kFloat).contiguous();
  const float* p = all.data_ptr<float>();
  return std::vector<float>(p, p + all.numel());
}

std::map<std::string, std::string> SslTrainer::save() const {
  std::lock_guard lock(impl_->state_mutex);
  std::map<std::string, std::string> blobs = {
      {"student", model::save_modules({{"", impl_->student.get()}})},
      {"teacher", model::save_modules({{"", impl_->teacher.get()}})},
      {"optimizer", impl_->optimizer->save()},
      {"trainer", std::to_string(impl_->step.load())}};
  if (impl_->center) blobs["center"] = model::save_modules({{"", impl_->center.get()}});
  return blobs;
}

void SslTrainer::load(const std::map<std::string, std::string>& blobs) {
  for (const char* name : {"student", "teacher", "optimizer", "trainer"}) {
    if (!blobs.count(name))
      throw std::runtime_error(fmt::format("checkpoint: blob '{}' is missing", name));
  }
  if (impl_->center && !blobs.count("center"))
    throw std::runtime_error(
        "checkpoint: blob 'center' is missing: it was not written with ssl.teacher_centering = "
        "\"ema\", which this trainer has");
  std::lock_guard lock(impl_->state_mutex);
  model::load_modules({{"", impl_->student.get()}}, blobs.at("student"));
  model::load_modules({{"", impl_->teacher.get()}}, blobs.at("teacher"));
  impl_->optimizer->load(blobs.at("optimizer"));
  if (impl_->center) model::load_modules({{"", impl_->center.get()}}, blobs.at("center"));
  impl_->step = std::stoll(blobs.at("trainer"));
  impl_->refresh_bf16_copies();
}

std::string SslTrainer::export_backbone() const {
  return model::export_backbone(*impl_->teacher->backbone);
}

}  // namespace saccade::pretrain

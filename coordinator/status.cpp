#include "coordinator/status.h"

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <random>

namespace saccade::coordinator {

void write_status(const JobStatus& s, wire::StatusReply::Builder out) {
  out.setJobId(s.job_id);
  out.setStage(s.stage);
  out.setState(s.state);
  out.setReason(s.reason);
  out.setStep(s.step);
  out.setTotalSteps(s.total_steps);
  out.setImagesPerSecond(s.images_per_second);
  out.setLoss(s.loss);
  out.setLr(s.lr);
  out.setKnn(s.knn);
  out.setTargetEntropyRatio(s.target_entropy_ratio);
  out.setPrototypesUsed(s.prototypes_used);
  out.setLastCheckpointStep(s.last_checkpoint_step);
  out.setLastCheckpointAgeMs(s.last_checkpoint_age_ms);
  out.setGeneration(s.generation);
  out.setStageIndex(s.stage_index);
  auto names = out.initMetricNames(static_cast<unsigned>(s.metrics.size()));
  auto values = out.initMetricValues(static_cast<unsigned>(s.metrics.size()));
  unsigned m = 0;
  for (const auto& [name, value] : s.metrics) {
    names.set(m, name);
    values.set(m++, value);
  }
  auto stages = out.initStages(static_cast<unsigned>(s.stages.size()));
  for (size_t i = 0; i < s.stages.size(); ++i) {
    auto b = stages[static_cast<unsigned>(i)];
    b.setName(s.stages[i].name);
    b.setState(s.stages[i].state);
    b.setSeconds(s.stages[i].seconds);
    b.setLastStep(s.stages[i].last_step);
  }
  auto actors = out.initActors(static_cast<unsigned>(s.actors.size()));
  for (size_t i = 0; i < s.actors.size(); ++i) {
    const ActorRow& a = s.actors[i];
    auto b = actors[static_cast<unsigned>(i)];
    b.setRole(control::role_from_name(a.role));
    b.setRank(a.rank);
    b.setNode(a.node);
    b.setPid(a.pid);
    b.setHeartbeatAgeMs(a.heartbeat_age_ms);
    b.setRestarts(a.restarts);
    b.setStep(a.step);
    b.setItemsPerSecond(a.items_per_second);
    b.setStraggler(a.straggler);
    for (auto st :
         {wire::ActorState::STARTING, wire::ActorState::RUNNING, wire::ActorState::DRAINING,
          wire::ActorState::EXITED, wire::ActorState::FAILED, wire::ActorState::RESTARTING}) {
      if (a.state == control::state_name(st)) b.setState(st);
    }
  }
  auto nodes = out.initNodes(static_cast<unsigned>(s.nodes.size()));
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const NodeRow& n = s.nodes[i];
    auto b = nodes[static_cast<unsigned>(i)];
    b.setName(n.name);
    b.setHost(n.host);
    b.setCores(n.cores);
    b.setGpus(n.gpus);
    b.setMemoryBytes(n.memory_bytes);
    b.setState(n.state);
    b.setHeartbeatAgeMs(n.heartbeat_age_ms);
  }
}

JobStatus read_status(wire::StatusReply::Reader in) {
  JobStatus s;
  s.job_id = in.getJobId();
  s.stage = in.getStage();
  s.state = in.getState();
  s.reason = in.getReason();
  s.step = in.getStep();
  s.total_steps = in.getTotalSteps();
  s.images_per_second = in.getImagesPerSecond();
  s.loss = in.getLoss();
  s.lr = in.getLr();
  s.knn = in.getKnn();
  s.target_entropy_ratio = in.getTargetEntropyRatio();
  s.prototypes_used = in.getPrototypesUsed();
  s.last_checkpoint_step = in.getLastCheckpointStep();
  s.last_checkpoint_age_ms = in.getLastCheckpointAgeMs();
  s.generation = in.getGeneration();
  s.stage_index = in.getStageIndex();
  const auto names = in.getMetricNames();
  const auto values = in.getMetricValues();
  for (unsigned i = 0; i < std::min(names.size(), values.size()); ++i)
    s.metrics[names[i]] = values[i];
  for (auto st : in.getStages())
    s.stages.push_back({st.getName(), st.getState(), st.getSeconds(), st.getLastStep()});
  for (auto a : in.getActors()) {
    s.actors.push_back({control::role_name(a.getRole()), a.getRank(), a.getNode(), a.getPid(),
                        control::state_name(a.getState()), a.getHeartbeatAgeMs(), a.getRestarts(),
                        a.getStep(), a.getItemsPerSecond(), a.getStraggler()});
  }
  for (auto n : in.getNodes()) {
    s.nodes.push_back({n.getName(), n.getHost(), n.getCores(), n.getGpus(), n.getMemoryBytes(),
                       n.getState(), n.getHeartbeatAgeMs()});
  }
  return s;
}

namespace {

std::string number_or_dash(double v, const char* format) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : "-";
}

std::string age(int64_t ms) {
  if (ms < 0) return "-";
  if (ms < 10000) return fmt::format("{:.1f}s", ms / 1000.0);
  return fmt::format("{}s", ms / 1000);
}

// Prometheus label values escape backslash, quote and newline.
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

// "2/3 probe (pretrain finished in 31m 02s, policy pending)".
std::string stage_line(const JobStatus& s) {
  std::string others;
  for (const StageRow& r : s.stages) {
    if (r.name == s.stage) continue;
    others += fmt::format("{}{} {}", others.empty() ? "" : ", ", r.name, r.state);
    if (r.state == "finished")
      others += fmt::format(" in {:.0f}m {:02.0f}s", std::floor(r.seconds / 60),
                            std::fmod(r.seconds, 60));
  }
  return fmt::format("{}/{} {}{}", int64_t{s.stage_index} + 1,  // any int32 from the wire
                     std::max<size_t>(s.stages.size(), 1), s.stage,
                     others.empty() ? "" : " (" + others + ")");
}

}  // namespace

double job_tflops(const JobStatus& s) {
  const auto it = s.metrics.find("flop_per_image");
  return it == s.metrics.end() ? NAN : s.images_per_second * it->second / 1e12;
}

double job_mfu(const JobStatus& s) {
  const auto it = s.metrics.find("mfu");
  return it == s.metrics.end() ? NAN : it->second;
}

std::string status_table(const JobStatus& s) {
  std::string out = fmt::format(
      "job {}  stage {}  state {}{}\n"
      "step {}{}  images/s {:.1f}  loss {}  lr {}  generation {}\n"
      "compute: TFLOP/s {}  MFU {}\n"
      "learning: k-NN {}  target entropy {} ln K  prototypes in use {}\n"
      "last checkpoint: {}\n",
      s.job_id, stage_line(s), s.state, s.reason.empty() ? "" : " (" + s.reason + ")", s.step,
      s.total_steps > 0 ? fmt::format("/{}", s.total_steps) : "", s.images_per_second,
      number_or_dash(s.loss, "{:.4f}"), number_or_dash(s.lr, "{:.3g}"), s.generation,
      number_or_dash(job_tflops(s), "{:.2f}"), number_or_dash(100 * job_mfu(s), "{:.1f}%"),
      number_or_dash(100 * s.knn, "{:.1f}%"), number_or_dash(s.target_entropy_ratio, "{:.3f}"),
      number_or_dash(s.prototypes_used, "{:.0f}"),
      s.last_checkpoint_step < 0
          ? std::string("none")
          : fmt::format("step {}, {} ago", s.last_checkpoint_step, age(s.last_checkpoint_age_ms)));
  out +=
      fmt::format("\n{:<8} {:>4} {:<12} {:>8} {:<10} {:>9} {:>8} {:>9} {:>10} {}\n", "ROLE", "RANK",
                  "NODE", "PID", "STATE", "HEARTBEAT", "RESTARTS", "STEP", "ITEMS/S", "STRAGGLER");
  for (const ActorRow& a : s.actors) {
    out += fmt::format("{:<8} {:>4} {:<12} {:>8} {:<10} {:>9} {:>8} {:>9} {:>10.1f} {}\n", a.role,
                       a.rank, a.node, a.pid, a.state, age(a.heartbeat_age_ms), a.restarts, a.step,
                       a.items_per_second, a.straggler ? "yes" : "");
  }
  return out;
}

std::string status_json(const JobStatus& s) {
  nlohmann::ordered_json j = {{"job", s.job_id},
                              {"stage", s.stage},
                              {"stage_index", s.stage_index},
                              {"stages", nlohmann::ordered_json::array()},
                              {"state", s.state},
                              {"reason", s.reason},
                              {"step", s.step},
                              {"total_steps", s.total_steps},
                              {"images_per_second", s.images_per_second},
                              {"tflops", job_tflops(s)},
                              {"mfu", job_mfu(s)},
                              {"loss", s.loss},
                              {"lr", s.lr},
                              {"knn", s.knn},
                              {"target_entropy_ratio", s.target_entropy_ratio},
                              {"prototypes_used", s.prototypes_used},
                              {"last_checkpoint_step", s.last_checkpoint_step},
                              {"last_checkpoint_age_ms", s.last_checkpoint_age_ms},
                              {"generation", s.generation},
                              {"metrics", s.metrics},
                              {"actors", nlohmann::ordered_json::array()},
                              {"nodes", nlohmann::ordered_json::array()}};
  for (const StageRow& r : s.stages)
    j["stages"].push_back(
        {{"name", r.name}, {"state", r.state}, {"seconds", r.seconds}, {"last_step", r.last_step}});
  for (const ActorRow& a : s.actors)
    j["actors"].push_back({{"role", a.role},
                           {"rank", a.rank},
                           {"node", a.node},
                           {"pid", a.pid},
                           {"state", a.state},
                           {"heartbeat_age_ms", a.heartbeat_age_ms},
                           {"restarts", a.restarts},
                           {"step", a.step},
                           {"items_per_second", a.items_per_second},
                           {"straggler", a.straggler}});
  for (const NodeRow& n : s.nodes)
    j["nodes"].push_back({{"name", n.name},
                          {"host", n.host},
                          {"cores", n.cores},
                          {"gpus", n.gpus},
                          {"memory_bytes", n.memory_bytes},
                          {"state", n.state},
                          {"heartbeat_age_ms", n.heartbeat_age_ms}});
  // NaN (not measured yet) is written as null; bytes that are not UTF-8 are replaced.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string status_prometheus(const JobStatus& s) {
  const std::string job = fmt::format("job=\"{}\"", label(s.job_id));
  std::string out;
  auto gauge = [&](const char* name, const char* help, const std::string& labels, double v) {
    if (!std::isfinite(v)) return;
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}{{{}}} {}\n", name, help, name, name,
                       labels, v);
  };
  gauge("saccade_step", "Training step of the job.", job, static_cast<double>(s.step));
  gauge("saccade_total_steps", "Step budget of the job (0: unknown).", job,
        static_cast<double>(s.total_steps));
  gauge("saccade_images_per_second", "Images per second over all learners.", job,
        s.images_per_second);
  gauge("saccade_tflops", "Model TFLOP/s over all learners.", job, job_tflops(s));
  gauge("saccade_mfu", "Model FLOP utilisation of the learners' devices (0..1).", job, job_mfu(s));
  gauge("saccade_loss", "Last reported loss.", job, s.loss);
  gauge("saccade_lr", "Last reported learning rate.", job, s.lr);
  gauge("saccade_knn_top1", "Last k-NN check of the teacher (0..1).", job, s.knn);
  gauge("saccade_target_entropy_ratio", "Entropy of the teacher's targets / ln K (1: uniform).",
        job, s.target_entropy_ratio);
  gauge("saccade_prototypes_used", "Prototypes that are some image's argmax.", job,
        s.prototypes_used);
  gauge("saccade_generation", "Learner generation (bumps at every re-rendezvous).", job,
        static_cast<double>(s.generation));
  gauge("saccade_last_checkpoint_step", "Step of the last committed checkpoint (-1: none).", job,
        static_cast<double>(s.last_checkpoint_step));
  gauge("saccade_job_state", "1 for the job's current state.",
        fmt::format("{},state=\"{}\"", job, label(s.state)), 1);
  gauge("saccade_stage_index", "0-based index of the running stage in job.stages.", job,
        s.stage_index);
  out +=
      "# HELP saccade_stage_state 1 for each stage's state (pending, running, finished).\n"
      "# TYPE saccade_stage_state gauge\n";
  for (const StageRow& r : s.stages)
    out += fmt::format("saccade_stage_state{{{},stage=\"{}\",state=\"{}\"}} 1\n", job,
                       label(r.name), label(r.state));
  out +=
      "# HELP saccade_stage_seconds Wall time of each stage so far.\n"
      "# TYPE saccade_stage_seconds gauge\n";
  for (const StageRow& r : s.stages)
    out +=
        fmt::format("saccade_stage_seconds{{{},stage=\"{}\"}} {}\n", job, label(r.name), r.seconds);
  const std::pair<const char*, const char*> per_actor[] = {
      {"saccade_actor_step", "Step of an actor."},
      {"saccade_actor_items_per_second", "Throughput of an actor."},
      {"saccade_actor_restarts", "Restarts of an actor."},
      {"saccade_actor_heartbeat_age_seconds", "Age of an actor's last heartbeat."},
      {"saccade_actor_straggler", "1 when the actor straggles behind its role."}};
  for (auto [name, help] : per_actor) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
    for (const ActorRow& a : s.actors) {
      const double v = name == per_actor[0].first   ? static_cast<double>(a.step)
                       : name == per_actor[1].first ? a.items_per_second
                       : name == per_actor[2].first ? a.restarts
                       : name == per_actor[3].first ? a.heartbeat_age_ms / 1000.0
                                                    : (a.straggler ? 1.0 : 0.0);
      out += fmt::format("{}{{{},role=\"{}\",rank=\"{}\",node=\"{}\"}} {}\n", name, job, a.role,
                         a.rank, label(a.node), v);
    }
  }
  return out;
}

namespace {

// The process's client context, never terminated (the process's exit frees it):
// zmq_ctx_term can block for good after the server refused a CURVE handshake
// (libzmq issues 2586, 2733): the likely reason `saccade status` with a stranger's
// client key once ran 10 s past its --timeout-ms in a loaded CI run.
zmq::context_t& client_context() {
  static auto* context = new zmq::context_t();  // leaked on purpose, see above
  return *context;
}

}  // namespace

std::optional<JobStatus> query_status(const std::string& endpoint, const JobConfig& config,
                                      const control::Security& security,
                                      std::chrono::milliseconds timeout, std::string& why,
                                      std::string* running_job) {
  zmq::socket_t socket(client_context(), zmq::socket_type::dealer);
  std::random_device random;
  control::configure_client(socket, security, fmt::format("c:{}:{:x}", ::getpid(), random()));
  socket.set(zmq::sockopt::immediate, 0);  // queue the request until the connection is up
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(endpoint);
  control::EnvelopeWriter writer({config.job.name, wire::Role::CLIENT, 0, ""});
  socket.send(
      writer.make(0, [](wire::Envelope::Builder env) { env.getBody().initStatusRequest(); }),
      zmq::send_flags::none);
  const int64_t deadline = control::steady_ms() + timeout.count();
  const wire::Expect expect = control::expect_for(config);
  why = fmt::format("no reply from {} within {} ms", endpoint, timeout.count());
  for (int64_t left; (left = deadline - control::steady_ms()) > 0;) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    control::poll_interruptible(&item, 1, std::chrono::milliseconds(left));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    wire::Received r = wire::recv_message(socket, expect, zmq::recv_flags::dontwait);
    if (r.status == wire::RecvStatus::kOk &&
        r.message->kind() == wire::Envelope::Body::STATUS_REPLY)
      return read_status(r.message->envelope().getBody().getStatusReply());
    if (r.status == wire::RecvStatus::kOk && r.message->kind() == wire::Envelope::Body::REFUSAL) {
      const auto refusal = r.message->envelope().getBody().getRefusal();
      why = fmt::format("{} refused the request: {} (ask with --job {} or that job's --config)",
                        endpoint, refusal.getReason().cStr(), refusal.getJobId().cStr());
      if (running_job) *running_job = refusal.getJobId().cStr();
      return std::nullopt;
    }
    if (r.status == wire::RecvStatus::kRefused) why = "refused a reply: " + r.why;
  }
  return std::nullopt;
}

}  // namespace saccade::coordinator

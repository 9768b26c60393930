// The actor side of the runtime: the `actor` process entry that every role
// body (data, learner, rollout, eval) runs inside. It connects to the
// coordinator, heartbeats (state, step, items/s), watches the coordinator's
// heartbeats, delivers rendezvous and drain requests, and turns SIGTERM into
// a drain with a final checkpoint. Torch-free: bodies bring their own torch.
//
//   class MyLearner : public ActorBody { int run(ActorContext& ctx) override; ... };
//   run_actor(options, {{wire::Role::LEARNER, [] { return std::make_unique<MyLearner>(); }}});
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "control/checkpoint_transfer.h"
#include "control/placement.h"
#include "control/rendezvous_store.h"

namespace CLI {
class App;
}

namespace saccade::runtime {

inline constexpr int kExitBadArguments = 2;     // unknown role, no body for it, bad config
inline constexpr int kExitCoordinatorGone = 3;  // coordinator lost past reconnect_grace_s

// The command line an agent starts an actor with.
struct ActorOptions {
  std::string role;
  int rank = 0;
  int local_rank = 0;
  std::string node;
  std::string coordinator;  // HOST:PORT
  std::string config_file;  // the job's resolved config
  std::string endpoint;
  std::string local_endpoint;  // ipc:// endpoint it also binds (data actors, for their node)
  std::vector<std::string> peers;
  int threads = 0;
  std::string device = "cpu";
  std::string stage;  // the job stage it runs ("" = job.stages' first)
  int restarts = 0;
  std::string log_level;  // overrides logging.level when set
  std::string log_dir;    // overrides logging.dir when set
};

// Where learners meet for one generation: through the coordinator's rendezvous
// store (ActorContext::rendezvous_store), the keys of this generation only.
struct RendezvousInfo {
  int32_t world_size = 0;
  int32_t rank = 0;
  int64_t resume_from_step = -1;  // -1: fresh start, else the last committed checkpoint
  int64_t collective_timeout_ms = 0;
  uint64_t generation = 0;  // bumps whenever a learner is lost: re-rendezvous
};

// Named byte blobs of one checkpoint (e.g. "student", "teacher", "optimizer").
using CheckpointBlobs = std::map<std::string, std::string>;

// A checkpoint as it arrived: its step (0 for input files) and its blobs.
struct LoadedCheckpoint {
  int64_t step = -1;
  CheckpointBlobs blobs;
};

// What a body sees of its process: an interface, so bodies built into a
// plugin (libsaccade_torch.so) use the runtime of the binary that loaded them
// without linking a copy of it. Thread-safe. Every call also tells the runtime
// the body is alive: a body that calls nothing for cluster.stall_timeout_s
// stops being heartbeated and is restarted as hung.
class ActorContext {
 public:
  virtual ~ActorContext() = default;

  virtual const control::Assignment& assignment() const = 0;
  virtual uint32_t restarts() const = 0;  // times this actor was restarted before
  virtual const JobConfig& config() const = 0;
  // A drain was asked (coordinator Shutdown, SIGTERM, coordinator gone): return soon.
  virtual bool stopping() const = 0;
  // The drain wants a final checkpoint (SIGTERM / preemption): ActorBody::checkpoint runs.
  virtual bool checkpoint_requested() const = 0;
  // Progress carried by the next heartbeat; metrics (e.g. loss, lr) go to the
  // coordinator as a Metrics message (only learner 0's are the job's).
  virtual void report(int64_t step, double items_per_second,
                      const std::vector<std::pair<std::string, double>>& metrics = {}) = 0;
  // Streams checkpoint `step` to the coordinator (learner 0), which commits it
  // to its RocksDB atomically. Blocks until the coordinator confirms the
  // commit (true) or refuses it, the timeout passes or a drain ends the wait
  // after the timeout (false). Only one checkpoint is in flight at a time.
  virtual bool save_checkpoint(int64_t step, const CheckpointBlobs& blobs,
                               std::chrono::milliseconds timeout) = 0;
  // Fetches what `query` names from the coordinator: a committed checkpoint of
  // the job (a learner resuming), or the stage's inputs (a checkpoint or files
  // of the stages before it). nullopt when the coordinator refuses (its reason
  // is logged), on timeout or when stopping. Blobs are CRC-checked on arrival.
  virtual std::optional<LoadedCheckpoint> load_checkpoint(const control::CheckpointQuery& query,
                                                          std::chrono::milliseconds timeout) = 0;
  // The latest rendezvous, if any arrived.
  virtual std::optional<RendezvousInfo> rendezvous() const = 0;
  // Waits for a rendezvous of a generation above `after_generation`; nullopt
  // on timeout or when stopping.
  virtual std::optional<RendezvousInfo> wait_rendezvous(uint64_t after_generation,
                                                        std::chrono::milliseconds timeout) = 0;
  // One operation on the learners' rendezvous store of `generation`, kept by
  // the coordinator and reached over this process's authenticated link (c10d's
  // Store for learners: workers/learner/coordinator_store.h). Blocks until the
  // coordinator answers; a get or wait waits up to query.timeout_ms for its
  // keys. Answers ok = false (error set) on timeout, when a newer generation
  // arrives or the coordinator restarts meanwhile (the keys are gone), or when
  // stopping. Learners only: the coordinator refuses other roles.
  virtual control::StoreAnswer rendezvous_store(uint64_t generation,
                                                const control::StoreQuery& query) = 0;
  // Sleeps up to `d`, waking early when a drain is asked.
  virtual void sleep_for(std::chrono::milliseconds d) = 0;
  // Tells the runtime the body is alive while it waits on something else
  // (a collective, a socket) for a long time.
  virtual void touch() = 0;
};

// Reports a serving body's progress: `step` and the rate of `items` (a running
// total) over about the last second, at most once a second.
class RateReporter {
 public:
  explicit RateReporter(ActorContext& ctx) : ctx_(ctx), since_(std::chrono::steady_clock::now()) {}
  void tick(int64_t step, uint64_t items) {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - since_).count();
    if (seconds < 1.0) return;
    ctx_.report(step, static_cast<double>(items - items_) / seconds);
    since_ = now;
    items_ = items;
  }

 private:
  ActorContext& ctx_;  // borrowed: the body's
  std::chrono::steady_clock::time_point since_;
  uint64_t items_ = 0;
};

// One role's work. run() returns its exit code when done or when
// ctx.stopping(); then, if the drain asked for it, checkpoint() runs while
// the body and its state still exist.
class ActorBody {
 public:
  virtual ~ActorBody() = default;
  virtual int run(ActorContext& ctx) = 0;
  virtual void checkpoint(ActorContext&) {}
  // True when checkpoint() may run on another thread while run() is inside a
  // step: it then commits the last completed step. The runtime does so when a
  // drain's window is nearly spent (bounded_drain_ms) and ends the process,
  // dropping the step in progress, instead of letting SIGKILL lose the drain.
  virtual bool checkpoint_while_running() const { return false; }
};

// How long after a drain with a checkpoint begins the runtime stops waiting
// for the step in progress and commits the last completed one: the window
// (cluster.drain_timeout_s) less a reserve for the upload, max(a quarter of
// the window, twice the last checkpoint's upload + 1 s).
std::chrono::milliseconds bounded_drain_ms(std::chrono::milliseconds window,
                                           std::chrono::milliseconds last_upload);

using ActorBodyFactory = std::function<std::unique_ptr<ActorBody>()>;

// The bodies a binary can run, by role. The caller builds the map (the
// `saccade` binary, a test's actor binary): the runtime holds no registry.
using ActorBodies = std::map<wire::Role, ActorBodyFactory>;

// The actor process: runs the body `bodies` has for its role; returns the
// body's exit code, kExitBadArguments (no body for the role among them) or
// kExitCoordinatorGone.
int run_actor(const ActorOptions& options, const ActorBodies& bodies);

// Adds the `actor` subcommand to `app`; on parse it runs run_actor with
// `bodies` and hands its exit code to `on_exit`.
void add_actor_command(CLI::App& app, ActorBodies bodies, std::function<void(int)> on_exit);

}  // namespace saccade::runtime

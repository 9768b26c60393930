// The coordinator's checkpoint service: learner 0 streams a checkpoint in
// (chunks, then CheckpointCommitted), which is committed to RocksDB in one
// synced batch on a thread of its own and acknowledged only then; learners
// that resume stream a committed checkpoint out, paced by their send queues.
// Internal to coordinator/; driven by the coordinator's loop, single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "common/config.h"
#include "control/checkpoint_transfer.h"
#include "coordinator/job_state.h"
#include "coordinator/stage_inputs.h"
#include "coordinator/state_store.h"
#include "schemas/wire.h"

namespace saccade::coordinator {

// How the service reaches a peer (the coordinator's ROUTER socket).
class PeerSender {
 public:
  enum class Sent { kOk, kFull, kGone };
  using Fill = std::function<void(wire::Envelope::Builder)>;
  virtual ~PeerSender() = default;
  // One message to peer `id`: kFull when its queue has no room (nothing sent).
  virtual Sent try_send_to(const std::string& id, const Fill& fill) = 0;
};

class CheckpointService {
 public:
  // All borrowed; they outlive the service.
  CheckpointService(const JobConfig& config, JobState& job, StateStore& store, StageInputs& inputs,
                    PeerSender& peers);

  // A CheckpointManifest, CheckpointChunk or CheckpointCommitted from learner `key`,
  // peer `id`. Returns why it was refused ("" when taken); the learner is told too. A
  // second upload of the step being committed is answered by that commit, not refused;
  // an upload whose manifest names a checkpoint already committed with the same blobs is
  // answered at once from the store, and its chunks are dropped unread.
  std::string on_upload(const std::string& id, const ActorKey& key, wire::Envelope::Reader env);
  // Answers learner 0 once its checkpoint's commit has finished (call every loop).
  void finish_commit();
  // Starts streaming what `query` names to peer `id` (or refuses it with an
  // Ack naming what is missing); a new request from the same peer replaces its old one.
  void send(const std::string& id, const control::CheckpointQuery& query);
  // Sends what the peers' queues take of every download, ~64 MiB per call at most.
  void pump(int64_t now_ms);
  // Drops the download to peer `id` (it exited: nobody to take it).
  void forget(const std::string& id) { downloads_.erase(id); }
  // A transfer or commit is in progress: the loop should poll fast.
  bool busy() const { return !downloads_.empty() || commit_.has_value(); }

 private:
  void refuse_upload(const std::string& id, uint64_t seq, const std::string& why);
  // The manifest of an upload: answers it when the store already holds that checkpoint.
  void on_manifest(const std::string& id, wire::CheckpointManifest::Reader manifest);
  // Records checkpoint `step` as the job's last committed one (persisted at once).
  void record_commit(int64_t step, uint64_t bytes, int64_t time_ns);
  // Tells learner 0 (peer `id`) that checkpoint `step` is committed.
  void answer_committed(const std::string& id, int64_t step, uint64_t bytes);

  const JobConfig& config_;
  JobState& job_;
  StateStore& store_;
  StageInputs& inputs_;
  PeerSender& peers_;
  control::CheckpointAssembler upload_;  // the checkpoint learner 0 is streaming in
  int64_t answered_step_ = -1;  // an upload answered from the store: its chunks are dropped
  struct Download {
    control::CheckpointDownload transfer;
    control::CheckpointQuery query;
    int64_t started_ms;
    int64_t deadline_ms;
  };
  std::map<std::string, Download> downloads_;  // checkpoints going out, by peer identity
  struct PendingCommit {
    std::string id;  // learner 0, answered when done
    uint64_t seq;    // of its CheckpointCommitted
    int64_t step;
    uint64_t bytes;
    int64_t time_ns;
    int64_t started_ms;
    std::future<std::string> error;  // "" once committed
  };
  std::optional<PendingCommit> commit_;  // at most one checkpoint being written
};

}  // namespace saccade::coordinator

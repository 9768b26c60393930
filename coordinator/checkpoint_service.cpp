#include "coordinator/checkpoint_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "control/control.h"

namespace saccade::coordinator {

using Body = wire::Envelope::Body;

CheckpointService::CheckpointService(const JobConfig& config, JobState& job, StateStore& store,
                                     StageInputs& inputs, PeerSender& peers)
    : config_(config), job_(job), store_(store), inputs_(inputs), peers_(peers) {}

void CheckpointService::refuse_upload(const std::string& id, uint64_t seq, const std::string& why) {
  peers_.try_send_to(id, [&](wire::Envelope::Builder e) {
    auto ack = e.getBody().initAck();
    ack.setSeq(seq);
    ack.setOk(false);
    ack.setError("checkpoint refused: " + why);
  });
}

std::string CheckpointService::on_upload(const std::string& id, const ActorKey& key,
                                         wire::Envelope::Reader env) {
  auto refuse = [&](const std::string& why) {
    refuse_upload(id, env.getSeq(), why);
    return why;
  };
  // A message from another learner or an older generation is refused without touching the
  // upload in progress: it is not part of it.
  if (key.first != wire::Role::LEARNER || key.second != 0)
    return refuse("only learner 0 commits checkpoints");
  if (env.getGeneration() != job_.generation)
    return refuse(
        fmt::format("stale generation {} (current {})", env.getGeneration(), job_.generation));
  auto refuse_and_drop = [&](const std::string& why) {  // the upload in progress is void
    upload_.reset();
    return refuse(why);
  };
  if (env.getBody().which() == Body::CHECKPOINT_MANIFEST) {
    on_manifest(id, env.getBody().getCheckpointManifest());
    return "";
  }
  const int64_t upload_step = env.getBody().which() == Body::CHECKPOINT_CHUNK
                                  ? env.getBody().getCheckpointChunk().getStep()
                                  : env.getBody().getCheckpointCommitted().getStep();
  if (upload_step == answered_step_) return "";  // already answered from the store
  if (env.getBody().which() == Body::CHECKPOINT_CHUNK) {
    const std::string why =
        upload_.add(env.getBody().getCheckpointChunk(),
                    static_cast<uint64_t>(config_.cluster.max_checkpoint_bytes));
    return why.empty() ? "" : refuse_and_drop(why);
  }
  const int64_t step = env.getBody().getCheckpointCommitted().getStep();
  if (!upload_.complete(env.getBody().getCheckpointCommitted().getBytes()) ||
      upload_.step() != step)
    return refuse_and_drop(fmt::format("checkpoint {} is incomplete", step));
  if (commit_ && commit_->step == step) {
    // The same checkpoint again: learner 0 saw this coordinator restart while its first copy
    // was in flight and sent it anew, so this process got both. The write under way answers it.
    commit_->id = id;
    commit_->seq = env.getSeq();
    upload_.reset();
    return "";
  }
  if (commit_)
    return refuse_and_drop(fmt::format("checkpoint {} is still being committed", commit_->step));
  // The synced write (seconds for a multi-GB checkpoint) runs on its own thread so that
  // heartbeats, status and downloads keep flowing; finish_commit() answers when it is done.
  const int64_t now_ns = wire::now_ns();
  const std::map<std::string, std::string> meta = {{"job", config_.job.name},
                                                   {"generation", std::to_string(job_.generation)},
                                                   {"time_ns", std::to_string(now_ns)}};
  commit_.emplace(PendingCommit{
      id, env.getSeq(), step, upload_.bytes(), now_ns, control::steady_ms(),
      std::async(std::launch::async,
                 [&store = store_.checkpoints(job_.stage()), blobs = upload_.take(), meta, step,
                  keep = config_.cluster.keep_checkpoints]() -> std::string {
                   try {
                     store.commit(step, blobs, meta);  // thread-safe store
                     store.prune(keep);
                     return "";
                   } catch (const std::exception& e) {
                     return e.what();
                   }
                 })});
  return "";
}

void CheckpointService::on_manifest(const std::string& id,
                                    wire::CheckpointManifest::Reader manifest) {
  // A manifest starts an upload: whatever came before it is superseded.
  upload_.reset();
  answered_step_ = -1;
  const int64_t step = manifest.getStep();
  if (commit_ && commit_->step == step) return;  // the write under way answers it
  std::optional<storage::CheckpointInfo> info;
  try {
    info = store_.checkpoints(job_.stage()).info(step);
  } catch (const std::exception& e) {
    spdlog::warn("checkpoint {}: reading the store's manifest failed ({}); taking the upload", step,
                 e.what());
  }
  if (!info || !control::same_blobs(manifest, info->blobs)) return;  // the chunks follow
  answered_step_ = step;
  uint64_t bytes = 0;
  for (const auto& b : info->blobs) bytes += b.size;
  // The previous coordinator process may have committed it and died before it recorded so.
  if (job_.checkpoint_step < step) {
    int64_t time_ns = wire::now_ns();
    if (const auto t = info->meta.find("time_ns"); t != info->meta.end())
      std::from_chars(t->second.data(), t->second.data() + t->second.size(), time_ns);
    record_commit(step, bytes, time_ns);
  }
  spdlog::info(
      "checkpoint {}: already committed with the same {} blobs ({} bytes); answered without "
      "a transfer",
      step, info->blobs.size(), bytes);
  answer_committed(id, step, bytes);
}

void CheckpointService::record_commit(int64_t step, uint64_t bytes, int64_t time_ns) {
  job_.checkpoint_step = step;
  job_.checkpoint_bytes = bytes;
  job_.checkpoint_time_ns = time_ns;
  job_.mark_job();
  job_.flush(true);
}

void CheckpointService::answer_committed(const std::string& id, int64_t step, uint64_t bytes) {
  peers_.try_send_to(id, [&](wire::Envelope::Builder e) {
    auto m = e.getBody().initCheckpointCommitted();
    m.setStep(step);
    m.setBytes(bytes);
  });
}

void CheckpointService::finish_commit() {
  if (!commit_ || commit_->error.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return;
  PendingCommit c = std::move(*commit_);
  commit_.reset();
  const std::string error = c.error.get();
  if (!error.empty()) {
    spdlog::error("checkpoint {}: commit failed: {}", c.step, error);
    refuse_upload(c.id, c.seq, error);
    return;
  }
  record_commit(c.step, c.bytes, c.time_ns);
  spdlog::info("checkpoint {} committed ({} bytes, {:.2f} s)", c.step, c.bytes,
               (control::steady_ms() - c.started_ms) / 1000.0);
  answer_committed(c.id, c.step, c.bytes);
}

void CheckpointService::send(const std::string& id, const control::CheckpointQuery& query) {
  std::optional<int64_t> step;
  std::shared_ptr<const control::Blobs> blobs;
  std::string error;
  try {
    switch (query.source) {
      case wire::CheckpointSource::INPUT_FILE:
        step = 0;
        blobs = std::make_shared<const control::Blobs>(inputs_.files(
            query.blobs, static_cast<uint64_t>(config_.cluster.max_checkpoint_bytes)));
        break;
      case wire::CheckpointSource::INPUT_CHECKPOINT: {
        auto [at, read] = inputs_.checkpoint(query.step, query.blobs);
        step = at;
        blobs = std::make_shared<const control::Blobs>(std::move(read));
        break;
      }
      default: {
        auto& store = store_.checkpoints(job_.stage());
        const auto info = query.step < 0 ? store.latest() : store.info(query.step);
        if (!info) throw std::runtime_error(fmt::format("no committed checkpoint {}", query.step));
        step = info->step;
        for (const auto& [other, d] : downloads_)  // one copy however many learners resume
          if (d.transfer.step() == info->step && d.query.source == query.source &&
              d.query.blobs == query.blobs)
            blobs = d.transfer.blobs();
        if (!blobs)
          blobs = std::make_shared<const control::Blobs>(read_blobs(store, *step, query.blobs));
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  downloads_.erase(id);
  if (!error.empty()) {
    spdlog::error("{} asked for {}: {}", id, control::describe(query), error);
    peers_.try_send_to(id, [&](wire::Envelope::Builder e) {
      auto ack = e.getBody().initAck();
      ack.setOk(false);
      ack.setError(error);
    });
    return;
  }
  const int64_t now = control::steady_ms();
  downloads_.emplace(
      id, Download{control::CheckpointDownload(
                       *step, std::move(blobs),
                       control::checkpoint_chunk_bytes(config_.cluster.max_message_bytes)),
                   query, now, now + config_.cluster.checkpoint_timeout_s * 1000});
}

void CheckpointService::pump(int64_t now) {
  constexpr uint64_t kBytesPerCall = uint64_t{64} << 20;
  uint64_t sent = 0;
  for (auto it = downloads_.begin(); it != downloads_.end();) {
    const std::string& id = it->first;
    control::CheckpointDownload& d = it->second.transfer;
    PeerSender::Sent s = PeerSender::Sent::kOk;
    while (!d.done() && sent < kBytesPerCall) {
      s = peers_.try_send_to(id, [&](wire::Envelope::Builder e) { d.next(e.getBody()); });
      if (s != PeerSender::Sent::kOk) break;
      sent += control::checkpoint_chunk_bytes(config_.cluster.max_message_bytes);
      d.advance();
    }
    if (d.done()) {
      spdlog::info("{} sent to {} ({} bytes in {} chunks, {:.2f} s)",
                   control::describe(it->second.query), id, d.bytes(), d.chunks(),
                   (now - it->second.started_ms) / 1000.0);
    } else if (s == PeerSender::Sent::kGone) {
      spdlog::warn("checkpoint {} to {}: the peer is gone; transfer dropped", d.step(), id);
    } else if (now > it->second.deadline_ms) {
      spdlog::warn("checkpoint {} to {}: not taken within cluster.checkpoint_timeout_s; dropped",
                   d.step(), id);
    } else {
      ++it;
      continue;
    }
    it = downloads_.erase(it);
  }
}

}  // namespace saccade::coordinator

// The learner's side of the data plane: batches cut by remote data actors,
// in the shape of data::SslLoader (strictly in order, each with the sampler
// position after it, for exact resume). Torch-free.
//
// The learner owns the sampler: batch n holds its entries n*B .. n*B+B-1 with
// the view seeds of data::view_seed_at, so a remote batch is bit for bit the
// one SslLoader would cut locally. Requests go to the data actors with at most
// queue_depth outstanding per actor (back-pressure); an actor that answers none
// of its requests for request_timeout is re-dialed (a fresh socket) and its
// requests go to another. Duplicate or stale answers are ignored; malformed
// frames are dropped and logged, and a malformed Batch is requested again.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataloader/sharded_sampler.h"
#include "dataloader/ssl_loader.h"
#include "dataloader/views.h"
#include "schemas/wire.h"
#include "workers/data_plane/remote_source_options.h"
#include "workers/runtime/request_client.h"

namespace saccade::data_plane {

class RemoteBatchSource : private runtime::RequestProtocol {
 public:
  // Starts at `start` (a checkpoint's data position, or {0, 0}); connects but
  // sends nothing until next(). Throws std::invalid_argument naming a bad option.
  RemoteBatchSource(RemoteSourceOptions options, data::DataPosition start);
  ~RemoteBatchSource() override;
  RemoteBatchSource(const RemoteBatchSource&) = delete;
  RemoteBatchSource& operator=(const RemoteBatchSource&) = delete;

  // The next batch, in order, with the sampler position after it (its
  // prep_seconds stays 0: the views were cut elsewhere). Waits as long as it
  // takes, calling `stopping` at least every 100 ms; nullopt once it returns
  // true (a drain), and the source may be asked again later.
  std::optional<data::LoadedBatch> next(const std::function<bool()>& stopping);

  uint64_t resent() const { return client_->resent(); }          // requests sent again
  uint64_t skipped_corrupt() const { return skipped_corrupt_; }  // corrupt images in batches taken
  uint64_t dropped() const { return client_->dropped(); }        // frames refused

 private:
  struct Request;  // a batch asked for, in batch order

  void refill();
  Request* find(uint64_t id);  // nullptr: taken already, or never asked for
  bool send(uint64_t id, size_t peer, runtime::PeerLink& link) override;
  runtime::Answer accept(size_t peer, wire::Message&& message) override;

  RemoteSourceOptions options_;
  data::ShardedSampler sampler_;                    // positioned after the last batch requested
  uint64_t next_id_ = 1;                            // batch id of the next request made
  std::deque<std::unique_ptr<Request>> pending_;    // consecutive ids; front is next()'s
  std::unique_ptr<runtime::RequestClient> client_;  // sockets and re-sends; borrows *this
  uint64_t skipped_corrupt_ = 0;
};

}  // namespace saccade::data_plane

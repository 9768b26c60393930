// The job config -> the ends of the links between a job's actors: CURVE keys,
// the sender in the envelopes, what a receiver accepts (torch-free: data
// actors use it; data_options.h describes the adapter layer).
#pragma once

#include "common/config.h"
#include "control/control.h"
#include "control/placement.h"
#include "schemas/wire.h"
#include "workers/runtime/request_server.h"

namespace saccade::job_options {

// What one end of a link between two actors of a job carries.
struct PeerLink {
  control::Security security;  // CURVE when on: a server's key pair, or the job's client pair
  wire::SenderInfo sender;     // actor `me` (job, role, rank, node) in the envelopes it sends
  wire::Expect expect;         // job id and frame size limit of what it accepts
};

// The end of actor `me` as a server (data, rollout and eval actors bind) or as a
// client (learners connect). Throws std::runtime_error when a key file cannot be read.
PeerLink peer_link(const JobConfig& config, const control::Assignment& me, bool as_server);

// A data, rollout or eval actor's request server: where `me` binds, and its end
// of the links as a server.
runtime::RequestServerOptions request_server_options(const JobConfig& config,
                                                     const control::Assignment& me);

}  // namespace saccade::job_options

#include "workers/job_options/link_options.h"

#include <utility>

namespace saccade::job_options {

PeerLink peer_link(const JobConfig& config, const control::Assignment& me, bool as_server) {
  PeerLink link;
  link.security = control::load_security(config.security, as_server);
  link.sender = {config.job.name, me.role, me.rank, me.node};
  link.expect = control::expect_for(config);
  return link;
}

runtime::RequestServerOptions request_server_options(const JobConfig& config,
                                                     const control::Assignment& me) {
  PeerLink link = peer_link(config, me, /*as_server=*/true);
  runtime::RequestServerOptions o;
  o.endpoint = me.endpoint;
  o.local_endpoint = me.local_endpoint;
  o.security = std::move(link.security);
  o.sender = std::move(link.sender);
  o.expect = std::move(link.expect);
  return o;
}

}  // namespace saccade::job_options

#include "common/allocation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace saccade {
namespace {

[[noreturn]] void malformed(std::string_view list, const std::string& why) {
  throw ConfigError({fmt::format("$SLURM_JOB_NODELIST \"{}\": {}", list, why)});
}

// "01-03,7" -> 01 02 03 7 (each range keeps the width of its first number).
std::vector<std::string> expand_ranges(std::string_view list, std::string_view ranges) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= ranges.size()) {
    const size_t comma = std::min(ranges.find(',', at), ranges.size());
    const std::string_view item = ranges.substr(at, comma - at);
    const size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    auto digits = [](std::string_view s) {
      return !s.empty() && s.size() < 10 &&
             std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) != 0; });
    };
    if (!digits(lo) || !digits(hi)) malformed(list, fmt::format("bad range \"{}\"", item));
    const long first = std::stol(std::string(lo)), last = std::stol(std::string(hi));
    if (last < first || last - first > 100000)
      malformed(list, fmt::format("bad range \"{}\"", item));
    for (long i = first; i <= last; ++i)
      out.push_back(fmt::format("{:0{}}", i, static_cast<int>(lo.size())));
    at = comma + 1;
  }
  return out;
}

}  // namespace

Allocation Allocation::from_environment() {
  Allocation a;
  if (const char* v = std::getenv("SLURM_JOB_NODELIST")) a.nodelist = v;
  if (const char* v = std::getenv("SLURM_JOB_ID")) a.job_id = v;
  if (const char* v = std::getenv("SACCADE_NODE_ADDRS")) {
    const std::string_view list(v);
    for (size_t at = 0; at < list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      const std::string_view item = list.substr(at, end - at);
      const size_t eq = item.find('=');
      if (eq == 0 || eq == std::string_view::npos || eq + 1 == item.size())
        throw ConfigError({fmt::format(
            "$SACCADE_NODE_ADDRS \"{}\": expected name=address entries separated by commas, "
            "got \"{}\"",
            list, item)});
      a.addresses[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
      at = end + 1;
    }
  }
  return a;
}

std::vector<std::string> expand_hostlist(std::string_view list) {
  std::vector<std::string> hosts;
  size_t at = 0;
  while (at < list.size()) {
    // One entry: a prefix, optionally [ranges], up to the next top-level comma.
    const size_t open = list.find('[', at);
    const size_t comma = list.find(',', at);
    if (open == std::string_view::npos || (comma != std::string_view::npos && comma < open)) {
      const size_t end = std::min(comma, list.size());
      if (end == at) malformed(list, "empty host name");
      hosts.emplace_back(list.substr(at, end - at));
      at = end + 1;
      continue;
    }
    const size_t close = list.find(']', open);
    if (close == std::string_view::npos) malformed(list, "'[' without ']'");
    const std::string_view prefix = list.substr(at, open - at);
    if (prefix.empty()) malformed(list, "a range without a host name before it");
    size_t end = close + 1;
    std::string suffix;
    while (end < list.size() && list[end] != ',') suffix += list[end++];
    if (suffix.find('[') != std::string::npos)
      malformed(list, "more than one [range] in one host name");
    for (const std::string& n : expand_ranges(list, list.substr(open + 1, close - open - 1)))
      hosts.push_back(std::string(prefix) + n + suffix);
    at = end + 1;
  }
  if (hosts.empty()) malformed(list, "no hosts");
  return hosts;
}

JobConfig resolve_allocation(const JobConfig& config, const Allocation& allocation) {
  JobConfig out = config;
  ClusterConfig& c = out.cluster;
  if (c.nodes_from == "slurm") {
    if (allocation.nodelist.empty()) {
      throw ConfigError(
          {"cluster.nodes_from = \"slurm\" needs $SLURM_JOB_NODELIST: launch it "
           "inside a Slurm allocation (sbatch, salloc or srun)"});
    }
    const NodeSpec templ = c.nodes.front();  // validated: exactly one entry
    c.nodes.clear();
    for (const std::string& host : expand_hostlist(allocation.nodelist)) {
      NodeSpec n = templ;
      n.name = host;
      const auto address = allocation.addresses.find(host);
      n.host = address == allocation.addresses.end() ? host : address->second;
      c.nodes.push_back(n);
    }
    c.coordinator_host = c.nodes.front().host;
    c.nodes_from = "config";  // resolved: the agents and actors get these nodes as written
  }
  if (c.ports_per_job > 0 && !allocation.job_id.empty()) {
    // Array jobs are "123_4": the leading number is the job's own id.
    const int64_t id = std::strtoll(allocation.job_id.c_str(), nullptr, 10);
    const int64_t offset = (id % 100) * c.ports_per_job;
    for (int64_t* port :
         {&c.coordinator_port, &c.metrics_port, &c.data_port_base, &c.rollout_port_base}) {
      if (*port != 0) *port += offset;
    }
  }
  // Re-validated: the ports and roles of the allocation's nodes.
  return parse_config(to_toml(out), fmt::format("the config resolved for allocation {} ({})",
                                                allocation.job_id, allocation.nodelist));
}

}  // namespace saccade

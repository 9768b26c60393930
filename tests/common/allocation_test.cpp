// Configs resolved against a Slurm allocation (common/allocation.h).
#include "common/allocation.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace saccade {
namespace {

using Hosts = std::vector<std::string>;

TEST(Hostlist, ExpandsRangesListsAndPadding) {
  EXPECT_EQ(expand_hostlist("node7"), (Hosts{"node7"}));
  EXPECT_EQ(expand_hostlist("a,b"), (Hosts{"a", "b"}));
  // Each item keeps its own width, as in Slurm.
  EXPECT_EQ(expand_hostlist("n[01-03,7]"), (Hosts{"n01", "n02", "n03", "n7"}));
  EXPECT_EQ(expand_hostlist("gpu[8-10]-ib,login"),
            (Hosts{"gpu8-ib", "gpu9-ib", "gpu10-ib", "login"}));
  EXPECT_EQ(expand_hostlist("x[1-2],y[3]"), (Hosts{"x1", "x2", "y3"}));
}

TEST(Hostlist, MalformedListsAreRefusedNamingThem) {
  for (const char* bad : {"n[1-", "n[a-b]", "n[3-1]", "[1-2]", "a,,b", "n[1][2]"}) {
    try {
      expand_hostlist(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos)
          << e.what();
    }
  }
}

JobConfig slurm_config() {
  return parse_config(
      "[cluster]\nnodes_from = \"slurm\"\nports_per_job = 50\ncoordinator_port = 7100\n"
      "data_port_base = 7110\nrollout_port_base = 7130\n"
      "[[cluster.nodes]]\nname = \"template\"\nhost = \"ignored\"\ndata_actors = 2\n"
      "learners = 1\n",
      "job.toml");
}

TEST(Allocation, NodesFollowTheAllocation) {
  for (const auto& [list, hosts] : {std::pair<std::string, Hosts>{"c1", {"c1"}},
                                    {"c[1-2]", {"c1", "c2"}},
                                    {"c[1-4]", {"c1", "c2", "c3", "c4"}}}) {
    const JobConfig c = resolve_allocation(slurm_config(), {list, ""});
    ASSERT_EQ(c.cluster.nodes.size(), hosts.size()) << list;
    for (size_t i = 0; i < hosts.size(); ++i) {
      EXPECT_EQ(c.cluster.nodes[i].name, hosts[i]);
      EXPECT_EQ(c.cluster.nodes[i].host, hosts[i]);
      EXPECT_EQ(c.cluster.nodes[i].data_actors, 2);
      EXPECT_EQ(c.cluster.nodes[i].learners, 1);
    }
    EXPECT_EQ(c.cluster.coordinator_host, hosts[0]);
    EXPECT_EQ(c.cluster.coordinator_port, 7100) << "no job id: ports as written";
  }
}

// Slurm nodes whose NodeAddr is not their name (several slurmd on one host, or a
// cluster whose node names do not resolve): the sbatch script passes the addresses.
TEST(Allocation, NodesTakeTheAddressesTheLauncherPasses) {
  ASSERT_EQ(setenv("SLURM_JOB_NODELIST", "sx[1-3]", 1), 0);
  ASSERT_EQ(setenv("SACCADE_NODE_ADDRS", "sx1=127.0.0.2,sx2=127.0.0.3", 1), 0);
  const Allocation a = Allocation::from_environment();
  const JobConfig c = resolve_allocation(slurm_config(), a);
  ASSERT_EQ(c.cluster.nodes.size(), 3u);
  EXPECT_EQ(c.cluster.nodes[0].name, "sx1");
  EXPECT_EQ(c.cluster.nodes[0].host, "127.0.0.2");
  EXPECT_EQ(c.cluster.nodes[1].host, "127.0.0.3");
  EXPECT_EQ(c.cluster.nodes[2].host, "sx3") << "no address passed: its name";
  EXPECT_EQ(c.cluster.coordinator_host, "127.0.0.2");
  for (const char* bad : {"sx1", "=127.0.0.2", "sx1=", "sx1=a,,sx2=b"}) {
    ASSERT_EQ(setenv("SACCADE_NODE_ADDRS", bad, 1), 0);
    try {
      Allocation::from_environment();
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("$SACCADE_NODE_ADDRS"), std::string::npos) << e.what();
    }
  }
  unsetenv("SACCADE_NODE_ADDRS");
  unsetenv("SLURM_JOB_NODELIST");
}

TEST(Allocation, PortsMoveWithTheJobId) {
  const JobConfig a = resolve_allocation(slurm_config(), {"c1", "4203"});
  EXPECT_EQ(a.cluster.coordinator_port, 7100 + 3 * 50);
  EXPECT_EQ(a.cluster.data_port_base, 7110 + 3 * 50);
  const JobConfig b = resolve_allocation(slurm_config(), {"c1", "4204_7"});  // an array task
  EXPECT_EQ(b.cluster.coordinator_port, 7100 + 4 * 50);
  // Two jobs on one node: their port ranges do not meet.
  EXPECT_GT(b.cluster.coordinator_port, a.cluster.rollout_port_base);
}

TEST(Allocation, RefusedWithTheKeyWhenItCannotHold) {
  try {
    resolve_allocation(slurm_config(), {"", ""});
    ADD_FAILURE() << "resolved without an allocation";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("$SLURM_JOB_NODELIST"), std::string::npos) << e.what();
  }
  // nodes_from = "slurm" takes one template; ports_per_job must exceed the job's span.
  auto refusal = [](const std::string& toml) -> std::string {
    try {
      parse_config(toml, "job.toml");
      return "";
    } catch (const ConfigError& e) {
      return e.what();
    }
  };
  EXPECT_NE(refusal("[cluster]\nnodes_from = \"slurm\"\n[[cluster.nodes]]\nname = \"a\"\n"
                    "[[cluster.nodes]]\nname = \"b\"\n")
                .find("exactly one [[cluster.nodes]] entry"),
            std::string::npos);
  EXPECT_NE(refusal("[cluster]\nports_per_job = 10\ncoordinator_port = 7100\n"
                    "data_port_base = 7200\n")
                .find("cluster.ports_per_job: must exceed the span"),
            std::string::npos);
  // A config without nodes_from is left as written.
  const JobConfig plain = default_config();
  EXPECT_EQ(resolve_allocation(plain, {"c[1-4]", ""}).cluster.nodes.size(), 1u);
}

}  // namespace
}  // namespace saccade

// The one place where every config key is declared: name, default, allowed
// values and meaning. The reader, the TOML writer and the markdown reference
// (docs/config.md) are visitors over these functions, so they cannot drift.
//
// Internal to common/: include common/config.h instead.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config.h"

namespace saccade::config_schema {

// "section.key" paths as the visitors and the error messages name keys.
inline std::string join_path(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

inline constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// What the checks that span several keys found, as (key path, what is wrong).
// They run once every key has read well; the reader adds where each key was written.
struct CrossKeyProblems {
  std::vector<std::pair<std::string, std::string>> found;
  void add(std::string key, std::string what) {
    found.emplace_back(std::move(key), std::move(what));
  }
};

// Refuses lo > hi, reported at lo_key.
inline void check_order(CrossKeyProblems& p, const char* lo_key, double lo, const char* hi_key,
                        double hi) {
  if (lo > hi) p.add(lo_key, fmt::format("must not exceed {} ({}), got {}", hi_key, hi, lo));
}

inline bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

template <class V>
void describe(V& v, JobSection& c) {
  v.text("name", c.name, "saccade",
         "Job id: carried by every message and keys the coordinator's database.");
  v.integer("seed", c.seed, 0, 0, kMaxInt, "Root of every random stream of the job.");
  v.text("work_dir", c.work_dir, "runs/saccade",
         "Checkpoints, databases, logs and metrics of this job.");
  v.choices("stages", c.stages, {"pretrain"}, kStageOrder,
            "The job's stages, in this order (a subsequence). `saccade run` and the coordinator "
            "run them one after the other in one work_dir, each when the one before it has "
            "committed its outputs (pretrain: data actors + learners; probe: learner 0; policy: "
            "learner 0 as the policy learner + rollout actors; eval: learner 0 as the eval leader "
            "+ eval actors, if any). A relaunched job resumes at the stage it was in. The probe, "
            "policy and eval stages also run as one-process commands (`saccade probe`, `saccade "
            "policy`, `saccade eval`).");
}

// Each stage reads what the ones before it wrote: they run in kStageOrder.
inline void check(const JobSection& c, CrossKeyProblems& p) {
  const auto& stages = c.stages;
  auto order_of = [&](const std::string& s) {
    return std::find(kStageOrder.begin(), kStageOrder.end(), s) - kStageOrder.begin();
  };
  if (stages.empty()) p.add("job.stages", "expected at least one stage");
  for (size_t i = 1; i < stages.size(); ++i) {
    if (order_of(stages[i]) <= order_of(stages[i - 1]))
      p.add("job.stages",
            fmt::format("expected stages in the order pretrain, probe, policy, eval, each once; "
                        "\"{}\" follows \"{}\"",
                        stages[i], stages[i - 1]));
  }
}

template <class V>
void describe(V& v, NodeSpec& c) {
  v.text("name", c.name, "local",
         "Node name; agents register under it (`saccade agent --node NAME`).");
  v.text("host", c.host, "127.0.0.1", "Address at which other nodes reach this node's actors.");
  v.integer("data_actors", c.data_actors, 1, 0, 1024,
            "Data actors (decode, integral image, views).");
  v.integer("learners", c.learners, 1, 0, 1024, "Learner actors (one per GPU on GPU nodes).");
  v.integer("rollout_actors", c.rollout_actors, 0, 0, 1024, "GRPO rollout actors.");
  v.integer("eval_actors", c.eval_actors, 0, 0, 1024,
            "Eval actors: the eval stage splits its glimpse traces across them (eval actor r "
            "binds rollout_port_base + r); 0 on every node = the eval leader (learner 0's slot) "
            "runs them.");
  v.integer("gpus", c.gpus, 0, 0, 64, "GPUs used on this node; 0 = CPU only.");
  v.integer("threads", c.threads, 0, 0, 4096,
            "Compute threads per actor; 0 = cores / the actors of the running stage on the node.");
}

template <class V>
void describe(V& v, ClusterConfig& c) {
  v.text("coordinator_host", c.coordinator_host, "127.0.0.1", "Address of the coordinator.");
  v.integer("coordinator_port", c.coordinator_port, 7100, 1, 65535,
            "Coordinator's control socket (agents, actors, status).");
  v.integer("metrics_port", c.metrics_port, 0, 0, 65535,
            "Prometheus text exposition port; 0 = off.");
  v.integer("store_port", c.store_port, 7102, 1, 65535,
            "Unused, accepted so that older configs load: learners meet through the "
            "coordinator's rendezvous store over the control link, and no store port is opened.");
  v.integer("data_port_base", c.data_port_base, 7200, 1, 65535,
            "First TCP port of data actors' batch sockets.");
  v.integer("rollout_port_base", c.rollout_port_base, 7300, 1, 65535,
            "First TCP port of rollout and eval actors' sockets (rollout actor r, eval actor r: "
            "base + r; their stages never run at once).");
  v.text("ipc_dir", c.ipc_dir, "/tmp/saccade",
         "Folder of ipc:// endpoints between actors of one node.");
  v.integer("heartbeat_interval_ms", c.heartbeat_interval_ms, 1000, 10, 600000,
            "Heartbeat period, both ways.");
  v.integer("heartbeat_misses", c.heartbeat_misses, 5, 1, 1000,
            "Missed heartbeats before a peer is declared dead.");
  v.integer("collective_timeout_s", c.collective_timeout_s, 300, 1, 86400,
            "c10d collective timeout (never the 30-minute default).");
  v.integer("rendezvous_timeout_s", c.rendezvous_timeout_s, 120, 1, 86400,
            "Time for all learners of a generation to join.");
  v.integer("max_restarts", c.max_restarts, 5, 0, 1000000,
            "Restarts per role before the job fails.");
  v.integer("restart_backoff_ms", c.restart_backoff_ms, 1000, 0, 3600000,
            "First restart delay; doubles per restart.");
  v.integer("restart_backoff_max_ms", c.restart_backoff_max_ms, 32000, 0, 3600000,
            "Cap of the restart delay.");
  v.integer("max_message_bytes", c.max_message_bytes, 256 << 20, 1024, int64_t{1} << 34,
            "Frames larger than this are dropped; a job whose learners' batches need larger "
            "frames is refused before it starts (with views.cut_on = learner the bound is "
            "images at views.ship_max_side).");
  v.integer("max_checkpoint_bytes", c.max_checkpoint_bytes, int64_t{1} << 36, 1024,
            int64_t{1} << 44, "Largest checkpoint the coordinator accepts or a learner loads.");
  v.integer("checkpoint_timeout_s", c.checkpoint_timeout_s, 600, 1, 86400,
            "Time for the coordinator to commit a streamed checkpoint, or to send one back.");
  v.integer("keep_checkpoints", c.keep_checkpoints, 3, 1, 1000000,
            "Committed checkpoints the coordinator keeps (older ones are pruned).");
  v.integer("reconnect_grace_s", c.reconnect_grace_s, 300, 1, 86400,
            "How long agents and actors wait for a lost coordinator (and the coordinator for a "
            "lost agent) before giving up.");
  v.integer("stall_timeout_s", c.stall_timeout_s, 600, 0, 86400,
            "An actor whose body has not called its context this long stops heartbeating, so "
            "it is killed and restarted as hung; 0 = off.");
  v.integer("drain_timeout_s", c.drain_timeout_s, 25, 1, 86400,
            "Time actors get to drain (checkpoint, exit) before SIGKILL.");
  v.integer("status_linger_ms", c.status_linger_ms, 2000, 0, 3600000,
            "The coordinator keeps answering status this long after the job ended (not after a "
            "SIGTERM or SIGINT).");
  v.choice("nodes_from", c.nodes_from, "config", {"config", "slurm"},
           "config: the [[cluster.nodes]] as written. slurm: one node per host of the Slurm "
           "allocation ($SLURM_JOB_NODELIST), each with the roles of the single "
           "[[cluster.nodes]] entry (a template whose name is replaced by the host's, and its "
           "host by the node's NodeAddr, which the sbatch script passes in $SACCADE_NODE_ADDRS, "
           "else by its name), and coordinator_host = the first node's; the same config then "
           "runs on any --nodes.");
  v.integer("ports_per_job", c.ports_per_job, 0, 0, 10000,
            "0: ports as written. N > 0: inside a Slurm job every port of [cluster] moves up by "
            "(SLURM_JOB_ID mod 100) x N, so jobs sharing a node do not share ports; N must exceed "
            "the span of the job's ports.");
  v.table_array("nodes", c.nodes, 1, "Machines of the cluster, one [[cluster.nodes]] table each.");
}

// Node names, the actors each of `job`'s stages needs, and ports that collide.
inline void check(const ClusterConfig& c, const JobSection& job, CrossKeyProblems& p) {
  std::set<std::string> names;
  int64_t learners = 0, rollouts = 0, evals = 0, data_actors = 0;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const NodeSpec& n = c.nodes[i];
    const std::string at = fmt::format("cluster.nodes[{}]", i);
    if (n.name.empty()) p.add(at + ".name", "expected a non-empty node name");
    if (n.host.empty()) p.add(at + ".host", "expected a non-empty host");
    if (!names.insert(n.name).second)
      p.add(at + ".name", fmt::format("duplicate node name \"{}\"", n.name));
    learners += n.learners;
    rollouts += n.rollout_actors;
    evals += n.eval_actors;
    data_actors += n.data_actors;
  }
  if (learners == 0) {
    p.add("cluster.nodes", "every stage needs at least one learner over all nodes, got 0");
  }
  if (contains(job.stages, "pretrain") && data_actors < learners) {
    // Data actor d feeds learner d % learners: with fewer, a learner has none.
    p.add("cluster.nodes",
          fmt::format("stage pretrain needs at least one data actor per learner, got {} data "
                      "actor(s) for {} learner(s)",
                      data_actors, learners));
  }
  if (contains(job.stages, "policy") && rollouts < 1) {
    // GRPO is learner 0 (the policy learner) fed by rollout actors.
    p.add("cluster.nodes", "stage policy needs at least one rollout actor, got 0");
  }
  if (c.nodes_from == "slurm" && c.nodes.size() != 1) {
    p.add("cluster.nodes", fmt::format("cluster.nodes_from = \"slurm\" takes exactly one "
                                       "[[cluster.nodes]] entry, the per-node template; got {}",
                                       c.nodes.size()));
  }
  std::map<int64_t, std::string> ports;
  for (auto [key, port] :
       {std::pair<const char*, int64_t>{"cluster.coordinator_port", c.coordinator_port},
        {"cluster.metrics_port", c.metrics_port},
        {"cluster.data_port_base", c.data_port_base},
        {"cluster.rollout_port_base", c.rollout_port_base}}) {
    if (port == 0) continue;
    auto [it, fresh] = ports.emplace(port, key);
    if (!fresh) p.add(key, fmt::format("port {} is already used by {}", port, it->second));
  }
  // Data actor d binds data_port_base + d, rollout actor r and eval actor r
  // rollout_port_base + r (their stages never run at once).
  const int64_t data_end = c.data_port_base + data_actors;
  const int64_t rollout_end = c.rollout_port_base + std::max(rollouts, evals);
  if (data_actors > 0 && std::max(rollouts, evals) > 0 && c.data_port_base < rollout_end &&
      c.rollout_port_base < data_end) {
    p.add("cluster.rollout_port_base",
          fmt::format("rollout and eval actor ports [{}, {}) overlap data ports [{}, {})",
                      c.rollout_port_base, rollout_end, c.data_port_base, data_end));
  }
  for (auto [key, port] :
       {std::pair<const char*, int64_t>{"cluster.coordinator_port", c.coordinator_port},
        {"cluster.metrics_port", c.metrics_port}}) {
    if (port != 0 && ((port >= c.data_port_base && port < data_end) ||
                      (port >= c.rollout_port_base && port < rollout_end)))
      p.add(key, fmt::format("port {} lies among the data, rollout or eval actors' ports", port));
  }
  if (c.ports_per_job > 0) {
    int64_t lo = c.coordinator_port, hi = c.coordinator_port;
    for (int64_t port :
         {c.metrics_port, data_actors > 0 ? data_end - 1 : 0,
          data_actors > 0 ? c.data_port_base : 0, rollouts + evals > 0 ? rollout_end - 1 : 0,
          rollouts + evals > 0 ? c.rollout_port_base : 0}) {
      if (port <= 0) continue;
      lo = std::min(lo, port);
      hi = std::max(hi, port);
    }
    if (hi - lo >= c.ports_per_job) {
      p.add("cluster.ports_per_job",
            fmt::format("must exceed the span of the job's ports ({} .. {}: {}), got {}", lo, hi,
                        hi - lo + 1, c.ports_per_job));
    }
    if (hi + 99 * c.ports_per_job > 65535) {
      p.add("cluster.ports_per_job",
            fmt::format("moves port {} past 65535 for a job id ending in 99", hi));
    }
  }
}

template <class V>
void describe(V& v, SecurityConfig& c) {
  v.boolean("curve", c.curve, false,
            "ZeroMQ CURVE (encryption, authentication) on every cluster socket.");
  v.text("server_key", c.server_key, "",
         "Coordinator's key pair file (`saccade keys generate DIR`: DIR/server.key); read by "
         "the coordinator only.");
  v.text("server_public_key", c.server_public_key, "",
         "Coordinator's public key file (DIR/server.pub); read by every process.");
  v.text("client_key", c.client_key, "",
         "The job's client key pair file (DIR/client.key), shared by agents, actors and status "
         "clients; the coordinator admits only its public key.");
}

inline void check(const SecurityConfig& c, CrossKeyProblems& p) {
  if (!c.curve) return;
  for (auto [key, value] :
       {std::pair<const char*, const std::string*>{"security.server_key", &c.server_key},
        {"security.server_public_key", &c.server_public_key},
        {"security.client_key", &c.client_key}}) {
    if (value->empty()) p.add(key, "security.curve = true needs this key file");
  }
}

template <class V>
void describe(V& v, DataConfig& c) {
  v.choice("dataset", c.dataset, "idx", {"folder", "shards", "idx", "translated", "cluttered"},
           "folder: one subfolder per class; shards: WebDataset tar files (KEY.jpg/.png + "
           "KEY.cls); idx: MNIST-format files; translated/cluttered: RAM protocol over the IDX "
           "set.");
  v.text("root", c.root, "", "Training image folder (dataset = folder).");
  v.text("val_root", c.val_root, "", "Validation image folder (dataset = folder).");
  v.text("shards", c.shards, "",
         "Training tar shards (dataset = shards): a folder (every *.tar in it), one .tar or a "
         "glob such as \"/data/train/shard-*.tar\"; `saccade data pack` writes them. Each "
         "shard's byte-offset index is cached beside it as SHARD.tar.idx.");
  v.text("val_shards", c.val_shards, "",
         "Validation tar shards (dataset = shards), as data.shards.");
  v.text("idx_images", c.idx_images, "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
         "IDX training images.");
  v.text("idx_labels", c.idx_labels, "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz",
         "IDX training labels.");
  v.text("val_idx_images", c.val_idx_images,
         "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "IDX validation images.");
  v.text("val_idx_labels", c.val_idx_labels,
         "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz", "IDX validation labels.");
  v.integer("channels", c.channels, 3, 1, 3, "Channels fed to the model: 1 (gray) or 3 (RGB).");
  v.integer("max_image_pixels", c.max_image_pixels, 178956970, 1, int64_t{1} << 30,
            "folder and shards: an image of more pixels is skipped and counted as corrupt, so "
            "that a damaged or hostile header declaring a giant image (a decompression bomb) "
            "cannot make a data actor allocate gigabytes; JPEG, PNG, BMP, WebP, TIFF and PNM files "
            "are refused from their header. "
            "The default is Pillow's (2 x Image.MAX_IMAGE_PIXELS); at most OpenCV's 2^30.");
  v.integer("canvas_size", c.canvas_size, 60, 8, 8192,
            "Canvas side of translated/cluttered images.");
  v.integer("clutter_pieces", c.clutter_pieces, 4, 0, 1024, "Clutter pieces per cluttered image.");
  v.integer("clutter_size", c.clutter_size, 8, 1, 1024, "Side of a clutter piece.");
  v.number("item_scale", c.item_scale, 1.0, 0.125, 16.0,
           "Translated/cluttered: every digit (the item and the digits clutter is cut from) "
           "resized by this factor before it is placed, bilinear up and area-averaged down; 2 "
           "puts 56 px Fashion-MNIST items on the canvas, larger than one fovea.");
  v.integer("seed", c.seed, 0, 0, kMaxInt, "Seed of the translated/cluttered generator.");
  v.numbers("pixel_mean", c.pixel_mean, {0.485, 0.456, 0.406}, 0.0, 1.0, false,
            "Per-channel mean (0..1) subtracted from patches; 1 value or one per channel.");
  v.numbers("pixel_std", c.pixel_std, {0.229, 0.224, 0.225}, 1e-6, 1.0, false,
            "Per-channel std (0..1) dividing patches; 1 value or one per channel.");
  v.integer("loader_threads", c.loader_threads, 2, 1, 1024, "Decode/view threads per data actor.");
  v.integer("queue_depth", c.queue_depth, 8, 1, 4096,
            "Batches a learner keeps requested per data actor (and the single-process loader "
            "prepares ahead): back-pressure beyond.");
  v.integer("request_timeout_ms", c.request_timeout_ms, 10000, 10, 3600000,
            "A data actor that answers none of a learner's requests for this long is re-dialed "
            "and its requests go to another data actor.");
}

// The clutter fits the canvas, one normalisation value or one per channel, and
// the chosen dataset's paths.
inline void check(const DataConfig& c, CrossKeyProblems& p) {
  if (c.clutter_size > c.canvas_size) {
    p.add("data.clutter_size", fmt::format("must not exceed data.canvas_size ({}), got {}",
                                           c.canvas_size, c.clutter_size));
  }
  for (auto [key, values] :
       {std::pair<const char*, const std::vector<double>*>{"data.pixel_mean", &c.pixel_mean},
        {"data.pixel_std", &c.pixel_std}}) {
    const size_t n = values->size();
    if (n != 1 && static_cast<int64_t>(n) != c.channels) {
      p.add(key,
            fmt::format("expected 1 value or data.channels ({}) values, got {}", c.channels, n));
    }
  }
  if (c.dataset == "folder" && c.root.empty()) {
    p.add("data.root", "dataset = \"folder\" needs data.root, the folder of class subfolders");
  }
  if (c.dataset == "shards" && c.shards.empty()) {
    p.add("data.shards",
          "dataset = \"shards\" needs data.shards, a folder, .tar file or glob of tar shards");
  }
  if (c.dataset != "folder" && c.dataset != "shards" &&
      (c.idx_images.empty() || c.idx_labels.empty())) {
    p.add("data.idx_images",
          fmt::format("dataset = \"{}\" needs data.idx_images and data.idx_labels", c.dataset));
  }
}

template <class V>
void describe(V& v, ModelConfig& c) {
  v.integer("patch_size", c.patch_size, 16, 1, 256,
            "Side P of every patch after resizing, in pixels.");
  v.integer("depth", c.depth, 12, 1, 128, "Transformer blocks (ViT-S: 12).");
  v.integer("width", c.width, 384, 8, 16384, "Embedding width (ViT-S: 384).");
  v.integer("heads", c.heads, 6, 1, 256, "Attention heads; must divide width (ViT-S: 6).");
  v.number("mlp_ratio", c.mlp_ratio, 4.0, 0.25, 64.0, "MLP hidden width / width.");
  v.integer("n_state", c.n_state, 8, 1, 1024, "State tokens carried between glimpses.");
  v.number("layerscale_init", c.layerscale_init, 1e-5, 0.0, 10.0, "Initial LayerScale value.");
  v.choice("state_input", c.state_input, "normed", {"normed", "projected", "memory", "gated"},
           "How the state carried from the previous glimpse re-enters the next: normed = the "
           "previous step's final-LayerNorm output plus the state embedding, as it is (the "
           "paper); projected = through a learned linear layer, initialised at zero, plus the "
           "state embedding; memory = the state tokens start afresh each step and read the "
           "carried state as n_state more tokens; gated = as memory, and the new state is then "
           "mixed per channel with the carried one through a learned sigmoid gate (old + g * "
           "(new - old)), so a glimpse that adds nothing can keep what earlier ones saw. With "
           "normed, the carried state (unit variance "
           "per feature) dwarfs what a freshly initialised step adds, so at first later glimpses "
           "barely change it (docs/ssl.md, \"Glimpses\").");
  v.integer("pos_mlp_hidden", c.pos_mlp_hidden, 128, 1, 65536,
            "Hidden width of the (x, y, z) positional-embedding MLP.");
  v.choice("gelu", c.gelu, "erf", {"erf", "tanh"},
           "The activation of the blocks' MLPs: erf = GELU as ViT and DINOv2 compute it; tanh = "
           "its tanh approximation (within 1e-3 of it everywhere), the form a GPU computes "
           "inside the matrix product before it (ssl.fused_mlp). Part of the model: exported "
           "backbones record it.");
}

inline void check(const ModelConfig& c, CrossKeyProblems& p) {
  if (c.width % c.heads != 0) {
    p.add("model.heads", fmt::format("must divide model.width ({}), got {}", c.width, c.heads));
  }
}

template <class V>
void describe(V& v, ViewsConfig& c) {
  v.integer("multizoom_patches", c.multizoom_patches, 36, 0, 4096,
            "M concentric multi-zoom crops per glimpse.");
  v.number("zoom_max", c.zoom_max, 5.0, 0.0, 30.0,
           "Multi-zoom levels z = linspace(0, zoom_max, M).");
  v.integer("fovea_grid", c.fovea_grid, 8, 0, 256, "G: G x G foveal grid per glimpse.");
  v.number("fovea_zoom_min", c.fovea_zoom_min, 3.0, 0.0, 30.0, "Lowest zoom of the foveal grid.");
  v.number("fovea_zoom_max", c.fovea_zoom_max, 5.0, 0.0, 30.0, "Highest zoom of the foveal grid.");
  v.integer("glimpses", c.glimpses, 8, 1, 1024, "K glimpses of a sequential view.");
  v.integer("global_grid", c.global_grid, 16, 1, 256, "Grid of a global view (DINOv2: 16).");
  v.number("global_scale_min", c.global_scale_min, 0.32, 1e-4, 1.0,
           "Least area scale of a global view.");
  v.number("global_scale_max", c.global_scale_max, 1.0, 1e-4, 1.0,
           "Largest area scale of a global view.");
  v.integer("local_grid", c.local_grid, 7, 1, 256, "Grid of a local view (DINOv2: 7).");
  v.integer("local_views", c.local_views, 8, 0, 64, "Local views per image for the student.");
  v.number("local_scale_min", c.local_scale_min, 0.05, 1e-4, 1.0,
           "Least area scale of a local view.");
  v.number("local_scale_max", c.local_scale_max, 0.32, 1e-4, 1.0,
           "Largest area scale of a local view.");
  v.integer("vit_grid", c.vit_grid, 16, 1, 256,
            "Grid of ViT-mode evaluation (one step over the whole image).");
  v.choice("cut_on", c.cut_on, "data", {"data", "learner"},
           "Who cuts the training views: data = data actors cut them and ship uint8 patches; "
           "learner = data actors ship the decoded image with the views' geometry and the "
           "learner builds the integral image and cuts on its device (CUDA kernels on a GPU). "
           "Both give the same views of the same image (docs/data.md, \"Who cuts the "
           "views\").");
  v.integer("ship_max_side", c.ship_max_side, 1024, 16, 65535,
            "With cut_on = learner: an image whose longer side exceeds this is downscaled "
            "(area interpolation) to it before shipping; it bounds the bytes per image "
            "(side^2 x channels) and so the frame size.");
}

inline void check(const ViewsConfig& c, CrossKeyProblems& p) {
  check_order(p, "views.fovea_zoom_min", c.fovea_zoom_min, "views.fovea_zoom_max",
              c.fovea_zoom_max);
  check_order(p, "views.global_scale_min", c.global_scale_min, "views.global_scale_max",
              c.global_scale_max);
  check_order(p, "views.local_scale_min", c.local_scale_min, "views.local_scale_max",
              c.local_scale_max);
  if (c.multizoom_patches + c.fovea_grid == 0) {
    p.add("views.multizoom_patches",
          "a glimpse needs patches: multizoom_patches and fovea_grid are both 0");
  }
}

template <class V>
void describe(V& v, SslConfig& c) {
  v.integer("epochs", c.epochs, 100, 1, 100000, "Pretraining epochs.");
  v.integer("schedule_epochs", c.schedule_epochs, 0, 0, 100000,
            "Schedules run as if training lasted this many epochs; 0 = epochs.");
  v.integer("steps_per_epoch", c.steps_per_epoch, 0, 0, kMaxInt,
            "Optimiser steps per epoch; 0 = dataset size / batch size.");
  v.integer("batch_size", c.batch_size, 1024, 1, 1 << 24, "Global batch over all learners.");
  v.number("lr", c.lr, 0.002, 0.0, 10.0,
           "Peak learning rate for a global batch of 1024 (the paper's), reached after warmup.");
  v.choice("lr_scaling", c.lr_scaling, "linear", {"linear", "sqrt", "none"},
           "How lr follows batch_size: linear = lr x batch / 1024 (DINO), sqrt = lr x "
           "sqrt(batch / 1024) (DINOv2), none = lr as given.");
  v.number("min_lr", c.min_lr, 1e-6, 0.0, 10.0, "Learning rate at the end of the cosine.");
  v.integer("warmup_epochs", c.warmup_epochs, 10, 0, 100000, "Linear learning-rate warmup.");
  v.number("weight_decay_start", c.weight_decay_start, 0.04, 0.0, 10.0,
           "Weight decay, cosine from this...");
  v.number("weight_decay_end", c.weight_decay_end, 0.4, 0.0, 10.0,
           "...to this (none on norms, biases, LayerScale).");
  v.number("momentum_start", c.momentum_start, 0.992, 0.0, 1.0,
           "Teacher EMA momentum, cosine from this to momentum_end.");
  v.number("momentum_end", c.momentum_end, 1.0, 0.0, 1.0, "Final teacher EMA momentum.");
  // Sinkhorn-Knopp takes exp(logit / temp) in fp32 with |logit| <= 1: below 1/88 it overflows.
  v.number("teacher_temp_start", c.teacher_temp_start, 0.04, 0.012, 10.0,
           "Teacher temperature, linear from this...");
  v.number("teacher_temp_end", c.teacher_temp_end, 0.07, 0.012, 10.0,
           "...to this over teacher_temp_warmup_epochs.");
  v.integer("teacher_temp_warmup_epochs", c.teacher_temp_warmup_epochs, 30, 0, 100000,
            "Teacher temperature warmup.");
  v.number("student_temp", c.student_temp, 0.1, 1e-4, 10.0, "Student temperature.");
  v.number("clip_grad", c.clip_grad, 3.0, 0.0, 1e9, "Gradient norm clipping; 0 = off.");
  v.integer("freeze_last_layer_epochs", c.freeze_last_layer_epochs, 1, 0, 100000,
            "Epochs with the head's last layer frozen.");
  v.number("koleo_weight", c.koleo_weight, 0.1, 0.0, 100.0, "KoLeo regulariser weight; 0 = off.");
  v.number("global_weight", c.global_weight, 0.125, 0.0, 1.0,
           "Share of the global view in the static term, the rest the local views' "
           "(Algorithm 1: 1/8 global, 7/8 local).");
  v.choice("sequential_targets", c.sequential_targets, "both", {"both", "global"},
           "What the student's sequential steps are matched to: both = the teacher's global view "
           "and the final step of its sequential view, averaged (the paper: all student outputs "
           "against all teacher outputs); global = the teacher's global view alone, so that "
           "each step is pulled towards what the whole image says.");
  v.number("sequential_weight", c.sequential_weight, 0.5, 0.0, 1.0,
           "Share of the sequential term (the mean over glimpses) in the DINO loss, the rest the "
           "static term's (Algorithm 1: 1/2).");
  v.integer("head_prototypes", c.head_prototypes, 65536, 2, 1 << 24, "DINO head prototypes K.");
  v.integer("head_hidden", c.head_hidden, 2048, 1, 1 << 20, "DINO head hidden width.");
  v.integer("head_bottleneck", c.head_bottleneck, 256, 1, 1 << 20, "DINO head bottleneck width.");
  v.choice("teacher_centering", c.teacher_centering, "sinkhorn", {"sinkhorn", "ema"},
           "How the teacher's targets are centred: sinkhorn = Sinkhorn-Knopp over the batch "
           "(DINOv2, the paper); ema = DINO's, the teacher's logits minus an EMA of their batch "
           "mean, then the softmax at teacher temperature.");
  v.integer("sinkhorn_iterations", c.sinkhorn_iterations, 3, 1, 1000,
            "Sinkhorn-Knopp iterations of teacher centring (teacher_centering = sinkhorn).");
  v.number("center_momentum", c.center_momentum, 0.9, 0.0, 1.0,
           "EMA momentum of the centre (teacher_centering = ema; DINO: 0.9).");
  v.integer("checkpoint_every_steps", c.checkpoint_every_steps, 500, 1, kMaxInt,
            "Steps between checkpoints.");
  v.choice("precision", c.precision, "fp32", {"fp32", "bf16", "bf16-params"},
           "fp32; bf16 = forward passes under bf16 autocast (matmuls in bf16 from fp32 weights); "
           "bf16-params = forward and backward on bf16 copies of the weights (residual stream, "
           "LayerNorm and weights in bf16, no casts) with fp32 master weights, all-reduce, "
           "update, EMA and checkpoints. The loss is fp32 in every mode. bf16 modes are for "
           "GPUs.");
  v.boolean("overlap_all_reduce", c.overlap_all_reduce, true,
            "With several learners: each bucket of gradients (about 25 MB) starts its "
            "all-reduce while backward still runs, as PyTorch's DDP does; false = every bucket "
            "after backward. The same weights either way.");
  v.boolean("batched_glimpses", c.batched_glimpses, false,
            "The student's sequential view in two passes with gradient instead of one per "
            "glimpse: a pass without gradient computes the states the glimpses carry (they are "
            "detached: no backprop through time), then glimpses 2..S run as one batch. The same "
            "losses and gradients for S-2 more glimpse forwards; fewer, larger kernels, for "
            "devices bound by launches (docs/model.md).");
  v.boolean("cuda_graphs", c.cuda_graphs, false,
            "Replay the teacher's forward (its global view and every glimpse of its sequential "
            "view), and with batched_glimpses the student's pass that computes the states its "
            "glimpses carry, as CUDA graphs instead of launching their kernels one by one: the "
            "host's dispatch sets those passes' time at the batches a GPU learner takes. The "
            "same step. Precision fp32 or bf16-params (autocast's cast cache cannot live in a "
            "graph); a learner on a CPU warns and runs without graphs.");
  v.boolean("fused_add_norm", c.fused_add_norm, false,
            "Each residual add of the backbone's blocks and the LayerNorm after it as one fused "
            "operation, forward and backward (kernels/layer_norm.h: fewer activation-sized "
            "passes over memory). The same step within float rounding; it fuses with "
            "precision fp32 or bf16-params (under bf16 autocast the types differ and LibTorch's "
            "operations run).");
  v.boolean("fused_mlp", c.fused_mlp, false,
            "On a GPU, each MLP of the backbone's blocks with its GELU inside its two matrix "
            "products, forward and backward (cuBLASLt epilogues, kernels/linear_epilogues.h: the "
            "GELU, its gradient and the first bias's gradient make no passes of their own over "
            "the hidden activations). Needs model.gelu = \"tanh\" (the form the epilogues "
            "compute). The same step within float rounding; it fuses with precision fp32 or "
            "bf16-params on a CUDA device, elsewhere LibTorch's operations run.");
  v.boolean("fused_bias_grad", c.fused_bias_grad, false,
            "On a GPU, each linear layer's bias gradient computed inside the product of its "
            "weight gradient (cuBLASLt's BGRADB epilogue, kernels/linear_epilogues.h) instead of "
            "by a reduction that reads the output gradient once more. The same step within "
            "float rounding; with precision fp32 or bf16-params on a CUDA device, elsewhere "
            "LibTorch's operations run.");
  v.boolean("prefetch_to_device", c.prefetch_to_device, false,
            "A GPU learner copies the next step's batch to the device while a step runs (on a "
            "thread of its own through page-locked memory, then on a side stream), instead of "
            "as the step's first phase with the device idle: the training loop reads one batch "
            "ahead. The same step. On a CPU learner nothing is copied ahead.");
  v.number("peak_tflops", c.peak_tflops, 0.0, 0.0, 1e6,
           "Peak dense TFLOP/s of one learner's device at ssl.precision, the denominator of the "
           "model FLOP utilisation (MFU) in the progress line, metrics, status and Prometheus; 0 "
           "= the table of known GPUs in docs/model.md (unknown devices and CPUs: no MFU).");
  v.integer("threads", c.threads, 0, 0, 4096,
            "Torch intra-op threads of the one-process commands (pretrain, probe, policy, "
            "eval); 0 = all cores. A job's actors take cluster.nodes[].threads instead.");
  v.choice("objective", c.objective, "dino", {"dino", "supervised"},
           "dino: sequential-to-global self-distillation. supervised: the labelled baseline with "
           "the same backbone, views, loss weights and optimiser, the teacher's targets replaced "
           "by the images' labels (head_prototypes must equal the number of classes; the DINO "
           "head is then a cosine classifier at student_temp).");
  v.integer("knn_every_steps", c.knn_every_steps, 500, 0, kMaxInt,
            "Steps between k-NN checks of the teacher (ViT mode and after each of probe.glimpses "
            "random glimpses; probe.knn_k and probe.knn_temperature) on images held apart from "
            "the probe's reported split; shown "
            "in the progress line, metrics and status; 0 = off.");
  v.integer("knn_bank_images", c.knn_bank_images, 2000, 1, kMaxInt,
            "k-NN check bank: the last N images of the training split.");
  v.integer("knn_query_images", c.knn_query_images, 1000, 1, kMaxInt,
            "k-NN check queries: the last N images of the validation split (keep them apart from "
            "the first probe.val_images).");
}

inline void check(const SslConfig& c, CrossKeyProblems& p) {
  if (const double peak = effective_lr(c); c.min_lr > peak) {
    p.add("ssl.min_lr", fmt::format("must not exceed the peak lr ({} = ssl.lr scaled by "
                                    "ssl.lr_scaling to ssl.batch_size), got {}",
                                    peak, c.min_lr));
  }
  check_order(p, "ssl.momentum_start", c.momentum_start, "ssl.momentum_end", c.momentum_end);
  if (c.cuda_graphs && c.precision == "bf16")
    p.add("ssl.cuda_graphs",
          "needs ssl.precision = \"fp32\" or \"bf16-params\" (autocast's cache of cast "
          "weights cannot live in a CUDA graph), got ssl.precision = \"bf16\"");
}

template <class V>
void describe(V& v, ProbeConfig& c) {
  v.choice("head", c.head, "linear", {"linear", "transformer"},
           "Task head the probe writes for the policy (its reward) and eval stages: linear on "
           "the first state token, or the paper's one-layer transformer pooling every state "
           "token (fitted on top of the linear probe's report, which it then also shows).");
  v.numbers("head_lrs", c.head_lrs, {1e-3}, 1e-9, 10.0, false,
            "Peak AdamW learning rates of the transformer head (batch 256, cosine schedule); "
            "the one, and the step, best on the held-apart training images is kept.");
  v.integer("head_steps", c.head_steps, 1000, 1, int64_t{1} << 40,
            "AdamW steps of the transformer head per learning rate.");
  v.integer("batch_size", c.batch_size, 256, 1, 1 << 24,
            "Images per forward pass while extracting features.");
  v.integer("glimpses", c.glimpses, 8, 1, 1024,
            "Random glimpses that produce the probe's features.");
  v.integer("train_images", c.train_images, 0, 0, kMaxInt,
            "The probe's training images: the first N of the training split; 0 = all.");
  v.integer("val_images", c.val_images, 0, 0, kMaxInt,
            "The reported images: the first N of the validation split; 0 = all.");
  v.numbers("cs", c.cs, {0.01, 0.1, 1.0, 10.0}, 1e-9, 1e9, false,
            "Inverse L2 strengths of the linear probe (scikit-learn's C); the one best on "
            "held-apart training images is refit on all of them.");
  v.number("holdout_fraction", c.holdout_fraction, 0.1, 0.01, 0.5,
           "Share of the probe's training images held apart to choose C on.");
  v.integer("max_iterations", c.max_iterations, 1000, 1, 1000000,
            "L-BFGS iterations per linear-probe fit.");
  v.integer("knn_k", c.knn_k, 20, 1, 100000, "Neighbours of the k-NN classifier (DINO: 20).");
  v.number("knn_temperature", c.knn_temperature, 0.07, 1e-4, 100.0,
           "Temperature of the k-NN votes, weight exp(cosine / T) (DINO: 0.07).");
  v.choices("baselines", c.baselines, {"random_init", "pixels"},
            {"random_init", "pixels", "supervised"},
            "Baselines measured in the same run: the backbone at its initial weights, raw "
            "pixels of the ViT-mode grid, and supervised: the same backbone and views trained "
            "with labels (ssl.objective = \"supervised\", every other [ssl] key as pretraining's) "
            "for probe.supervised_steps by the probe itself, in job.work_dir/supervised "
            "(resumed, not retrained, when the probe runs again), then probed like the others.");
  v.integer("supervised_steps", c.supervised_steps, 0, 0, kMaxInt,
            "Optimiser steps of the supervised baseline, batches of ssl.batch_size, on "
            "pretraining's schedules (as `saccade pretrain --steps N`); 0 = pretraining's "
            "whole budget (ssl.epochs x ssl.steps_per_epoch). probe.json reports its wall time.");
  v.choices("features", c.features, {"first_state"},
            {"first_state", "all_states", "state_and_patch_mean", "glimpse_mean"},
            "Features reported per backbone: first_state (the paper's; the task head written for "
            "the policy reads it), all_states (every state token concatenated, rows named "
            "NAME/all_states) and state_and_patch_mean (the first state token beside the mean "
            "patch token, DINOv2's linear-eval input; after glimpse k the mean over every patch of "
            "glimpses 1..k; rows NAME/state_and_patch_mean) and glimpse_mean (after glimpse k the "
            "first state token averaged over glimpses 1..k, so what an earlier glimpse gave "
            "counts even where the carried state lost it; rows NAME/glimpse_mean).");
}

template <class V>
void describe(V& v, PolicyConfig& c) {
  v.integer("blocks", c.blocks, 6, 1, 128, "Transformer blocks of the gaze policy.");
  v.integer("width", c.width, 192, 8, 8192, "Embedding width of the gaze policy.");
  v.integer("heads", c.heads, 3, 1, 128, "Attention heads of the gaze policy (divide width).");
  v.integer("mixtures", c.mixtures, 4, 1, 1024, "Gaussian mixture components N_mix.");
  v.integer("group_size", c.group_size, 8, 2, 4096, "GRPO group: traces per image.");
  v.integer("steps", c.steps, 8, 1, 1024, "Glimpses per trace.");
  v.number("gamma", c.gamma, 0.9, 0.0, 1.0, "Return discount.");
  v.choice("reward", c.reward, "probability", {"probability", "increase", "final_correct"},
           "What a trace is rewarded for after each glimpse: probability (the task head's "
           "probability of the true class, every glimpse; the paper's), increase (its rise over "
           "the glimpse before), final_correct (1 when the last glimpse's answer is right, 0 "
           "before). results/policy.md has the ablation.");
  v.number("clip_eps", c.clip_eps, 0.2, 0.0, 10.0, "PPO-style ratio clip.");
  v.number("kl_beta", c.kl_beta, 0.0, 0.0, 100.0, "KL penalty to the reference policy.");
  v.number("lr", c.lr, 1e-4, 0.0, 10.0, "Policy learning rate (AdamW).");
  v.number("std_start", c.std_start, 0.15, 1e-6, 10.0,
           "GMM std (short-side units), scheduled from this...");
  v.number("std_end", c.std_end, 0.05, 1e-6, 10.0, "...to this.");
  v.integer("epochs", c.epochs, 20, 1, 100000, "Policy training epochs.");
  v.integer("batch_size", c.batch_size, 64, 1, 1 << 24, "Images per rollout batch.");
  v.integer("updates", c.updates, 4, 1, 1000,
            "Gradient steps per rollout batch (GRPO's mu; > 1 makes the clip matter).");
  v.integer("keep_rollout_batches", c.keep_rollout_batches, 16, 0, int64_t{1} << 40,
            "Rollout batches the policy learner keeps in job.work_dir/rollouts.db (0 = all).");
  v.integer("rollout_timeout_ms", c.rollout_timeout_ms, 60000, 1, int64_t{1} << 40,
            "Silence of a rollout actor before the policy learner sends its images to another.");
  v.integer("checkpoint_every_batches", c.checkpoint_every_batches, 50, 1, int64_t{1} << 40,
            "Rollout batches between the policy learner's checkpoints (policy and AdamW state, "
            "committed by the coordinator); a killed policy learner resumes from the last one.");
  v.text("input_dir", c.input_dir, "",
         "Where a policy stage finds the probe's head (probe_head.safetensors) and the "
         "checkpoints it names (coordinator.db or checkpoints.db) when its job has no probe or "
         "pretrain stage of its own, on the coordinator's node: its actors get them from the "
         "coordinator; empty = job.work_dir.");
  v.integer("train_images", c.train_images, 0, 0, int64_t{1} << 40,
            "GRPO trains on the first N training images; 0 = all (`saccade policy "
            "--max-train-images` overrides).");
  v.boolean("sees_state", c.sees_state, true,
            "false: the policy reads only the glimpse index (a one-hot code in place of the "
            "state tokens), so GRPO learns one path for every image: the best fixed scan path, "
            "the baseline a policy that searches must beat (docs/policy.md).");
  v.boolean("fixed_path_baseline", c.fixed_path_baseline, true,
            "After the policy, GRPO also trains the best fixed scan path (a state-blind policy, "
            "as sees_state = false) with the same budget, seeds and rollouts, and the stage "
            "reports it beside the policy (policy.json fixed_path_*): the baseline a policy "
            "that searches must beat, in the same report. Doubles the stage's GRPO time.");
  v.integer("curve_every_batches", c.curve_every_batches, 100, 0, int64_t{1} << 40,
            "Every N rollout batches (and after the last) GRPO measures the policy on the first "
            "policy.curve_images validation images: the training curve of policy.json "
            "(val_curve) and policy_training.png; 0 = none.");
  v.integer("curve_images", c.curve_images, 500, 1, int64_t{1} << 40,
            "Validation images of each point of the training curve.");
  v.integer("val_images", c.val_images, 0, 0, int64_t{1} << 40,
            "The policy is evaluated on the first N validation images; 0 = all (`saccade policy "
            "--max-val-images` overrides).");
}

// A state-blind policy codes the glimpse index one-hot in the backbone's width
// (workers/policy/gaze_traces.h), so `model` bounds its steps.
inline void check(const PolicyConfig& c, const ModelConfig& model, CrossKeyProblems& p) {
  if (c.width % c.heads != 0) {
    p.add("policy.heads", fmt::format("must divide policy.width ({}), got {}", c.width, c.heads));
  }
  if ((!c.sees_state || c.fixed_path_baseline) && c.steps > model.width) {
    p.add("policy.steps",
          fmt::format("a state-blind policy ({}) codes the glimpse in model.width ({}) values: "
                      "expected at most that many steps, got {}",
                      c.sees_state ? "policy.fixed_path_baseline" : "policy.sees_state = false",
                      model.width, c.steps));
  }
  check_order(p, "policy.std_end", c.std_end, "policy.std_start", c.std_start);
}

template <class V>
void describe(V& v, EvalConfig& c) {
  v.choices("modes", c.modes, {"vit", "random", "scan", "fixed_path", "policy"},
            {"vit", "random", "scan", "fixed_path", "policy"},
            "Modes `saccade eval` and the eval stage measure: vit (one step over the ViT-mode "
            "grid), random gazes, scan (the fixed centre-first scan path), fixed_path (the "
            "learned fixed path of policy.fixed_path_baseline), policy (the learned policy's "
            "most likely gaze); the last two need the policy stage's weights.");
  v.integer("glimpses", c.glimpses, 8, 1, 1024,
            "Glimpses of the gaze modes: top-1 is reported after each (the paper: after 8).");
  v.integer("batch_size", c.batch_size, 256, 1, 1 << 24,
            "Images per forward pass (the sweep's larger ViT grids get proportionally fewer).");
  v.integer("images", c.images, 0, 0, int64_t{1} << 40,
            "The first N validation images of the per-glimpse evaluation; 0 = all.");
  v.numbers("scales", c.scales, {1.0, 2.0, 4.0, 8.0}, 0.01, 64.0, /*may_be_empty=*/true,
            "Resolution sweep: the validation images resized by each factor; every mode, plus a "
            "ViT of fixed patch size (vit_fixed_patch: views.vit_grid x scale patches per side), "
            "is measured at each. Empty = no sweep.");
  v.integer("sweep_images", c.sweep_images, 500, 1, int64_t{1} << 40,
            "The first N validation images of the resolution sweep.");
  v.choice("upscale", c.upscale, "nearest", {"nearest", "bilinear"},
           "How the sweep enlarges images: nearest replicates pixels (every view sees the same "
           "content at every scale, up to the rounding of cell borders); bilinear blurs the "
           "content a model trained on sub-pixel cells has seen (results/eval.md).");
}

// Mode fixed_path evaluates the learned fixed path, a state-blind policy the
// policy stage trains beside the policy: the glimpses fit model.width, and the
// policy stage must train it.
inline void check(const EvalConfig& c, const JobConfig& job, CrossKeyProblems& p) {
  const int64_t width = job.model.width;
  const bool evaluates_policy = contains(c.modes, "policy");
  const bool evaluates_blind = contains(c.modes, "fixed_path");
  if (evaluates_blind && c.glimpses > width) {
    p.add("eval.glimpses",
          fmt::format("the learned fixed path (eval mode fixed_path) codes the glimpse in "
                      "model.width ({}) values: expected at most that many glimpses, got {}",
                      width, c.glimpses));
  } else if (!job.policy.sees_state && evaluates_policy && c.glimpses > width) {
    p.add("eval.glimpses",
          fmt::format("a state-blind policy (policy.sees_state = false) codes the glimpse in "
                      "model.width ({}) values: expected at most that many glimpses in mode "
                      "policy, got {}",
                      width, c.glimpses));
  }
  if (contains(job.job.stages, "eval") && evaluates_blind &&
      (!job.policy.fixed_path_baseline || !job.policy.sees_state)) {
    p.add("eval.modes",
          fmt::format("mode \"fixed_path\" needs the learned fixed path, which {}: drop "
                      "\"fixed_path\" from eval.modes",
                      job.policy.sees_state ? "policy.fixed_path_baseline = false does not train"
                                            : "a state-blind policy (policy.sees_state = false) "
                                              "does not train beside itself"));
  }
}

template <class V>
void describe(V& v, LoggingConfig& c) {
  v.choice("level", c.level, "info", {"trace", "debug", "info", "warn", "error", "critical", "off"},
           "Log level.");
  v.text("dir", c.dir, "",
         "Log folder (one file per process: ROLE-RANK.log); empty = stderr only.");
  v.text("metrics_file", c.metrics_file, "metrics.jsonl",
         "Metrics as JSON lines, relative to job.work_dir.");
  v.boolean("progress", c.progress, true, "Progress bar on a terminal.");
}

// The file's sections, in the order `config show` prints them.
template <class V>
void describe(V& v, JobConfig& c) {
  v.section("job", "The job.", c.job);
  v.section("cluster", "Nodes, roles, ports, liveness.", c.cluster);
  v.section("security", "Authentication and encryption of cluster sockets.", c.security);
  v.section("data", "Datasets and loading.", c.data);
  v.section("model", "The foveal transformer.", c.model);
  v.section("views", "Geometry of the views cut per image.", c.views);
  v.section("ssl", "Sequential-to-global DINO pretraining.", c.ssl);
  v.section("probe", "Task head on frozen features.", c.probe);
  v.section("policy", "Gaze policy trained with GRPO.", c.policy);
  v.section("eval", "Evaluation.", c.eval);
  v.section("logging", "Logs and metrics.", c.logging);
}

// Every section's cross-key checks, in the order of the sections.
inline void check(const JobConfig& c, CrossKeyProblems& p) {
  check(c.job, p);
  check(c.cluster, c.job, p);
  check(c.security, p);
  check(c.data, p);
  check(c.model, p);
  check(c.views, p);
  check(c.ssl, p);
  if (c.ssl.fused_mlp && c.model.gelu != "tanh")
    p.add("ssl.fused_mlp", fmt::format("needs model.gelu = \"tanh\" (the GELU cuBLASLt's "
                                       "epilogues compute), got model.gelu = \"{}\"",
                                       c.model.gelu));
  check(c.policy, c.model, p);
  check(c.eval, c, p);
}

}  // namespace saccade::config_schema

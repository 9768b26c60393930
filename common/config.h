// The job configuration: one TOML file per job.
//
// The structs below only hold values. Every key's default, range and
// documentation live in one place, common/config_schema.h; a
// default-constructed JobConfig is zeroed, use default_config() for defaults.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace saccade {

struct JobSection {
  std::string name;      // job id: carried by every message, keys the coordinator's database
  int64_t seed{};        // root of every random stream in the job
  std::string work_dir;  // checkpoints, databases, logs and metrics of this job
  std::vector<std::string> stages;  // what `saccade run` runs: a subsequence of kStageOrder
};

// The stages a job may run, in the order they run (each reads the ones before it).
inline const std::vector<std::string> kStageOrder = {"pretrain", "probe", "policy", "eval"};

// In job.work_dir: the probe's supervised baseline (probe.baselines), a
// `saccade pretrain` folder of its own that `saccade run --fresh` deletes too.
inline constexpr const char* kSupervisedBaselineDir = "supervised";

// One machine of the cluster and the actors it hosts.
struct NodeSpec {
  std::string name;  // agents register under this name (`saccade agent --node NAME`)
  std::string host;  // address other nodes reach this node's actors at
  int64_t data_actors{};
  int64_t learners{};
  int64_t rollout_actors{};
  int64_t eval_actors{};
  int64_t gpus{};     // GPUs used on this node (0 = CPU only)
  int64_t threads{};  // compute threads per actor (0 = cores / actors on the node)
};

struct ClusterConfig {
  std::string coordinator_host;
  int64_t coordinator_port{};
  int64_t metrics_port{};  // Prometheus text exposition; 0 = off
  int64_t store_port{};    // unused: the rendezvous store is the coordinator's (docs/runtime.md)
  int64_t data_port_base{};
  int64_t rollout_port_base{};
  std::string ipc_dir;  // ipc:// endpoints for actors on the same node
  int64_t heartbeat_interval_ms{};
  int64_t heartbeat_misses{};
  int64_t collective_timeout_s{};
  int64_t rendezvous_timeout_s{};
  int64_t max_restarts{};
  int64_t restart_backoff_ms{};
  int64_t restart_backoff_max_ms{};
  int64_t max_message_bytes{};
  int64_t max_checkpoint_bytes{};
  int64_t checkpoint_timeout_s{};
  int64_t keep_checkpoints{};
  int64_t reconnect_grace_s{};  // how long a lost coordinator or agent may stay away
  int64_t stall_timeout_s{};    // an actor body silent this long stops heartbeating (0 = off)
  int64_t drain_timeout_s{};    // time actors get to drain before SIGKILL
  int64_t status_linger_ms{};   // the coordinator answers status this long after the job ends
  std::string nodes_from;       // config | slurm (common/allocation.h)
  int64_t ports_per_job{};      // 0: ports as written; N: + (Slurm job id mod 100) * N
  std::vector<NodeSpec> nodes;

  // Actors of one kind over all nodes, e.g. total(&NodeSpec::learners).
  int64_t total(int64_t NodeSpec::*actors) const {
    int64_t n = 0;
    for (const NodeSpec& node : nodes) n += node.*actors;
    return n;
  }
};

// ZeroMQ CURVE on every cluster socket (`saccade keys generate DIR`).
struct SecurityConfig {
  bool curve{};
  std::string server_key;         // coordinator's key pair file (public + secret)
  std::string server_public_key;  // coordinator's public key file, read by every process
  std::string client_key;         // the job's client key pair, shared by its processes
};

struct DataConfig {
  std::string dataset;  // folder | shards | idx | translated | cluttered
  std::string root;     // image folder (one subfolder per class)
  std::string val_root;
  std::string shards;  // tar shards: a folder, a .tar or a glob
  std::string val_shards;
  std::string idx_images;  // IDX (MNIST format) files, gzipped or not
  std::string idx_labels;
  std::string val_idx_images;
  std::string val_idx_labels;
  int64_t channels{};
  int64_t max_image_pixels{};  // folder and shards: larger images are skipped and counted
  int64_t canvas_size{};       // translated / cluttered canvas side
  int64_t clutter_pieces{};
  int64_t clutter_size{};
  double item_scale{};  // translated / cluttered: digits resized by this before they are placed
  int64_t seed{};
  std::vector<double> pixel_mean;  // per channel, 0..1 scale
  std::vector<double> pixel_std;
  int64_t loader_threads{};
  int64_t queue_depth{};         // batch requests a learner keeps outstanding per data actor
  int64_t request_timeout_ms{};  // a data actor silent this long loses its requests to another
};

struct ModelConfig {
  int64_t patch_size{};
  int64_t depth{};
  int64_t width{};
  int64_t heads{};
  double mlp_ratio{};
  int64_t n_state{};
  double layerscale_init{};
  int64_t pos_mlp_hidden{};
  std::string state_input;  // projected | normed: how the carried state re-enters a step
  std::string gelu;         // erf | tanh: the blocks' MLP activation
};

// Geometry of the views cut for every image (paper: Method, appendix B).
struct ViewsConfig {
  int64_t multizoom_patches{};  // M concentric crops, z = linspace(0, zoom_max, M)
  double zoom_max{};
  int64_t fovea_grid{};  // G x G foveal grid per glimpse
  double fovea_zoom_min{};
  double fovea_zoom_max{};
  int64_t glimpses{};  // K steps of the sequential view
  int64_t global_grid{};
  double global_scale_min{};
  double global_scale_max{};
  int64_t local_grid{};
  int64_t local_views{};
  double local_scale_min{};
  double local_scale_max{};
  int64_t vit_grid{};       // ViT-mode evaluation grid
  std::string cut_on;       // data | learner: who cuts the training views
  int64_t ship_max_side{};  // cut_on = learner: images are shipped at most this long a side
};

struct SslConfig {
  int64_t epochs{};
  int64_t schedule_epochs{};  // schedules run as if training lasted this long (0 = epochs)
  int64_t steps_per_epoch{};  // 0 = dataset size / batch size
  int64_t batch_size{};       // global, over all learners
  double lr{};                // at a global batch of 1024, scaled by lr_scaling
  std::string lr_scaling;     // linear | sqrt | none
  double min_lr{};
  int64_t warmup_epochs{};
  double weight_decay_start{};
  double weight_decay_end{};
  double momentum_start{};
  double momentum_end{};
  double teacher_temp_start{};
  double teacher_temp_end{};
  int64_t teacher_temp_warmup_epochs{};
  double student_temp{};
  double clip_grad{};
  int64_t freeze_last_layer_epochs{};
  double koleo_weight{};
  double global_weight{};            // L_static = global_weight H_global + (1 - it) H_local
  double sequential_weight{};        // L = (1 - it) L_static + it mean_k H_k
  std::string sequential_targets{};  // both (the paper) | global: what each step is matched to
  int64_t head_prototypes{};
  int64_t head_hidden{};
  int64_t head_bottleneck{};
  std::string teacher_centering;  // sinkhorn (DINOv2, the paper) | ema (DINO)
  int64_t sinkhorn_iterations{};
  double center_momentum{};  // ema centring's
  int64_t checkpoint_every_steps{};
  std::string precision;       // fp32 | bf16 | bf16-params
  double peak_tflops{};        // per-device peak for MFU; 0 = the device table
  bool overlap_all_reduce{};   // learners' gradient all-reduce during backward
  bool batched_glimpses{};     // the student's glimpses 2..S in one pass with gradient
  bool cuda_graphs{};          // no-grad passes (teacher, student's carry) as CUDA graphs
  bool fused_add_norm{};       // residual adds + LayerNorms as fused kernels
  bool fused_mlp{};            // the MLPs' GELU inside their matrix products (cuBLASLt)
  bool fused_bias_grad{};      // linear layers' bias gradients inside their weights' products
  bool prefetch_to_device{};   // the next batch copied to the device during a step
  int64_t threads{};           // torch intra-op threads (0 = all cores)
  std::string objective;       // dino | supervised (the labelled baseline)
  int64_t knn_every_steps{};   // k-NN monitor period; 0 = off
  int64_t knn_bank_images{};   // the last N training images
  int64_t knn_query_images{};  // the last N validation images
};

struct ProbeConfig {
  std::string head;  // linear | transformer
  std::vector<double>
      head_lrs;            // the transformer head's learning rates, chosen on held-apart images
  int64_t head_steps{};    // the transformer head's AdamW steps per learning rate
  int64_t batch_size{};    // images per forward pass while extracting features
  int64_t glimpses{};      // random glimpses that produce the features
  int64_t train_images{};  // the first N of the training split; 0 = all
  int64_t val_images{};    // the first N of the validation split; 0 = all
  std::vector<double> cs;  // inverse L2 strengths of the linear probe, chosen on held-apart images
  double holdout_fraction{};  // of the probe's training images, to choose C on
  int64_t max_iterations{};   // L-BFGS iterations per fit
  int64_t knn_k{};
  double knn_temperature{};
  std::vector<std::string> baselines;  // measured in the same run: random_init, pixels, supervised
  int64_t supervised_steps{};          // the supervised baseline's steps; 0 = pretraining's
  std::vector<std::string> features;   // first_state (the head's input), all_states
};

struct PolicyConfig {
  int64_t blocks{};
  int64_t width{};
  int64_t heads{};
  int64_t mixtures{};
  int64_t group_size{};  // G traces per image
  int64_t steps{};       // T glimpses per trace
  double gamma{};
  std::string reward;  // probability | increase | final_correct (rl::RewardKind)
  double clip_eps{};
  double kl_beta{};
  double lr{};
  double std_start{};
  double std_end{};
  int64_t epochs{};
  int64_t batch_size{};                // images per rollout batch
  int64_t updates{};                   // gradient steps per rollout batch
  int64_t keep_rollout_batches{};      // in work_dir/rollouts.db; 0 = all
  int64_t rollout_timeout_ms{};        // a rollout actor's silence before its part goes elsewhere
  int64_t checkpoint_every_batches{};  // the policy learner's checkpoint cadence
  std::string input_dir;               // probe head and checkpoints; "" = job.work_dir
  int64_t train_images{};              // the first N training images GRPO runs on; 0 = all
  int64_t val_images{};                // the first N validation images evaluated; 0 = all
  bool sees_state{};                   // false: the policy reads the glimpse index only
  bool fixed_path_baseline{};          // also train a state-blind policy, reported beside
  int64_t curve_every_batches{};       // validation points during GRPO; 0 = none
  int64_t curve_images{};              // the first N validation images of each point
};

struct EvalConfig {
  std::vector<std::string> modes;  // vit | random | scan | policy
  int64_t glimpses{};
  int64_t batch_size{};
  int64_t images{};            // the first N validation images; 0 = all
  std::vector<double> scales;  // resolution sweep factors
  std::string upscale;         // nearest | bilinear: how the sweep enlarges images
  int64_t sweep_images{};      // the first N validation images of the sweep
};

struct LoggingConfig {
  std::string level;  // trace | debug | info | warn | error | critical | off
  std::string dir;    // empty: stderr only
  std::string metrics_file;
  bool progress{};
};

struct JobConfig {
  JobSection job;
  ClusterConfig cluster;
  SecurityConfig security;
  DataConfig data;
  ModelConfig model;
  ViewsConfig views;
  SslConfig ssl;
  ProbeConfig probe;
  PolicyConfig policy;
  EvalConfig eval;
  LoggingConfig logging;
};

// Thrown when a config is refused. what() lists every problem found, one per
// line, each as "FILE:LINE:COL: KEY.PATH: what was expected, got what".
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// ssl.lr scaled to ssl.batch_size by ssl.lr_scaling: the peak learning rate a job uses.
double effective_lr(const SslConfig& ssl);

// Every key at its default.
JobConfig default_config();

// Parses and validates; throws ConfigError before anything starts. A top-level
// `include = "base.toml"` (relative to the including file's folder) reads that
// config first and merges this one's keys over it: tables key by key, any other
// value (arrays of tables too) replacing the base's; bases may include further.
JobConfig load_config(const std::filesystem::path& file);
// `source_name` names the text in messages and is the folder an include is relative to.
JobConfig parse_config(std::string_view toml_text, std::string_view source_name);

// The resolved config (defaults filled in) as TOML; parse_config(to_toml(c)) == c.
std::string to_toml(const JobConfig& config);

// Markdown reference of every key: type, default, allowed range, meaning.
std::string config_reference_markdown();

}  // namespace saccade

# Every message saccade's processes exchange over ZeroMQ. This file is the only
# language they share: add a field with the next ordinal, never renumber or
# reuse one (Cap'n Proto's compatibility rules), and bump protocolVersion only
# for changes an older peer cannot ignore.
@0xcd4dd84a6519da3e;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("saccade::wire");

const protocolVersion :UInt16 = 3;  # 2: uploads start with a CheckpointManifest
                                    # 3: the learners' rendezvous store lives in the coordinator
                                    #    (StoreRequest/StoreReply); Rendezvous names no store port

enum Role {
  unknown @0;
  coordinator @1;
  agent @2;
  data @3;
  learner @4;
  rollout @5;
  eval @6;
  client @7;     # saccade status, saccade keys, tools
}

struct Sender {
  role @0 :Role;
  rank @1 :Int32;     # rank within the role
  node @2 :Text;      # node name from the config
  pid @3 :UInt32;
  incarnation @4 :UInt64;  # random per process: tells a restarted process from the old
                           # one even where a pid repeats (another host, pid reuse)
}

# Every frame is one Envelope; the union's tag is the message kind.
struct Envelope {
  jobId @0 :Text;
  version @1 :UInt16;        # protocolVersion of the sender
  generation @2 :UInt64;     # learner generation: bumps at every re-rendezvous
  sender @3 :Sender;
  sentAtNs @4 :Int64;        # sender's CLOCK_REALTIME, for latency figures
  seq @5 :UInt64;            # per-sender sequence number

  body :union {
    registerNode @6 :RegisterNode;
    assignRoles @7 :AssignRoles;
    heartbeat @8 :Heartbeat;
    actorEvent @9 :ActorEvent;
    statusRequest @10 :StatusRequest;
    statusReply @11 :StatusReply;
    batch @12 :Batch;
    credit @13 :Credit;
    checkpointChunk @14 :CheckpointChunk;
    checkpointCommitted @15 :CheckpointCommitted;
    metrics @16 :Metrics;
    rendezvous @17 :Rendezvous;
    shutdown @18 :Shutdown;
    rolloutRequest @19 :RolloutRequest;
    rolloutGroup @20 :RolloutGroup;
    weights @21 :Weights;
    ack @22 :Ack;
    actorCommand @23 :ActorCommand;
    batchRequest @24 :BatchRequest;
    checkpointRequest @25 :CheckpointRequest;
    refusal @26 :Refusal;
    checkpointManifest @28 :CheckpointManifest;
    storeRequest @29 :StoreRequest;
    storeReply @30 :StoreReply;
  }

  launch @27 :Text;          # the launch (Slurm job id or a token); "" from clients
}

# --- control plane ---------------------------------------------------------

struct RegisterNode {
  nodeName @0 :Text;
  host @1 :Text;
  cores @2 :UInt32;
  gpus @3 :UInt32;
  memoryBytes @4 :UInt64;
  actors @5 :List(ActorEvent);   # actors the agent supervises now (re-registration
                                 # after a coordinator restart: the job resumes with them)
}

struct ActorAssignment {
  role @0 :Role;
  rank @1 :Int32;              # global rank within the role
  localRank @2 :Int32;         # rank within the node
  endpoint @3 :Text;           # where the actor binds its own socket, if any
  peers @4 :List(Text);        # endpoints it connects to (e.g. a learner's data actors)
  threads @5 :UInt32;
  device @6 :Text;             # "cpu" or "cuda:N"
  localEndpoint @7 :Text;      # ipc:// endpoint it also binds for peers on its node ("" = none)
  stage @8 :Text;              # the job stage it runs (pretrain, probe, policy): picks its body
}

struct AssignRoles {
  nodeName @0 :Text;
  configToml @1 :Text;         # the resolved job config, so every node runs the same job
  actors @2 :List(ActorAssignment);
}

enum ActorState {
  starting @0;
  running @1;
  draining @2;
  exited @3;
  failed @4;
  restarting @5;
}

struct Heartbeat {
  state @0 :ActorState;
  step @1 :Int64;
  itemsPerSecond @2 :Float64;  # images/s for learners and data actors, traces/s for rollouts
}

struct ActorEvent {
  role @0 :Role;
  rank @1 :Int32;
  pid @2 :UInt32;
  state @3 :ActorState;
  exitCode @4 :Int32;
  signal @5 :Int32;
  reason @6 :Text;
}

struct StatusRequest {
  includeActors @0 :Bool = true;
}

struct ActorStatus {
  role @0 :Role;
  rank @1 :Int32;
  node @2 :Text;
  pid @3 :UInt32;
  state @4 :ActorState;
  heartbeatAgeMs @5 :Int64;
  restarts @6 :UInt32;
  step @7 :Int64;
  itemsPerSecond @8 :Float64;
  straggler @9 :Bool;
}

struct StatusReply {
  jobId @0 :Text;
  stage @1 :Text;
  step @2 :Int64;
  totalSteps @3 :Int64;
  imagesPerSecond @4 :Float64;
  loss @5 :Float64;
  lr @6 :Float64;
  lastCheckpointStep @7 :Int64;      # -1 when none
  lastCheckpointAgeMs @8 :Int64;
  generation @9 :UInt64;
  actors @10 :List(ActorStatus);
  state @11 :Text;                   # running, draining, finished, failed
  reason @12 :Text;                  # why a job failed
  nodes @13 :List(NodeStatus);
  knn @14 :Float64;                  # last k-NN check of the teacher (0..1); NaN: none yet
  targetEntropyRatio @15 :Float64;   # teacher targets' entropy / ln K; NaN: not reported
  prototypesUsed @16 :Float64;       # prototypes that are some image's argmax; NaN: not reported
  stageIndex @17 :Int32;             # 0-based index of `stage` in `stages`
  stages @18 :List(StageStatus);     # every stage of job.stages, in order
  metricNames @19 :List(Text);       # every figure learner 0 reported last, by name
  metricValues @20 :List(Float64);   # (same length as metricNames)
}

struct StageStatus {
  name @0 :Text;
  state @1 :Text;                    # pending, running, finished
  seconds @2 :Float64;               # wall time so far (running) or in all (finished)
  lastStep @3 :Int64;                # its last committed checkpoint step; -1: none
}

struct NodeStatus {
  name @0 :Text;
  host @1 :Text;
  cores @2 :UInt32;
  gpus @3 :UInt32;
  memoryBytes @4 :UInt64;
  state @5 :Text;                    # waiting, registered, lost
  heartbeatAgeMs @6 :Int64;
}

struct Metrics {
  step @0 :Int64;
  names @1 :List(Text);
  values @2 :List(Float64);
}

struct Rendezvous {
  storeHost @0 :Text;                # unused since protocol 3: the store is the coordinator's
  storePort @1 :UInt16;              # (StoreRequest over this authenticated link); always empty/0
  worldSize @2 :Int32;
  rank @3 :Int32;
  resumeFromStep @4 :Int64;          # -1: fresh start
  collectiveTimeoutMs @5 :Int64;
}

# Learner -> coordinator: one operation on the learners' rendezvous store (what c10d's
# Store does: the collective library's addresses and ids). Its keys live in the coordinator,
# one map per learner generation, so they travel only over this (CURVE-protected) link and
# no learner opens a store port. The coordinator answers every request with a StoreReply of
# the same id: at once, or for get/wait once the keys exist, the timeout passed (timedOut)
# or the generation ended (ok = false).
struct StoreRequest {
  id @0 :UInt64;                     # the learner's number for it; the reply carries it
  generation @1 :UInt64;             # the generation whose keys it touches (the current one only)
  op @2 :StoreOp;
  keys @3 :List(Data);               # one key; check and wait: one or more
  value @4 :Data;                    # set: the value; compareSet: the value wanted
  expected @5 :Data;                 # compareSet: the value the key must hold now (empty: absent)
  delta @6 :Int64;                   # add
  timeoutMs @7 :Int64;               # get and wait: how long missing keys are waited for
                                     # (capped by the coordinator's config; 0: its cap)
}

enum StoreOp {
  set @0;
  get @1;                            # waits for the key, then answers its value
  add @2;                            # the key holds a decimal integer; answers the sum
  compareSet @3;                     # answers the value held afterwards
  check @4;                          # number = 1 when every key exists
  deleteKey @5;                      # number = 1 when it existed
  numKeys @6;
  wait @7;                           # answers once every key exists
}

struct StoreReply {
  id @0 :UInt64;
  ok @1 :Bool;
  error @2 :Text;                    # why not: timed out, the generation is over, refused
  timedOut @3 :Bool;
  value @4 :Data;                    # get, compareSet
  number @5 :Int64;                  # add, numKeys, check, deleteKey
}

struct Shutdown {
  reason @0 :Text;
  checkpointFirst @1 :Bool;          # SIGTERM/preemption: checkpoint, then exit
}

# Coordinator -> a peer it will not serve (a client or agent of another job, an
# agent whose node is not in cluster.nodes). Final: an agent exits, a client
# prints the reason. The only kind accepted whatever its jobId, so that it
# reaches the peers of other jobs.
struct Refusal {
  reason @0 :Text;
  jobId @1 :Text;                    # the job this coordinator runs
}

# Coordinator -> agent: start (or restart) one actor, or kill its process group.
# Restart policy (counts, backoff, caps) lives in the coordinator, so it
# survives a coordinator restart with the rest of the job's state.
struct ActorCommand {
  enum Action {
    start @0;
    kill @1;                         # SIGKILL to the actor's process group (hung actor)
  }
  action @0 :Action;
  assignment @1 :ActorAssignment;
  reason @2 :Text;
  restarts @3 :UInt32;               # times this actor was restarted before
}

struct Ack {
  seq @0 :UInt64;                    # the acknowledged message's seq
  ok @1 :Bool;
  error @2 :Text;
}

# --- data plane -------------------------------------------------------------

enum DType {
  float32 @0;
  bfloat16 @1;
  float16 @2;
  int64 @3;
  int32 @4;
  uint8 @5;
}

struct Tensor {
  name @0 :Text;
  dtype @1 :DType;
  shape @2 :List(Int64);
  data @3 :Data;                     # little-endian, row-major
}

# A ready batch of views from a data actor to a learner.
struct Batch {
  batchId @0 :UInt64;
  epoch @1 :Int64;
  position @2 :Int64;                # data position after this batch, for exact resume
  images @3 :UInt32;
  skippedCorrupt @4 :UInt32;         # corrupt images skipped while making it
  tensors @5 :List(Tensor);
}

# Learner -> data actor: cut the views of these images into one Batch (same
# batchId). The learner owns the sampler and the data position (exact resume),
# so data actors keep no state and any of them can serve any request: the
# requests of a slow or dead data actor go to another. A learner keeps at most
# data.queue_depth requests outstanding per data actor (back-pressure).
struct BatchRequest {
  batchId @0 :UInt64;
  indices @1 :List(Int64);           # dataset index per image
  seeds @2 :List(UInt64);            # view seed per image
}

# Back-pressure: a learner grants a data actor room for this many more batches.
struct Credit {
  batches @0 :UInt32;
}

# Rank 0 streams a checkpoint in chunks; the coordinator commits it atomically.
struct CheckpointChunk {
  step @0 :Int64;
  index @1 :UInt32;
  count @2 :UInt32;
  name @3 :Text;                     # e.g. "student", "teacher", "optimizer", "state"
  data @4 :Data;
  checksum @5 :UInt64;               # of the whole named blob, on its last chunk
}

# Rank 0 -> coordinator, the first message of every checkpoint upload: what its blobs are.
# When the coordinator already holds checkpoint `step` with exactly these blobs (names,
# sizes, CRC-32s), e.g. a copy sent again after a coordinator restart that had committed
# the first one, it answers CheckpointCommitted at once and drops the chunks that follow;
# rank 0 then stops sending them. Otherwise the chunks and the commit marker follow as usual.
struct CheckpointManifest {
  step @0 :Int64;
  blobs @1 :List(BlobDigest);        # in name order
}

struct BlobDigest {
  name @0 :Text;
  size @1 :UInt64;
  crc32 @2 :UInt32;                  # zlib's CRC-32 of the whole blob
}

# Actor -> coordinator: send checkpoint `step` (-1: the latest) of `source`.
# The coordinator answers with its blobs as CheckpointChunk messages, then
# CheckpointCommitted{step, bytes} once all were sent; Ack{ok = false} when it
# has no such checkpoint, blob or file. Every actor gets what it loads this
# way: none opens a database or file on the coordinator's node.
struct CheckpointRequest {
  step @0 :Int64;
  blobs @1 :List(Text);              # only these blobs (files for inputFile); empty: every blob
  source @2 :CheckpointSource;
}

enum CheckpointSource {
  job @0;                            # the asking actor's stage's committed checkpoints (resuming)
  inputCheckpoint @1;                # pretraining's checkpoints: this job's pretrain stage,
                                     # else those of policy.input_dir
  inputFile @2;                      # a stage output by name (e.g. the task head): the latest
                                     # checkpoint of this job's stage that wrote it, else a file
                                     # of policy.input_dir, sent as a checkpoint of step 0
}

struct CheckpointCommitted {
  step @0 :Int64;
  bytes @1 :UInt64;
}

# --- GRPO -------------------------------------------------------------------

enum GazeSource {
  sample @0;                         # draws from the policy's mixture (GRPO)
  mode @1;                           # the heaviest component's mean (evaluation)
  random @2;                         # uniform in the image (the baseline)
  scan @3;                           # the fixed scan path (centre, then a 3 x 3 grid)
}

# Policy learner -> rollout actor (and eval leader -> eval actor: the same
# protocol on the validation split): run groupSize traces of `steps` glimpses of
# each image with the policy of `policyVersion` (sent before as Weights). The
# actor answers one RolloutGroup per image, or Ack{ok = false, seq} when it
# cannot (e.g. it has not got that version: the learner sends it again).
struct RolloutRequest {
  policyVersion @0 :UInt64;
  imageIds @1 :List(UInt64);         # dataset indices (rollout actors: training split;
                                     # eval actors: validation split)
  groupSize @2 :UInt32;
  steps @3 :UInt32;
  requestId @4 :UInt64;
  seeds @5 :List(UInt64);            # per image: every draw of its traces
  std @6 :Float64;                   # the mixture's std (source = sample)
  source @7 :GazeSource;
  stateBlind @8 :Bool;               # the policy reads the glimpse index, not the state
  scale @9 :Float64 = 1.0;           # the images resized by this factor (eval's sweep)
  bilinearUpscale @10 :Bool;         # upsample bilinearly (else replicate pixels)
}

# The traces of one image (workers/policy/rollout_codec.h names the tensors).
struct RolloutGroup {
  policyVersion @0 :UInt64;
  imageId @1 :UInt64;
  tensors @2 :List(Tensor);          # states, extent, gazes, logProb, rewards, correct
  requestId @3 :UInt64;
}

struct Weights {
  version @0 :UInt64;
  safetensors @1 :Data;              # named tensors in the safetensors format
}

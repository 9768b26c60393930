// The job config -> the probe's options: the frozen backbone's features (also
// the eval stage's ViT rows), the k-NN and linear probes, the transformer head
// (data_options.h describes the adapter layer).
#pragma once

#include <cstdint>

#include "common/config.h"
#include "workers/probe/probe.h"
#include "workers/probe/transformer_probe.h"

namespace saccade::job_options {

// Whose frozen features: the probe's of the training or the validation split
// (other images and gazes), or the eval stage's ViT-mode rows.
enum class FeaturesFor { kProbeTrain, kProbeValidation, kEvalVit };

// The probe's: [probe] (its glimpses, batch, images, and the features that
// probe.features, probe.head and probe.baselines read). The eval stage's: ViT
// mode only with every state token (the transformer head's input), eval.images
// in eval.batch_size. Both: data.loader_threads, gazes seeded by job.seed.
// on_progress is left empty.
probe::FeatureOptions feature_options(const JobConfig& config, FeaturesFor which);

// The k-NN and the linear probe of [probe]; on_progress is left empty.
probe::EvaluationOptions evaluation_options(const JobConfig& config);

// The transformer head of [probe], with `heads` attention heads (the
// backbone's); on_progress is left empty.
probe::TransformerProbeOptions transformer_probe_options(const JobConfig& config, int64_t heads);

}  // namespace saccade::job_options

// `saccade bench data CONFIG`: what a data actor spends per image, stage by stage, on one
// core: read, decode, table build, cut, augment (the draw), encode and send, beside
// decoding alone on the same files; once with the data actor cutting the views and once
// shipping the image for the learner to cut (views.cut_on). On generated ImageNet-size JPEGs and on
// photos (the installed wallpapers by default). Torch-free: it measures the data plane as data
// actors run it (dataloader/views.h, workers/data_plane/batch_codec.h, ZeroMQ over loopback).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace saccade::bench {

struct DataBenchOptions {
  std::string config_path;    // [views] and [data] (channels, mean, std, augment)
  int generated = 48;         // ImageNet-size JPEGs generated (0 = none)
  int generated_width = 500;  // their size (ImageNet's median is about 500 x 375)
  int generated_height = 375;
  std::vector<std::string> photos;  // more image files (default: /usr/share/backgrounds/*.jpg)
  bool default_photos = true;
  int max_photos = 8;                               // of the default photos (2-30 MP each)
  int batch = 16;                                   // images per encoded frame
  std::string send_endpoint = "tcp://127.0.0.1:*";  // where frames are sent (a PULL binds)
  std::string json_path;
};

// Prints a table to `out`; returns 0. Throws std::invalid_argument on bad options and
// saccade::ConfigError on a refused config.
int run_data_bench(const DataBenchOptions& options, std::ostream& out);

}  // namespace saccade::bench

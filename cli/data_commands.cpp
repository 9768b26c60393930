// saccade data pack: an image folder into tar shards (dataloader/tar_pack.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "dataloader/tar_pack.h"

namespace saccade::cli {

void add_data_commands(CLI::App& app, GlobalOptions&) {
  CLI::App* data = app.add_subcommand("data", "Prepare data sets");
  data->require_subcommand(1);
  auto options = std::make_shared<data::PackOptions>();
  CLI::App* pack = data->add_subcommand(
      "pack",
      "Pack an image folder (one subfolder per class) into WebDataset tar shards: KEY.jpg/.png "
      "+ KEY.cls, classes.txt and each shard's index beside them");
  pack->add_option("FOLDER", options->folder, "Image folder, one subfolder per class")->required();
  pack->add_option("OUT", options->out, "Folder for the shards (created; must hold no .tar)")
      ->required();
  pack->add_option("--shard-size", options->shard_size, "Samples per shard")->capture_default_str();
  pack->add_option("--prefix", options->prefix, "Shard file names: PREFIX-000000.tar, ...")
      ->capture_default_str();
  pack->callback([options] {
    const data::PackResult r = data::pack_image_folder(*options);
    fmt::print("packed {} images into {} shard(s) in {} ({:.1f} MB)\n", r.samples, r.shards.size(),
               options->out, static_cast<double>(r.bytes) / 1e6);
  });
}

}  // namespace saccade::cli

// Translated and Cluttered Translated variants of a digit dataset (the RAM
// protocol, Mnih et al. 2014, "Recurrent Models of Visual Attention"), generated on
// the fly.
//
// Image i puts digit i of the base dataset at a uniformly random position of a
// black canvas_size x canvas_size canvas; the cluttered variant then adds
// n_clutter pieces, each a random clutter_size x clutter_size crop of another
// random digit placed at a random position, combined with the canvas by
// per-pixel max. Every random choice comes from a generator seeded by
// (seed, i) alone, so image i is the same on any rank, thread or call order.
// The label is the digit's label.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <opencv2/core/types.hpp>

#include "dataloader/dataset.h"

namespace saccade::data {

struct TranslationOptions {
  int canvas_size = 60;  // side of the square canvas, >= the digits' sides
  int n_clutter = 0;     // 0: Translated; > 0: Cluttered Translated (RAM uses 4)
  int clutter_size = 8;  // side of a clutter piece (clipped to the source digit and canvas)
  uint64_t seed = 0;
};

// Where image i's content comes from, in canvas pixels.
struct TranslationLayout {
  cv::Rect digit;  // the digit's rectangle on the canvas
  struct Piece {
    int64_t source_index;  // base index drawn (the next good one is used if corrupt)
    cv::Rect crop;         // in the source digit
    cv::Rect placed;       // on the canvas
  };
  std::vector<Piece> clutter;
};

class TranslatedDataset final : public Dataset {
 public:
  // Throws std::invalid_argument (naming the field) for a null or empty base,
  // canvas_size < 1, n_clutter < 0, clutter_size < 1, or a first digit larger
  // than the canvas.
  TranslatedDataset(std::shared_ptr<const Dataset> base, TranslationOptions options);

  int64_t size() const override;         // the base's size: one image per digit
  int64_t num_classes() const override;  // the base's
  int channels() const override;         // the base's
  // nullopt when digit i's file is corrupt; a corrupt clutter source is replaced
  // by the next good one (get_or_next_good). Throws std::invalid_argument when
  // digit i is larger than the canvas.
  std::optional<Sample> get(int64_t index) const override;
  const DatasetStats& stats() const override;  // the base's

  // The layout image `index` uses (decodes the same digits as get()).
  std::optional<TranslationLayout> layout(int64_t index) const;
  const TranslationOptions& options() const { return options_; }

 private:
  std::optional<Sample> compose(int64_t index, TranslationLayout* layout) const;

  std::shared_ptr<const Dataset> base_;  // shared: several variants may use one base
  TranslationOptions options_;
};

}  // namespace saccade::data

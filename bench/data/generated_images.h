// Photo-like JPEGs generated on the spot, for benchmarks that need real files to decode
// (saccade bench data, the data-feed runs of saccade bench runtime) on machines that
// carry no image data set.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace saccade::bench {

// A width x height RGB test image: smooth gradients, shapes and mild noise, so that it
// compresses like a photo (tens of KB at ImageNet size) rather than like noise. The same
// seed gives the same bytes.
std::vector<uint8_t> generated_jpeg(int width, int height, uint64_t seed);

// `images` generated JPEGs as an image folder of `classes` classes (FOLDER/class-000/
// 00000.jpg, ...; image i in class i % classes, seed i). Returns their paths in order.
// Throws std::invalid_argument unless images >= 1, classes >= 1 and both sides >= 16.
std::vector<std::filesystem::path> write_generated_folder(const std::filesystem::path& folder,
                                                          int images, int classes, int width,
                                                          int height);

}  // namespace saccade::bench

// An IDX images file (MNIST's format, gzipped or not): data::IdxDataset refuses a malformed
// file with an error naming the field, and every image of one it accepts reads whole.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "dataloader/idx_dataset.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace saccade::data;
  const std::string& path = saccade::fuzz::memory_file(data, size);
  try {
    const IdxDataset dataset(IdxOptions{path, "", 1});
    for (int64_t i = 0; i < dataset.size(); ++i) {
      const auto sample = dataset.get(i);
      if (!sample || sample->image.rows != dataset.rows() || sample->image.cols != dataset.cols())
        std::abort();
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}

// The main of every test binary: GoogleTest's, after the OpenBLAS kernel fix that saccade's
// own main makes (common/openblas_core.h), so that tests multiply as the product does.
#include <gtest/gtest.h>

#include "common/openblas_core.h"

int main(int argc, char** argv) {
  saccade::reexec_with_openblas_core_fix(argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

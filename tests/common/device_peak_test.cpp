#include "common/device_peak.h"

#include <gtest/gtest.h>

namespace saccade {
namespace {

TEST(DevicePeak, TheTableKnowsHopperAndAmpereByTheDriversNames) {
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H100 80GB HBM3", "bf16"), 989.4);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H100 80GB HBM3", "fp32"), 66.9);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H100 PCIe", "bf16"), 756.5);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H100 NVL", "bf16"), 835.5);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H200", "bf16"), 989.4);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA H200 NVL", "bf16"), 835.5);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA GH200 480GB", "bf16"), 989.4);
  EXPECT_DOUBLE_EQ(table_peak_tflops("NVIDIA A100-SXM4-80GB", "bf16"), 312.0);
  EXPECT_DOUBLE_EQ(table_peak_tflops("Tesla V100-SXM2-16GB", "bf16"), 0.0);
  EXPECT_DOUBLE_EQ(table_peak_tflops("", "bf16"), 0.0);
}

TEST(DevicePeak, TheConfiguredPeakWinsAndACpuHasNone) {
  EXPECT_DOUBLE_EQ(resolve_peak_tflops(123.0, "cpu", "fp32"), 123.0);
  EXPECT_DOUBLE_EQ(resolve_peak_tflops(123.0, "cuda:3", "bf16"), 123.0);
  EXPECT_DOUBLE_EQ(resolve_peak_tflops(0.0, "cpu", "bf16"), 0.0);
  // No driver on this machine (or a GPU the table lacks): unknown, not a guess.
  if (cuda_device_name(0).empty()) {
    EXPECT_DOUBLE_EQ(resolve_peak_tflops(0.0, "cuda:0", "bf16"), 0.0);
  }
}

}  // namespace
}  // namespace saccade

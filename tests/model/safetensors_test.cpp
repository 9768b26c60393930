// The safetensors byte format: round trips, the published layout, and refusal
// of corrupted input with a clear message.
#include "model/safetensors.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/paths.h"

#include <fstream>
#include <iterator>

namespace saccade::model {
namespace {

RawTensor f32(std::vector<int64_t> shape, float start) {
  RawTensor t;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  const int64_t n = t.numel();
  t.data.resize(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    const float v = start + static_cast<float>(i);
    std::memcpy(t.data.data() + 4 * i, &v, 4);
  }
  return t;
}

// Builds bytes from a hand-written header, to corrupt it at will.
std::string with_header(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_safetensors(bytes);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripIsExactAndKeepsMetadata) {
  RawTensorMap tensors;
  tensors["a.weight"] = f32({2, 3}, 1.f);
  tensors["b"] = f32({4}, -2.f);
  RawTensor bf;
  bf.dtype = DType::kBF16;
  bf.shape = {3};
  bf.data = std::string("\x01\x02\x03\x04\x05\x06", 6);
  tensors["c \"quoted\"\n"] = bf;
  RawTensor empty;
  empty.dtype = DType::kI64;
  empty.shape = {0, 5};
  tensors["empty"] = empty;
  const Metadata meta{{"format", "saccade.test"}, {"note", "tab\there"}};

  const std::string bytes = serialize_safetensors(tensors, meta);
  Metadata meta_back;
  const RawTensorMap back = parse_safetensors(bytes, &meta_back);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(back.at(name).dtype, t.dtype) << name;
    EXPECT_EQ(back.at(name).shape, t.shape) << name;
    EXPECT_EQ(back.at(name).data, t.data) << name;
  }
  EXPECT_EQ(meta_back, meta);
  EXPECT_EQ(serialize_safetensors(back, meta_back), bytes);  // byte-stable
}

TEST(Safetensors, LayoutFollowsThePublishedFormat) {
  RawTensorMap tensors;
  tensors["w"] = f32({2}, 1.f);
  const std::string bytes = serialize_safetensors(tensors);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  ASSERT_EQ(n % 8, 0u) << "header padded to 8 bytes";
  ASSERT_EQ(bytes.size(), 8 + n + 8);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})");
  float v[2];
  std::memcpy(v, bytes.data() + 8 + n, 8);
  EXPECT_EQ(v[0], 1.f);
  EXPECT_EQ(v[1], 2.f);
}

// tests/model/data/python_written.safetensors: written by the Python `safetensors`
// package (0.8.0, safetensors.numpy.save_file) with five dtypes/shapes, a non-ASCII
// name, an empty tensor and metadata; its data is ordered by dtype, not by name.
TEST(Safetensors, LoadsAFileWrittenByThePythonPackage) {
  std::ifstream in(testing::source_path("tests/model/data/python_written.safetensors"),
                   std::ios::binary);
  ASSERT_TRUE(in) << "fixture missing";
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Metadata meta;
  const RawTensorMap t = parse_safetensors(bytes, &meta);
  EXPECT_EQ(meta.at("format"), "np");
  EXPECT_EQ(meta.at("note"), "written by safetensors 0.8.0");
  ASSERT_EQ(t.size(), 5u);
  const RawTensor& w = t.at("blocks.0.attn.qkv.weight");
  EXPECT_EQ(w.dtype, DType::kF32);
  EXPECT_EQ(w.shape, (std::vector<int64_t>{3, 4}));
  float f[12];
  ASSERT_EQ(w.data.size(), sizeof f);
  std::memcpy(f, w.data.data(), sizeof f);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f[i], static_cast<float>(i));
  int64_t ids[3];
  std::memcpy(ids, t.at("ids").data.data(), sizeof ids);
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[2], 9);
  EXPECT_EQ(t.at("half").dtype, DType::kF16);
  EXPECT_EQ(t.at("caf\xc3\xa9").numel(), 0);
  float s[2];
  std::memcpy(s, t.at("state_embed").data.data(), sizeof s);
  EXPECT_EQ(s[0], 1.5f);
  EXPECT_EQ(s[1], -2.0f);
  // Written back by this library, it reads the same.
  EXPECT_EQ(parse_safetensors(serialize_safetensors(t, meta)).at("ids").data, t.at("ids").data);
}

TEST(Safetensors, ParsesHeadersWrittenByOtherTools) {
  // Whitespace, field order and escapes as Python's json.dumps may write them.
  const std::string header =
      "{ \"__metadata__\" : {\"format\": \"pt\"},\n  \"x\\u00e9\": {\"data_offsets\": [0, 4], "
      "\"shape\": [], \"dtype\": \"I32\"} }";
  Metadata meta;
  const auto t = parse_safetensors(with_header(header, std::string(4, '\x07')), &meta);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t.begin()->first, "x\xc3\xa9");
  EXPECT_EQ(t.begin()->second.dtype, DType::kI32);
  EXPECT_TRUE(t.begin()->second.shape.empty());
  EXPECT_EQ(meta.at("format"), "pt");
}

TEST(Safetensors, CorruptedBytesAreRefusedWithAReason) {
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  ASSERT_EQ(parse_error(with_header(good, data)), "");

  EXPECT_NE(parse_error("abc").find("shorter than the 8-byte"), std::string::npos);
  std::string too_long = with_header(good, data);
  const uint64_t huge = 1000;
  std::memcpy(too_long.data(), &huge, 8);
  EXPECT_NE(parse_error(too_long).find("runs past the end"), std::string::npos);
  const uint64_t giant = 1ull << 40;
  std::memcpy(too_long.data(), &giant, 8);
  EXPECT_NE(parse_error(too_long).find("100 MB"), std::string::npos);
  EXPECT_NE(parse_error(with_header("[1,2]", data)).find("start with '{'"), std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8])", data))
          .find("malformed"),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data))
          .find("unknown dtype \"F33\""),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", data))
          .find("out of range"),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data))
          .find("dtype x shape needs 12"),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data))
          .find("negative"),
      std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                    data))
                .find("overlap"),
            std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data))
          .find("hole"),
      std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data))
          .find("not covered"),
      std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("w":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})",
                                    data))
                .find("duplicate"),
            std::string::npos);
  EXPECT_NE(
      parse_error(with_header(R"({"w":{"dtype":"F32","shape":[2]}})", data)).find("expected dtype"),
      std::string::npos);
  EXPECT_NE(
      parse_error(
          with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", data))
          .find("unknown field"),
      std::string::npos);
  EXPECT_NE(parse_error(with_header(R"({"__metadata__":{"k":1}})", "")).find("string value"),
            std::string::npos);
  EXPECT_NE(parse_error(with_header(good + "x", data)).find("trailing"), std::string::npos);
  // A number past double's range is nlohmann's out_of_range, not a parse error (found by
  // tests/fuzz/fuzz_safetensors): refused as malformed like the rest.
  EXPECT_NE(parse_error(with_header(R"({"__metadata__":{"k":"v"},"w":9.9E9998})", data))
                .find("malformed header JSON"),
            std::string::npos);
  // Shape product overflow must not wrap around to a small size.
  EXPECT_NE(parse_error(
                with_header(
                    R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
                    data))
                .find("dtype x shape"),
            std::string::npos);

  // Every truncation of valid bytes is refused, never a crash.
  const std::string bytes = with_header(good, data);
  for (size_t len = 0; len < bytes.size(); ++len)
    EXPECT_THROW(parse_safetensors(std::string_view(bytes).substr(0, len)), std::runtime_error)
        << len;
}

TEST(Safetensors, SerializeRefusesInconsistentTensors) {
  RawTensorMap tensors;
  tensors["w"] = f32({2}, 0.f);
  tensors["w"].shape = {3};
  EXPECT_THROW(serialize_safetensors(tensors), std::invalid_argument);
  EXPECT_THROW(dtype_from_name("F128"), std::invalid_argument);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_STREQ(dtype_name(DType::kF64), "F64");
}

}  // namespace
}  // namespace saccade::model

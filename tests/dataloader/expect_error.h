// Asserts that a call throws exception type E whose message holds every given piece.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace saccade::data::testing {

template <typename E, typename F>
void expect_error(F&& call, std::initializer_list<std::string> pieces) {
  try {
    call();
    ADD_FAILURE() << "expected an exception, none was thrown";
  } catch (const E& e) {
    const std::string message = e.what();
    for (const auto& piece : pieces) {
      EXPECT_NE(message.find(piece), std::string::npos)
          << "message \"" << message << "\" lacks \"" << piece << "\"";
    }
  }
}

}  // namespace saccade::data::testing

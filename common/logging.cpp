#include "common/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace saccade {

void init_logging(const LogOptions& options) {
  const spdlog::level::level_enum level = spdlog::level::from_str(options.level);
  // from_str maps unknown names to "off": refuse them instead of silently muting the process.
  if (level == spdlog::level::off && options.level != "off") {
    throw std::invalid_argument(
        "log level: expected one of trace, debug, info, warn, error, critical, off; got \"" +
        options.level + "\"");
  }
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.dir, ec);
    if (ec)
      throw std::runtime_error("log dir '" + options.dir + "': cannot create: " + ec.message());
    const std::string file =
        options.dir + "/" + options.role + "-" + std::to_string(options.rank) + ".log";
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
  }
  auto logger = std::make_shared<spdlog::logger>(options.role, sinks.begin(), sinks.end());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [" + options.role + ":" +
                      std::to_string(options.rank) + " pid " + std::to_string(::getpid()) + "] %v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace saccade

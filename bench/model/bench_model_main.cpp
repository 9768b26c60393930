// bench_model [--threads N] [--batch B] [--iters I] [--tokens T] [--presets tiny,vit_s]
//             [--no-vit] [--json PATH] [--device cpu|cuda[:i]] [--bf16]
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>

#include "bench/model/model_bench.h"
#include "common/openblas_core.h"

int main(int argc, char** argv) {
  saccade::reexec_with_openblas_core_fix(argv);  // as saccade's main
  saccade::model::ModelBenchOptions o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
        return argv[++i];
      };
      if (arg == "--threads")
        o.threads = std::stoi(value());
      else if (arg == "--batch")
        o.batch = std::stoll(value());
      else if (arg == "--iters")
        o.iters = std::stoi(value());
      else if (arg == "--tokens")
        o.foveal_tokens = std::stoll(value());
      else if (arg == "--json")
        o.json_path = value();
      else if (arg == "--device")
        o.device = value();
      else if (arg == "--bf16")
        o.bf16 = true;
      else if (arg == "--no-vit")
        o.vit_mode = false;
      else if (arg == "--presets") {
        o.presets.clear();
        std::stringstream list(value());
        for (std::string p; std::getline(list, p, ',');) o.presets.push_back(p);
      } else {
        throw std::invalid_argument("unknown argument " + arg);
      }
    }
    return saccade::model::run_model_bench(o, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "bench_model: " << e.what() << "\n";
    return 2;
  }
}

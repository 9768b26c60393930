#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "cli/torch_commands.h"

namespace saccade::cli {

void* torch_entry(const char* name) {
  static void* handle = [] {
    setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
    const std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
    const std::string path = (dir / "libsaccade_torch.so").string();
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw std::runtime_error(std::string("cannot load the torch commands: ") + dlerror());
    return h;
  }();
  void* symbol = dlsym(handle, name);
  if (!symbol)
    throw std::runtime_error(std::string("libsaccade_torch.so has no entry point ") + name);
  return symbol;
}

}  // namespace saccade::cli

#include "model/fused_ops.h"

namespace saccade::model {
namespace {
thread_local FusedOps g_fused;  // the innermost scope's choice on this thread
}  // namespace

FusedScope::FusedScope(FusedOps ops) : previous_(g_fused) {
  g_fused = ops;
}

FusedScope::~FusedScope() {
  g_fused = previous_;
}

const FusedOps& FusedScope::current() {
  return g_fused;
}

}  // namespace saccade::model

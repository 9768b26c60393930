# Shared by the script tests that pretrain (sourced): the smallest Fashion-MNIST job.

# Prints its [data], [model] and [views] sections; a test adds [job], [ssl] and the rest.
tiny_fmnist_sections() {
  cat <<'TOML'
[data]
dataset = "idx"
channels = 1
pixel_mean = [0.286]
pixel_std = [0.353]
loader_threads = 1
[model]
patch_size = 4
depth = 1
width = 32
heads = 2
n_state = 2
[views]
multizoom_patches = 2
fovea_grid = 2
glimpses = 2
global_grid = 3
local_grid = 2
local_views = 1
vit_grid = 3
TOML
}

/* tests/emu/include/emu_project.h: this project's knobs for its emulated build, forced into the
 * emulated .cu files after cuda_runtime.h. FT_EMU_MAX_GRID caps the blocks of model/cuda_launch.h's
 * grid-stride launches (default: its 8192), so test shapes of a few thousand items iterate. */
#ifndef EMU_PROJECT_H
#define EMU_PROJECT_H
#include "emu_api.h"
#define LAUNCH_MAX_GRID (emu_env_unsigned("FT_EMU_MAX_GRID", 8192u))
#endif

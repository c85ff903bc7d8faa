// zero/location.h: where a model state can live, the one encoding every layer uses: the
// options (run/config.h's --offload-optimizer / --offload-param), zero.h and its stores
// (zero/store.h), the memory planner and the step-time model.
//
// Contract
//   LOC_DEVICE: the backend's compute memory (the GPU's, or the CPU trainer's own); LOC_HOST:
//   host memory beside it; LOC_NVME: files on NVMe, read and written with direct I/O. As an
//   offload option, LOC_DEVICE means "not offloaded".
//   zero_location_names: how logs, plans and reports name a location; zero_offload_names: how
//   the options and DeepSpeed's "device" key spell it ("none", "cpu", "nvme").
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_LOCATION_H
#define ZERO_LOCATION_H

enum { LOC_DEVICE, LOC_HOST, LOC_NVME, LOC_KINDS };
static const char *const zero_location_names[LOC_KINDS] = {"device", "host", "nvme"};
static const char *const zero_offload_names[LOC_KINDS] = {"none", "cpu", "nvme"};

#endif // ZERO_LOCATION_H

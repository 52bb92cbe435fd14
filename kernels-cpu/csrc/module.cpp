// The Python module ws1_kernels_cpu._C. It is empty: loading the library runs the kernel files'
// TORCH_LIBRARY_FRAGMENT registrations, and the ops are reached through torch.ops.ws1_cpu. pybind11
// alone, not <torch/extension.h>: this file needs nothing of torch.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}

// The Python module weft_torch._C: the creator that torch.distributed calls for backend
// "weft" (weft_torch/__init__.py registers it).
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include "process_group_weft.hpp"

PYBIND11_MODULE(_C, m) {
  m.doc() = "weft's torch.distributed backend (a c10d::ProcessGroup over weft's C API)";
  m.def("create_process_group", &weft_torch::createProcessGroupWeft, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "A weft process group of size ranks; rank 0 shares the unique id through store.");
  m.def("version", [] {
    int v = 0;
    weftGetVersion(&v);
    return v;
  });
}

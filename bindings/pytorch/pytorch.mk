# The PyTorch backend (bindings/pytorch): built into $(BUILD)/pytorch/weft_torch when torch's
# C++ headers, the Python package and pybind11 are installed (install-deps.sh installs them),
# so that PYTHONPATH=$(BUILD)/pytorch /usr/bin/python3 -c "import weft_torch" works.
# /usr/bin/python3 on purpose: the torch Debian ships is for the system Python only.
TORCH_PYTHON ?= /usr/bin/python3
TORCH_HEADER := $(wildcard /usr/include/torch/csrc/distributed/c10d/ProcessGroup.hpp)
TORCH_PACKAGE := $(wildcard /usr/lib/python3/dist-packages/torch/__init__.py)
PYBIND_HEADER := $(wildcard /usr/include/pybind11/pybind11.h)
HAVE_TORCH := $(if $(and $(TORCH_HEADER),$(TORCH_PACKAGE),$(PYBIND_HEADER)),yes,)

PT_DIR := $(BUILD)/pytorch
PT_SRCS := $(wildcard bindings/pytorch/src/*.cpp)
PT_OBJS := $(patsubst bindings/pytorch/src/%.cpp,$(PT_DIR)/obj/%.o,$(PT_SRCS))
PT_MODULE := $(PT_DIR)/weft_torch/_C$(if $(HAVE_TORCH),$(shell $(TORCH_PYTHON) -c \
  "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null),.so)
PT_PY := $(patsubst bindings/pytorch/%,$(PT_DIR)/%,$(wildcard bindings/pytorch/weft_torch/*.py))
PT_PYINC := $(shell $(TORCH_PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
# torch 1.13 from Debian: built with the C++11 ABI (0 links but fails at import) and gcc
# 12's pybind11 ABI tags, which the extension must match to share torch's Python types.
PT_CXXFLAGS := -std=c++17 -O2 -g -fPIC -pthread -Wall -Wextra -Werror -D_GLIBCXX_USE_CXX11_ABI=1 \
  -DPYBIND11_COMPILER_TYPE='"_gcc"' -DPYBIND11_STDLIB='"_libstdcpp"' \
  -DPYBIND11_BUILD_ABI='"_cxxabi1017"' -DTORCH_API_INCLUDE_EXTENSION_H \
  -Iinclude -isystem /usr/include/torch/csrc/api/include -isystem $(PT_PYINC)
PT_LIBS := -ltorch_python -ltorch -ltorch_cpu -lc10

# make install puts the package where Debian's python3 looks: /usr/lib/python3/dist-packages
# for PREFIX=/usr, else PREFIX/lib/python3.X/dist-packages (/usr/local's is on its path).
PT_PYVER := $(shell $(TORCH_PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/$(PT_PYVER)/dist-packages)

.PHONY: pytorch install-pytorch uninstall-pytorch
uninstall-pytorch:
	rm -rf $(DESTDIR)$(PYTHONDIR)/weft_torch
ifeq ($(HAVE_TORCH),yes)
pytorch: $(PT_MODULE) $(PT_PY)

install-pytorch: pytorch
	install -d $(DESTDIR)$(PYTHONDIR)/weft_torch
	install -m 644 $(PT_PY) $(DESTDIR)$(PYTHONDIR)/weft_torch/
	install -m 755 $(PT_MODULE) $(DESTDIR)$(PYTHONDIR)/weft_torch/

$(PT_DIR)/obj/%.o: bindings/pytorch/src/%.cpp $(wildcard bindings/pytorch/src/*.hpp) include/weft.h
	@mkdir -p $(dir $@)
	$(CXX) $(PT_CXXFLAGS) -c $< -o $@

# libweft.a linked in (built -fPIC): the module needs no libweft.so at run time. Python's own
# symbols stay undefined (the interpreter has them): no -z defs, no libpython.
$(PT_MODULE): $(PT_OBJS) $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CXX) -shared -o $@ $(PT_OBJS) $(BUILD)/libweft.a $(PT_LIBS) $(LIBS)

$(PT_DIR)/weft_torch/%.py: bindings/pytorch/weft_torch/%.py
	@mkdir -p $(dir $@)
	cp $< $@
else
install-pytorch:
pytorch:
	@echo "pytorch: torch, its C++ headers or pybind11 not installed; the weft backend is not built (install-deps.sh installs python3-torch libtorch-dev pybind11-dev)"
endif

// Tensors as weft sees them: a datatype, a contiguous buffer, an element count.
#pragma once

#include <ATen/ATen.h>

#include <weft.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace weft_torch {

// The weft datatype of t; bool travels as uint8 (one byte, 0 or 1). Throws for CUDA tensors
// and for dtypes weft has no type for (complex, uint16...).
inline weftDataType_t weftTypeOf(const at::Tensor &t) {
  if (!t.device().is_cpu())
    throw std::runtime_error("weft: only CPU tensors are supported, got a tensor on " +
                             t.device().str());
  switch (t.scalar_type()) {
    case at::kFloat: return weftFloat32;
    case at::kDouble: return weftFloat64;
    case at::kHalf: return weftFloat16;
    case at::kBFloat16: return weftBfloat16;
    case at::kChar: return weftInt8;
    case at::kByte: return weftUint8;
    case at::kBool: return weftUint8;
    case at::kInt: return weftInt32;
    case at::kLong: return weftInt64;
    default:
      throw std::runtime_error(std::string("weft: unsupported dtype ") +
                               c10::toString(t.scalar_type()));
  }
}

inline size_t countOf(const at::Tensor &t) { return static_cast<size_t>(t.numel()); }

// A contiguous stand-in for a tensor: the tensor itself when it is contiguous, else a copy,
// written back by copyBack(). Made on the worker, so that the copy sees the data as earlier
// queued collectives left it.
struct Dense {
  at::Tensor orig, buf;
  explicit Dense(const at::Tensor &t) : orig(t), buf(t.is_contiguous() ? t : t.contiguous()) {}
  void copyBack() {
    if (!buf.is_same(orig)) orig.copy_(buf);
  }
};

// One contiguous 1-D tensor holding the tensors' elements one after another.
inline at::Tensor flatCat(const std::vector<at::Tensor> &ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const auto &t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of flat (from element offset on) into the tensors.
inline void unflatten(const at::Tensor &flat, int64_t offset, const std::vector<at::Tensor> &ts) {
  for (const auto &t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Every tensor has the dtype and element count of the first (what a collective needs).
inline void checkSameShape(const std::vector<at::Tensor> &ts, const at::Tensor &like,
                           const char *what) {
  for (const auto &t : ts) {
    if (t.scalar_type() != like.scalar_type())
      throw std::runtime_error(std::string("weft ") + what + ": tensors of different dtypes");
    if (t.numel() != like.numel())
      throw std::runtime_error(std::string("weft ") + what + ": tensors of different sizes (" +
                               std::to_string(t.numel()) + " and " +
                               std::to_string(like.numel()) + " elements)");
    weftTypeOf(t);
  }
}

// Argument checks shared by the collectives; each throws with a message naming the call.
inline const at::Tensor &single(const std::vector<at::Tensor> &ts, const char *what) {
  if (ts.size() != 1)
    throw std::runtime_error(std::string("weft ") + what + ": expects one tensor, got " +
                             std::to_string(ts.size()));
  weftTypeOf(ts[0]);
  return ts[0];
}

inline void checkRoot(int64_t root, int size, const char *what) {
  if (root < 0 || root >= size)
    throw std::runtime_error(std::string("weft ") + what + ": root " + std::to_string(root) +
                             " is not a rank of this group of " + std::to_string(size));
}

inline void checkCount(size_t n, size_t want, const char *what, const char *which) {
  if (n != want)
    throw std::runtime_error(std::string("weft ") + what + ": " + which + " has " +
                             std::to_string(n) + " elements, expected " + std::to_string(want));
}

}  // namespace weft_torch
